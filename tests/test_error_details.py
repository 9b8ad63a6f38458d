"""`type`, `code` and `param` of a scenario's `fail` and `http_error`, on the wire and through the official SDKs."""

from __future__ import annotations

import json

import aiohttp
import anthropic
import openai
import pytest

from fakehop.scenario import reader as sc

from . import clients
from .inline_scenarios import add, problems_of

MESSAGES = [{"role": "user", "content": "Hi"}]
QUOTA_FAIL = "steps: [{text: Hi}, {fail: {kind: rate_limit, type: insufficient_quota, code: insufficient_quota, message: Pay up}}]"
CONTEXT_ERROR = "http_error: {status: 400, type: invalid_request_error, code: context_length_exceeded, param: messages, message: Too long}"
QUOTA_ERROR = "http_error: {status: 429, type: insufficient_quota, code: insufficient_quota, message: Pay up}"


async def post(base_url: str, path: str, body: dict, headers: dict) -> tuple[int, dict, str]:
    async with aiohttp.ClientSession() as session:
        async with session.post(base_url + path, json=body, headers=headers) as answer:
            return answer.status, dict(answer.headers), await answer.text()


async def test_chat_mid_stream_error_takes_the_scenario_type_and_code(base_url, gateway, openai_client):
    headers = add(gateway, "quota", QUOTA_FAIL)
    _, _, text = await post(
        base_url, "/v1/chat/completions", {"model": "m", "messages": MESSAGES, "stream": True}, headers
    )
    frames = [json.loads(frame.removeprefix("data: ")) for frame in text.split("\n\n") if frame.startswith("data: {")]
    assert frames[-1] == {
        "error": {"message": "Pay up", "type": "insufficient_quota", "param": None, "code": "insufficient_quota"}
    }
    with pytest.raises(openai.APIError) as raised:
        stream = await openai_client.chat.completions.create(
            model="m", messages=MESSAGES, stream=True, extra_headers=headers
        )
        [chunk async for chunk in stream]
    assert (raised.value.type, raised.value.code, raised.value.message) == (
        "insufficient_quota",
        "insufficient_quota",
        "Pay up",
    )


