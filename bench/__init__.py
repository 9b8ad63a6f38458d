"""The fakehop benchmark: `make bench` or `python -m bench --help`."""
