"""The three long runs against a `soak.child` server, each returning its figures.

- `aborts`: many streams, SOAK_CONCURRENCY at a time, some cut short by the client at random points;
  afterwards the server must be back where it started (tasks, timers, fds, connections; RSS
  close to it), with nothing logged and every answer's bytes as the golden files say.
- `slow_readers`: clients that stop reading a long, fast stream; the server's memory must
  stay bounded, because every write waits for the socket to drain.
- `load`: many streams at once, every one's bytes as the golden files say, and every entry of
  a sequence handed out as the server's count of its requests says.
"""

from __future__ import annotations

import asyncio
import random
import socket
import time
from collections import Counter
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import aiohttp

from fakehop.scenario.library import Library

from .server import Figures, ServerProcess
from .streams import (
    EVERY_STEP,
    EVERY_STEP_NAME,
    Cut,
    Result,
    Target,
    client_session,
    fetch,
    library_with_every_step,
    targets,
)

SOAK_TIME_SCALE = 0.005  # a 120 s stall lasts 0.6 s: long enough to be cut in the middle
LOAD_TIME_SCALE = 0.01
RSS_TOLERANCE_MIB = 8.0  # RSS a run may leave behind: the allocator keeps some, a leak would keep more
SLOW_MEMORY_BOUND_MIB = 16.0  # RSS stalled readers may add; the answers they hold back are far larger
QUICK_TARGET_SECONDS = 0.05  # warm-up requests take at most this long
SOAK_CONCURRENCY = 200
YAML = {"Content-Type": "application/yaml"}  # how a scenario file's text goes to the control API


@dataclass
class Run:
    """What every run reports: the server before, during and after, and what went wrong."""

    name: str
    requests: int = 0
    seconds: float = 0.0
    baseline: Figures | None = None
    checkpoints: list[tuple[str, Figures]] = field(default_factory=list)
    after: Figures | None = None
    wrong: list[Result] = field(default_factory=list)  # answers whose bytes were not as golden
    logged: str = ""  # the server's stderr
    outcomes: Counter = field(default_factory=Counter)  # how the client's requests went
    surprises: list[str] = field(default_factory=list)  # sequence entries handed out other than once
    rss_reference: tuple[str, Figures] | None = None  # what RSS growth is measured from, when not the baseline

    @property
    def back_to_baseline(self) -> bool:
        base, after = self.baseline, self.after
        return (after.tasks, after.timers, after.fds, after.connections) == (base.tasks, base.timers, base.fds, 0)

    @property
    def rss_growth_mib(self) -> float:
        reference = self.rss_reference[1] if self.rss_reference else self.baseline
        return self.after.rss_mib - reference.rss_mib

    @property
    def unfinished(self) -> int:
        """Answers the server could not finish (an exception in the handler) during the run."""
        return self.after.unfinished - self.baseline.unfinished

    @property
    def log_records(self) -> int:
        """Records the server logged: the lines of its stderr that start with a level name."""
        return sum(1 for line in self.logged.splitlines() if line.split(" ", 1)[0] in ("WARNING", "ERROR", "CRITICAL"))

    @property
    def server_ends(self) -> Counter:
        """How the server's journal says the run's requests ended."""
        return Counter(self.after.ends) - Counter(self.baseline.ends)


async def warm_up(server: ServerProcess, session: aiohttp.ClientSession, all_targets: list[Target]) -> Figures:
    """Fill the journal and exercise every quick target, then the figures at rest: the baseline."""
    rest = await server.figures_async()
    quick = [target for target in all_targets if target.seconds * server.time_scale <= QUICK_TARGET_SECONDS]
    requests = server.journal_size + SOAK_CONCURRENCY
    for start in range(0, requests, SOAK_CONCURRENCY):
        batch = [quick[i % len(quick)] for i in range(start, start + SOAK_CONCURRENCY)]
        await asyncio.gather(*(fetch(session, server.url, target) for target in batch))
    return await server.idle_figures(rest.tasks)


