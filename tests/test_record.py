"""`fakehop record` in front of a real upstream: a second fakehop serving the bundled scenarios.

Through the proxy a client gets the upstream's bytes exactly, as they arrive; each answer is
written as a scenario that passes the loader, and served back it gives the official SDKs
what the original gave them.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp
import pytest

from fakehop import record
from fakehop.library import Library
from fakehop.protocols import PROTOCOLS
from fakehop.scenario import load_file
from fakehop.server import Gateway, create_app

from .conftest import FAST
from .sdk_results import MODELS, QUESTION, TIMEOUT, final_result

LIBRARY = Library.load()
CASES = [(name, protocol, stream) for name in LIBRARY.names() for protocol in PROTOCOLS for stream in (True, False)]
SEED = {"X-Fakehop-Seed": "0"}
WAIT_FOR_FILES = 5.0


@pytest.fixture
async def proxy(aiohttp_server, tmp_path):
    """start(upstream URL, **options) -> (the proxy's URL, the directory it records into)."""

    async def start(upstream_url: str, **options) -> tuple[str, Path]:
        out = tmp_path / f"recorded-{len(list(tmp_path.iterdir()))}"
        out.mkdir()
        server = await aiohttp_server(record.create_app(record.Recorder(upstream_url, out, **options)))
        return str(server.make_url("")).rstrip("/"), out

    return start


@pytest.fixture
async def recording(serve, proxy):
    """A proxy in front of a fakehop serving the bundled scenarios at the tests' time scale:
    (the upstream's gateway, its URL, the proxy's URL, the directory)."""
    gateway = Gateway(LIBRARY, time_scale=FAST)
    upstream_url = await serve(gateway)
    proxy_url, out = await proxy(upstream_url)
    return gateway, upstream_url, proxy_url, out


def request_body(protocol: str, stream: bool) -> dict:
    body = dict(PROTOCOLS[protocol].EXAMPLE_REQUEST, model=MODELS[protocol], stream=stream)
    return body | ({"stream_options": {"include_usage": True}} if protocol == "chat" and stream else {})


async def exchange(url: str, protocol: str, body: dict, headers: dict) -> tuple:
    """What a client gets: the status, the content type, the body's bytes as far as they came,
    and how the body ended (its end, a broken connection, or the client's timeout)."""
    received = bytearray()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(sock_read=TIMEOUT)) as session:
        try:
            async with session.post(url + PROTOCOLS[protocol].PATH, json=body, headers=headers) as response:
                status, content_type = response.status, response.headers.get("Content-Type")
                try:
                    async for data in response.content.iter_any():
                        received += data
                    ending = "end"
                except aiohttp.ClientPayloadError:
                    ending = "broken"
                except asyncio.TimeoutError:
                    ending = "timeout"
        except aiohttp.ServerDisconnectedError:
            return None, None, b"", "no answer"
        except asyncio.TimeoutError:
            return None, None, b"", "timeout"
    return status, content_type, bytes(received), ending


async def recorded(out: Path, count: int = 1) -> list[Path]:
    """The files written so far, once there are `count` (an answer the client gave up on is
    written when the proxy sees it go)."""
    deadline = time.monotonic() + WAIT_FOR_FILES
    while len(files := sorted(out.glob("*.yaml"))) < count and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return files


async def replay(serve, directory: Path) -> tuple[Gateway, str]:
    """A fakehop serving the recordings in real time."""
    gateway = Gateway(Library.load([directory]), time_scale=1.0)
    return gateway, await serve(gateway)


@pytest.mark.parametrize(("name", "protocol", "stream"), CASES)
async def test_the_client_gets_the_upstreams_bytes(recording, name, protocol, stream):
    gateway, upstream_url, proxy_url, _ = recording
    headers = {"X-Fakehop-Scenario": name, **SEED}
    body = request_body(protocol, stream)
    direct = await exchange(upstream_url, protocol, body, headers)
    gateway.reset()  # a sequence's proxied request gets the same entry
    assert await exchange(proxy_url, protocol, body, headers) == direct


@pytest.mark.parametrize(("name", "protocol", "stream"), CASES)
async def test_a_recording_replays_to_what_the_sdks_got(recording, serve, name, protocol, stream):
    _, _, proxy_url, out = recording
    original = await final_result(proxy_url, protocol, stream, {"X-Fakehop-Scenario": name, **SEED})
    [path] = await recorded(out)
    load_file(path)
    replay_gateway, replay_url = await replay(serve, out)
    assert await final_result(replay_url, protocol, stream, SEED) == original
    [request] = replay_gateway.journal.since()
    assert request.scenario == path.stem  # picked by its match, with no header naming it
