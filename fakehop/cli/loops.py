"""The event loop `fakehop serve` runs on: uvloop where it is installed, as aiohttp advises for
production, else asyncio's own. uvloop answers a request in about an eighth fewer
instructions (see docs/benchmark.md); `--loop asyncio` opts out."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["LOOPS", "LoopUnavailable", "runner_for"]

LOOPS = ("auto", "uvloop", "asyncio")  # auto: uvloop when it imports, else asyncio

Runner = Callable[[Coroutine[Any, Any, Any]], Any]


class LoopUnavailable(Exception):
    """A loop asked for by name that this Python cannot run."""


def runner_for(name: str) -> Runner:
    """What runs a coroutine to its end on the loop `name` (one of LOOPS)."""
    if name == "asyncio":
        return asyncio.run
    try:
        import uvloop
    except ImportError:
        if name == "uvloop":
            raise LoopUnavailable(
                "--loop uvloop: uvloop is not installed here (pip install uvloop), or give --loop asyncio"
            ) from None
        return asyncio.run
    return uvloop.run
