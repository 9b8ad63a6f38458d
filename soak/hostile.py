"""Hostile requests against a `soak.child` server, one at a time, while a prober times the health check.

Each case is one request (or a short burst) of the kind that once froze the server's loop or
blew up its memory: a model of megabytes, a gzip bomb, regexes that backtrack, keepalives a
microsecond apart, a million deltas to a fast reader, a 71,000-step upload, bodies of tens of
MiB in the journal. While it is served, a thread asks `GET /_fakehop/health` every few
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
from dataclasses import dataclass
from typing import Awaitable, Callable
from urllib.parse import urlsplit

import aiohttp

from fakehop.intake import MAX_BODY_BYTES, MAX_MODEL_CHARS

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
    "million-deltas": "steps:\n  - text: {faker: paragraphs, nb: 10000, seed: 2}\n    chunk: char\n",  # 940,000 characters
}


def chat_body(prompt: str = "hi", model: str = "gpt-5.6-sol", stream: bool = True) -> bytes:
    return json.dumps({"model": model, "messages": [{"role": "user", "content": prompt}], "stream": stream}).encode()


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

    def __enter__(self) -> "HealthProber":
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


async def post(session: aiohttp.ClientSession, url: str, body: bytes, headers: dict | None = None, path: str = CHAT) -> str:
    """Send one request and read all of its answer; returns its status and size."""
    async with session.post(url + path, data=body, headers={"Content-Type": "application/json", **(headers or {})}) as response:
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


def cases(scale: float) -> list[tuple[str, Callable[[aiohttp.ClientSession, str], Awaitable[str]]]]:
    """Every case, with what it sends grown by `scale` (1 for the soak's figures). The bodies
    are made here, before any prober runs: making them takes this process's time too."""
    words = {"X-Fakehop-Scenario": "three-hundred-words"}
    bomb = gzip.compress(b'{"model": "m", "x": "' + b"a" * int(MAX_BODY_BYTES * max(8 * scale, 1.1)) + b'"}')
    two_mib_model, ten_mib_model = chat_body(model="m" * 2**21), chat_body(model="m" * 10 * 2**20)
    largest = chat_body("word " * ((MAX_BODY_BYTES - 400) // 5), model="m" * MAX_MODEL_CHARS)
    backtracking, long_prompt, stream, whole = chat_body("a" * 27 + "b"), chat_body("weather " * 25_000), chat_body(), chat_body(stream=False)
    steps = ("steps:\n" + "  - keepalive\n" * int(71_000 * scale)).encode()
    large = chat_body("x" * 20 * 2**20, stream=False)
    return [
        ("a 2 MiB model on a 300-word scenario", lambda s, url: post(s, url, two_mib_model, words)),
        ("20 models of 10 MiB", lambda s, url: burst(int(20 * scale) or 1, lambda: post(s, url, ten_mib_model, words))),
        ("the largest body with the longest model on a 300-word scenario", lambda s, url: post(s, url, largest, words)),
        (f"a gzip bomb of {len(bomb) // 1024:,} KB", lambda s, url: post(s, url, bomb, {"Content-Encoding": "gzip"})),
        ("/^(a+)+$/ on a 27-character prompt", lambda s, url: post(s, url, backtracking)),
        ("/weather.*Paris/ on a 200 KB prompt", lambda s, url: post(s, url, long_prompt)),
        ("keepalives every 1ms during an hour's delay", lambda s, url: read_for(s, url, 2 * scale, stream, "tiny-keepalives")),
        ("a million deltas with no pause, streamed", lambda s, url: read_for(s, url, 30, stream, "million-deltas")),
        ("a million deltas with no pause, whole", lambda s, url: post(s, url, whole, {"X-Fakehop-Scenario": "million-deltas"})),
        (f"an upload of {int(71_000 * scale):,} steps", lambda s, url: post(s, url, steps, YAML, path="/_fakehop/scenarios?name=many-steps")),
        ("bodies of 20 MiB in the journal, then read", lambda s, url: journal_of_large_bodies(s, url, large, int(40 * scale) or 1)),
    ]


async def burst(count: int, send: Callable[[], Awaitable[str]]) -> str:
    return "; ".join(sorted(set(await asyncio.gather(*(send() for _ in range(count))))))


async def journal_of_large_bodies(session: aiohttp.ClientSession, url: str, body: bytes, count: int) -> str:
    for _ in range(count):
        await post(session, url, body)
    started = time.perf_counter()
    async with session.get(url + "/_fakehop/requests") as response:
        size = len(await response.read())
    return f"{count} sent; GET /requests: {size:,} bytes in {(time.perf_counter() - started) * 1000:.0f} ms"


async def add_scenarios(session: aiohttp.ClientSession, url: str) -> None:
    for name, text in SCENARIOS.items():
        async with session.post(url + "/_fakehop/scenarios", params={"name": name}, data=text, headers=YAML) as response:
            response.raise_for_status()


async def hostile(server: ServerProcess, scale: float = 1.0, only: str | None = None) -> list[Figures]:
    """Each case (or the one named `only`) in turn, with its figures."""
    found = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        await add_scenarios(session, server.url)
        for name, send in cases(scale):
            if only is not None and name != only:
                continue
            await asyncio.to_thread(server.figures, "clear-peak")
            with HealthProber(server.url) as prober:
                await asyncio.sleep(0.05)
                outcome = await send(session, server.url)
                await asyncio.sleep(0.05)
            peak = (await server.figures_async()).peak_rss / 2**20
            found.append(Figures(name, prober.longest, peak, outcome, prober.failures))
            async with session.post(server.url + "/_fakehop/reset") as response:
                response.raise_for_status()
            await add_scenarios(session, server.url)
    return found
