"""Programmatic tool calling: a `tool_call` with `caller: code_execution` is made by the code of
the latest code_execution step; Messages names that server_tool_use as the tool_use's caller, on
real sockets and through the official SDK; Responses makes the code a `program` item the
function_call names; Chat Completions leaves the caller out."""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml
from openai.types.responses import ResponseFunctionToolCall
from openai.types.responses.response_function_tool_call import CallerProgram
from openai.types.responses.response_output_item import Program, ProgramOutput

from fakehop.scenario.model import ServerTool, ToolCall

from . import clients
from .cli_runs import fakehop_here
from .hosted_scenarios import answer_bytes, imported_script, request, served, streamed_message, validate_problems
from .inline_scenarios import data_events, problems_of

CALLED = """
steps:
  - server_tool:
      name: code_execution
      input: {code: "print(get_weather('Paris'))"}
      result: {stdout: "", return_code: 0}
  - tool_call:
      name: get_weather
      arguments: {city: Paris}
      caller: code_execution
"""
NAMED = CALLED.replace("name: code_execution\n", "name: code_execution\n      id: srvtoolu_01given\n")
WEATHER_TOOL = {"name": "get_weather", "input_schema": {"type": "object"}}


def messages_body(stream: bool) -> dict:
    return dict(request("messages", stream), tools=[WEATHER_TOOL])


def blocks_started(events: list[dict]) -> list[dict]:
    return [event["content_block"] for event in events if event["type"] == "content_block_start"]


# ---------------------------------------------------------------- Messages on the wire


@pytest.mark.parametrize("scenario", [CALLED, NAMED])
async def test_the_tool_use_names_the_code_execution_as_its_caller(serve, make_gateway, scenario):
    url, headers = await served(serve, make_gateway, "called", scenario)
    events = await data_events(url, "/v1/messages", messages_body(True), headers)
    use, _, call = blocks_started(events)
    assert use["type"] == "server_tool_use" and use["id"].startswith("srvtoolu_01")
    assert call["type"] == "tool_use"
    assert call["caller"] == {"type": "code_execution_20250825", "tool_id": use["id"]}
    [whole] = await data_events(url, "/v1/messages", messages_body(False), headers)
    use, _, call = whole["content"]
    assert call["caller"] == {"type": "code_execution_20250825", "tool_id": use["id"]}


async def test_a_code_execution_without_an_id_gets_the_same_one_every_answer(serve, make_gateway):
    url, headers = await served(serve, make_gateway, "called", CALLED)
    answers = [await data_events(url, "/v1/messages", messages_body(True), headers) for _ in range(2)]
    ids = {blocks_started(events)[0]["id"] for events in answers}
    assert len(ids) == 1


async def test_a_code_execution_with_an_id_keeps_it(serve, make_gateway):
    url, headers = await served(serve, make_gateway, "named", NAMED)
    events = await data_events(url, "/v1/messages", messages_body(True), headers)
    assert blocks_started(events)[2]["caller"]["tool_id"] == "srvtoolu_01given"


async def test_a_call_without_caller_is_called_directly(serve, make_gateway):
    url, headers = await served(serve, make_gateway, "direct", CALLED.replace("      caller: code_execution\n", ""))
    events = await data_events(url, "/v1/messages", messages_body(True), headers)
    assert blocks_started(events)[2]["caller"] == {"type": "direct"}


# ---------------------------------------------------------------- the anthropic SDK


async def test_the_anthropic_sdk_reads_the_caller_of_a_whole_message(serve, make_gateway):
    url, headers = await served(serve, make_gateway, "called", CALLED)
    async with clients.anthropic_async(base_url=url, api_key="sk-test", max_retries=0) as client:
        message = await client.messages.create(
            model="claude-sonnet-5",
            max_tokens=1024,
            messages=[{"role": "user", "content": "Weather?"}],
            tools=[WEATHER_TOOL],
            extra_headers=headers,
        )
    use, _, call = message.content
    assert call.type == "tool_use" and call.caller is not None
    assert (call.caller.type, call.caller.tool_id) == ("code_execution_20250825", use.id)
    assert message.stop_reason == "tool_use"


async def test_the_anthropic_sdk_reads_the_caller_of_a_streamed_message(serve, make_gateway):
    url, headers = await served(serve, make_gateway, "called", CALLED)
    message = await streamed_message(url, headers)
    use, _, call = message.content
    assert call.type == "tool_use" and call.input == {"city": "Paris"}
    assert call.caller is not None and (call.caller.type, call.caller.tool_id) == ("code_execution_20250825", use.id)


# ---------------------------------------------------------------- loading, validate and the schema


