"""The official anthropic SDK, pointed at a real fakehop server, gets every scenario right on /v1/messages.

Expected answers come from the scenarios themselves, played by the protocol-neutral player;
the SDK's view of the wire must agree with them.
"""

from __future__ import annotations

import base64
import json
import time
from typing import cast

import aiohttp
import anthropic
import httpx2
import pytest
from anthropic.types import MessageParam, ThinkingConfigParam

from fakehop.play import player
from fakehop.protocols import messages
from fakehop.scenario import reader as sc
from fakehop.scenario.library import Library
from fakehop.scenario.reader import parse_text

from . import clients
from .agents import MessagesAgent, agent_weather_loop
from .hosted_scenarios import served
from .sdk_results import CUT_SHORT, caused_by

MODEL = "claude-sonnet-5"
MESSAGES: list[MessageParam] = [{"role": "user", "content": "Hello"}]
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "content_filter": "refusal"}
BLOCK_TYPES = {"text": "text", "reasoning": "thinking", "tool_call": "tool_use"}
INTERRUPTED = "Response stream interrupted, please retry"
LIBRARY = Library.load()
# the example request's, which the expected outcomes are for
THINKING = cast(ThinkingConfigParam, messages.EXAMPLE_REQUEST["thinking"])


def scenario_header(name: str) -> dict:
    return {"X-Fakehop-Scenario": name}


def expected_outcome(name: str) -> player.Outcome:
    """What the scenario says the answer holds, for the example request."""
    script = LIBRARY[name].entries[0].script
    assert script is not None
    parsed = messages.parse(dict(messages.EXAMPLE_REQUEST))
    return player.Outcome.gather([h for _, h in player.timeline(script, parsed.play)])


def finishing_scenarios() -> list[str]:
    """Bundled single scenarios that end well (no http_error, fail, disconnect, hang or raw bytes)."""
    names = []
    for name in LIBRARY.names():
        scenario = LIBRARY[name]
        script = scenario.entries[0].script
        if (
            not scenario.is_sequence
            and script is not None
            and script.http_error is None
            and not any(isinstance(s, sc.Raw) for s in script.steps)
        ):
            if isinstance(expected_outcome(name).ending, player.Finish):
                names.append(name)
    return names


FINISHING = finishing_scenarios()
FAILING = {
    "fail-rate-limit": ("rate_limit_error", "Rate limit reached, please retry after a short wait"),
    "fail-server-error": ("api_error", "upstream went away"),
    "fail-invalid-prompt": ("invalid_request_error", "Invalid prompt: the request was flagged by the content policy"),
    "fail-overloaded": ("overloaded_error", "Overloaded. https://docs.claude.com/en/api/errors"),
    "interrupted": ("api_error", INTERRUPTED),
    "stall": ("api_error", "Stream stalled: no output for 120s"),
}


def assert_matches_outcome(message, outcome: player.Outcome) -> None:
    finish = outcome.ending
    assert isinstance(finish, player.Finish), finish
    assert [block.type for block in message.content] == [BLOCK_TYPES[b.kind] for b in outcome.blocks]
    for got, want in zip(message.content, outcome.blocks):
        if want.kind == "text":
            assert got.text == want.text
        elif want.kind == "reasoning":
            assert got.thinking == want.text
            assert base64.b64decode(got.signature, validate=True)
        else:
            assert (got.name, got.input) == (want.name, json.loads(want.text))
            assert got.id == want.call_id if want.call_id else got.id.startswith("toolu_")
    assert message.stop_reason == STOP_REASONS[finish.reason]
    assert message.stop_sequence is None
    assert (message.usage.input_tokens, message.usage.output_tokens) == (
        finish.usage.input_tokens,
        finish.usage.output_tokens,
    )
    assert message.model == MODEL
    assert message.id.startswith("msg_")


async def stream_final_message(client: anthropic.AsyncAnthropic, name: str, **kwargs):
    kwargs.setdefault("thinking", THINKING)
    async with client.messages.stream(
        model=MODEL, max_tokens=1024, messages=MESSAGES, extra_headers=scenario_header(name), **kwargs
    ) as stream:
        return await stream.get_final_message()


