"""The official openai SDK's Responses API, pointed at a real fakehop server, gets every scenario right.

Expected text, reasoning, tool calls and fail codes come from the scenario files and from the
SCENARIOS.md table, never from the encoder under test.
"""

from __future__ import annotations

import json

import aiohttp
import httpx2
import openai
import pytest

from fakehop.play.player import FAIL_MESSAGES
from fakehop.scenario import reader as sc
from fakehop.scenario import yamlsource
from fakehop.scenario.library import Library, resolve
from fakehop.state.stored import StoredResponses

from . import clients
from .agents import ResponsesAgent, agent_weather_loop
from .sdk_results import CUT_SHORT, TIMED_OUT, caused_by

MODEL = "gpt-5.6-sol"
LIBRARY = Library.load()
# SCENARIOS.md: the `error.code` of `response.failed` for each fail kind.
FAIL_CODES = {
    "rate_limit": "rate_limit_exceeded",
    "server_error": "server_error",
    "invalid_prompt": "invalid_prompt",
    "overloaded": "server_error",
    "interrupted": "server_error",
}
# The error `type` that goes with each code (OpenAI's rate-limit errors are of type `requests`).
FAIL_TYPES = {
    "rate_limit_exceeded": "requests",
    "server_error": "server_error",
    "invalid_prompt": "invalid_request_error",
}
# SCENARIOS.md: the HTTP status of a `fail` in an answer that was not streamed.
FAIL_STATUSES = {"rate_limit": 429, "server_error": 500, "invalid_prompt": 400, "overloaded": 503, "interrupted": 500}
SUMMARY = {"summary": "auto"}  # what a request sends to be shown reasoning summaries
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def first_script(name: str) -> sc.Script:
    return resolve(LIBRARY, name, 1)[1]


def ending(script: sc.Script) -> str:
    """How a script's answer ends: http_error, raw, failed, disconnect, hang, incomplete or completed."""
    if script.http_error is not None:
        return "http_error"
    kinds = {type(step) for step in script.steps}
    if sc.Raw in kinds:
        return "raw"
    last = script.steps[-1]
    if isinstance(last, sc.Fail) or (isinstance(last, sc.Stall) and not last.resume):
        return "failed"
    if isinstance(last, (sc.Disconnect, sc.Hang)):
        return type(last).__name__.lower()
    return "incomplete" if script.finish in ("length", "content_filter") else "completed"


def scenarios_ending(kind: str) -> list[str]:
    return [name for name in LIBRARY.names() if ending(first_script(name)) == kind]


COMPLETING = scenarios_ending("completed")
FAILING = scenarios_ending("failed")


def joined(script: sc.Script, kind: str) -> str:
    return "".join("".join(step.deltas) for step in script.steps if isinstance(step, sc.Output) and step.kind == kind)


def tool_calls(script: sc.Script) -> list[sc.ToolCall]:
    return [step for step in script.steps if isinstance(step, sc.ToolCall)]


def expected_failure(script: sc.Script) -> tuple[str, str]:
    """(code, message) of the `response.failed` a failing script ends with."""
    last = script.steps[-1]
    if isinstance(last, sc.Stall):
        return "server_error", f"Stream stalled: no output for {script.stall_timeout:g}s"
    assert isinstance(last, sc.Fail), last
    return FAIL_CODES[last.kind], last.message or FAIL_MESSAGES[last.kind]


@pytest.fixture
async def retrying_client(base_url):
    """An SDK client that retries as the SDK does by default: up to two more attempts."""
    async with clients.openai_async(base_url=base_url + "/v1", api_key="sk-test", max_retries=2) as client:
        yield client


def header(name: str) -> dict:
    return {"X-Fakehop-Scenario": name}


async def stream_events(client, name: str, **params) -> list:
    params.setdefault("input", "Hello")
    stream = await client.responses.create(model=MODEL, stream=True, extra_headers=header(name), **params)
    return [event async for event in stream]


