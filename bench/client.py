"""The load client: one process that drives one server through one measurement.

It reads one JSON spec per line on stdin and answers each with one JSON result line on
stdout. It uses a bare aiohttp client (no SDK), and for timing a bare asyncio protocol that
only stamps reads. It does not parse SSE but counts the blank lines that end frames, which is
all the measurements need and keeps the client cheap. It reads the server's CPU time and
memory from /proc, so the figures cover exactly the measured window.

Modes:
  throughput  `concurrency` workers each send requests back to back for `duration` seconds
  idle        open `streams` streams, hold them `hold` seconds, check their keepalives
  timing      `concurrency` workers, started `spread` seconds apart at most, each play
              `streams_each` paced streams; every frame group's arrival is compared with
              its schedule
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp
import h11

from fakehop.cli.main import raise_open_file_limit

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
OPEN_TIMEOUT = 60.0


def cpu_seconds(pid: int | str = "self") -> float:
    """User + system CPU time of a process, from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as file:
        fields = file.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def rss_kb(pid: int | str = "self") -> int:
    """Resident memory of a process in KiB, from /proc/PID/status."""
    with open(f"/proc/{pid}/status") as file:
        for line in file:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


def listen_overflows() -> int:
    """Connections the kernel dropped because a listen backlog was full, machine-wide."""
    with open("/proc/net/netstat") as file:
        lines = [line.split() for line in file if line.startswith("TcpExt:")]
    names, values = lines[0], lines[1]
    return int(values[names.index("ListenOverflows")])


def percentile(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


@dataclass
class Target:
    """One scenario on one server, and what a correct answer to it looks like."""

    url: str
    body: bytes
    headers: dict[str, str]
    frames: int  # frames in a whole answer
    last_line: bytes  # the first line of its last frame: `data: [DONE]`, `event: response.completed`, ...
    group_starts: list[int]  # index of the first frame of each timed group
    group_offsets: list[float]  # when each group is due, seconds from the first

    @classmethod
    def from_spec(cls, spec: dict) -> Target:
        groups = spec["groups"]
        starts, count = [], 0
        for _, frames in groups:
            starts.append(count)
            count += len(frames)
        return cls(
            url=spec["url"] + spec["path"],
            body=json.dumps(spec["body"]).encode(),
            headers={
                "Content-Type": "application/json",
                "Authorization": "Bearer sk-bench",
                "X-Fakehop-Scenario": spec["scenario"],
            },
            frames=count,
            last_line=groups[-1][1][-1].encode().split(b"\n", 1)[0],
            group_starts=starts,
            group_offsets=[offset for offset, _ in groups],
        )

    def is_whole(self, status: int, data: bytes) -> bool:
        """The answer has every frame and ends as the plan does (ids and times differ per answer)."""
        if status != 200 or data.count(b"\n\n") != self.frames:
            return False
        before_last = data.rfind(b"\n\n", 0, len(data) - 2)
        return data.startswith(self.last_line, 0 if before_last < 0 else before_last + 2)


class Window:
    """CPU time of the server (all its processes) and of this client, and wall time, over a measured
    stretch; and of Redis, when the server keeps its state there."""

    def __init__(self, server_pids: list[int], redis_pid: int | None = None):
        self.server_pids = server_pids
        self.redis_pid = redis_pid
        self.wall = time.monotonic()
        self.server_cpu = sum(map(cpu_seconds, server_pids))
        self.redis_cpu = cpu_seconds(redis_pid) if redis_pid else 0.0
        self.client_cpu = cpu_seconds()

    @classmethod
    def from_spec(cls, spec: dict) -> Window:
        return cls(spec.get("server_pids") or [spec["server_pid"]], spec.get("redis_pid"))

    def close(self) -> dict:
        wall = time.monotonic() - self.wall
        server_cpu = sum(map(cpu_seconds, self.server_pids)) - self.server_cpu
        measured = {
            "seconds": round(wall, 3),
            "server_cpu_seconds": round(server_cpu, 3),
            "server_cpu_percent": round(100 * server_cpu / wall, 1),
            "client_cpu_percent": round(100 * (cpu_seconds() - self.client_cpu) / wall, 1),
            "loadavg_1min": os.getloadavg()[0],
        }
        if self.redis_pid:
            measured["redis_cpu_seconds"] = round(cpu_seconds(self.redis_pid) - self.redis_cpu, 3)
        return measured


def new_session(connections: int) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=connections)
    return aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=None, sock_connect=OPEN_TIMEOUT)
    )


