"""fakehop: a fake HopBase LLM gateway for integration tests."""

__version__ = "0.1.0"

CONTROL_PREFIX = "/_fakehop"  # the control API lives under this path