def check_response_matches(response, script: sc.Script) -> None:
    """A final response holds the script's text, reasoning summary, tool calls and usage."""
    assert response.output_text == joined(script, "text")
    summaries = [part.text for item in response.output if item.type == "reasoning" for part in item.summary]
    assert "".join(summaries) == joined(script, "reasoning")
    calls = [item for item in response.output if item.type == "function_call"]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        (t.name, json.loads(t.arguments)) for t in tool_calls(script)
    ]
    for call, step in zip(calls, tool_calls(script)):
        assert call.call_id == step.call_id if step.call_id else call.call_id.startswith("call_")
        assert call.status == "completed"
    usage = response.usage
    assert usage.output_tokens > 0 and usage.input_tokens > 0
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    if script.usage.output_tokens is not None:
        assert (usage.input_tokens, usage.output_tokens) == (script.usage.input_tokens, script.usage.output_tokens)
    assert usage.input_tokens_details.cached_tokens == 0
    assert 0 <= usage.output_tokens_details.reasoning_tokens <= usage.output_tokens


# ---------------------------------------------------------------- streams that end well


@pytest.mark.parametrize("name", COMPLETING)
async def test_raw_stream_of_every_completing_scenario(openai_client, name):
    script = first_script(name)
    events = await stream_events(openai_client, name, reasoning=SUMMARY)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [e.type for e in events[:2]] == ["response.created", "response.in_progress"]
    assert events[-1].type == "response.completed"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == joined(script, "text")
    reasoning = "".join(e.delta for e in events if e.type == "response.reasoning_summary_text.delta")
    assert reasoning == joined(script, "reasoning")
    arguments = [e.arguments for e in events if e.type == "response.function_call_arguments.done"]
    assert arguments == [t.arguments for t in tool_calls(script)]
    final = events[-1].response
    assert final.status == "completed" and final.error is None and final.incomplete_details is None
    assert final.output == [e.item for e in events if e.type == "response.output_item.done"]
    check_response_matches(final, script)


@pytest.mark.parametrize("name", COMPLETING)
async def test_stream_helper_final_response_of_every_completing_scenario(openai_client, name):
    script = first_script(name)
    async with openai_client.responses.stream(
        model=MODEL, input="Hello", reasoning=SUMMARY, extra_headers=header(name)
    ) as stream:
        snapshots = [event.snapshot async for event in stream if event.type == "response.output_text.delta"]
        final = await stream.get_final_response()
    check_response_matches(final, script)
    if snapshots:
        assert snapshots[-1] == joined(script, "text")


async def test_stream_helper_parses_tool_arguments_for_strict_tools(openai_client):
    tool = {**WEATHER_TOOL, "strict": True}
    tool["parameters"] = {
        **tool["parameters"],
        "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
        "required": ["city", "unit"],
        "additionalProperties": False,
    }
    async with openai_client.responses.stream(
        model=MODEL, input="Weather in Paris?", tools=[tool], extra_headers=header("weather-tool")
    ) as stream:
        argument_snapshots = [
            event.snapshot async for event in stream if event.type == "response.function_call_arguments.delta"
        ]
        final = await stream.get_final_response()
    call = next(item for item in final.output if item.type == "function_call")
    assert (call.name, call.call_id, call.parsed_arguments) == (
        "get_weather",
        "call_weather_1",
        {"city": "Paris", "unit": "celsius"},
    )
    assert argument_snapshots[-1] == call.arguments
    assert final.tools[0].name == "get_weather"


async def test_response_echoes_the_request(openai_client):
    events = await stream_events(
        openai_client,
        "hello",
        instructions="Be brief.",
        tools=[WEATHER_TOOL],
        tool_choice="required",
        max_output_tokens=500,
        metadata={"run": "7"},
        temperature=0.2,
        reasoning={"effort": "low"},
    )
    for response in (events[0].response, events[-1].response):
        assert response.instructions == "Be brief."
        assert [t.name for t in response.tools] == ["get_weather"]
        assert (response.tool_choice, response.max_output_tokens, response.metadata) == ("required", 500, {"run": "7"})
        assert (response.temperature, response.reasoning.effort, response.model) == (0.2, "low", MODEL)
    assert len({e.response.id for e in events if hasattr(e, "response")}) == 1


