"""fakehop: a fake HopBase LLM gateway for integration tests.

What a program needs to start a server from Python, drive it and read its journal is importable
from here: `from fakehop import Fakehop, Gateway, Library, ThreadServer`. Each name is imported
when first used, so `import fakehop` stays cheap and the package's modules can import this one.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

CONTROL_PREFIX = "/_fakehop"  # the control API lives under this path

# name -> the module that defines it
_PUBLIC = {
    "Fakehop": "fakehop.testing.fixture",
    "RecordedRequest": "fakehop.testing.fixture",
    "SetFault": "fakehop.testing.fixture",
    "make_app": "fakehop.testing.fixture",
    "ThreadServer": "fakehop.testing.thread_server",
    "Gateway": "fakehop.server.gateway",
    "create_app": "fakehop.server.app",
    "Library": "fakehop.scenario.library",
    "Scenario": "fakehop.scenario.model",
    "ScenarioError": "fakehop.scenario.reader",
    "load_file": "fakehop.scenario.reader",
    "parse_text": "fakehop.scenario.reader",
    "ControlClient": "fakehop.testing.remote",
    "ControlFailed": "fakehop.testing.remote",
    "Finding": "fakehop.verdicts",
}

__all__ = [
    "CONTROL_PREFIX",
    "ControlClient",
    "ControlFailed",
    "Fakehop",
    "Finding",
    "Gateway",
    "Library",
    "RecordedRequest",
    "Scenario",
    "ScenarioError",
    "SetFault",
    "ThreadServer",
    "__version__",
    "create_app",
    "load_file",
    "make_app",
    "parse_text",
]

if TYPE_CHECKING:
    from fakehop.scenario.library import Library
    from fakehop.scenario.model import Scenario
    from fakehop.scenario.reader import ScenarioError, load_file, parse_text
    from fakehop.server.app import create_app
    from fakehop.server.gateway import Gateway
    from fakehop.testing.fixture import Fakehop, RecordedRequest, SetFault, make_app
    from fakehop.testing.remote import ControlClient, ControlFailed
    from fakehop.testing.thread_server import ThreadServer
    from fakehop.verdicts import Finding


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'fakehop' has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value  # the next use finds it at once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})
