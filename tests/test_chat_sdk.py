"""The official openai SDK, pointed at a real fakehop server, gets every chat scenario right."""

from __future__ import annotations

import json

import httpx2
import openai
import pytest

from fakehop.scenario.library import Library
from fakehop.scenario.reader import parse_text

from . import clients
from .agents import ChatAgent, agent_weather_loop, loop
from .sdk_results import CUT_SHORT, TIMED_OUT, caused_by

MESSAGES = [{"role": "user", "content": "Hello"}]
STREAMING_SCENARIOS_THAT_FINISH = [
    "hello",
    "long-text",
    "slow-typing",
    "keepalive-demo",
    "reasoning-pause",
    "weather-tool",
    "two-tools",
    "stall-recovers",
    "think-then-tool",
]
FAIL_CODES = {
    "fail-rate-limit": "rate_limit_exceeded",
    "fail-server-error": "server_error",
    "fail-invalid-prompt": "invalid_prompt",
    "fail-overloaded": "server_error",
    "interrupted": "server_error",
    "stall": "server_error",
}


def scenario(name: str) -> dict:
    return {"X-Fakehop-Scenario": name}


def expected_answer(library, name: str) -> tuple[str, list[tuple[str, dict]]]:
    """The text and tool calls (name, parsed arguments) a scenario's steps spell out."""
    from fakehop.scenario.model import Output, ToolCall

    script = library[name].entries[0].script
    text = "".join("".join(s.deltas) for s in script.steps if isinstance(s, Output) and s.kind == "text")
    calls = [(s.name, json.loads(s.arguments)) for s in script.steps if isinstance(s, ToolCall)]
    return text, calls


@pytest.mark.parametrize("name", STREAMING_SCENARIOS_THAT_FINISH)
async def test_create_stream_gives_text_tool_calls_and_usage(openai_client, library, name):
    stream = await openai_client.chat.completions.create(
        model="gpt-5.6-sol",
        messages=MESSAGES,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers=scenario(name),
    )
    chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    arguments: dict[int, str] = {}
    names: dict[int, str] = {}
    for chunk in chunks:
        for call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            arguments[call.index] = arguments.get(call.index, "") + (call.function.arguments or "")
            if call.function.name:
                names[call.index] = call.function.name
    expected_text, expected_calls = expected_answer(library, name)
    assert text == expected_text
    assert [(names[i], json.loads(arguments[i])) for i in sorted(names)] == expected_calls
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens > 0
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == ["tool_calls" if expected_calls else "stop"]


@pytest.mark.parametrize("name", STREAMING_SCENARIOS_THAT_FINISH)
async def test_stream_helper_final_completion(openai_client, library, name):
    async with openai_client.chat.completions.stream(
        model="gpt-5.6-sol",
        messages=MESSAGES,
        stream_options={"include_usage": True},
        extra_headers=scenario(name),
    ) as stream:
        events = [event.type async for event in stream]
        final = await stream.get_final_completion()
    message = final.choices[0].message
    expected_text, expected_calls = expected_answer(library, name)
    assert (message.content or "") == expected_text
    assert message.role == "assistant"
    assert [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []] == expected_calls
    assert all(c.id for c in message.tool_calls or [])
    assert final.usage.completion_tokens > 0 and final.usage.prompt_tokens > 0
    if expected_text:
        assert "content.done" in events
    if expected_calls:
        assert events.count("tool_calls.function.arguments.done") == len(expected_calls)


async def test_scenario_usage_is_reported(openai_client):
    final = await openai_client.chat.completions.create(
        model="gpt-5.6-sol",
        messages=MESSAGES,
        extra_headers=scenario("think-then-tool"),
    )
    assert (final.usage.prompt_tokens, final.usage.completion_tokens, final.usage.total_tokens) == (40, 30, 70)


async def test_usage_chunk_only_when_asked(openai_client):
    stream = await openai_client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    chunks = [chunk async for chunk in stream]
    assert all(c.usage is None for c in chunks)
    assert all(c.choices for c in chunks)


async def test_non_streaming_completion(openai_client):
    completion = await openai_client.chat.completions.create(
        model="gpt-5.6-sol",
        messages=MESSAGES,
        extra_headers=scenario("weather-tool"),
    )
    message = completion.choices[0].message
    assert completion.object == "chat.completion"
    assert message.content == "Let me check the weather."
    assert message.tool_calls[0].id == "call_weather_1"
    assert json.loads(message.tool_calls[0].function.arguments) == {"city": "Paris", "unit": "celsius"}
    assert completion.choices[0].finish_reason == "tool_calls"


