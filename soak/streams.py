"""One request to a soak server as a client would send it, cut short or not, and what its bytes should be.

Every request carries `X-Fakehop-Seed: 0` and its protocol's example request (for a
conversation, at the turn its golden file answers), so what comes back is exactly what the
golden files under tests/golden hold (`fakehop play --seed 0`), or
for EVERY_STEP, which has no golden file, what `fakehop play` prints for it.
"""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp

from fakehop.play import player
from fakehop.protocols import PROTOCOLS
from fakehop.scenario import reader as sc
from fakehop.scenario.library import Library
from fakehop.scenario.reader import parse_text
from tests.golden_files import Case, played_bytes

HANG_WAIT = 0.3  # how long a client waits for the headers of a non-streamed `hang` before giving up
EVERY_STEP_NAME = "every-step"
EVERY_STEP = """\
description: One of every step that can come before the end, then a failure.
keepalive: 2s
stall_timeout: 6s
steps:
  - reasoning: "Thinking it over."
    chunk: word
  - redacted_thinking
  - delay: 5s
  - keepalive
  - tool_call: {name: lookup, arguments: {query: soak}}
    chunk: 4
    interval: 500ms
  - text: "Here it comes"
    chunk: char
    interval: 1s
  - stall: continue
  - raw: ": a comment of our own\n\n"
  - text: " and a little more."
    citations: [{url: "https://example.com/soak", start: 1, end: 4}]
  - server_tool: {name: web_search, input: {query: soak}, result: [{url: "https://example.com/soak"}]}
  - compaction: "Earlier: a soak."
  - fail: interrupted
"""


@dataclass(frozen=True)
class Target:
    """A scenario in one protocol, streamed or not, with every answer it may give (one per sequence entry)."""

    protocol: str
    scenario: str
    stream: bool
    expected: tuple[bytes, ...]
    hangs: bool  # the answer ends in `hang`: the client reads what comes, then gives up
    disconnects: bool  # the answer may end in `disconnect`
    seconds: float  # how long the longest of its answers takes at time scale 1
    turn: int = 1  # the turn of the example request it sends (a conversation's answer depends on it)

    @property
    def path(self) -> str:
        return PROTOCOLS[self.protocol].PATH

    def body(self) -> bytes:
        return json.dumps(dict(PROTOCOLS[self.protocol].example_request(self.turn), stream=self.stream)).encode()

    def headers(self) -> dict[str, str]:
        return {"Content-Type": "application/json", "X-Fakehop-Scenario": self.scenario, "X-Fakehop-Seed": "0"}

    def matches(self, received: bytes) -> bool:
        return received in self.expected

    def is_prefix(self, received: bytes) -> bool:
        return any(answer.startswith(received) for answer in self.expected)


def ends_with(library: Library, name: str, step_kind: type) -> bool:
    return any(
        entry.script and entry.script.steps and isinstance(entry.script.steps[-1], step_kind)
        for entry in library[name].entries
    )


def longest_seconds(library: Library, name: str) -> float:
    scripts = [entry.script for entry in library[name].entries if entry.script]
    return max((offset for script in scripts for offset, _ in player.timeline(script)), default=0.0)


def library_with_every_step() -> Library:
    return Library.load().with_scenario(parse_text(EVERY_STEP, "<soak>", EVERY_STEP_NAME))


async def targets(library: Library, streams_only: bool = False) -> list[Target]:
    """Every scenario in every protocol, streamed and (unless `streams_only`) not; a
    conversation once for each of its turns."""
    found = []
    for protocol in sorted(PROTOCOLS):
        for name in library.names():
            scenario = library[name]
            entries = len(scenario.entries) if scenario.is_sequence or scenario.is_conversation else 0
            for stream in (True,) if streams_only else (True, False):
                cases = [Case(protocol, name, stream, number) for number in range(1, entries + 1)] or [
                    Case(protocol, name, stream, 0)
                ]
                if name == EVERY_STEP_NAME:
                    answers = tuple([await played_bytes(library, case) for case in cases])
                else:
                    answers = tuple(case.path.read_bytes() for case in cases)
                facts = (
                    ends_with(library, name, sc.Hang),
                    ends_with(library, name, sc.Disconnect),
                    longest_seconds(library, name),
                )
                if scenario.is_conversation:
                    found += [
                        Target(protocol, name, stream, (answer,), *facts, turn=turn)
                        for turn, answer in enumerate(answers, 1)
                    ]
                else:
                    found.append(Target(protocol, name, stream, answers, *facts))
    return found