@pytest.mark.parametrize(
    "path, body",
    [
        ("/v1/chat/completions", {"model": "m", "messages": MESSAGES}),
        ("/v1/responses", {"model": "m", "input": "Hi"}),
    ],
)
async def test_openai_http_errors_take_type_code_and_param(base_url, gateway, path, body):
    status, _, text = await post(base_url, path, body, add(gateway, "too-long", CONTEXT_ERROR))
    assert status == 400
    assert json.loads(text) == {
        "error": {
            "message": "Too long",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }
    status, _, text = await post(base_url, path, body, add(gateway, "quota", QUOTA_ERROR))
    assert (status, json.loads(text)["error"]["type"], json.loads(text)["error"]["code"]) == (
        429,
        "insufficient_quota",
        "insufficient_quota",
    )


async def test_openai_sdk_reads_the_error_details(gateway, openai_client):
    with pytest.raises(openai.BadRequestError) as raised:
        await openai_client.chat.completions.create(
            model="m", messages=MESSAGES, extra_headers=add(gateway, "too-long", CONTEXT_ERROR)
        )
    assert (raised.value.type, raised.value.code, raised.value.param) == (
        "invalid_request_error",
        "context_length_exceeded",
        "messages",
    )
    with pytest.raises(openai.RateLimitError) as raised:
        await openai_client.responses.create(model="m", input="Hi", extra_headers=add(gateway, "quota", QUOTA_ERROR))
    assert (raised.value.type, raised.value.code) == ("insufficient_quota", "insufficient_quota")


async def test_without_details_the_defaults_are_unchanged(base_url, gateway):
    status, _, text = await post(
        base_url,
        "/v1/chat/completions",
        {"model": "m", "messages": MESSAGES},
        add(gateway, "plain", "http_error: {status: 429}"),
    )
    assert json.loads(text)["error"] == {
        "message": "Rate limit reached, please retry after a short wait",
        "type": "requests",
        "param": None,
        "code": "rate_limit_exceeded",
    }


async def test_anthropic_errors_take_the_scenario_type(base_url, gateway, anthropic_client):
    headers = add(gateway, "billing", "http_error: {status: 400, type: billing_error, message: No credit}")
    body = {"model": "claude-x", "max_tokens": 100, "messages": MESSAGES}
    status, _, text = await post(base_url, "/v1/messages", body, headers)
    assert status == 400 and json.loads(text)["error"] == {"type": "billing_error", "message": "No credit"}
    with pytest.raises(anthropic.BadRequestError) as raised:
        await anthropic_client.messages.create(
            model="claude-x", max_tokens=100, messages=MESSAGES, extra_headers=headers
        )
    assert raised.value.type == "billing_error"
    streaming = add(
        gateway, "stream-billing", "steps: [{text: Hi}, {fail: {kind: invalid_prompt, type: billing_error}}]"
    )
    with pytest.raises(anthropic.APIStatusError) as raised:
        async with anthropic_client.messages.stream(
            model="claude-x", max_tokens=100, messages=MESSAGES, extra_headers=streaming
        ) as stream:
            await stream.get_final_message()
    assert (raised.value.status_code, raised.value.type) == (200, "billing_error")
    with pytest.raises(anthropic.BadRequestError) as raised:
        await anthropic_client.messages.create(
            model="claude-x", max_tokens=100, messages=MESSAGES, extra_headers=streaming
        )
    assert raised.value.type == "billing_error"


def test_details_are_checked_at_load():
    assert "error_event: expected true or false" in problems_of(
        "steps: [{fail: {kind: rate_limit, error_event: sometimes}}]"
    )
    assert "code: expected a string" in problems_of("http_error: {status: 400, code: [1]}")
    assert "did you mean 'param'" in problems_of("steps: [{fail: {kind: rate_limit, parm: x}}]")
    fail = sc.parse_text(QUOTA_FAIL, "t.yaml", "t").entries[0].script.steps[-1]
    assert fail == sc.Fail("rate_limit", "Pay up", "insufficient_quota", "insufficient_quota", None, True)


@pytest.mark.parametrize(
    "status, should_retry",
    [
        (400, "false"),
        (401, "false"),
        (404, "false"),
        (409, "false"),
        (413, "false"),
        (429, "true"),
        (500, "true"),
        (503, "true"),
        (529, "true"),
    ],
)
async def test_anthropic_errors_say_whether_to_retry(base_url, gateway, status, should_retry):
    headers = add(gateway, f"status-{status}", f"http_error: {{status: {status}}}")
    got, answer_headers, _ = await post(
        base_url, "/v1/messages", {"model": "c", "max_tokens": 9, "messages": MESSAGES}, headers
    )
    assert (got, answer_headers.get("x-should-retry")) == (status, should_retry)
    got, answer_headers, _ = await post(base_url, "/v1/chat/completions", {"model": "m", "messages": MESSAGES}, headers)
    assert (got, answer_headers.get("x-should-retry")) == (status, None)


async def test_anthropic_refusals_of_the_request_say_not_to_retry(base_url):
    status, answer_headers, _ = await post(base_url, "/v1/messages", {"model": "c", "messages": MESSAGES}, {})
    assert (status, answer_headers["x-should-retry"]) == (400, "false")
    status, answer_headers, _ = await post(base_url, "/v1/nowhere", {}, {"anthropic-version": "2023-06-01"})
    assert (status, answer_headers["x-should-retry"]) == (404, "false")


async def test_anthropic_sdk_follows_x_should_retry(base_url, gateway):
    async with clients.anthropic_async(base_url=base_url, api_key="k", max_retries=2) as client:
        for name, text, attempts in [
            ("conflict", "http_error: {status: 409}", 1),  # the SDK would retry a bare 409
            ("overloaded", "http_error: {status: 529}", 3),
            (
                "forced",
                "http_error: {status: 400, headers: {x-should-retry: 'true'}}",
                3,
            ),  # the scenario's own header wins
        ]:
            gateway.journal.clear()
            with pytest.raises(anthropic.APIStatusError):
                await client.with_options(timeout=5).messages.create(
                    model="c", max_tokens=9, messages=MESSAGES, extra_headers=add(gateway, name, text)
                )
            assert len(gateway.journal.records) == attempts, name