async def test_model_comes_from_request_unless_scenario_sets_it(openai_client, gateway):
    plain = await openai_client.chat.completions.create(model="my-model", messages=MESSAGES)
    assert plain.model == "my-model"
    gateway.global_session.add(parse_text("model: gpt-5.6-mini\nsteps: [{text: hi}]\n", "<test>", "pinned"))
    stream = await openai_client.chat.completions.create(
        model="my-model", messages=MESSAGES, stream=True, extra_headers=scenario("pinned")
    )
    first = await stream.__anext__()
    assert first.model == "gpt-5.6-mini"
    await stream.close()


async def test_no_bundled_scenario_pins_a_model():
    """A bundled scenario plays in every protocol, so one that named a model would name the
    other family's on two of them."""
    library = Library.load()
    assert [
        name for name in library.names() if any(entry.script and entry.script.model for entry in library[name].entries)
    ] == []


@pytest.mark.parametrize("name,code", sorted(FAIL_CODES.items()))
async def test_mid_stream_fail_raises_api_error_with_code(openai_client, name, code):
    stream = await openai_client.chat.completions.create(
        model="gpt-5.6-sol",
        messages=MESSAGES,
        stream=True,
        extra_headers=scenario(name),
    )
    seen = []
    with pytest.raises(openai.APIError) as raised:
        async for chunk in stream:
            seen.append(chunk)
    assert raised.value.code == code
    assert not isinstance(raised.value, openai.APIStatusError)
    assert raised.value.message
    if name == "interrupted":
        assert raised.value.message == "Response stream interrupted, please retry"
    if name == "stall":
        assert "120s" in raised.value.message


async def test_stream_helper_raises_on_fail(openai_client):
    with pytest.raises(openai.APIError) as raised:
        async with openai_client.chat.completions.stream(
            model="m", messages=MESSAGES, extra_headers=scenario("fail-rate-limit")
        ) as stream:
            async for _ in stream:
                pass
    assert raised.value.code == "rate_limit_exceeded"


@pytest.mark.parametrize(
    "name,status,error",
    [
        ("fail-rate-limit", 429, openai.RateLimitError),
        ("fail-invalid-prompt", 400, openai.BadRequestError),
        ("fail-server-error", 500, openai.InternalServerError),
        ("fail-overloaded", 503, openai.InternalServerError),
        ("interrupted", 500, openai.InternalServerError),
        ("rate-limited", 429, openai.RateLimitError),
        ("server-error", 500, openai.InternalServerError),
    ],
)
async def test_unstreamed_failures_are_http_errors(openai_client, name, status, error):
    with pytest.raises(error) as raised:
        await openai_client.chat.completions.create(model="m", messages=MESSAGES, extra_headers=scenario(name))
    assert raised.value.status_code == status
    assert raised.value.request_id and raised.value.request_id.startswith("req_")


async def test_retry_after_header_as_written(openai_client):
    with pytest.raises(openai.RateLimitError) as raised:
        await openai_client.chat.completions.create(
            model="m", messages=MESSAGES, extra_headers=scenario("rate-limited")
        )
    headers = raised.value.response.headers
    assert headers["retry-after"] == "2"
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert raised.value.body["message"] == "Rate limit reached for requests"


async def test_sdk_retries_flaky_sequence_then_succeeds(base_url, gateway):
    client = clients.openai_async(base_url=base_url + "/v1", api_key="sk-test", max_retries=2)
    stream = await client.chat.completions.create(
        model="m", messages=MESSAGES, stream=True, extra_headers=scenario("flaky-then-ok")
    )
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == "Hello! How can I help you today?"
    records = gateway.journal.since(0)
    assert [r.status for r in records] == [429, 500, 200]
    assert [r.scenario for r in records] == ["flaky-then-ok[1]", "flaky-then-ok[2]", "flaky-then-ok[3]->hello"]
    assert [r.headers.get("x-stainless-retry-count") for r in records] == ["0", "1", "2"]


async def test_disconnect_raises_connection_error(openai_client, gateway):
    stream = await openai_client.chat.completions.create(
        model="m", messages=MESSAGES, stream=True, extra_headers=scenario("disconnect")
    )
    received = []
    with pytest.raises(CUT_SHORT) as caught:
        async for chunk in stream:
            received.append(chunk.choices[0].delta.content)
    assert caused_by(caught.value, httpx2.RemoteProtocolError)
    assert "".join(filter(None, received)) == "Here is the start of"
    assert gateway.journal.since(0)[-1].end == "disconnected"


