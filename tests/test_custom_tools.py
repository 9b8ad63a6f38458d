"""`custom_tool_call` steps: a custom (free-text) tool's call, as each protocol sends one, on the
wire and through the official SDKs; and what loading such a step refuses."""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml
from openai.types.chat import ChatCompletionMessageCustomToolCall
from openai.types.responses import ResponseCustomToolCall

from fakehop.scenario.model import ToolCall
from fakehop.scenario.schema import scenario_schema

from .cli_runs import fakehop_here
from .inline_scenarios import add, data_events, problems_of
from .round_trips import answer_bytes, imported_steps, recorded_steps

SQL = 'SELECT "name" FROM users;\nLIMIT 1'
CUSTOM = (
    "steps:\n"
    "  - text: Querying.\n"
    "  - custom_tool_call: {name: write_sql, input: " + json.dumps(SQL) + ", id: call_sql1}\n"
    "    chunk: 5\n"
)
SQL_TOOL = {"type": "custom", "name": "write_sql", "description": "Write one SQL query."}
CHAT_SQL_TOOL = {"type": "custom", "custom": {"name": "write_sql", "description": "Write one SQL query."}}
MESSAGES = [{"role": "user", "content": "Who is first?"}]
PIECES = [SQL[start : start + 5] for start in range(0, len(SQL), 5)]


async def test_responses_stream_a_custom_tool_call_item(base_url, gateway):
    headers = add(gateway, "sql", CUSTOM)
    events = await data_events(
        base_url, "/v1/responses", {"model": "m", "input": "Who?", "tools": [SQL_TOOL], "stream": True}, headers
    )
    added = [e["item"] for e in events if e["type"] == "response.output_item.added"][1]
    assert (added["type"], added["call_id"], added["name"], added["input"]) == (
        "custom_tool_call",
        "call_sql1",
        "write_sql",
        "",
    )
    assert added["id"].startswith("ctc_")
    deltas = [e for e in events if e["type"] == "response.custom_tool_call_input.delta"]
    assert [e["delta"] for e in deltas] == PIECES
    assert {(e["item_id"], e["output_index"]) for e in deltas} == {(added["id"], 1)}
    done = next(e for e in events if e["type"] == "response.custom_tool_call_input.done")
    assert (done["input"], done["item_id"]) == (SQL, added["id"])
    assert not [e for e in events if "function_call" in e["type"]]
    item = events[-1]["response"]["output"][1]
    assert item == {**added, "status": "completed", "input": SQL}


async def test_openai_sdk_reads_a_custom_tool_call_from_responses(gateway, openai_client):
    headers = add(gateway, "sql", CUSTOM)
    async with openai_client.responses.stream(
        model="m", input="Who?", tools=[SQL_TOOL], extra_headers=headers
    ) as stream:
        seen = [event.type async for event in stream]
        streamed = await stream.get_final_response()
    assert "response.custom_tool_call_input.delta" in seen
    whole = await openai_client.responses.create(model="m", input="Who?", tools=[SQL_TOOL], extra_headers=headers)
    for response in (streamed, whole):
        call = response.output[1]
        assert isinstance(call, ResponseCustomToolCall)
        assert (call.name, call.input, call.call_id, call.status) == ("write_sql", SQL, "call_sql1", "completed")
        assert response.output_text == "Querying."


async def test_chat_streams_a_custom_tool_call(base_url, gateway):
    headers = add(gateway, "sql", CUSTOM)
    body = {"model": "m", "messages": MESSAGES, "tools": [CHAT_SQL_TOOL], "stream": True}
    chunks = await data_events(base_url, "/v1/chat/completions", body, headers)
    calls = [call for c in chunks if c["choices"] for call in c["choices"][0]["delta"].get("tool_calls", [])]
    assert calls[0] == {"index": 0, "id": "call_sql1", "type": "custom", "custom": {"name": "write_sql", "input": ""}}
    assert calls[1:] == [{"index": 0, "custom": {"input": piece}} for piece in PIECES]
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "tool_calls"