def test_the_call_holds_the_id_its_code_execution_is_given():
    from fakehop.scenario.reader import parse_text

    [entry] = parse_text(CALLED, "t.yaml", "t").entries
    assert entry.script is not None
    run, call = entry.script.steps
    assert isinstance(run, ServerTool) and isinstance(call, ToolCall)
    assert run.call_id is not None and call.caller == run.call_id


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "steps:\n  - text: hi\n  - tool_call: {name: f, caller: code_execution}\n",
            "t.yaml:3: tool_call caller: code_execution needs a server_tool code_execution step before the call",
        ),
        (
            "steps:\n  - tool_call: {name: f, caller: code_execution}\n"
            "  - server_tool: {name: code_execution, input: {code: x}, result: {stdout: ''}}\n",
            "t.yaml:2: tool_call caller: code_execution needs a server_tool code_execution step before the call",
        ),
        (
            "steps:\n  - server_tool: {name: web_fetch, input: {url: u}, result: {content: c}}\n"
            "  - tool_call: {name: f, caller: code_execution}\n",
            "t.yaml:3: tool_call caller: code_execution needs a server_tool code_execution step before the call",
        ),
        (
            "steps:\n  - server_tool: {name: code_execution, input: {code: x}, result: {stdout: ''}}\n"
            "  - tool_call: {name: f, caller: web_search}\n",
            "t.yaml:3: tool_call caller: expected one of code_execution, got 'web_search'",
        ),
    ],
)
def test_a_caller_without_its_code_execution_is_a_problem_naming_its_line(text, problem):
    assert problem in problems_of(text)


def test_a_later_turn_may_call_from_an_earlier_turns_code_execution():
    from fakehop.scenario.reader import parse_text

    text = (
        "sequence:\n"
        "  - steps:\n"
        "      - server_tool: {name: code_execution, input: {code: x}, result: {stdout: ''}}\n"
        "      - tool_call: {name: f, caller: code_execution}\n"
        "  - steps:\n"
        "      - tool_call: {name: g, caller: code_execution}\n"
    )
    first, second = parse_text(text, "t.yaml", "t").entries
    assert first.script is not None and second.script is not None
    run, call = first.script.steps
    assert isinstance(run, ServerTool) and run.call_id is not None
    assert call.caller == second.script.steps[0].caller == run.call_id


def test_validate_names_the_file_and_line_of_a_caller_without_code_execution(tmp_path):
    path, said = validate_problems(tmp_path, "steps:\n  - tool_call: {name: f, caller: code_execution}\n")
    assert f"{path}:2: tool_call caller: code_execution needs" in said


def test_the_schema_takes_a_caller_and_no_other():
    schema = json.loads(fakehop_here("schema").stdout)
    jsonschema.validate(yaml.safe_load(CALLED), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(yaml.safe_load(CALLED.replace("caller: code_execution", "caller: web_search")), schema)


# ---------------------------------------------------------------- Responses and Chat Completions


async def test_responses_stream_the_code_as_a_program_the_function_call_names(serve, make_gateway):
    url, headers = await served(serve, make_gateway, "called", CALLED)
    events = await data_events(url, "/v1/responses", request("responses"), headers)
    added = [event["item"] for event in events if event["type"] == "response.output_item.added"]
    assert [item["type"] for item in added] == ["program", "program_output", "function_call"]
    program, output, call = added
    assert (program["code"], output["call_id"], output["result"]) == (
        "print(get_weather('Paris'))",
        program["call_id"],
        "",
    )
    assert call["caller"] == {"type": "program", "caller_id": program["call_id"]}
    [completed] = [event for event in events if event["type"] == "response.completed"]
    assert completed["response"]["output"][2]["caller"] == call["caller"]


async def test_the_openai_sdk_reads_the_program_and_the_caller(serve, make_gateway):
    url, headers = await served(serve, make_gateway, "called", CALLED)
    async with clients.openai_async(base_url=url + "/v1", api_key="sk-test", max_retries=0) as client:
        response = await client.responses.create(model="gpt-5.6", input="Weather?", extra_headers=headers)
        stream = await client.responses.create(model="gpt-5.6", input="Weather?", stream=True, extra_headers=headers)
        done = [event.item async for event in stream if event.type == "response.output_item.done"]
    for output in (response.output, done):
        program, result, call = output
        assert isinstance(program, Program) and isinstance(result, ProgramOutput)
        assert isinstance(call, ResponseFunctionToolCall) and isinstance(call.caller, CallerProgram)
        assert call.caller.caller_id == program.call_id == result.call_id
        assert program.code == "print(get_weather('Paris'))" and program.fingerprint


async def test_responses_without_caller_keep_the_code_interpreter_call(serve, make_gateway):
    url, headers = await served(serve, make_gateway, "direct", CALLED.replace("      caller: code_execution\n", ""))
    events = await data_events(url, "/v1/responses", request("responses"), headers)
    added = [event["item"] for event in events if event["type"] == "response.output_item.added"]
    assert [item["type"] for item in added] == ["code_interpreter_call", "function_call"]
    assert "caller" not in added[1]


async def test_chat_completions_leave_the_caller_out(serve, make_gateway):
    url, headers = await served(serve, make_gateway, "called", CALLED)
    async with clients.openai_async(base_url=url + "/v1", api_key="sk-test", max_retries=0) as client:
        completion = await client.chat.completions.create(
            model="gpt-5.6", messages=[{"role": "user", "content": "Weather?"}], extra_headers=headers
        )
    [call] = completion.choices[0].message.tool_calls or []
    assert call.function.name == "get_weather" and "caller" not in call.model_dump()


# ---------------------------------------------------------------- import


@pytest.mark.parametrize("stream", [True, False])
async def test_a_messages_capture_imports_the_caller_back(serve, make_gateway, tmp_path, stream):
    url, headers = await served(serve, make_gateway, "called", CALLED)
    capture = await answer_bytes(url, "messages", messages_body(stream), headers)
    script, text = await imported_script(tmp_path, capture, ".sse" if stream else ".json")
    assert "caller: code_execution" in text
    run, call = [step for step in script.steps if isinstance(step, (ServerTool, ToolCall))]
    assert isinstance(run, ServerTool) and isinstance(call, ToolCall)
    assert run.calls_tools and call.caller == run.call_id and run.call_id.startswith("srvtoolu_01")


async def test_a_caller_of_another_answers_code_execution_imports_as_a_direct_call(tmp_path):
    call = {"type": "tool_use", "id": "toolu_01a", "name": "f", "input": {}}
    caller = {"type": "code_execution_20250825", "tool_id": "srvtoolu_01elsewhere"}
    body = {
        "id": "msg_01a",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-5",
        "content": [{**call, "caller": caller}],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 3, "output_tokens": 4},
    }
    script, text = await imported_script(tmp_path, json.dumps(body).encode(), ".json")
    assert "caller" not in text.split("steps:", 1)[1]
    [step] = [step for step in script.steps if isinstance(step, ToolCall)]
    assert step.caller is None


