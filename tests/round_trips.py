"""Helpers for tests that read an answer back into a scenario: with `fakehop import` from the
bytes a client got, or with `fakehop record` in front of a real fakehop server."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp

from fakehop.protocols import PROTOCOLS
from fakehop.record import proxy as record
from fakehop.scenario.library import Library
from fakehop.scenario.model import Step

from .cli_runs import fakehop_here_async

BODIES: dict[str, dict] = {
    "chat": {"model": "m", "messages": [{"role": "user", "content": "Go on"}]},
    "responses": {"model": "m", "input": "Go on"},
    "messages": {"model": "c", "max_tokens": 200, "messages": [{"role": "user", "content": "Go on"}]},
}


async def answer_bytes(url: str, protocol: str, stream: bool, headers: dict) -> bytes:
    """The body of the answer a client gets: its event stream, or its whole JSON."""
    body = {**BODIES[protocol], "stream": stream}
    async with aiohttp.ClientSession() as session:
        async with session.post(url + PROTOCOLS[protocol].PATH, json=body, headers=headers) as answer:
            return await answer.read()


def only_steps(directory: Path) -> tuple[Step, ...]:
    """The steps of the one scenario in `directory`, loaded as any scenario is."""
    library = Library.load([directory], bundled=False)
    [name] = library.names()
    entry = library[name].entries[0]
    assert entry.script is not None
    return entry.script.steps


async def imported_steps(data: bytes, directory: Path) -> tuple[Step, ...]:
    """`fakehop import` of a capture holding `data`: the steps of the scenario it writes."""
    capture = directory / "answer.capture"
    capture.write_bytes(data)
    out = directory / "imported"
    run = await fakehop_here_async("import", str(capture), "--out", str(out))
    assert run.returncode == 0, run.stderr
    return only_steps(out)


async def recorded_steps(aiohttp_server, upstream_url: str, protocol: str, stream: bool, headers: dict, out: Path):
    """The steps `fakehop record` in front of `upstream_url` writes for one answer."""
    out.mkdir()
    server = await aiohttp_server(record.create_app(record.Recorder(upstream_url, out)))
    await answer_bytes(str(server.make_url("")).rstrip("/"), protocol, stream, headers)
    deadline = time.monotonic() + 15
    while not list(out.glob("*.yaml")) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return only_steps(out)