async def raw_events(client: anthropic.AsyncAnthropic, name: str) -> list:
    stream = await client.messages.create(
        model=MODEL,
        max_tokens=1024,
        messages=MESSAGES,
        stream=True,
        thinking=THINKING,
        extra_headers=scenario_header(name),
    )
    return [event async for event in stream]


# ---------------------------------------------------------------- good answers


@pytest.mark.parametrize("name", FINISHING)
async def test_stream_helper_final_message(anthropic_client, name):
    message = await stream_final_message(anthropic_client, name)
    assert_matches_outcome(message, expected_outcome(name))


@pytest.mark.parametrize("name", FINISHING)
async def test_raw_stream_events_in_order(anthropic_client, name):
    events = await raw_events(anthropic_client, name)
    outcome = expected_outcome(name)
    assert events[0].type == "message_start"
    assert events[0].message.content == [] and events[0].message.usage.output_tokens == 1
    assert [e.type for e in events[-2:]] == ["message_delta", "message_stop"]
    assert events[-2].usage.output_tokens == outcome.ending.usage.output_tokens
    starts = [e for e in events if e.type == "content_block_start"]
    assert [e.index for e in starts] == list(range(len(outcome.blocks)))
    for index, block in enumerate(outcome.blocks):
        block_events = [e for e in events if getattr(e, "index", None) == index]
        assert block_events[0].type == "content_block_start" and block_events[-1].type == "content_block_stop"
        deltas = [e.delta for e in block_events if e.type == "content_block_delta"]
        fragments = [
            getattr(d, "text", None) or getattr(d, "thinking", None) or getattr(d, "partial_json", "") for d in deltas
        ]
        if block.kind == "reasoning":
            assert deltas[-1].type == "signature_delta"
            fragments = fragments[:-1]
        assert "".join(fragments) == block.text


async def test_hello_text_and_usage(anthropic_client):
    message = await stream_final_message(anthropic_client, "hello")
    assert message.content[0].text == "Hello! How can I help you today?"
    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens == 8


async def test_thinking_then_text_then_tool_use(anthropic_client):
    message = await stream_final_message(
        anthropic_client,
        "think-then-tool",
        thinking={"type": "enabled", "budget_tokens": 512},
        tools=[{"name": "get_weather", "input_schema": {"type": "object"}}],
    )
    thinking, text, tool = message.content
    assert thinking.thinking == "The user wants the weather in Paris; call the tool."
    assert len(base64.b64decode(thinking.signature)) > 32
    assert text.text == "Checking."
    assert (tool.name, tool.input) == ("get_weather", {"city": "Paris"})
    assert message.stop_reason == "tool_use"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (40, 30)


async def test_tool_use_keeps_the_scenario_id(anthropic_client):
    message = await stream_final_message(anthropic_client, "weather-tool")
    tool = message.content[1]
    assert (tool.id, tool.name, tool.input) == ("call_weather_1", "get_weather", {"city": "Paris", "unit": "celsius"})


async def test_stream_helper_text_events(anthropic_client):
    async with anthropic_client.messages.stream(
        model=MODEL, max_tokens=1024, messages=MESSAGES, extra_headers=scenario_header("hello")
    ) as stream:
        texts = [event.text async for event in stream if event.type == "text"]
    assert "".join(texts) == "Hello! How can I help you today?"


async def test_max_tokens_from_the_request_cuts_the_answer(anthropic_client):
    message = await anthropic_client.messages.create(
        model=MODEL, max_tokens=3, messages=MESSAGES, extra_headers=scenario_header("long-text")
    )
    assert message.stop_reason == "max_tokens"
    assert len(message.content[0].text) == 12
    assert message.usage.output_tokens == 3