@pytest.mark.parametrize("stream", [True, False])
async def test_a_responses_capture_imports_the_program_and_its_calls_back(serve, make_gateway, tmp_path, stream):
    url, headers = await served(serve, make_gateway, "called", CALLED)
    capture = await answer_bytes(url, "responses", request("responses", stream), headers)
    script, text = await imported_script(tmp_path, capture, ".sse" if stream else ".json")
    assert "caller: code_execution" in text and "Not kept" not in text
    run, call = [step for step in script.steps if isinstance(step, (ServerTool, ToolCall))]
    assert isinstance(run, ServerTool) and isinstance(call, ToolCall)
    assert (run.name, json.loads(run.input), json.loads(str(run.result))) == (
        "code_execution",
        {"code": "print(get_weather('Paris'))"},
        {"stdout": ""},
    )
    assert (
        run.calls_tools
        and call.caller == run.call_id
        and (call.name, json.loads(call.arguments))
        == (
            "get_weather",
            {"city": "Paris"},
        )
    )


def program_answer(*items: dict) -> bytes:
    """A whole Responses answer whose output is `items`."""
    body = {
        "id": "resp_1",
        "object": "response",
        "model": "gpt-5.6",
        "status": "completed",
        "output": list(items),
        "usage": {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7},
    }
    return json.dumps(body).encode()


PROGRAM = {"id": "prg_1", "type": "program", "call_id": "call_prg", "code": "f()", "fingerprint": "AAAA"}


def function_call(caller_id: str) -> dict:
    return {
        "id": "fc_1",
        "type": "function_call",
        "call_id": "call_f",
        "name": "f",
        "arguments": "{}",
        "status": "completed",
        "caller": {"type": "program", "caller_id": caller_id},
    }


async def test_a_function_call_of_another_answers_program_imports_as_a_direct_call(tmp_path):
    script, text = await imported_script(tmp_path, program_answer(function_call("call_elsewhere")), ".json")
    assert "caller" not in text.split("steps:", 1)[1] and "latest program" in text
    [step] = [step for step in script.steps if isinstance(step, ToolCall)]
    assert step.caller is None


async def test_a_program_without_its_output_imports_with_an_empty_result(tmp_path):
    script, text = await imported_script(tmp_path, program_answer(PROGRAM, function_call("call_prg")), ".json")
    assert "without their program_output" in text
    run, call = [step for step in script.steps if isinstance(step, (ServerTool, ToolCall))]
    assert isinstance(run, ServerTool) and json.loads(str(run.result)) == {}
    assert isinstance(call, ToolCall) and call.caller == run.call_id == "call_prg"
