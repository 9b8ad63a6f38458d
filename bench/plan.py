"""What the ceiling serves and the client expects: each bench scenario's frames and their times.

The bytes come from `fakehop play NAME --protocol P --no-wait` (its command, run in this
process), exactly what a client of fakehop gets (ids aside, which have the same length). The
time of each frame comes from the player's own timeline, laid out on a clock that never waits;
the two are checked to agree.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from pathlib import Path

from fakehop.cli import main as cli
from fakehop.protocols import PROTOCOLS
from fakehop.scenario.library import Library
from fakehop.server.render import render

SCENARIO_DIR = Path(__file__).parent / "scenarios"
SCENARIOS = ("bench-long", "bench-short", "bench-paced", "bench-idle")


class VirtualClock:
    """A clock whose pauses end at once but which remembers how late it is."""

    def __init__(self) -> None:
        self.time = 0.0

    def now(self) -> float:
        return self.time

    async def sleep_until(self, when: float) -> None:
        self.time = max(self.time, when)


def split_frames(data: bytes) -> list[bytes]:
    """SSE frames, each with the blank line that ends it."""
    parts = data.split(b"\n\n")
    if parts[-1]:
        raise ValueError(f"stream does not end at a frame boundary: {parts[-1][:60]!r}")
    return [part + b"\n\n" for part in parts[:-1]]


def play_arguments(protocol: str, name: str) -> list[str]:
    """`fakehop play` for one bench scenario, printing at once."""
    return ["play", name, "--protocol", protocol, "--no-wait", "--time-scale", "1", "--scenarios", str(SCENARIO_DIR)]


def played_bytes(cases: list[tuple[str, str]]) -> dict[tuple[str, str], bytes]:
    """What `fakehop play` prints for each (protocol, scenario)."""
    return {case: printed_by_play(*case) for case in cases}


def printed_by_play(protocol: str, name: str) -> bytes:
    out, err = io.TextIOWrapper(io.BytesIO(), write_through=True), io.StringIO()  # play writes to sys.stdout.buffer
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(play_arguments(protocol, name))
    if code != 0:
        raise RuntimeError(f"fakehop play {name} --protocol {protocol} failed: {err.getvalue()[-1000:]}")
    return out.buffer.getvalue()


def timed_groups(library: Library, protocol: str, name: str) -> list[tuple[float, list[bytes]]]:
    """(offset in seconds, frames), one group per write fakehop makes, in order."""
    clock = VirtualClock()
    writes: list[tuple[float, bytes]] = []
    body = dict(PROTOCOLS[protocol].EXAMPLE_REQUEST)
    asyncio.run(
        render(library, name, protocol, body, clock=clock, write=lambda data: writes.append((clock.time, data)))
    )
    return [(offset, split_frames(data)) for offset, data in writes if data]


def build(protocols: list[str]) -> dict:
    """The plan as JSON-ready data: per protocol its path, request body and scenarios' groups."""
    library = Library.load([SCENARIO_DIR])
    printed = played_bytes([(protocol, name) for protocol in protocols for name in SCENARIOS])
    plan = {}
    for protocol in protocols:
        scenarios = {}
        for name in SCENARIOS:
            groups = timed_groups(library, protocol, name)
            if b"".join(b"".join(frames) for _, frames in groups) != printed[protocol, name]:
                raise RuntimeError(f"the timeline of {name} ({protocol}) does not give the bytes `fakehop play` prints")
            scenarios[name] = [[offset, [frame.decode() for frame in frames]] for offset, frames in groups]
        module = PROTOCOLS[protocol]
        plan[protocol] = {"path": module.PATH, "body": module.EXAMPLE_REQUEST, "scenarios": scenarios}
    return plan


def write(plan: dict, path: Path) -> None:
    path.write_text(json.dumps(plan))
