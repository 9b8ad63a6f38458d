"""Recording and importing: the proxy that captures a real gateway's answers, the importer of
captured traffic, and the writer that turns either into scenario files."""