@dataclass(frozen=True)
class Cut:
    """Where a client gives up: after `after_bytes` of the body, after `after_seconds`, or while
    still sending its request (`mid_request`)."""

    after_bytes: int | None = None
    after_seconds: float | None = None
    mid_request: bool = False

    @classmethod
    def at_random(cls, rng: random.Random, target: Target, time_scale: float) -> Cut:
        """Anywhere in the request or its answer: a byte of it, a moment of it, or before it."""
        kind = rng.choice(("bytes", "seconds", "request"))
        if kind == "bytes":
            return cls(after_bytes=rng.randrange(max(1, *(len(answer) for answer in target.expected))))
        if kind == "seconds":
            return cls(after_seconds=rng.uniform(0, target.seconds * time_scale))
        return cls(mid_request=True)


@dataclass
class Result:
    target: Target
    received: bytes
    cut_short: bool  # the client gave up before the answer ended
    error: str | None = None  # a failure the client did not ask for

    @property
    def correct(self) -> bool:
        if self.error is not None:
            return False
        return self.target.is_prefix(self.received) if self.cut_short else self.target.matches(self.received)


async def fetch(session: aiohttp.ClientSession, url: str, target: Target, cut: Cut | None = None) -> Result:
    """Send one request and read its answer, giving up where `cut` says (a `hang` always needs giving up on)."""
    if cut is not None and cut.mid_request:
        await send_half_a_request(url, target)
        return Result(target, b"", cut_short=True)
    if cut is not None and cut.after_seconds is not None:
        partial = bytearray()
        try:
            return await asyncio.wait_for(read(session, url, target, partial, None), cut.after_seconds)
        except asyncio.TimeoutError:
            return Result(target, bytes(partial), cut_short=True)
    return await read(session, url, target, bytearray(), None if cut is None else cut.after_bytes)


async def read(
    session: aiohttp.ClientSession, url: str, target: Target, received: bytearray, stop_after: int | None
) -> Result:
    """Read the answer into `received` until it ends, or `stop_after` bytes, or (for a `hang`) all it will send."""
    hang_point = len(target.expected[0]) if target.hangs else None
    limits = [limit for limit in (stop_after, hang_point) if limit is not None]
    limit = min(limits) if limits else None
    try:
        response = await post(session, url, target)
    except asyncio.TimeoutError:  # a non-streamed `hang` sends nothing at all
        return Result(target, b"", cut_short=False)
    except aiohttp.ClientConnectionError as exc:
        return Result(target, b"", cut_short=False, error=None if target.disconnects else repr(exc))
    async with response:
        try:
            while limit is None or len(received) < limit:
                chunk = await response.content.readany()
                if not chunk:
                    break
                received += chunk
        except aiohttp.ClientPayloadError:
            pass  # the server closed mid-answer, as `disconnect` does
        if limit is not None and len(received) >= limit:
            response.close()
            return Result(target, bytes(received), cut_short=hang_point is None or len(received) < hang_point)
    return Result(target, bytes(received), cut_short=False)


async def post(session: aiohttp.ClientSession, url: str, target: Target) -> aiohttp.ClientResponse:
    sending = session.post(url + target.path, data=target.body(), headers=target.headers())
    if target.hangs and not target.stream:
        return await asyncio.wait_for(sending, HANG_WAIT)
    return await sending


async def send_half_a_request(url: str, target: Target) -> None:
    """Headers and half the body, then the connection closes."""
    address = urlsplit(url)
    body = target.body()
    reader, writer = await asyncio.open_connection(address.hostname, address.port)
    head = f"POST {target.path} HTTP/1.1\r\nHost: {address.netloc}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    writer.write(head.encode() + body[: len(body) // 2])
    await writer.drain()
    writer.close()
    await writer.wait_closed()


def client_session(connections: int = 0) -> aiohttp.ClientSession:
    """A session that opens a fresh connection for every request (none kept alive between them)."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=connections, force_close=True),
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
    )