@pytest.mark.parametrize(
    "prompt_input, scenario",
    [
        ("What is the weather?", "sunny"),
        ([{"role": "user", "content": [{"type": "input_text", "text": "The weather in Paris?"}]}], "sunny"),
        (
            [
                {"role": "user", "content": "What is the weather?"},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Where?"}]},
                {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "{}"},
                {"role": "user", "content": "Never mind."},
            ],
            "hello",
        ),
    ],
    ids=["string", "parts", "earlier-message"],
)
async def test_match_reads_the_last_user_message(openai_client, gateway, prompt_input, scenario):
    gateway.global_session.add(
        sc.parse_text("match: {protocol: responses, prompt: weather}\nsteps: [{text: Sunny.}]", "test", "sunny")
    )
    response = await openai_client.responses.create(model=MODEL, input=prompt_input)
    assert gateway.journal.records[-1].scenario == scenario
    assert response.output_text == ("Sunny." if scenario == "sunny" else "Hello! How can I help you today?")


# ---------------------------------------------------------------- incomplete answers


async def test_max_tokens_scenario_ends_incomplete(openai_client):
    events = await stream_events(openai_client, "max-tokens")
    final = events[-1]
    assert final.type == "response.incomplete"
    assert final.response.status == "incomplete"
    assert final.response.incomplete_details.reason == "max_output_tokens"
    message = final.response.output[-1]
    assert (message.type, message.status) == ("message", "incomplete")
    assert final.response.output_text == joined(first_script("max-tokens"), "text")
    assert (final.response.usage.input_tokens, final.response.usage.output_tokens) == (12, 16)


async def test_stream_helper_get_final_response_raises_when_incomplete(openai_client):
    async with openai_client.responses.stream(model=MODEL, input="Hello", extra_headers=header("max-tokens")) as stream:
        types = [event.type async for event in stream]
        with pytest.raises(RuntimeError, match="response.completed"):
            await stream.get_final_response()
    assert types[-1] == "response.incomplete"


async def test_request_max_output_tokens_cuts_the_answer(openai_client):
    events = await stream_events(openai_client, "hello", max_output_tokens=2)
    final = events[-1].response
    assert (events[-1].type, final.incomplete_details.reason) == ("response.incomplete", "max_output_tokens")
    assert final.output_text == "Hello! H"
    assert (final.usage.output_tokens, final.max_output_tokens) == (2, 2)


async def test_content_filter_finish_ends_incomplete(openai_client, gateway):
    gateway.global_session.add(sc.parse_text("finish: content_filter\nsteps: [{text: 'I cannot'}]", "test", "filtered"))
    events = await stream_events(openai_client, "filtered")
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.incomplete_details.reason == "content_filter"
    assert events[-1].response.output[0].status == "incomplete"


# ---------------------------------------------------------------- failures


async def events_until_error(client, name: str) -> tuple[list, openai.APIError]:
    """The events the SDK hands out before it raises, and the APIError it raises."""
    events = []
    with pytest.raises(openai.APIError) as raised:
        stream = await client.responses.create(model=MODEL, input="Hello", stream=True, extra_headers=header(name))
        async for event in stream:
            events.append(event)
    return events, raised.value


@pytest.mark.parametrize("name", FAILING)
async def test_failures_raise_api_error_while_iterating_with_their_code(openai_client, name):
    code, message = expected_failure(first_script(name))
    events, error = await events_until_error(openai_client, name)
    assert not isinstance(error, openai.APIStatusError)
    assert (error.code, error.message, error.param) == (code, message, None)
    assert error.type == FAIL_TYPES[code]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "response.failed" not in [e.type for e in events]
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == joined(first_script(name), "text")


def without_error_event(name: str) -> dict:
    """A failing bundled scenario, its `fail` set to send `response.failed` alone."""
    steps = [{"text": joined(first_script(name), "text")}]
    fail = first_script(name).steps[-1]
    assert isinstance(fail, sc.Fail), fail
    return {
        "steps": steps
        + [{"fail": {"kind": fail.kind, "message": fail.message or FAIL_MESSAGES[fail.kind], "error_event": False}}]
    }


