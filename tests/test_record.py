"""`fakehop record` in front of a real upstream: a second fakehop serving the bundled scenarios.

Through the proxy a client gets the upstream's bytes exactly, as they arrive; each answer is
written as a scenario that passes the loader, and served back it gives the official SDKs
what the original gave them.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import time
from pathlib import Path

import aiohttp
import pytest

from fakehop.cli import main as cli
from fakehop.protocols import PROTOCOLS
from fakehop.record import proxy as record
from fakehop.scenario.library import Library
from fakehop.scenario.reader import load_file, parse_text
from fakehop.server.gateway import Gateway

from .agents import Turn, sdk_loop
from .conftest import FAST
from .fidelity_scenarios import with_fidelity
from .sdk_results import HANG_TIMEOUT, SEED, TIMEOUT, final_result, request_body
from .timing import timed_frames

LIBRARY = Library.load()
UPSTREAM = with_fidelity(LIBRARY)  # the bundled scenarios and those of every fidelity step and setting
CASES = [(name, protocol, stream) for name in UPSTREAM.names() for protocol in PROTOCOLS for stream in (True, False)]
QUICK = (
    FAST / 10
)  # a time scale for what does not hang on pauses: the bytes, and what the SDKs make of them (a stall takes 0.12 s)
WAIT_FOR_FILES = 15.0


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
    """A proxy in front of a fakehop serving the UPSTREAM scenarios at the QUICK time scale:
    (the upstream's gateway, its URL, the proxy's URL, the directory)."""
    gateway = Gateway(UPSTREAM, time_scale=QUICK)
    upstream_url = await serve(gateway)
    proxy_url, out = await proxy(upstream_url)
    return gateway, upstream_url, proxy_url, out


def timeout_for(name: str) -> float:
    return HANG_TIMEOUT if name == "hang" else TIMEOUT


async def exchange(url: str, protocol: str, body: dict, headers: dict, timeout: float = TIMEOUT) -> tuple:
    """What a client gets: the status, the content type, the body's bytes as far as they came,
    and how the body ended (its end, a broken connection, or the client's timeout)."""
    received = bytearray()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(sock_read=timeout)) as session:
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


async def replay(serve, directory: Path, time_scale: float = 1.0) -> tuple[Gateway, str]:
    """A fakehop serving the recordings, in real time unless told otherwise."""
    gateway = Gateway(Library.load([directory]), time_scale=time_scale)
    return gateway, await serve(gateway)


@pytest.mark.parametrize(("name", "protocol", "stream"), CASES)
async def test_the_client_gets_the_upstreams_bytes(recording, name, protocol, stream):
    gateway, upstream_url, proxy_url, _ = recording
    headers = {"X-Fakehop-Scenario": name, **SEED}
    body = request_body(protocol, stream)
    direct = await exchange(upstream_url, protocol, body, headers, timeout_for(name))
    gateway.global_session.reset()  # a sequence's proxied request gets the same entry
    assert await exchange(proxy_url, protocol, body, headers, timeout_for(name)) == direct


@pytest.mark.parametrize(("name", "protocol", "stream"), CASES)
async def test_a_recording_replays_to_what_the_sdks_got(recording, serve, name, protocol, stream):
    """Replayed at the upstream's time scale: what the SDKs make of an answer does not hang on its pauses."""
    _, _, proxy_url, out = recording
    original = await final_result(proxy_url, protocol, stream, {"X-Fakehop-Scenario": name, **SEED}, timeout_for(name))
    [path] = await recorded(out)
    assert cli.main(["validate", str(path)]) == 0
    replay_gateway, replay_url = await replay(serve, out, QUICK)
    assert await final_result(replay_url, protocol, stream, SEED, timeout_for(name)) == original, path.read_text()
    [request] = replay_gateway.journal.since()
    assert request.scenario == path.stem  # picked by its match, with no header naming it


