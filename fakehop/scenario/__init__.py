"""Scenarios: YAML in, validated immutable objects out; the library of scenarios a server plays."""
