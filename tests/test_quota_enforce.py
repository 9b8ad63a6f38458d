"""`rate_limit: {…, enforce: true}`: once the window's requests or tokens are used up, each further
request gets the protocol's 429 with Retry-After and the headers at 0, until the window opens
again; through the official SDKs and on the wire."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import anthropic
import jsonschema
import openai
import pytest

from fakehop.scenario.schema import scenario_schema
from fakehop.state import journal as jr

from .inline_scenarios import add, problems_of

WINDOW = 2.0  # seconds, real: the time scale changes fakehop's pauses, never a window
TWO_A_WINDOW = "rate_limit: {requests: 2, window: 2s, enforce: true}\nsteps: [{text: Hi}]"
MESSAGES = [{"role": "user", "content": "Hi"}]


async def test_openai_sdk_gets_its_rate_limit_error_once_the_requests_are_used_up(gateway, openai_client):
    headers = add(gateway, "quota", TWO_A_WINDOW)
    for _ in range(2):
        await openai_client.chat.completions.create(model="m", messages=MESSAGES, extra_headers=headers)
    opened = time.monotonic()  # the server opened the window a little before
    with pytest.raises(openai.RateLimitError) as raised:
        await openai_client.chat.completions.create(model="m", messages=MESSAGES, extra_headers=headers)
    error = raised.value
    assert error.status_code == 429
    assert error.response.headers["retry-after"] in ("1", "2")  # whole seconds, rounded up
    assert error.response.headers["x-ratelimit-remaining-requests"] == "0"
    assert error.response.headers["x-ratelimit-limit-requests"] == "2"
    assert error.body["type"] == "requests" and error.body["code"] == "rate_limit_exceeded"
    assert "Limit 2" in error.body["message"]
    await asyncio.sleep(max(0.0, opened + WINDOW + 0.05 - time.monotonic()))
    answer = await openai_client.chat.completions.with_raw_response.create(
        model="m", messages=MESSAGES, extra_headers=headers
    )
    assert answer.headers["x-ratelimit-remaining-requests"] == "1"  # a new window
    assert answer.parse().choices[0].message.content == "Hi"


async def test_anthropic_sdk_gets_its_rate_limit_error_and_recovers(gateway, anthropic_client):
    headers = add(gateway, "quota", TWO_A_WINDOW)
    for _ in range(2):
        await anthropic_client.messages.create(model="c", max_tokens=20, messages=MESSAGES, extra_headers=headers)
    opened = time.monotonic()  # the server opened the window a little before
    with pytest.raises(anthropic.RateLimitError) as raised:
        await anthropic_client.messages.create(model="c", max_tokens=20, messages=MESSAGES, extra_headers=headers)
    error = raised.value
    assert error.status_code == 429
    assert error.response.headers["retry-after"] in ("1", "2")  # whole seconds, rounded up
    assert error.response.headers["anthropic-ratelimit-requests-remaining"] == "0"
    assert error.response.headers["x-should-retry"] == "true"
    assert error.body["error"]["type"] == "rate_limit_error"
    await asyncio.sleep(max(0.0, opened + WINDOW + 0.05 - time.monotonic()))
    message = await anthropic_client.messages.create(model="c", max_tokens=20, messages=MESSAGES, extra_headers=headers)
    assert message.content[0].text == "Hi"


async def post(base_url: str, path: str, body: dict, headers: dict) -> tuple[int, dict, dict]:
    async with aiohttp.ClientSession() as session:
        async with session.post(base_url + path, json=body, headers=headers) as answer:
            await answer.read()
            return answer.status, dict(answer.headers), await answer.json() if answer.status != 200 else {}


async def test_used_up_tokens_refuse_a_streamed_responses_request(base_url, gateway):
    """30 tokens an answer (10 in, 20 out allowed) of 50: the second uses up the rest."""
    headers = add(
        gateway,
        "tokens",
        "rate_limit: {tokens: 50, window: 1m, enforce: true}\nusage: {input_tokens: 10}\nsteps: [{text: Hi}]",
    )
    body = {"model": "m", "input": "Hi", "max_output_tokens": 20, "stream": True}
    statuses = [(await post(base_url, "/v1/responses", body, headers))[0] for _ in range(2)]
    status, answer_headers, error = await post(base_url, "/v1/responses", body, headers)
    assert statuses == [200, 200]
    assert status == 429
    assert answer_headers["x-ratelimit-remaining-tokens"] == "0"
    assert answer_headers["x-ratelimit-remaining-requests"] == "4998"
    assert 58 <= int(answer_headers["Retry-After"]) <= 60
    assert error["error"]["type"] == "tokens"
    assert error["error"]["code"] == "rate_limit_exceeded"


async def test_a_refused_request_takes_nothing_and_is_in_the_journal(base_url, gateway):
    headers = add(gateway, "quota", TWO_A_WINDOW)
    body = {"model": "m", "messages": MESSAGES}
    statuses = [(await post(base_url, "/v1/chat/completions", body, headers))[0] for _ in range(4)]
    assert statuses == [200, 200, 429, 429]
    last = gateway.journal.since()[-1]
    assert (last.end, last.status) == (jr.HTTP_ERROR, 429)
    assert last.retry_after in ("1", "2")


async def test_each_session_has_its_own_window(base_url, gateway):
    headers = add(gateway, "quota", TWO_A_WINDOW)
    body = {"model": "m", "messages": MESSAGES}
    for _ in range(2):
        await post(base_url, "/v1/chat/completions", body, headers)
    assert (await post(base_url, "/v1/chat/completions", body, headers))[0] == 429
    other = {**headers, "X-Fakehop-Session": "other"}
    gateway.session("other").add(gateway.global_session.library.scenarios["quota"])
    assert (await post(base_url, "/v1/chat/completions", body, other))[0] == 200


async def test_without_enforce_the_headers_count_down_and_nothing_is_refused(base_url, gateway):
    headers = add(gateway, "counted", "rate_limit: {requests: 1, window: 1m}\nsteps: [{text: Hi}]")
    body = {"model": "m", "messages": MESSAGES}
    assert [(await post(base_url, "/v1/chat/completions", body, headers))[0] for _ in range(3)] == [200] * 3


def test_enforce_is_true_or_false():
    assert "enforce: expected true or false, got a string" in problems_of(
        "rate_limit: {enforce: always}\nsteps: [{text: hi}]"
    )
    validator = jsonschema.Draft202012Validator(scenario_schema())
    assert not list(validator.iter_errors({"rate_limit": {"enforce": True}, "steps": [{"text": "hi"}]}))
    assert list(validator.iter_errors({"rate_limit": {"enforce": "always"}, "steps": [{"text": "hi"}]}))
