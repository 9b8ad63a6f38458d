"""Hostile requests against a `soak.child` server, one at a time, while a prober times the health check.

Each case is one request (or a short burst) of the kind that once froze the server's loop or
blew up its memory: a model of megabytes, a gzip bomb, regexes that backtrack, keepalives a
microsecond apart, a million deltas to a fast reader, a 71,000-step upload, bodies of tens of
MiB in the journal, bodies of millions of tiny values, headers of megabytes. While it is served, a thread asks `GET /_fakehop/health` every few
milliseconds on a connection of its own; the longest answer and the server's peak RSS are the
case's figures.
"""

from __future__ import annotations

import asyncio
import gzip
import http.client
import json
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import NamedTuple
from urllib.parse import urlsplit

import aiohttp

from fakehop.server.intake import MAX_BACKSLASHES, MAX_BODY_BYTES, MAX_JSON_VALUES, MAX_MODEL_CHARS

from .server import ServerProcess

HEALTH_BOUND_MS = 100.0  # the longest the health check may take while any one case is served
PROBE_INTERVAL = 0.005
RSS_BOUND_MIB = 240.0  # peak RSS while the largest body with the longest model is answered (a fresh server is about 50)
CHAT = "/v1/chat/completions"
YAML = {"Content-Type": "application/yaml"}
SCENARIOS = {
    "three-hundred-words": "steps:\n  - text: {faker: words, nb: 300, seed: 1}\n    chunk: word\n",
    "backtracking": "match: {prompt: '/^(a+)+$/'}\nsteps: [{text: matched}]\n",
    "weather-in-paris": "match: {prompt: '/weather.*Paris/'}\nsteps: [{text: sunny}]\n",
    "tiny-keepalives": "keepalive: 1ms\nsteps: [{text: a}, {delay: 1h}, {text: b}]\n",
}
# Added only before the cases that play them: the server takes about half a second to make this text.
LARGE_SCENARIOS = {
    "million-deltas": "steps:\n  - text: {faker: paragraphs, nb: 10000, seed: 2}\n    chunk: char\n",  # 940,000 characters
}


def chat_body(prompt: str = "hi", model: str = "gpt-5.6-sol", stream: bool = True, **extra) -> bytes:
    return json.dumps(
        {"model": model, "messages": [{"role": "user", "content": prompt}], "stream": stream, **extra}
    ).encode()


def conversation(messages: int) -> bytes:
    """A chat body of `messages` short turns, user and assistant by turns, then "hi": some 33 bytes a turn."""
    turns = [{"role": "user" if number % 2 == 0 else "assistant", "content": "t"} for number in range(messages)]
    return json.dumps(
        {"model": "gpt-5.6-sol", "messages": turns + [{"role": "user", "content": "hi"}]}, separators=(",", ":")
    ).encode()


def of_values(values: list[str]) -> bytes:
    """A chat body whose `x` is a list of `values` (each JSON text), built as text: fast."""
    return chat_body(stream=False)[:-1] + b', "x": [' + ",".join(values).encode() + b"]}"


class Case(NamedTuple):
    """One case: its name, what makes its request(s), and the LARGE_SCENARIOS it plays."""

    name: str
    make: Callable[[], Send]
    plays: tuple[str, ...] = ()


@dataclass
class Figures:
    """What one case did to the server: the longest health check, the peak RSS, what it got."""

    name: str
    health_ms: float
    peak_rss_mib: float
    outcome: str
    failures: list[str]  # health checks that did not answer 200


class HealthProber:
    """A thread asking for the health check over and over; `longest` is the slowest answer, in ms."""

    def __init__(self, url: str):
        self.address = urlsplit(url)
        self.longest = 0.0
        self.failures: list[str] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.probe, daemon=True)

    def __enter__(self) -> HealthProber:
        self.thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stopping.set()
        self.thread.join()

    def probe(self) -> None:
        connection = http.client.HTTPConnection(self.address.hostname, self.address.port, timeout=30)
        while not self.stopping.is_set():
            started = time.perf_counter()
            try:
                connection.request("GET", "/_fakehop/health")
                response = connection.getresponse()
                response.read()
                if response.status != 200:
                    self.failures.append(f"health answered {response.status}")
            except (OSError, http.client.HTTPException) as exc:
                self.failures.append(repr(exc))
                connection.close()
            self.longest = max(self.longest, (time.perf_counter() - started) * 1000)
            time.sleep(PROBE_INTERVAL)
        connection.close()