FAILING_WITH_FAIL = [name for name in FAILING if isinstance(first_script(name).steps[-1], sc.Fail)]


@pytest.mark.parametrize("name", FAILING_WITH_FAIL)
async def test_without_the_error_event_failures_arrive_as_response_failed(openai_client, gateway, name):
    code, message = expected_failure(first_script(name))
    gateway.global_session.add(
        sc.parse_document(yamlsource.load(json.dumps(without_error_event(name))), "test", "quiet-failure")
    )
    events = await stream_events(openai_client, "quiet-failure")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    failed = events[-1]
    assert failed.type == "response.failed"
    assert failed.response.status == "failed"
    assert (failed.response.error.code, failed.response.error.message) == (code, message)
    assert [e.type for e in events].count("response.failed") == 1
    assert "error" not in [e.type for e in events]
    assert failed.response.output_text == joined(first_script(name), "text")


def test_every_fail_kind_is_covered_by_a_bundled_scenario():
    kinds = {first_script(name).steps[-1].kind for name in FAILING_WITH_FAIL}
    assert kinds == set(FAIL_CODES)
    assert any(isinstance(first_script(name).steps[-1], sc.Stall) for name in FAILING)


async def test_stream_helper_raises_the_error_event(openai_client):
    events = []
    with pytest.raises(openai.APIError) as raised:
        async with openai_client.responses.stream(
            model=MODEL, input="Hello", extra_headers=header("fail-rate-limit")
        ) as stream:
            async for event in stream:
                events.append(event)
    assert (raised.value.code, raised.value.type) == ("rate_limit_exceeded", "requests")
    assert events[-1].type == "response.output_text.delta"


async def test_stream_helper_sees_response_failed_without_the_error_event(openai_client, gateway):
    gateway.global_session.add(
        sc.parse_text("steps: [{text: Hi}, {fail: {kind: rate_limit, error_event: false}}]", "test", "quiet-failure")
    )
    async with openai_client.responses.stream(
        model=MODEL, input="Hello", extra_headers=header("quiet-failure")
    ) as stream:
        events = [event async for event in stream]
        with pytest.raises(RuntimeError, match="response.completed"):
            await stream.get_final_response()
    assert events[-1].type == "response.failed"
    assert events[-1].response.error.code == "rate_limit_exceeded"


async def test_a_failure_takes_the_type_code_and_param_the_scenario_gives(openai_client, gateway):
    gateway.global_session.add(
        sc.parse_text(
            "steps: [{fail: {kind: rate_limit, type: insufficient_quota, code: insufficient_quota, param: input, message: Pay up}}]",
            "test",
            "quota",
        )
    )
    events, error = await events_until_error(openai_client, "quota")
    assert (error.type, error.code, error.param, error.message) == (
        "insufficient_quota",
        "insufficient_quota",
        "input",
        "Pay up",
    )
    with pytest.raises(openai.RateLimitError) as raised:
        await openai_client.responses.create(model=MODEL, input="Hello", extra_headers=header("quota"))
    assert (raised.value.type, raised.value.code, raised.value.param) == (
        "insufficient_quota",
        "insufficient_quota",
        "input",
    )


async def test_an_interrupted_stream_is_not_retried_and_the_next_request_succeeds(retrying_client, gateway):
    first, error = await events_until_error(retrying_client, "interrupted-then-ok")
    second = await stream_events(retrying_client, "interrupted-then-ok")
    assert (first[-1].type, error.code) == ("response.output_text.delta", "server_error")
    assert second[-1].response.output_text == "Hello! How can I help you today?"
    assert [r.scenario for r in gateway.journal.records] == ["interrupted-then-ok[1]", "interrupted-then-ok[2]->hello"]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
