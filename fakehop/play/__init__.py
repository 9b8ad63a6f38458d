"""Playing: a scenario and a clock in, timed happenings out that no protocol has shaped yet."""