async def test_keepalives_never_reach_the_sdk(anthropic_client, base_url):
    async with aiohttp.ClientSession() as session:
        async with session.post(
            base_url + "/v1/messages", json=messages.EXAMPLE_REQUEST, headers=scenario_header("keepalive-demo")
        ) as response:
            wire = await response.read()
    assert wire.count(b": hopbase-keepalive\n\n") == 3
    events = await raw_events(anthropic_client, "keepalive-demo")
    wire_events = wire.count(b"event: ") - wire.count(b"event: ping\n")
    assert len(events) == wire_events
    assert (
        "".join(e.delta.text for e in events if e.type == "content_block_delta")
        == "Sorry for the wait. Here is the answer."
    )


# ---------------------------------------------------------------- errors inside the stream


@pytest.mark.parametrize("name", sorted(FAILING))
async def test_fail_raises_with_its_type_from_the_stream_helper(anthropic_client, name):
    error_type, message = FAILING[name]
    with pytest.raises(anthropic.APIStatusError) as caught:
        await stream_final_message(anthropic_client, name)
    assert type(caught.value) is anthropic.APIStatusError
    assert caught.value.status_code == 200
    assert caught.value.type == error_type
    assert caught.value.body == {"type": "error", "error": {"type": error_type, "message": message}}


async def test_interrupted_raw_stream_yields_the_partial_text_then_raises(anthropic_client):
    stream = await anthropic_client.messages.create(
        model=MODEL, max_tokens=1024, messages=MESSAGES, stream=True, extra_headers=scenario_header("interrupted")
    )
    texts = []
    with pytest.raises(anthropic.APIStatusError) as caught:
        async for event in stream:
            if event.type == "content_block_delta":
                texts.append(event.delta.text)
    assert "".join(texts) == "The answer to your question is"
    assert caught.value.type == "api_error"
    assert caught.value.body == {"type": "error", "error": {"type": "api_error", "message": INTERRUPTED}}


async def test_disconnect_is_a_connection_error(anthropic_client):
    with pytest.raises(CUT_SHORT) as caught:
        await stream_final_message(anthropic_client, "disconnect")
    assert caused_by(caught.value, httpx2.RemoteProtocolError)  # the body cut short, however the SDK wraps it


# ---------------------------------------------------------------- HTTP errors and retries


async def test_flaky_then_ok_is_retried_until_it_succeeds(base_url, gateway):
    client = clients.anthropic_async(base_url=base_url, api_key="sk-test", max_retries=2)
    message = await stream_final_message(client, "flaky-then-ok")
    assert message.content[0].text == "Hello! How can I help you today?"
    records = gateway.journal.since(0)
    assert [r.status for r in records] == [429, 500, 200]
    assert [r.headers.get("x-stainless-retry-count") for r in records] == ["0", "1", "2"]


async def test_rate_limit_honours_retry_after(base_url, gateway):
    gateway.global_session.add(
        parse_text("http_error: {status: 429, retry_after: 1, message: slow down}", "<test>", "limited")
    )
    client = clients.anthropic_async(base_url=base_url, api_key="sk-test", max_retries=1)
    started = time.monotonic()
    with pytest.raises(anthropic.RateLimitError) as caught:
        await client.messages.create(
            model=MODEL, max_tokens=16, messages=MESSAGES, extra_headers=scenario_header("limited")
        )
    assert time.monotonic() - started >= 0.95
    assert len(gateway.journal.since(0)) == 2
    assert caught.value.response.headers["retry-after"] == "1"
    assert caught.value.body["error"] == {"type": "rate_limit_error", "message": "slow down"}