@pytest.mark.parametrize(("name", "how"), [("hang", "the client went away"), ("disconnect", "cut off")])
async def test_an_answer_that_never_came_is_said_to_have_had_no_status(serve, proxy, name, how):
    """An upstream that sends nothing, not even a status, until the client gives up or it closes."""
    told: list[str] = []
    proxy_url, out = await proxy(await serve(Gateway(UPSTREAM, time_scale=QUICK)), listeners=[told.append])
    await exchange(proxy_url, "chat", request_body("chat", False), {"X-Fakehop-Scenario": name}, HANG_TIMEOUT)
    [path] = await recorded(out)
    assert f": chat, whole, no HTTP status, {how} (written as {name})" in told[-1], told
    assert ": no answer, not even an HTTP status." in path.read_text() and "HTTP 200" not in path.read_text()
    assert cli.main(["validate", str(path)]) == 0


AGENT_LOOPS = {
    "chat": ("chat", {}),
    "responses": ("responses", {}),
    "responses-chained": ("responses", {"chain": True}),
    "messages": ("messages", {}),
}


async def agent_loop(url: str, loop_name: str, stream: bool) -> tuple[Turn, Turn]:
    """The agent of AGENT_LOOPS[loop_name] asks, answers the tool calls and asks again."""
    protocol, options = AGENT_LOOPS[loop_name]
    return await sdk_loop(url, protocol, {"get_weather": "Rain, 12 °C"}, stream=stream, **options)


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("loop_name", list(AGENT_LOOPS))
async def test_a_recorded_agent_loop_replays_turn_by_turn(serve, proxy, loop_name, stream):
    """Both turns of agent-weather recorded, each with its turn in its match (a chained
    Responses request's read in the answer it continues): the same loop replayed gets turn 1's
    tool call, then turn 2's answer, not turn 1's again."""
    proxy_url, out = await proxy(await serve(Gateway(LIBRARY, default="agent-weather", time_scale=FAST)))
    original = await agent_loop(proxy_url, loop_name, stream)
    first, second = sorted(await recorded(out, 2), key=lambda path: len(path.stem))
    assert "  turn: 1\n" in first.read_text() and "  turn: 2\n  tool_result: true\n" in second.read_text()
    replay_gateway, replay_url = await replay(serve, out, FAST)
    replayed = await agent_loop(replay_url, loop_name, stream)
    assert replayed == original and replayed[1] == Turn("The weather in Paris: Rain, 12 °C.", [])
    assert [(request.turn, request.scenario) for request in replay_gateway.journal.since()] == [
        (1, first.stem),
        (2, second.stem),
    ]


# ---------------------------------------------------------------- time

LATE = 0.5  # more than tests/test_timing.py allows: two passes through the proxy, each of which a loaded machine may hold up
EARLY = 0.05  # a recording may move a piece by a quarter of its interval, 12.5 ms at 50 ms


def delta_offsets(frames: list[tuple[float, str]]) -> list[tuple[float, str]]:
    """When each delta of text or reasoning arrived, and its text."""
    found = []
    for at, frame in frames:
        data = next((line[6:] for line in frame.splitlines() if line.startswith("data: {")), None)
        if data is None:
            continue
        event = json.loads(data)
        delta = event.get("delta") or (event.get("choices") or [{}])[0].get("delta") or {}
        text = delta.get("text") or delta.get("thinking") or delta.get("content")
        if text:
            found.append((at, text))
    return found


@pytest.mark.long
@pytest.mark.parametrize(("name", "protocol"), [("slow-typing", "chat"), ("reasoning-pause", "messages")])
async def test_timing_survives_at_time_scale_1(serve, proxy, name, protocol):
    """Recorded in real time (reasoning-pause takes 45 s), replayed in real time: each delta
    arrives when it did through the proxy."""
    upstream_url = await serve(Gateway(LIBRARY, time_scale=1.0))
    proxy_url, out = await proxy(upstream_url)
    body = request_body(protocol, True)
    path = PROTOCOLS[protocol].PATH
    original = delta_offsets(await timed_frames(proxy_url + path, body, {"X-Fakehop-Scenario": name}))
    [recording] = await recorded(out)
    _, replay_url = await replay(serve, out)
    replayed = delta_offsets(await timed_frames(replay_url + path, body))
    assert [text for _, text in replayed] == [text for _, text in original]
    assert original[-1][0] > (2 if name == "slow-typing" else 45)
    for (then, text), (now, _) in zip(original, replayed):  # the first pass too may have been read up to LATE late
        assert then - LATE - EARLY <= now <= then + LATE, (
            f"{text!r} came at {now:.3f}s, recorded at {then:.3f}s\n{recording.read_text()}"
        )