# ---------------------------------------------------------------- throughput


async def throughput(spec: dict) -> dict:
    target = Target.from_spec(spec)
    concurrency, duration = spec["concurrency"], spec["duration"]
    done, errors, latencies = 0, 0, []

    async def worker(stop_at: float) -> None:
        nonlocal done, errors
        while time.monotonic() < stop_at:
            sent = time.monotonic()
            try:
                async with session.post(target.url, data=target.body, headers=target.headers) as response:
                    data = await response.read()
                whole = target.is_whole(response.status, data)
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                whole = False
            if whole:
                done += 1
                latencies.append(time.monotonic() - sent)
            else:
                errors += 1

    async with new_session(concurrency) as session:
        window = Window.from_spec(spec)
        stop_at = time.monotonic() + duration
        await asyncio.gather(*(worker(stop_at) for _ in range(concurrency)))
        measured = window.close()
    if "redis_cpu_seconds" in measured:
        measured["redis_us_per_request"] = round(1e6 * measured["redis_cpu_seconds"] / done, 1) if done else None
    return {
        **measured,
        "requests": done,
        "errors": errors,
        "requests_per_s": round(done / measured["seconds"], 1),
        "events_per_s": round(done * target.frames / measured["seconds"], 1),
        "server_us_per_request": round(1e6 * measured["server_cpu_seconds"] / done, 1) if done else None,
        "latency_p50_ms": _ms(percentile(latencies, 0.5)),
        "latency_p99_ms": _ms(percentile(latencies, 0.99)),
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


# ---------------------------------------------------------------- idle streams


class IdleStreams:
    """Many streams held open, each counting the frames (keepalives) it receives."""

    OPEN, FAILED, ENDED = "open", "failed", "ended"

    def __init__(self, target: Target, count: int, connecting: int):
        self.target = target
        self.count = count
        self.connecting = asyncio.Semaphore(connecting)
        self.frames = [0] * count
        self.states: list[str | None] = [None] * count
        self.settled = 0
        self.all_settled = asyncio.Event()

    def count_of(self, state: str) -> int:
        return self.states.count(state)

    def mark(self, number: int, state: str) -> None:
        first = self.states[number] is None
        self.states[number] = state
        if first:
            self.settled += 1
            if self.settled == self.count:
                self.all_settled.set()

    async def hold(self, session: aiohttp.ClientSession, number: int) -> None:
        try:
            async with self.connecting:
                response = await session.post(self.target.url, data=self.target.body, headers=self.target.headers)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            self.mark(number, self.FAILED)
            return
        if response.status != 200:
            response.release()
            self.mark(number, self.FAILED)
            return
        self.mark(number, self.OPEN)
        try:
            async for chunk in response.content.iter_any():
                self.frames[number] += chunk.count(b"\n\n")
        except (aiohttp.ClientError, OSError):
            pass
        self.mark(number, self.ENDED)


async def idle(spec: dict) -> dict:
    target = Target.from_spec(spec)
    count, hold_seconds, keepalive = spec["streams"], spec["hold"], spec["keepalive_interval"]
    pid = spec["server_pid"]
    streams = IdleStreams(target, count, spec["connect_concurrency"])
    baseline_kb = rss_kb(pid)
    overflows = listen_overflows()
    async with new_session(0) as session:
        opening = time.monotonic()
        tasks = [asyncio.create_task(streams.hold(session, n)) for n in range(count)]
        try:
            await asyncio.wait_for(streams.all_settled.wait(), OPEN_TIMEOUT)
        except asyncio.TimeoutError:
            pass
        open_seconds = time.monotonic() - opening
        overflows = listen_overflows() - overflows
        await asyncio.sleep(spec["settle"])
        frames_before = list(streams.frames)
        window = Window([pid])
        await asyncio.sleep(hold_seconds)
        measured = window.close()
        held_kb = rss_kb(pid)
        received = [after - before for after, before in zip(streams.frames, frames_before)]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    expected = int(measured["seconds"] / keepalive) - 1
    starved = sum(1 for state, got in zip(streams.states, received) if state == streams.OPEN and got < expected)
    failed, ended = streams.count_of(streams.FAILED), streams.count_of(streams.ENDED)
    opened = count - failed - streams.count_of(None)
    return {
        **measured,
        "streams": count,
        "opened": opened,
        "open_seconds": round(open_seconds, 2),
        "listen_overflows": overflows,
        "errors": count - opened + ended + starved,
        "failed_to_open": count - opened,
        "ended_early": ended,
        "starved": starved,
        "keepalives_per_s": round(sum(received) / measured["seconds"], 1),
        "server_rss_baseline_kb": baseline_kb,
        "server_rss_held_kb": held_kb,
        "kb_per_stream": round((held_kb - baseline_kb) / max(1, opened - ended), 2),
        "client_rss_kb": rss_kb(),
    }


# ---------------------------------------------------------------- timing fidelity


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No garbage collection in this client while it times arrivals: a pass over its many
    objects would stall every stream at once and be counted as the server's lateness."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


STREAM_TIMEOUT = 60.0
CHUNKED_END = b"\r\n0\r\n\r\n"  # the end of a chunked body; no response head can end so


class TimedConnection(asyncio.Protocol):
    """One keep-alive connection that plays streams one after another, stamping each read.

    `data_received` only stamps a read with the time the event loop hands it over and keeps
    it, watching for the bytes that end a chunked body. Taking the HTTP apart (`Played`)
    waits until every stream has ended: parsing as reads come would put this client's own
    work, which under hundreds of streams is most of what it does, into the figures.
    """

    def __init__(self, target: Target):
        self.target = target
        self.transport: asyncio.Transport | None = None
        self.closed = asyncio.get_running_loop().create_future()
        self.ended: asyncio.Future | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)
        if self.ended is not None and not self.ended.done():
            self.ended.set_result(None)

    async def stream(self) -> Played:
        """Send one request and keep every read of its answer, until the body ends or the connection does."""
        http = h11.Connection(h11.CLIENT)
        url = urlsplit(self.target.url)
        headers = [("Host", url.netloc), ("Content-Length", str(len(self.target.body))), *self.target.headers.items()]
        request = http.send(h11.Request(method="POST", target=url.path, headers=headers))
        self.reads: list[tuple[float, bytes]] = []
        self.last_bytes = b""
        self.ended = asyncio.get_running_loop().create_future()
        sent = time.monotonic()
        if self.closed.done():  # the server closed the connection after the last stream: this one fails
            return Played(http, sent, [])
        self.transport.write(request + http.send(h11.Data(data=self.target.body)) + http.send(h11.EndOfMessage()))
        try:
            await asyncio.wait_for(asyncio.shield(self.ended), STREAM_TIMEOUT)
        except asyncio.TimeoutError:
            self.transport.close()  # what came is parsed, and found short
        return Played(http, sent, self.reads)

    def data_received(self, data: bytes) -> None:
        self.reads.append((time.monotonic(), data))
        if self.ended.done():
            return
        self.last_bytes = (self.last_bytes + data)[-len(CHUNKED_END) :]
        refused = len(self.reads) == 1 and not data.startswith(
            b"HTTP/1.1 200 "
        )  # no stream comes: parsing will say why
        if refused or self.last_bytes == CHUNKED_END:
            self.ended.set_result(None)