async def post(
    session: aiohttp.ClientSession, url: str, body: bytes, headers: dict | None = None, path: str = CHAT
) -> str:
    """Send one request and read all of its answer; returns its status and size."""
    async with session.post(
        url + path, data=body, headers={"Content-Type": "application/json", **(headers or {})}
    ) as response:
        size = len(await response.read())
        return f"{response.status}, {size:,} bytes"


async def read_for(session: aiohttp.ClientSession, url: str, seconds: float, body: bytes, scenario: str) -> str:
    """A stream read as fast as it comes for `seconds`, then dropped."""
    received = 0
    async with session.post(url + CHAT, data=body, headers={"X-Fakehop-Scenario": scenario}) as response:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            chunk = await asyncio.wait_for(response.content.readany(), seconds)
            if not chunk:
                break
            received += len(chunk)
        response.close()
    return f"{response.status}, {received:,} bytes in {seconds:g}s"


Send = Callable[
    [aiohttp.ClientSession, str], Awaitable[str]
]  # one case's request(s) to the server at a URL; returns what came back


def sending(body: bytes, headers: dict | None = None, path: str = CHAT) -> Send:
    return lambda session, url: post(session, url, body, headers, path)


def cases(scale: float) -> list[Case]:
    """Every case, with what it sends grown by `scale` (1 for the soak's figures): its name, and
    what makes its request(s). That is called before the case's prober starts: making a body
    takes this process's time too."""
    words = {"X-Fakehop-Scenario": "three-hundred-words"}
    bomb_bytes = int(MAX_BODY_BYTES * max(8 * scale, 1.1))
    steps, empty_objects, messages, escapes = (
        int(71_000 * scale),
        int(3_000_000 * scale),
        int(900_000 * scale),
        int(15_000_000 * scale),
    )
    big_headers = {f"X-Big-{number}": "h" * 60_000 for number in range(120)}
    return [
        Case(*case)
        for case in [
            ("a 2 MiB model on a 300-word scenario", lambda: sending(chat_body(model="m" * 2**21), words)),
            ("20 models of 10 MiB", lambda: bursting(int(20 * scale) or 1, chat_body(model="m" * 10 * 2**20), words)),
            (
                "the largest body with the longest model on a 300-word scenario",
                lambda: sending(chat_body("word " * ((MAX_BODY_BYTES - 400) // 5), model="m" * MAX_MODEL_CHARS), words),
            ),
            (
                f"a gzip bomb of {bomb_bytes / 2**20:.0f} MiB inflated",
                lambda: sending(
                    gzip.compress(b'{"model": "m", "x": "' + b"a" * bomb_bytes + b'"}'), {"Content-Encoding": "gzip"}
                ),
            ),
            ("/^(a+)+$/ on a 27-character prompt", lambda: sending(chat_body("a" * 27 + "b"))),
            ("/weather.*Paris/ on a 200 KB prompt", lambda: sending(chat_body("weather " * 25_000))),
            ("keepalives every 1ms during an hour's delay", lambda: reading(2 * scale, chat_body(), "tiny-keepalives")),
            (
                "a million deltas with no pause, streamed",
                lambda: reading(30, chat_body(), "million-deltas"),
                ("million-deltas",),
            ),
            (
                "a million deltas with no pause, whole",
                lambda: sending(chat_body(stream=False), {"X-Fakehop-Scenario": "million-deltas"}),
                ("million-deltas",),
            ),
            (
                f"an upload of {steps:,} steps",
                lambda: sending(
                    ("steps:\n" + "  - keepalive\n" * steps).encode(), YAML, path="/_fakehop/scenarios?name=many-steps"
                ),
            ),
            (
                "bodies of 20 MiB in the journal, then read",
                lambda: journaling(chat_body("x" * 20 * 2**20, stream=False), int(40 * scale) or 1),
            ),
            (f"{empty_objects:,} empty objects in one body", lambda: sending(of_values(["{}"] * empty_objects))),
            (f"a conversation of {messages:,} messages", lambda: sending(conversation(messages))),
            (
                "a conversation of 80,000 messages, about the most a body may hold",
                lambda: sending(conversation(80_000)),
            ),
            (
                f"{MAX_JSON_VALUES - 100:,} numbers in one body, about the most it may hold",
                lambda: sending(of_values(["1"] * (MAX_JSON_VALUES - 100))),
            ),
            (f"a prompt of {escapes:,} escapes", lambda: sending(chat_body("\n" * escapes, stream=False))),
            (
                f"a prompt of {MAX_BACKSLASHES:,} escapes, the most a body may hold",
                lambda: sending(chat_body("\n" * MAX_BACKSLASHES, stream=False)),
            ),
            (
                "bodies of 149,000 numbers in the journal, then read",  # 1.0 MB each: kept parsed
                lambda: journaling(
                    of_values([str(number) for number in range(10**5, 10**5 + 149_000)]), int(64 * scale) or 1
                ),
            ),
            (
                "headers of 120 lines of 60 KB in the journal, then read",
                lambda: journaling(chat_body(), int(40 * scale) or 1, big_headers),
            ),
        ]
    ]


def bursting(count: int, body: bytes, headers: dict) -> Send:
    return lambda session, url: burst(count, lambda: post(session, url, body, headers))


def reading(seconds: float, body: bytes, scenario: str) -> Send:
    return lambda session, url: read_for(session, url, seconds, body, scenario)


def journaling(body: bytes, count: int, headers: dict | None = None) -> Send:
    return lambda session, url: journal_of(session, url, body, count, headers)


async def burst(count: int, send: Callable[[], Awaitable[str]]) -> str:
    return "; ".join(sorted(set(await asyncio.gather(*(send() for _ in range(count))))))


async def journal_of(
    session: aiohttp.ClientSession, url: str, body: bytes, count: int, headers: dict | None = None
) -> str:
    """`count` requests of `body` (with `headers`) one after another, then the journal's first page read."""
    for _ in range(count):
        await post(session, url, body, headers)
    started = time.perf_counter()
    async with session.get(url + "/_fakehop/requests") as response:
        size = len(await response.read())
    return f"{count} sent; GET /requests: {size:,} bytes in {(time.perf_counter() - started) * 1000:.0f} ms"


async def add_scenarios(session: aiohttp.ClientSession, url: str, large: tuple[str, ...]) -> None:
    """SCENARIOS, which every case gets (a request that names no scenario meets their `match`es),
    and the `large` ones of LARGE_SCENARIOS."""
    for name, text in [*SCENARIOS.items(), *((name, LARGE_SCENARIOS[name]) for name in large)]:
        async with session.post(
            url + "/_fakehop/scenarios", params={"name": name}, data=text, headers=YAML
        ) as response:
            response.raise_for_status()


async def hostile(server: ServerProcess, scale: float = 1.0, only: str | None = None) -> list[Figures]:
    """Each case (or the one named `only`) in turn, with its figures. SCENARIOS, and the large
    ones a case plays, are added before it and go with the reset after it."""
    found = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        for name, make, plays in cases(scale):
            if only is not None and name != only:
                continue
            await add_scenarios(session, server.url, plays)
            send = make()
            await asyncio.to_thread(server.figures, "clear-peak")
            with HealthProber(server.url) as prober:
                await asyncio.sleep(0.05)
                outcome = await send(session, server.url)
                await asyncio.sleep(0.05)
            peak = (await server.figures_async()).peak_rss / 2**20
            found.append(Figures(name, prober.longest, peak, outcome, prober.failures))
            async with session.post(server.url + "/_fakehop/reset") as response:
                response.raise_for_status()
    return found


async def hostile_apart(time_scale: float, scale: float = 1.0) -> tuple[list[Figures], str]:
    """Each case on a server of its own, started afresh, and what the servers logged: a case's
    peak RSS is then its own, not what the cases before it left in the journal and the allocator."""
    found, logged = [], ""
    for case in cases(scale):
        with ServerProcess(time_scale) as server:
            found += await hostile(server, scale, only=case.name)
            logged += server.logged()
    return found, logged