async def aborts(
    server: ServerProcess, streams: int, cut_share: float = 0.2, seed: int = 1, checkpoints: int = 2
) -> Run:
    """`streams` requests over every bundled target and EVERY_STEP's, `cut_share` of them cut
    short at random points."""
    rng = random.Random(seed)
    run = Run("aborts")
    all_targets = await targets(library_with_every_step())
    async with client_session(SOAK_CONCURRENCY) as session:
        async with session.post(
            server.url + "/_fakehop/scenarios", params={"name": EVERY_STEP_NAME}, data=EVERY_STEP, headers=YAML
        ) as response:
            response.raise_for_status()
        run.baseline = await warm_up(server, session, all_targets)
        started = time.monotonic()
        for _ in range(checkpoints):
            plan = [
                (target, Cut.at_random(rng, target, server.time_scale) if rng.random() < cut_share else None)
                for target in rng.choices(all_targets, k=streams // checkpoints)
            ]
            results = await bounded_gather(
                [fetch(session, server.url, target, cut) for target, cut in plan], SOAK_CONCURRENCY
            )
            tally(run, results, [cut for _, cut in plan])
            run.checkpoints.append((f"after {run.requests:,} streams", await server.idle_figures(run.baseline.tasks)))
        run.seconds = time.monotonic() - started
    run.after = run.checkpoints[-1][1]
    run.logged = server.logged()
    return run


def tally(run: Run, results: list[Result], cuts: list[Cut | None]) -> None:
    run.requests += len(results)
    for result, cut in zip(results, cuts):
        if cut is None:
            run.outcomes["read to the end"] += 1
        else:
            run.outcomes[f"cut {cut_kind(cut)}" if result.cut_short else "ended before their cut"] += 1
        if not result.correct:
            run.wrong.append(result)


def cut_kind(cut: Cut) -> str:
    if cut.mid_request:
        return "mid-request"
    return "after bytes" if cut.after_bytes is not None else "after time"


async def bounded_gather(coroutines: list, limit: int) -> list:
    gate = asyncio.Semaphore(limit)

    async def one(coroutine):
        async with gate:
            return await coroutine

    return await asyncio.gather(*(one(c) for c in coroutines))


async def load(server: ServerProcess, streams: int, rounds: int = 2) -> Run:
    """`rounds` times, `streams` streams of every bundled target in turn, all at once; sequences
    start from their first entry each round. The first round's thousands of connections leave
    the allocator holding a high-water mark of memory; RSS growth counts from after it."""
    run = Run("load")
    stream_targets = await targets(Library.load(), streams_only=True)
    plan = [stream_targets[i % len(stream_targets)] for i in range(streams)]
    async with client_session() as session:
        run.baseline = await warm_up(server, session, stream_targets)
        started = time.monotonic()
        for round_number in range(1, rounds + 1):
            async with session.post(server.url + "/_fakehop/reset") as response:
                response.raise_for_status()
            async with PeakWatch(server) as peak:
                results = await asyncio.gather(*(fetch(session, server.url, target) for target in plan))
            tally(run, results, [None] * len(results))
            run.surprises += sequence_surprises(results)
            run.checkpoints.append((f"round {round_number}, most connections", peak.figures))
            run.checkpoints.append((f"round {round_number}, after", await server.idle_figures(run.baseline.tasks)))
        run.seconds = time.monotonic() - started
    run.after = run.checkpoints[-1][1]
    run.rss_reference = run.checkpoints[1]
    run.logged = server.logged()
    return run


def sequence_surprises(results: list[Result]) -> list[str]:
    """Sequences restart before each round, so each of their entries but the last (which
    repeats) goes to exactly one request, whatever its protocol."""
    handed_out: Counter = Counter()
    for result in results:
        if result.received in result.target.expected[:-1]:
            handed_out[(result.target.scenario, result.target.expected.index(result.received))] += 1
    sequences = {
        result.target.scenario: len(result.target.expected) for result in results if len(result.target.expected) > 1
    }
    return [
        f"{name} entry {entry + 1} went to {handed_out[(name, entry)]} requests"
        for name, entries in sorted(sequences.items())
        for entry in range(entries - 1)
        if handed_out[(name, entry)] != 1
    ]


class PeakWatch:
    """Samples the server's figures while a run is under way: keeps those with the most
    connections, and the highest RSS seen."""

    def __init__(self, server: ServerProcess):
        self.server = server
        self.figures: Figures | None = None
        self.rss = 0
        self.task: asyncio.Task | None = None

    async def __aenter__(self) -> PeakWatch:
        self.task = asyncio.create_task(self.watch())
        return self

    async def __aexit__(self, *exc_info) -> None:
        self.task.cancel()
        try:
            await self.task
        except asyncio.CancelledError:
            pass

    async def watch(self) -> None:
        while True:
            figures = await self.server.figures_async()
            if self.figures is None or figures.connections > self.figures.connections:
                self.figures = figures
            self.rss = max(self.rss, figures.rss)
            await asyncio.sleep(0.02)


# ---------------------------------------------------------------- slow readers

FIREHOSE = """\
description: A long answer all at once, one character a delta.
steps:
  - text: {faker: paragraphs, nb: 1000, seed: 7}
    chunk: char
"""


@dataclass
class SlowRun(Run):
    stream_bytes: int = 0  # one whole answer
    stream_events: int = 0
    readers: int = 0
    most_events_written: int = 0  # by the server, to any stalled reader, while it stalled
    rss_while_stalled: int = 0  # the most seen


async def slow_readers(server: ServerProcess, readers: int, stall_seconds: float) -> SlowRun:
    """`readers` clients ask for FIREHOSE and read nothing for `stall_seconds`, then hang up."""
    run = SlowRun("slow readers", readers=readers)
    async with client_session() as session:
        async with session.post(
            server.url + "/_fakehop/scenarios", params={"name": "firehose"}, data=FIREHOSE, headers=YAML
        ) as response:
            response.raise_for_status()
        whole = await firehose(session, server.url)
        run.stream_bytes = len(whole)
        run.stream_events = whole.count(b"\n\n")
        run.baseline = await server.idle_figures((await server.figures_async()).tasks)
        started = time.monotonic()
        sockets = [stalled_reader(server.url) for _ in range(readers)]
        async with PeakWatch(server) as peak:
            await asyncio.sleep(stall_seconds)
        run.rss_while_stalled = peak.rss
        run.most_events_written = await most_events_in_progress(session, server.url)
        run.checkpoints.append((f"{readers} readers stalled for {stall_seconds:g}s, most connections", peak.figures))
        for sock in sockets:
            sock.close()
        run.requests = readers
        run.after = await server.idle_figures(run.baseline.tasks)
        run.seconds = time.monotonic() - started
    run.logged = server.logged()
    return run


async def firehose(session: aiohttp.ClientSession, url: str) -> bytes:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    async with session.post(
        url + "/v1/chat/completions", json=body, headers={"X-Fakehop-Scenario": "firehose"}
    ) as response:
        return await response.read()


def stalled_reader(url: str) -> socket.socket:
    """A connection that sends its request for FIREHOSE and then never reads."""
    address = urlsplit(url)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((address.hostname, address.port))
    body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true}'
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {address.netloc}\r\nContent-Type: application/json\r\n"
        f"X-Fakehop-Scenario: firehose\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    sock.sendall(head.encode() + body)
    return sock


async def most_events_in_progress(session: aiohttp.ClientSession, url: str) -> int:
    async with session.get(url + "/_fakehop/requests") as response:
        records = (await response.json())["requests"]
    return max((r["events"] for r in records if r["end"] == "in_progress"), default=0)
