"""`fakehop record` writes an app's retries of one request (the same path and body) into one
`sequence:` scenario, so that a replay fails and then succeeds as the recording did."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from aiohttp import web

from fakehop.cli import main as cli
from fakehop.scenario.library import Library
from fakehop.scenario.reader import MAX_FILE_BYTES, load_file
from fakehop.server.gateway import Gateway

from .conftest import FAST
from .sdk_results import SEED, final_result, request_body
from .test_record import KEY, WAIT_FOR_FILES, exchange, proxy, recorded, replay  # noqa: F401 (proxy is a fixture)

FLAKY_ONCE = """\
sequence:
  - http_error: {status: 429, message: "Rate limit reached for requests", headers: {retry-after-ms: "10"}}
  - use: hello
"""
SDK_PROTOCOLS = ["chat", "messages"]


@pytest.fixture
async def flaky_upstream(serve, tmp_path):
    """A fakehop whose default answers its first request with a 429 and every later one with hello."""
    directory = tmp_path / "upstream"
    directory.mkdir()
    (directory / "flaky-once.yaml").write_text(FLAKY_ONCE)
    return await serve(Gateway(Library.load([directory]), default="flaky-once", time_scale=FAST))


async def recorded_retry(proxy, flaky_upstream, protocol: str) -> tuple[dict, Path]:
    """What the SDK made of the 429 and the success after it, through the proxy, and the one file written."""
    proxy_url, out = await proxy(flaky_upstream)
    original = await final_result(proxy_url, protocol, False, SEED, max_retries=2)
    deadline = time.monotonic() + WAIT_FOR_FILES
    while (
        "# Attempt 2," not in "".join(path.read_text() for path in out.glob("*.yaml")) and time.monotonic() < deadline
    ):
        await asyncio.sleep(0.02)  # the retry's answer is written as the proxy sees it end
    files = sorted(out.glob("*.yaml"))
    assert len(files) == 1, [path.name for path in files]
    return original, files[0]


@pytest.mark.parametrize("protocol", SDK_PROTOCOLS)
async def test_a_retried_request_is_one_sequence_of_its_attempts(proxy, flaky_upstream, protocol):
    original, path = await recorded_retry(proxy, flaky_upstream, protocol)
    assert "error" not in original, original
    assert cli.main(["validate", str(path)]) == 0
    scenario = load_file(path)
    text = path.read_text()
    assert path.name == f"{protocol}-hello.yaml", text
    assert scenario.is_sequence and len(scenario.entries) == 2, text
    first, second = scenario.entries
    assert first.script is not None and first.script.http_error is not None and first.script.http_error.status == 429
    assert second.script is not None and second.script.http_error is None
    assert "# Attempt 1, on " in text and "# Attempt 2, on " in text and "# 2 attempts of one request" in text


@pytest.mark.parametrize("protocol", SDK_PROTOCOLS)
async def test_a_recorded_retry_replays_to_what_the_sdk_got(serve, proxy, flaky_upstream, protocol):
    original, path = await recorded_retry(proxy, flaky_upstream, protocol)
    replay_gateway, replay_url = await replay(serve, path.parent, FAST)
    assert await final_result(replay_url, protocol, False, SEED, max_retries=2) == original, path.read_text()
    assert [request.scenario for request in replay_gateway.journal.since()] == [f"{path.stem}[1]", f"{path.stem}[2]"]


@pytest.mark.parametrize("protocol", SDK_PROTOCOLS)
async def test_a_replay_without_retries_gets_the_first_attempts_error(serve, proxy, flaky_upstream, protocol):
    _, path = await recorded_retry(proxy, flaky_upstream, protocol)
    _, replay_url = await replay(serve, path.parent, FAST)
    got = await final_result(replay_url, protocol, False, SEED, max_retries=0)
    assert got["status_code"] == 429, got


@pytest.mark.parametrize("protocol", SDK_PROTOCOLS)
async def test_different_requests_are_different_files(proxy, flaky_upstream, protocol):
    """The 429 of one request, then another request's success: two files, neither a sequence."""
    proxy_url, out = await proxy(flaky_upstream)
    body = request_body(protocol, False)
    other = body | {"messages": [{"role": "user", "content": "Something else"}]}
    statuses = [(await exchange(proxy_url, protocol, sent, {}))[0] for sent in (body, other)]
    assert statuses == [429, 200]
    files = await recorded(out, 2)
    assert sorted(path.name for path in files) == [f"{protocol}-hello.yaml", f"{protocol}-something-else.yaml"]
    assert not any(load_file(path).is_sequence for path in files)


async def test_a_request_after_a_success_is_a_file_of_its_own(serve, proxy):
    """Only a failed attempt is followed by its retries: the same request asked again after a
    success is a new file, as before."""
    proxy_url, out = await proxy(await serve(Gateway(Library.load(), time_scale=FAST)))
    body = request_body("chat", False)
    for _ in range(2):
        assert (await exchange(proxy_url, "chat", body, {}))[0] == 200
    files = await recorded(out, 2)
    assert sorted(path.name for path in files) == ["chat-hello-2.yaml", "chat-hello.yaml"]


async def test_a_retry_keeps_secrets_out_and_says_what_the_file_holds(serve, proxy, tmp_path):
    directory = tmp_path / "upstream"
    directory.mkdir()
    (directory / "echo-flaky.yaml").write_text(
        f"sequence:\n  - http_error: {{status: 429, message: 'bad key {KEY}'}}\n  - steps: [{{text: 'key {KEY}'}}]\n"
    )
    told: list[str] = []
    proxy_url, out = await proxy(
        await serve(Gateway(Library.load([directory]), default="echo-flaky", time_scale=FAST)), listeners=[told.append]
    )
    body = request_body("chat", False)
    for count in range(2):
        headers = {"Authorization": f"Bearer {KEY}", "x-stainless-retry-count": str(count)}
        await exchange(proxy_url, "chat", body, headers)
    [path] = await recorded(out)
    text = path.read_text()
    assert KEY not in text and text.count("[redacted]") == 2, text
    assert load_file(path).is_sequence
    assert told[-1] == f"recorded {path}: chat, whole, HTTP 200, finished; the file now holds 2 attempts", told


def big_answer_upstream() -> web.Application:
    """An upstream that answers its first request with a 429, and each later one with a chat
    answer of more text than a scenario file holds."""
    asked = []

    async def answer(request: web.Request) -> web.Response:
        asked.append(await request.read())
        if len(asked) == 1:
            return web.json_response({"error": {"message": "slow down", "type": "requests"}}, status=429)
        text = " ".join(f"word{number}" for number in range(200_000))
        message = {"role": "assistant", "content": text}
        return web.json_response(
            {
                "id": "c",
                "object": "chat.completion",
                "model": "m",
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            }
        )

    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer)
    return app


async def test_a_retry_too_long_for_the_file_is_cut_to_fit(aiohttp_server, proxy):
    upstream = await aiohttp_server(big_answer_upstream())
    told: list[str] = []
    proxy_url, out = await proxy(str(upstream.make_url("")), listeners=[told.append])
    body = request_body("chat", False)
    assert [(await exchange(proxy_url, "chat", body, {}))[0] for _ in range(2)] == [429, 200]
    [path] = await recorded(out)
    assert "; the file now holds 2 attempts; cut after " in told[-1], told
    assert MAX_FILE_BYTES * 0.95 < path.stat().st_size <= MAX_FILE_BYTES  # as much as fits, aiming 2% under
    assert cli.main(["validate", str(path)]) == 0
    assert len(load_file(path).entries) == 2