@dataclass
class Played:
    """One stream's reads, taken apart once timing is over."""

    http: h11.Connection
    sent: float
    reads: list[tuple[float, bytes]]

    def arrivals(self, target: Target) -> list[float] | None:
        """When the first frame of each group arrived; None unless the answer was a whole 200."""
        status, seen, tail, arrivals, ended = 0, 0, b"", [], False
        try:
            for arrived, data in self.reads:
                self.http.receive_data(data)
                while (event := self.http.next_event()) not in (h11.NEED_DATA, h11.PAUSED):
                    if isinstance(event, h11.Response):
                        status = event.status_code
                    elif isinstance(event, h11.Data):
                        joined = tail + bytes(event.data)
                        seen, tail = seen + joined.count(b"\n\n"), joined[-1:]
                        while len(arrivals) < len(target.group_starts) and target.group_starts[len(arrivals)] < seen:
                            arrivals.append(arrived)
                    elif isinstance(event, h11.EndOfMessage):
                        ended = True
        except h11.ProtocolError:
            return None
        return arrivals if ended and status == 200 and seen == target.frames else None


async def timing(spec: dict) -> dict:
    target = Target.from_spec(spec)
    concurrency, streams_each, spread = spec["concurrency"], spec["streams_each"], spec["spread"]
    url = urlsplit(target.url)
    loop = asyncio.get_running_loop()
    played: list[Played] = []
    failures = 0

    async def worker() -> None:
        nonlocal failures
        await asyncio.sleep(random.uniform(0, spread))
        try:
            _, connection = await asyncio.wait_for(
                loop.create_connection(lambda: TimedConnection(target), url.hostname, url.port), OPEN_TIMEOUT
            )
        except (OSError, asyncio.TimeoutError):
            failures += streams_each
            return
        try:
            for _ in range(streams_each):
                played.append(await connection.stream())
        finally:
            connection.transport.close()
            await connection.closed

    window = Window.from_spec(spec)
    with collector_paused():
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    measured = window.close()
    errors_by_group: list[list[float]] = [[] for _ in target.group_offsets]
    first_frame_ms: list[float] = []
    for stream in played:
        arrivals = stream.arrivals(target)
        if arrivals is None:
            failures += 1
            continue
        first_frame_ms.append((arrivals[0] - stream.sent) * 1000)
        # Each group's lateness against the stream's own schedule, anchored at its most punctual
        # group: the start of the stream as the client sees it, whatever the network latency.
        start = min(arrived - offset for arrived, offset in zip(arrivals, target.group_offsets))
        for group, (arrived, offset) in enumerate(zip(arrivals, target.group_offsets)):
            errors_by_group[group].append((arrived - offset - start) * 1000)
    return {
        **measured,
        **timing_summary(errors_by_group),
        "errors": failures,
        "first_frame_p50_ms": _round(percentile(first_frame_ms, 0.5)),
        "first_frame_p99_ms": _round(percentile(first_frame_ms, 0.99)),
    }