@pytest.mark.parametrize(
    ("status", "exception", "error_type"),
    [
        (400, anthropic.BadRequestError, "invalid_request_error"),
        (401, anthropic.AuthenticationError, "authentication_error"),
        (403, anthropic.PermissionDeniedError, "permission_error"),
        (404, anthropic.NotFoundError, "not_found_error"),
        (429, anthropic.RateLimitError, "rate_limit_error"),
        (500, anthropic.InternalServerError, "api_error"),
        (529, anthropic.OverloadedError, "overloaded_error"),
    ],
)
async def test_http_errors_map_to_sdk_exceptions(anthropic_client, gateway, status, exception, error_type):
    gateway.global_session.add(parse_text(f"http_error: {{status: {status}}}", "<test>", "broken"))
    with pytest.raises(exception) as caught:
        await anthropic_client.messages.create(
            model=MODEL, max_tokens=16, messages=MESSAGES, stream=True, extra_headers=scenario_header("broken")
        )
    body = caught.value.body
    assert caught.value.status_code == status
    assert body["type"] == "error" and body["error"]["type"] == error_type
    assert body["request_id"] == caught.value.request_id and body["request_id"].startswith("req_")


# ---------------------------------------------------------------- non-streaming


@pytest.mark.parametrize("name", FINISHING)
async def test_non_streaming_message(anthropic_client, name):
    message = await anthropic_client.messages.create(
        model=MODEL, max_tokens=1024, messages=MESSAGES, thinking=THINKING, extra_headers=scenario_header(name)
    )
    assert_matches_outcome(message, expected_outcome(name))


@pytest.mark.parametrize(
    ("name", "exception", "status"),
    [
        ("fail-rate-limit", anthropic.RateLimitError, 429),
        ("fail-invalid-prompt", anthropic.BadRequestError, 400),
        ("fail-server-error", anthropic.InternalServerError, 500),
        ("interrupted", anthropic.InternalServerError, 500),
        ("fail-overloaded", anthropic.OverloadedError, 529),
    ],
)
async def test_non_streaming_fail_is_an_http_error(anthropic_client, name, exception, status):
    with pytest.raises(exception) as caught:
        await anthropic_client.messages.create(
            model=MODEL, max_tokens=1024, messages=MESSAGES, extra_headers=scenario_header(name)
        )
    error_type, message = FAILING[name]
    assert caught.value.status_code == status
    assert caught.value.body["error"] == {"type": error_type, "message": message}


# ---------------------------------------------------------------- auth and bad requests


async def test_api_key_accepted_as_bearer_and_x_api_key(make_gateway, serve):
    url = await serve(make_gateway(api_key="sk-right"))
    sdk = clients.anthropic_async(base_url=url, api_key="sk-right", max_retries=0)
    assert (await sdk.messages.create(model=MODEL, max_tokens=16, messages=MESSAGES)).content[0].text
    async with aiohttp.ClientSession() as session:
        headers = {"x-api-key": "sk-right", "anthropic-version": "2023-06-01"}
        async with session.post(
            url + "/v1/messages", json=dict(messages.EXAMPLE_REQUEST, stream=False), headers=headers
        ) as response:
            assert response.status == 200
            assert (await response.json())["type"] == "message"


async def test_wrong_api_key_is_an_authentication_error(make_gateway, serve):
    url = await serve(make_gateway(api_key="sk-right"))
    sdk = clients.anthropic_async(base_url=url, api_key="sk-wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as caught:
        await sdk.messages.create(model=MODEL, max_tokens=16, messages=MESSAGES, stream=True)
    assert caught.value.body["error"]["type"] == "authentication_error"


async def test_unknown_scenario_is_an_invalid_request(anthropic_client):
    with pytest.raises(anthropic.BadRequestError) as caught:
        await anthropic_client.messages.create(
            model=MODEL, max_tokens=16, messages=MESSAGES, extra_headers=scenario_header("no-such-scenario")
        )
    assert caught.value.body["error"]["type"] == "invalid_request_error"
    assert "hello" in caught.value.body["error"]["message"]


GOOD = {"model": MODEL, "max_tokens": 16, "messages": MESSAGES}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"max_tokens": 16, "messages": MESSAGES}, "model: Field required"),
        ({**GOOD, "model": 5}, "model: Input should be a valid string"),
        ({"model": MODEL, "messages": MESSAGES}, "max_tokens: Field required"),
        ({**GOOD, "max_tokens": "16"}, "max_tokens: Input should be a valid integer"),
        ({**GOOD, "max_tokens": True}, "max_tokens: Input should be a valid integer"),
        ({**GOOD, "max_tokens": 0}, "max_tokens: Input should be greater than or equal to 1"),
        ({"model": MODEL, "max_tokens": 16}, "messages: Field required"),
        ({**GOOD, "messages": "Hello"}, "messages: Input should be a valid list"),
        ({**GOOD, "messages": []}, "messages: at least one message is required"),
        (
            {**GOOD, "messages": [{"role": "tool", "content": "x"}]},
            "messages.0.role: Input should be 'user', 'assistant' or 'system'",
        ),
        ({**GOOD, "messages": [{"role": "user"}]}, "messages.0.content: Field required"),
        ({**GOOD, "stream": "yes"}, "stream: Input should be a valid boolean"),
        ({**GOOD, "system": {"text": "x"}}, "system: Input should be a valid string or a list of text blocks"),
        ({**GOOD, "tools": {}}, "tools: Input should be a valid list"),
    ],
)
async def test_bad_request_bodies_get_anthropic_errors(base_url, body, message):
    async with aiohttp.ClientSession() as session:
        async with session.post(
            base_url + "/v1/messages", json=body, headers={"anthropic-version": "2023-06-01"}
        ) as response:
            answer = await response.json()
            request_id = response.headers["request-id"]
    assert response.status == 400
    assert answer == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": message},
        "request_id": request_id,
    }