async def test_keepalives_never_reach_sdk_events(base_url, library):
    client = clients.openai_async(base_url=base_url + "/v1", api_key="sk-test", max_retries=0)
    stream = await client.chat.completions.create(
        model="m", messages=MESSAGES, stream=True, extra_headers=scenario("stall-recovers")
    )
    chunks = [chunk async for chunk in stream]
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Working on it - done."


async def test_max_tokens_gives_finish_reason_length(openai_client):
    stream = await openai_client.chat.completions.create(
        model="m",
        messages=MESSAGES,
        stream=True,
        max_completion_tokens=3,
        stream_options={"include_usage": True},
        extra_headers=scenario("long-text"),
    )
    chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(text) == 12
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].usage.completion_tokens == 3


async def test_stream_helper_raises_length_error(openai_client):
    with pytest.raises(openai.LengthFinishReasonError):
        async with openai_client.chat.completions.stream(model="m", messages=MESSAGES, max_tokens=2) as stream:
            await stream.get_final_completion()


async def test_hang_keeps_the_stream_open_until_the_client_leaves(base_url, gateway):
    client = clients.openai_async(base_url=base_url + "/v1", api_key="sk-test", max_retries=0, timeout=0.5)
    stream = await client.chat.completions.create(
        model="m", messages=MESSAGES, stream=True, extra_headers=scenario("hang")
    )
    with pytest.raises(TIMED_OUT) as caught:
        async for _ in stream:
            pass
    assert caused_by(caught.value, httpx2.ReadTimeout)
    await stream.close()
    import asyncio

    for _ in range(100):
        if gateway.journal.since(0)[-1].end != "in_progress":
            break
        await asyncio.sleep(0.02)
    record = gateway.journal.since(0)[-1]
    assert record.end == "client_disconnected"
    assert record.events > 0


async def test_malformed_frame_reaches_the_sdk_as_a_json_error(openai_client):
    import json as json_module

    stream = await openai_client.chat.completions.create(
        model="m", messages=MESSAGES, stream=True, extra_headers=scenario("malformed")
    )
    received = []
    with pytest.raises(json_module.JSONDecodeError):
        async for chunk in stream:
            received.append(chunk.choices[0].delta.content or "")
    assert "".join(received) == "Fine so far."


async def test_interrupted_then_ok_is_not_retried_but_the_next_request_succeeds(openai_client):
    stream = await openai_client.chat.completions.create(
        model="m", messages=MESSAGES, stream=True, extra_headers=scenario("interrupted-then-ok")
    )
    with pytest.raises(openai.APIError, match="interrupted"):
        async for _ in stream:
            pass
    again = await openai_client.chat.completions.create(
        model="m", messages=MESSAGES, extra_headers=scenario("interrupted-then-ok")
    )
    assert again.choices[0].message.content == "Hello! How can I help you today?"


# ---------------------------------------------------------------- an agent's tool loop


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_tool_loop_gets_agent_weather_turn_by_turn(openai_client, gateway, stream):
    gateway.global_session.default = "agent-weather"
    await agent_weather_loop(ChatAgent(openai_client, stream=stream), gateway.journal)


async def test_agent_two_tools_calls_both_at_once_then_quotes_each_result(openai_client, gateway):
    gateway.global_session.default = "agent-two-tools"
    first, second = await loop(ChatAgent(openai_client), {"get_weather": "Fog", "get_time": "07:30"})
    assert [(call.name, call.arguments) for call in first.calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_time", {"timezone": "Europe/Paris"}),
    ]
    assert len({call.call_id for call in first.calls}) == 2
    assert second.text == "In Paris it is 07:30, and the weather: Fog."


def test_every_bundled_scenario_is_exercised_here(library):
    covered = (
        set(STREAMING_SCENARIOS_THAT_FINISH)
        | set(FAIL_CODES)
        | {
            "rate-limited",
            "server-error",
            "flaky-then-ok",
            "interrupted-then-ok",
            "disconnect",
            "hang",
            "max-tokens",
            "malformed",
            "agent-weather",
            "agent-two-tools",
        }
    )
    assert set(library.names()) - covered == set()


async def test_max_tokens_scenario_finishes_with_length(openai_client):
    completion = await openai_client.chat.completions.create(
        model="m", messages=MESSAGES, extra_headers=scenario("max-tokens")
    )
    assert completion.choices[0].finish_reason == "length"
    assert completion.choices[0].message.content == "This answer is cut off in the middle of a"
    assert completion.usage.completion_tokens == 16
    with pytest.raises(openai.LengthFinishReasonError):
        async with openai_client.chat.completions.stream(
            model="m", messages=MESSAGES, extra_headers=scenario("max-tokens")
        ) as stream:
            await stream.get_final_completion()