async def test_a_recording_plays_faster_at_a_smaller_time_scale(serve, proxy):
    upstream_url = await serve(Gateway(LIBRARY, time_scale=1.0))
    proxy_url, out = await proxy(upstream_url)
    path, body = PROTOCOLS["chat"].PATH, request_body("chat", True)
    original = delta_offsets(await timed_frames(proxy_url + path, body, {"X-Fakehop-Scenario": "slow-typing"}))
    await recorded(out)
    _, replay_url = await replay(serve, out, time_scale=0.25)
    replayed = delta_offsets(await timed_frames(replay_url + path, body))
    assert len(replayed) == len(original) == len("The quick brown fox jumps over the lazy dog.")
    for (then, _), (now, _) in zip(original, replayed):  # as above, with the first pass's lateness a quarter as long
        assert (then - LATE) / 4 - EARLY <= now <= then / 4 + LATE


async def test_the_proxy_streams_as_it_receives(serve, proxy):
    gateway = Gateway(LIBRARY, time_scale=1.0)
    gateway.global_session.add(parse_text("steps: [{text: first}, {delay: 1s}, {text: second}]", "<test>", "paced"))
    proxy_url, _ = await proxy(await serve(gateway))
    frames = delta_offsets(
        await timed_frames(
            proxy_url + PROTOCOLS["chat"].PATH, request_body("chat", True), {"X-Fakehop-Scenario": "paced"}
        )
    )
    assert [text for _, text in frames] == ["first", "second"]
    (first, _), (second, _) = frames
    assert first < 0.5
    assert 1 - EARLY <= second <= 1 + LATE  # from the request's sending, which a late first delta cannot shift


# ---------------------------------------------------------------- secrets

KEY = "sk-live-0123456789abcdef"
COOKIE = "cookie-value-abcdef12"
ORG_TOKEN = "org-token-7777777777"
UPSTREAM_KEY = "sk-upstream-fedcba9876543210"
SECRET_HEADERS = {
    "Authorization": f"Bearer {KEY}",
    "x-api-key": KEY,
    "Cookie": f"session={COOKIE}; theme=dark",
    "X-Org-Token": ORG_TOKEN,
    "Proxy-Authorization": "Basic cHJveHk6c2VjcmV0c2VjcmV0",
}
ECHOING = {  # an upstream that writes the request's secrets back, in every place a recording keeps
    "echo-text": f"steps: [{{text: 'key {KEY}, cookie {COOKIE}, org {ORG_TOKEN}', chunk: 4}}, {{tool_call: {{name: f, arguments: {{key: {KEY}}}}}}}]",
    "echo-error": f"http_error: {{status: 401, message: 'bad key {KEY}', headers: {{x-ratelimit-remaining-tokens: '{COOKIE}', x-org-token: '{ORG_TOKEN}'}}}}",
    "echo-failure": f"steps: [{{text: 'so far'}}, {{fail: {{kind: server_error, message: 'no {ORG_TOKEN}'}}}}]",
    "echo-split": f"steps: [{{text: ['key {KEY[:5]}', '{KEY[5:12]}', '{KEY[12:]} end']}}]",  # no piece holds it whole
}


def joined_texts(path: Path) -> list[str]:
    """Each step's text, pieces joined, as the file plays it."""
    script = load_file(path).entries[0].script
    assert script is not None
    return ["".join(step.deltas) for step in script.steps if hasattr(step, "deltas")]


@pytest.fixture
async def echoing(serve, proxy):
    gateway = Gateway(LIBRARY, time_scale=FAST)
    for name, text in ECHOING.items():
        gateway.global_session.add(parse_text(text, "<test>", name))
    proxy_url, out = await proxy(await serve(gateway), redact=("X-Org-Token",))
    return gateway, proxy_url, out