async def test_openai_sdk_reads_a_custom_tool_call_from_chat(gateway, openai_client):
    headers = add(gateway, "sql", CUSTOM)
    whole = await openai_client.chat.completions.create(
        model="m", messages=MESSAGES, tools=[CHAT_SQL_TOOL], extra_headers=headers
    )
    call = whole.choices[0].message.tool_calls[0]
    assert isinstance(call, ChatCompletionMessageCustomToolCall)
    assert (call.id, call.custom.name, call.custom.input) == ("call_sql1", "write_sql", SQL)
    assert (whole.choices[0].message.content, whole.choices[0].finish_reason) == ("Querying.", "tool_calls")
    async with openai_client.chat.completions.stream(
        model="m", messages=MESSAGES, tools=[CHAT_SQL_TOOL], extra_headers=headers
    ) as stream:
        seen = [event.type async for event in stream]
        snapshot = stream.current_completion_snapshot.choices[0]
    # The stream helper gathers the call under `custom` (its get_final_completion, in openai 3.63,
    # then fails on any custom tool call: its snapshot types know only function calls).
    streamed = snapshot.message.tool_calls[0]
    assert (streamed.type, streamed.id, streamed.custom) == ("custom", "call_sql1", {"name": "write_sql", "input": SQL})
    assert (snapshot.message.content, snapshot.finish_reason, seen.count("content.done")) == (
        "Querying.",
        "tool_calls",
        1,
    )


async def test_messages_gives_a_custom_tool_call_as_a_tool_use_of_its_input(base_url, gateway, anthropic_client):
    headers = add(gateway, "sql", CUSTOM)
    body = {"model": "c", "max_tokens": 100, "messages": MESSAGES, "stream": True}
    events = await data_events(base_url, "/v1/messages", body, headers)
    partial = [e["delta"]["partial_json"] for e in events if e["type"] == "content_block_delta" and e["index"] == 1]
    assert json.loads("".join(partial)) == {"input": SQL}
    async with anthropic_client.messages.stream(
        model="c", max_tokens=100, messages=MESSAGES, extra_headers=headers
    ) as stream:
        streamed = await stream.get_final_message()
    whole = await anthropic_client.messages.create(model="c", max_tokens=100, messages=MESSAGES, extra_headers=headers)
    for message in (streamed, whole):
        use = message.content[1]
        assert (use.type, use.name, use.id, use.input) == ("tool_use", "write_sql", "call_sql1", {"input": SQL})
        assert message.stop_reason == "tool_use"


async def test_an_empty_custom_input_and_pieces(base_url, gateway, anthropic_client):
    headers = add(gateway, "pieces", 'steps: [{custom_tool_call: {name: t, input: ["a\\u00e9", "\\"}"]}}]')
    whole = await anthropic_client.messages.create(model="c", max_tokens=100, messages=MESSAGES, extra_headers=headers)
    assert whole.content[0].input == {"input": 'aé"}'}
    headers = add(gateway, "empty", "steps: [{custom_tool_call: {name: t}}]")
    async with anthropic_client.messages.stream(
        model="c", max_tokens=100, messages=MESSAGES, extra_headers=headers
    ) as stream:
        assert (await stream.get_final_message()).content[0].input == {"input": ""}
    events = await data_events(base_url, "/v1/responses", {"model": "m", "input": "Hi", "stream": True}, headers)
    assert events[-1]["response"]["output"][0]["input"] == ""


def test_custom_tool_call_problems_name_their_line():
    assert "t.yaml:4: custom_tool_call input: expected free text or a list of pieces, got a mapping" in problems_of(
        "steps:\n  - text: hi\n  - custom_tool_call: {name: t,\n      input: {a: 1}}"
    )
    assert "custom_tool_call: needs a name" in problems_of("steps: [{custom_tool_call: {input: x}}]")
    assert "unknown key 'arguments' in custom_tool_call" in problems_of(
        "steps: [{custom_tool_call: {name: t, arguments: x}}]"
    )
    assert "chunk: custom_tool_call input is already a list of pieces" in problems_of(
        "steps: [{custom_tool_call: {name: t, input: [a, b]}, chunk: 2}]"
    )


def test_validate_names_the_file_and_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: bad\nsteps:\n  - custom_tool_call: write_sql\n")
    run = fakehop_here("validate", str(path))
    assert run.returncode == 1
    assert (
        f"{path}:3: custom_tool_call: expected a mapping with name and input, got a string" in run.stdout + run.stderr
    )
    good = tmp_path / "good.yaml"
    good.write_text(f"name: good\n{CUSTOM}")
    assert fakehop_here("validate", str(good)).returncode == 0