async def test_http_errors_are_retried_then_succeed(retrying_client, gateway, stream):
    if stream:
        events = await stream_events(retrying_client, "flaky-then-ok")
        response = events[-1].response
    else:
        response = await retrying_client.responses.create(
            model=MODEL, input="Hello", extra_headers=header("flaky-then-ok")
        )
    assert response.output_text == "Hello! How can I help you today?"
    assert [r.status for r in gateway.journal.records] == [429, 500, 200]
    assert [r.headers.get("x-stainless-retry-count") for r in gateway.journal.records] == ["0", "1", "2"]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
async def test_disconnect_raises_a_connection_error(openai_client, stream):
    with pytest.raises(CUT_SHORT) as caught:
        if stream:
            await stream_events(openai_client, "disconnect")
        else:
            await openai_client.responses.create(model=MODEL, input="Hello", extra_headers=header("disconnect"))
    assert caused_by(caught.value, httpx2.RemoteProtocolError)


async def test_hang_runs_into_the_client_timeout(openai_client):
    with pytest.raises(TIMED_OUT) as caught:
        await stream_events(openai_client.with_options(timeout=0.5), "hang")
    assert caused_by(caught.value, httpx2.ReadTimeout)


async def test_malformed_frame_breaks_the_sdk_parser(openai_client):
    with pytest.raises(json.JSONDecodeError):
        await stream_events(openai_client, "malformed")


# ---------------------------------------------------------------- keepalives


@pytest.mark.parametrize("name", ["keepalive-demo", "stall", "reasoning-pause"])
async def test_keepalives_never_reach_the_sdk(openai_client, base_url, name):
    async with aiohttp.ClientSession() as session:
        request = {"model": MODEL, "input": "Hello", "stream": True}
        async with session.post(base_url + "/v1/responses", json=request, headers=header(name)) as raw:
            frames = (await raw.text()).split("\n\n")
    assert frames.count(": hopbase-keepalive") >= 3
    sent = sum(frame.startswith("event: ") for frame in frames)
    if name in FAILING:  # the SDK raises on the `error` event, so it hands out neither it nor `response.failed`
        events, _ = await events_until_error(openai_client, name)
        sent -= 2
    else:
        events = await stream_events(openai_client, name)
    assert len(events) == sent
    assert [e.sequence_number for e in events] == list(range(len(events)))


# ---------------------------------------------------------------- answers that are not streamed


@pytest.mark.parametrize("name", COMPLETING)
async def test_whole_response_of_every_completing_scenario(openai_client, name):
    response = await openai_client.responses.create(
        model=MODEL, input="Hello", reasoning=SUMMARY, extra_headers=header(name)
    )
    assert (response.object, response.status, response.model) == ("response", "completed", MODEL)
    assert response.id.startswith("resp_")
    check_response_matches(response, first_script(name))


async def test_whole_response_when_cut_short(openai_client):
    response = await openai_client.responses.create(model=MODEL, input="Hello", extra_headers=header("max-tokens"))
    assert (response.status, response.incomplete_details.reason, response.output[-1].status) == (
        "incomplete",
        "max_output_tokens",
        "incomplete",
    )


@pytest.mark.parametrize("name", [n for n in FAILING if isinstance(first_script(n).steps[-1], sc.Fail)])
async def test_whole_response_failure_is_an_http_error(openai_client, name):
    kind = first_script(name).steps[-1].kind
    with pytest.raises(openai.APIStatusError) as caught:
        await openai_client.responses.create(model=MODEL, input="Hello", extra_headers=header(name))
    assert (caught.value.status_code, caught.value.code) == (FAIL_STATUSES[kind], FAIL_CODES[kind])


async def test_bad_request_names_the_parameter(openai_client):
    with pytest.raises(openai.BadRequestError) as caught:
        await openai_client.responses.create(model=MODEL, input="Hello", max_output_tokens=0)
    assert (caught.value.param, caught.value.type) == ("max_output_tokens", "invalid_request_error")


# ---------------------------------------------------------------- an agent's tool loop and stored responses