async def test_system_thinking_and_tool_choice_are_accepted(anthropic_client):
    message = await anthropic_client.messages.create(
        model=MODEL,
        max_tokens=2048,
        messages=[{"role": "user", "content": [{"type": "text", "text": "Hello"}]}],
        system=[{"type": "text", "text": "Be brief."}],
        thinking={"type": "enabled", "budget_tokens": 1024},
        tools=[{"name": "get_weather", "input_schema": {"type": "object"}}],
        tool_choice={"type": "auto"},
        extra_headers={"anthropic-version": "2099-01-01"},
    )
    assert message.content[0].text == "Hello! How can I help you today?"


@pytest.mark.parametrize(
    ("method", "path", "status", "error_type"),
    [
        ("GET", "/v1/messages", 405, "invalid_request_error"),
        ("POST", "/v1/messages/nope", 404, "not_found_error"),
    ],
)
async def test_unknown_routes_answer_anthropic_clients_in_their_shape(base_url, method, path, status, error_type):
    async with aiohttp.ClientSession() as session:
        async with session.request(method, base_url + path, headers={"anthropic-version": "2023-06-01"}) as response:
            answer = await response.json()
    assert response.status == status
    assert answer["type"] == "error" and answer["error"]["type"] == error_type


async def test_malformed_frame_reaches_the_sdk_as_a_json_error(anthropic_client):
    texts = []
    with pytest.raises(json.JSONDecodeError):
        async for event in await anthropic_client.messages.create(
            model=MODEL,
            max_tokens=1024,
            messages=MESSAGES,
            stream=True,
            extra_headers=scenario_header("malformed"),
        ):
            if event.type == "content_block_delta":
                texts.append(event.delta.text)
    assert "".join(texts) == "Fine so far."


# ---------------------------------------------------------------- an agent's tool loop


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_tool_loop_gets_agent_weather_turn_by_turn(anthropic_client, gateway, stream):
    gateway.global_session.default = "agent-weather"
    await agent_weather_loop(MessagesAgent(anthropic_client, stream=stream), gateway.journal)


async def test_a_system_message_is_read_after_the_system_prompt(serve, make_gateway):
    scenario = "match: {system: '/brief\\.\\nAnswer in French/'}\nsteps: [{text: Bonjour.}]"
    url, _ = await served(serve, make_gateway, "in-french", scenario)
    said: list[MessageParam] = [*MESSAGES, {"role": "system", "content": "Answer in French."}]
    async with clients.anthropic_async(base_url=url, api_key="sk-test", max_retries=0) as client:
        message = await client.messages.create(model=MODEL, max_tokens=16, system="Be brief.", messages=said)
    assert message.content[0].text == "Bonjour."