async def test_no_secret_of_the_request_reaches_a_recording(echoing):
    gateway, proxy_url, out = echoing
    for number, name in enumerate(ECHOING):
        for protocol in PROTOCOLS:
            for stream in (True, False):
                body = request_body(protocol, stream) | {"temperature": number / 10}  # not a retry of the one before
                await exchange(proxy_url, protocol, body, {"X-Fakehop-Scenario": name, **SECRET_HEADERS})
    files = await recorded(out, len(ECHOING) * 6)
    assert len(files) == len(ECHOING) * 6
    for path in files:
        text = path.read_text()
        for secret in (KEY, COOKIE, ORG_TOKEN, "cHJveHk6c2VjcmV0c2VjcmV0"):
            assert secret not in text, f"{secret} in {path.name}:\n{text}"
            assert not any(secret in played for played in joined_texts(path)), f"{secret} in {path.name}:\n{text}"
        assert "[redacted]" in text
    upstream_saw = gateway.journal.since()[0].headers
    assert upstream_saw["Authorization"] == f"Bearer {KEY}" and upstream_saw["Cookie"] == SECRET_HEADERS["Cookie"]
    assert "Proxy-Authorization" not in upstream_saw  # a hop-by-hop header stays with the proxy


async def test_the_upstream_key_replaces_the_clients(serve, proxy):
    gateway = Gateway(LIBRARY, time_scale=FAST)
    proxy_url, out = await proxy(await serve(gateway), upstream_key=UPSTREAM_KEY)
    await exchange(proxy_url, "chat", request_body("chat", True), {"Authorization": f"Bearer {KEY}"})
    await exchange(proxy_url, "messages", request_body("messages", True), {"x-api-key": KEY})
    chat_headers, messages_headers = (record.headers for record in gateway.journal.since())
    assert chat_headers["Authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert messages_headers["x-api-key"] == UPSTREAM_KEY and "Authorization" not in messages_headers
    assert all(UPSTREAM_KEY not in path.read_text() and KEY not in path.read_text() for path in await recorded(out, 2))


# ---------------------------------------------------------------- what the proxy does not record


async def test_an_upstream_that_cannot_be_reached_is_a_502_in_the_protocols_shape(proxy, unused_tcp_port):
    proxy_url, out = await proxy(f"http://127.0.0.1:{unused_tcp_port}")
    status, _, body, _ = await exchange(proxy_url, "messages", request_body("messages", False), {})
    error = json.loads(body)
    assert status == 502 and error["type"] == "error" and error["error"]["type"] == "api_error"
    assert error["error"]["message"].startswith(
        f"fakehop record could not reach the upstream http://127.0.0.1:{unused_tcp_port}: "
    )
    assert not list(out.iterdir())


async def test_models_are_forwarded_and_other_paths_refused(recording):
    _, upstream_url, proxy_url, out = recording
    async with aiohttp.ClientSession() as session:
        async with session.get(proxy_url + "/v1/models") as response:
            models = await response.json()
        async with session.get(upstream_url + "/v1/models") as response:
            assert models == await response.json()
        async with session.post(proxy_url + "/v1/embeddings", json={}) as response:
            assert response.status == 404
            assert "fakehop record forwards only /v1/chat/completions" in (await response.json())["error"]["message"]
    assert not list(out.iterdir())


async def test_a_compressed_request_goes_upstream_as_it_came_and_is_read_for_its_match(recording):
    gateway, _, proxy_url, out = recording
    body = gzip.compress(
        json.dumps(request_body("chat", False) | {"messages": [{"role": "user", "content": "Squeezed?"}]}).encode()
    )
    async with aiohttp.ClientSession() as session:
        headers = {"Content-Encoding": "gzip", "Content-Type": "application/json", "X-Fakehop-Scenario": "hello"}
        async with session.post(proxy_url + PROTOCOLS["chat"].PATH, data=body, headers=headers) as response:
            assert (await response.json())["choices"][0]["message"]["content"] == "Hello! How can I help you today?"
    assert gateway.journal.since()[0].headers["Content-Encoding"] == "gzip"
    [path] = await recorded(out)
    assert path.name == "chat-squeezed.yaml" and "prompt: '/^Squeezed\\?$/'" in path.read_text()