def timing_summary(errors_by_group: list[list[float]]) -> dict:
    """Percentiles of every paced group's lateness, and early groups against late ones."""
    every = [error for group in errors_by_group for error in group]
    quarter = max(1, len(errors_by_group) // 4)
    early = [error for group in errors_by_group[:quarter] for error in group]
    late = [error for group in errors_by_group[-quarter:] for error in group]
    return {
        "deltas": len(every),
        "error_p50_ms": _round(percentile(every, 0.5)),
        "error_p99_ms": _round(percentile(every, 0.99)),
        "error_max_ms": _round(max(every, default=None)),
        "early_p50_ms": _round(percentile(early, 0.5)),
        "late_p50_ms": _round(percentile(late, 0.5)),
        "drift_ms": _round(percentile(late, 0.5) - percentile(early, 0.5)) if every else None,
        "early_p99_ms": _round(percentile(early, 0.99)),
        "late_p99_ms": _round(percentile(late, 0.99)),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


MODES = {"throughput": throughput, "idle": idle, "timing": timing}


def main() -> None:
    """One spec per line on stdin, one result per line on stdout, until stdin closes."""
    raise_open_file_limit()
    for line in sys.stdin:
        spec = json.loads(line)
        try:
            result = asyncio.run(MODES[spec["mode"]](spec))
        except Exception as exc:  # reported to the bench, which stops with it
            result = {"failure": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
