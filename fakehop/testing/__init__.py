"""For tests: the pytest fixture's handle on a server, make_app on a test's own loop, the
control API's client, a server in a thread of its own, and the pytest plugin (plugin.py).

`from fakehop.testing import Fakehop, make_app, plain_http_tls` imports the fixture module when a
name is first used, so that the plugin, which lives here too, loads no server with pytest."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = ["Fakehop", "RecordedRequest", "RemoteServer", "SetFault", "make_app", "plain_http_tls"]

if TYPE_CHECKING:
    from .fixture import Fakehop, RecordedRequest, RemoteServer, SetFault, make_app, plain_http_tls


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'fakehop.testing' has no attribute {name!r}")
    return getattr(importlib.import_module("fakehop.testing.fixture"), name)