THREE_TURNS = """
conversation:
  - steps: [{tool_call: {name: get_weather, arguments: {city: Paris}}}]
  - steps: [{tool_call: {name: get_time, arguments: {timezone: Europe/Paris}}}]
  - steps: [{text: {template: "It is {tool_result:get_time}[{tool_result:get_weather}]."}}]
"""


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("chain", [False, True], ids=["input-resent", "previous-response-id"])
async def test_a_tool_loop_gets_agent_weather_turn_by_turn(openai_client, gateway, stream, chain):
    gateway.global_session.default = "agent-weather"
    await agent_weather_loop(ResponsesAgent(openai_client, stream=stream, chain=chain), gateway.journal)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_previous_response_id_chain_of_three_turns_advances_the_turn(openai_client, gateway, stream):
    gateway.global_session.add(sc.parse_text(THREE_TURNS, "test", "three-turns"))
    gateway.global_session.default = "three-turns"
    agent = ResponsesAgent(openai_client, stream=stream, chain=True)
    first = await agent.ask()
    agent.answer({"get_weather": "Fog"})
    second = await agent.ask()
    agent.answer({"get_time": "07:30"})
    third = await agent.ask()
    assert [call.name for call in first.calls + second.calls] == ["get_weather", "get_time"]
    assert third.text == "It is 07:30[]."  # a quote reads the results the request ends with
    assert [(r.turn, r.scenario) for r in gateway.journal.records] == [
        (1, "three-turns[1]"),
        (2, "three-turns[2]"),
        (3, "three-turns[3]"),
    ]
    assert [r.body.get("previous_response_id") for r in gateway.journal.records][1:] != [None, None]


async def test_an_unknown_previous_response_id_is_the_real_apis_400(openai_client, gateway):
    with pytest.raises(openai.BadRequestError) as caught:
        await openai_client.responses.create(model=MODEL, input="And tomorrow?", previous_response_id="resp_unknown")
    error = caught.value
    assert (error.status_code, error.code, error.param, error.type) == (
        400,
        "previous_response_not_found",
        "previous_response_id",
        "invalid_request_error",
    )
    assert error.body["message"] == "Previous response with id 'resp_unknown' not found."
    assert gateway.journal.records[-1].end == "rejected"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_stored_response_is_retrieved_then_deleted(openai_client, stream):
    agent = ResponsesAgent(openai_client, stream=stream)
    await agent.ask()
    kept, answered = await openai_client.responses.retrieve(agent.response.id), agent.response
    assert (kept.id, kept.status, kept.output_text, kept.usage, kept.created_at) == (
        answered.id,
        answered.status,
        answered.output_text,
        answered.usage,
        answered.created_at,
    )
    assert [(item.id, item.type) for item in kept.output] == [(item.id, item.type) for item in answered.output]
    assert await openai_client.responses.delete(agent.response.id) is None
    with pytest.raises(openai.NotFoundError) as caught:
        await openai_client.responses.retrieve(agent.response.id)
    assert caught.value.body["message"] == f"Response with id '{agent.response.id}' not found."
    with pytest.raises(openai.BadRequestError, match="not found"):
        await openai_client.responses.create(model=MODEL, input="Again?", previous_response_id=agent.response.id)


async def test_store_false_answers_are_not_kept(openai_client):
    response = await openai_client.responses.create(model=MODEL, input="Hello", store=False)
    assert response.store is False
    with pytest.raises(openai.NotFoundError):
        await openai_client.responses.retrieve(response.id)
    with pytest.raises(openai.NotFoundError):
        await openai_client.responses.delete(response.id)


async def test_stored_responses_are_bounded_oldest_first(make_gateway, serve):
    gateway = make_gateway(responses=StoredResponses(capacity=2))
    async with clients.openai_async(base_url=await serve(gateway) + "/v1", api_key="sk-test", max_retries=0) as client:
        ids = [(await client.responses.create(model=MODEL, input=f"Question {number}")).id for number in range(3)]
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve(ids[0])
        assert [(await client.responses.retrieve(kept)).id for kept in ids[1:]] == ids[1:]
    assert len(gateway.responses) == 2