def test_the_schema_takes_custom_tool_calls():
    validator = jsonschema.Draft202012Validator(scenario_schema())
    assert not list(validator.iter_errors(yaml.safe_load(CUSTOM)))
    pieces = {"steps": [{"custom_tool_call": {"name": "t", "input": ["a", "b"], "id": "c"}, "interval": 0.01}]}
    assert not list(validator.iter_errors(pieces))
    for wrong in (
        {"custom_tool_call": {"name": "t", "input": {"a": 1}}},
        {"custom_tool_call": {"name": "t", "arguments": "x"}},
        {"custom_tool_call": {"name": "t", "input": ["a"]}, "chunk": 2},
    ):
        assert list(validator.iter_errors({"steps": [wrong]})), wrong


def call_of(steps) -> tuple:
    [call] = [step for step in steps if isinstance(step, ToolCall)]
    return call.custom, call.name, call.call_id, call.arguments


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("protocol", ["responses", "chat"])
async def test_an_imported_custom_tool_call_is_a_custom_tool_call_step(base_url, gateway, tmp_path, protocol, stream):
    headers = add(gateway, "sql", CUSTOM)
    data = await answer_bytes(base_url, protocol, stream, headers)
    assert call_of(await imported_steps(data, tmp_path)) == (True, "write_sql", "call_sql1", SQL)


async def test_an_imported_custom_call_on_messages_is_the_tool_use_it_was(base_url, gateway, tmp_path):
    """Messages has no custom tools: what a client got was a tool_use, and it replays as one."""
    headers = add(gateway, "sql", CUSTOM)
    data = await answer_bytes(base_url, "messages", True, headers)
    custom, name, call_id, arguments = call_of(await imported_steps(data, tmp_path))
    assert (custom, name, call_id, json.loads(arguments)) == (False, "write_sql", "call_sql1", {"input": SQL})


@pytest.mark.parametrize("protocol", ["responses", "chat"])
async def test_a_recorded_custom_tool_call_is_a_custom_tool_call_step(
    aiohttp_server, base_url, gateway, tmp_path, protocol
):
    headers = add(gateway, "sql", CUSTOM)
    steps = await recorded_steps(aiohttp_server, base_url, protocol, True, headers, tmp_path / "recorded")
    assert call_of(steps) == (True, "write_sql", "call_sql1", SQL)


AGENT = (
    "conversation:\n"
    "  - steps: [{custom_tool_call: {name: write_sql, input: 'SELECT 1'}}]\n"
    "  - steps: [{text: {template: 'Rows: {tool_result:write_sql}'}}]\n"
)


async def test_a_custom_tool_result_answers_the_call_of_a_chained_response(gateway, openai_client):
    """The stored response's custom tool call names the result its output item gives back."""
    headers = add(gateway, "sql-agent", AGENT)
    first = await openai_client.responses.create(model="m", input="Count", tools=[SQL_TOOL], extra_headers=headers)
    [call] = first.output
    result = {"type": "custom_tool_call_output", "call_id": call.call_id, "output": "42"}
    second = await openai_client.responses.create(
        model="m", previous_response_id=first.id, input=[result], tools=[SQL_TOOL], extra_headers=headers
    )
    assert second.output_text == "Rows: 42"


async def test_a_custom_tool_result_in_the_conversation_is_named(gateway, openai_client):
    headers = add(gateway, "sql-agent", AGENT)
    call = {"type": "custom_tool_call", "call_id": "call_1", "name": "write_sql", "input": "SELECT 1"}
    result = {"type": "custom_tool_call_output", "call_id": "call_1", "output": "42"}
    items = [{"role": "user", "content": "Count"}, call, result]
    answer = await openai_client.responses.create(model="m", input=items, tools=[SQL_TOOL], extra_headers=headers)
    assert answer.output_text == "Rows: 42"
    messages = [
        *MESSAGES,
        {
            "role": "assistant",
            "tool_calls": [{"id": "call_1", "type": "custom", "custom": {"name": "write_sql", "input": "SELECT 1"}}],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "42"},
    ]
    completion = await openai_client.chat.completions.create(
        model="m", messages=messages, tools=[CHAT_SQL_TOOL], extra_headers=headers
    )
    assert completion.choices[0].message.content == "Rows: 42"
