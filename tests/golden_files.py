"""Golden files: the exact bytes `fakehop play` prints for every bundled scenario.

tests/golden/<protocol>/<scenario>[.<request>].<sse|json> holds what
`fakehop play <scenario> --protocol <protocol> [--no-stream] [--request N] --no-wait`
prints with the default seed (0): for a sequence, its answer to request N; for a conversation,
its answer to the example request at turn N. `python -m tests.golden_files --write` rewrites them all
after a deliberate change of the wire format; review the diff before committing it.
"""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass
from pathlib import Path

from fakehop.play import player
from fakehop.protocols import PROTOCOLS
from fakehop.scenario.library import Library
from fakehop.scenario.model import Raw
from fakehop.server.render import render

GOLDEN_DIR = Path(__file__).parent / "golden"


@dataclass(frozen=True)
class Case:
    protocol: str
    scenario: str
    stream: bool
    request: int  # 0: not a sequence

    @property
    def path(self) -> Path:
        number = f".{self.request}" if self.request else ""
        return GOLDEN_DIR / self.protocol / f"{self.scenario}{number}.{'sse' if self.stream else 'json'}"

    @property
    def id(self) -> str:
        return str(self.path.relative_to(GOLDEN_DIR))

    def cli_args(self) -> list[str]:
        args = ["play", self.scenario, "--protocol", self.protocol, "--no-wait"]
        if not self.stream:
            args.append("--no-stream")
        if self.request:
            args += ["--request", str(self.request)]
        return args


def cases(library: Library) -> list[Case]:
    found = []
    for protocol in sorted(PROTOCOLS):
        for name in library.names():
            scenario = library[name]
            requests = range(1, len(scenario.entries) + 1) if scenario.is_sequence or scenario.is_conversation else [0]
            for request in requests:
                for stream in (True, False):
                    found.append(Case(protocol, name, stream, request))
    return found


def raw_frames(library: Library) -> set[str]:
    """The frames the bundled scenarios write with `raw:`, as they appear between blank lines."""
    return {
        step.data.removesuffix("\n\n")
        for name in library.names()
        for entry in library[name].entries
        if entry.script
        for step in entry.script.steps
        if isinstance(step, Raw)
    }


def play_bytes(library: Library, case: Case) -> bytes:
    """What `fakehop play` writes to stdout for this case."""
    return asyncio.run(played_bytes(library, case))


async def played_bytes(library: Library, case: Case) -> bytes:
    """play_bytes, for a caller already on an event loop."""
    module = PROTOCOLS[case.protocol]
    turn = case.request if library[case.scenario].is_conversation else 1
    body = dict(module.example_request(turn), stream=case.stream)
    out = bytearray()
    await render(
        library,
        case.scenario,
        case.protocol,
        body,
        request_number=case.request or 1,
        clock=player.InstantClock(),
        write=out.extend,
    )
    return bytes(out)


def write_all() -> int:
    library = Library.load()
    for case in cases(library):
        case.path.parent.mkdir(parents=True, exist_ok=True)
        case.path.write_bytes(play_bytes(library, case))
    return len(cases(library))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite every golden file")
    if parser.parse_args().write:
        print(f"wrote {write_all()} golden files under {GOLDEN_DIR}")
