"""Hosted (server) tools: a `server_tool` step plays the protocol's own items and blocks, on
real sockets and through the official SDKs, and a recording of them reads back into the same
steps."""

from __future__ import annotations

import asyncio
import json
import time

import jsonschema
import pytest
import yaml
from openai.types.responses import (
    ResponseCodeInterpreterToolCall,
    ResponseFileSearchToolCall,
    ResponseFunctionWebSearch,
)
from openai.types.responses.response_output_item import ImageGenerationCall, McpCall, McpListTools

from fakehop.protocols import PROTOCOLS
from fakehop.record import proxy as record
from fakehop.scenario.model import ServerTool
from fakehop.scenario.reader import load_file

from . import clients
from .cli_runs import fakehop_here
from .hosted_scenarios import answer_bytes, imported_script, request, served, streamed_message, validate_problems
from .inline_scenarios import data_events, problems_of
from .sdk_results import SEED

HOSTED = """
steps:
  - text: "Let me look."
  - server_tool:
      name: web_search
      input: {query: "cats"}
      result: [{url: "https://a.example/cats", title: "Cats", page_age: "2 days"}]
  - server_tool:
      name: code_execution
      input: {code: "print(6 * 7)"}
      result: {stdout: "42\\n", return_code: 0}
  - server_tool:
      name: web_fetch
      input: {url: "https://b.example/page"}
      result: {content: "Page text", title: "B"}
  - text: "Done."
"""
OPENAI_ONLY = """
steps:
  - server_tool:
      name: file_search
      input: {queries: ["cats"]}
      result: [{file_id: "file-1", filename: "cats.md", score: 0.9, text: "Cats purr."}]
  - server_tool: {name: image_generation, input: {prompt: "a cat"}, result: "iVBORw0KGgo="}
  - server_tool: {name: mcp, server: wiki, tool: ask, input: {question: "why"}, result: "Because."}
  - text: "Here."
"""


# ---------------------------------------------------------------- Responses


async def test_responses_stream_gives_each_hosted_tool_its_typed_item(serve, make_gateway):
    url, headers = await served(serve, make_gateway, "hosted", HOSTED + OPENAI_ONLY.replace("steps:", ""))
    async with clients.openai_async(base_url=url + "/v1", api_key="sk-test", max_retries=0) as client:
        async with client.responses.stream(model="gpt-5.6-sol", input="Hi", extra_headers=headers) as stream:
            events = [event.type async for event in stream]
            final = await stream.get_final_response()
    output = final.output
    assert [item.type for item in output] == [
        "message",
        "web_search_call",
        "code_interpreter_call",
        "web_search_call",
        "message",
        "file_search_call",
        "image_generation_call",
        "mcp_list_tools",
        "mcp_call",
        "message",
    ]
    search = output[1]
    assert isinstance(search, ResponseFunctionWebSearch) and search.status == "completed"
    assert search.action.type == "search" and search.action.query == "cats"
    assert [source.url for source in search.action.sources or []] == ["https://a.example/cats"]
    code = output[2]
    assert isinstance(code, ResponseCodeInterpreterToolCall)
    assert code.code == "print(6 * 7)" and code.container_id.startswith("cntr_")
    assert [(log.type, getattr(log, "logs", None)) for log in code.outputs or []] == [("logs", "42\n")]
    assert output[3].action.type == "open_page" and output[3].action.url == "https://b.example/page"
    files = output[5]
    assert isinstance(files, ResponseFileSearchToolCall) and files.queries == ["cats"]
    assert [(hit.file_id, hit.score, hit.text) for hit in files.results or []] == [("file-1", 0.9, "Cats purr.")]
    image = output[6]
    assert isinstance(image, ImageGenerationCall) and image.result == "iVBORw0KGgo="
    listed, mcp = output[7:9]
    assert isinstance(listed, McpListTools) and listed.server_label == "wiki"
    assert [tool.name for tool in listed.tools] == ["ask"]
    assert isinstance(mcp, McpCall)
    assert (mcp.server_label, mcp.name, json.loads(mcp.arguments), mcp.output) == (
        "wiki",
        "ask",
        {"question": "why"},
        "Because.",
    )
    assert final.output_text == "Let me look.Done.Here."
    for expected in (
        ["response.web_search_call.in_progress", "response.web_search_call.searching"],
        ["response.web_search_call.completed", "response.output_item.done"],
        ["response.code_interpreter_call.in_progress", "response.code_interpreter_call_code.delta"],
        ["response.code_interpreter_call_code.done", "response.code_interpreter_call.interpreting"],
        ["response.mcp_call.in_progress", "response.mcp_call_arguments.delta", "response.mcp_call_arguments.done"],
        ["response.mcp_list_tools.in_progress", "response.mcp_list_tools.completed", "response.output_item.done"],
        ["response.image_generation_call.in_progress", "response.image_generation_call.generating"],
        ["response.file_search_call.in_progress", "response.file_search_call.searching"],
    ):
        assert any(events[at : at + len(expected)] == expected for at in range(len(events))), expected


async def test_responses_whole_answer_holds_the_same_items(serve, make_gateway):
    url, headers = await served(serve, make_gateway, "hosted", HOSTED + OPENAI_ONLY.replace("steps:", ""))
    [whole] = await data_events(url, "/v1/responses", request("responses", stream=False), headers)
    [streamed] = [
        event["response"]
        for event in await data_events(url, "/v1/responses", request("responses"), headers)
        if event["type"] == "response.completed"
    ]
    assert [item["type"] for item in whole["output"]] == [item["type"] for item in streamed["output"]]
    assert whole["output"][1]["action"] == streamed["output"][1]["action"]
    assert whole["output"][2]["outputs"] == [{"type": "logs", "logs": "42\n"}]
    assert whole["output"][7] == {**streamed["output"][7], "id": whole["output"][7]["id"]}  # the MCP server's tools


async def test_hosted_item_events_number_on_and_name_their_item(serve, make_gateway):
    url, headers = await served(serve, make_gateway, "hosted", HOSTED)
    events = await data_events(url, "/v1/responses", request("responses"), headers)
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    [added] = [e for e in events if e["type"] == "response.output_item.added" and e["output_index"] == 1]
    assert added["item"] == {
        "id": added["item"]["id"],
        "type": "web_search_call",
        "status": "in_progress",
        "action": {"type": "search", "query": "cats"},
    }
    searching = [e for e in events if e["type"] == "response.web_search_call.searching"]
    assert [(e["item_id"], e["output_index"]) for e in searching] == [
        (added["item"]["id"], 1),
        (searching[1]["item_id"], 3),
    ]


# ---------------------------------------------------------------- Messages


async def test_messages_stream_gives_server_tool_use_and_result_blocks(serve, make_gateway):
    url, headers = await served(serve, make_gateway, "hosted", HOSTED)
    message = await streamed_message(url, headers)
    content = message.content
    assert [block.type for block in content] == [
        "text",
        "server_tool_use",
        "web_search_tool_result",
        "server_tool_use",
        "code_execution_tool_result",
        "server_tool_use",
        "web_fetch_tool_result",
        "text",
    ]
    search, found = content[1], content[2]
    assert (search.name, search.input, search.id.startswith("srvtoolu_01")) == ("web_search", {"query": "cats"}, True)
    assert found.tool_use_id == search.id
    assert [(page.url, page.title, page.page_age) for page in found.content] == [
        ("https://a.example/cats", "Cats", "2 days")
    ]
    ran = content[4].content
    assert (ran.type, ran.stdout, ran.return_code) == ("code_execution_result", "42\n", 0)
    fetched = content[6].content
    assert (fetched.url, fetched.content.source.data, fetched.content.title) == (
        "https://b.example/page",
        "Page text",
        "B",
    )
    assert message.stop_reason == "end_turn"
    assert message.usage.server_tool_use is not None
    assert (message.usage.server_tool_use.web_search_requests, message.usage.server_tool_use.web_fetch_requests) == (
        1,
        1,
    )
    assert message.container is not None and message.container.id.startswith("container_011C")


async def test_messages_whole_answer_holds_the_same_blocks_and_usage(serve, make_gateway):
    url, headers = await served(serve, make_gateway, "hosted", HOSTED)
    async with clients.anthropic_async(base_url=url, api_key="sk-test", max_retries=0) as client:
        message = await client.messages.create(
            model="claude-sonnet-5",
            max_tokens=1024,
            messages=[{"role": "user", "content": "Hi"}],
            extra_headers=headers,
        )
    assert [block.type for block in message.content][1:3] == ["server_tool_use", "web_search_tool_result"]
    assert message.content[1].input == {"query": "cats"}
    assert message.usage.server_tool_use is not None and message.usage.server_tool_use.web_search_requests == 1
    assert message.container is not None


async def test_messages_leave_out_the_tools_they_have_not_and_keep_their_indexes(serve, make_gateway):
    url, headers = await served(serve, make_gateway, "openai-only", OPENAI_ONLY)
    events = await data_events(url, "/v1/messages", request("messages"), headers)
    starts = [(e["index"], e["content_block"]["type"]) for e in events if e["type"] == "content_block_start"]
    assert starts == [(0, "mcp_tool_use"), (1, "mcp_tool_result"), (2, "text")]
    [delta] = [e for e in events if e["type"] == "message_delta"]
    assert "server_tool_use" not in delta["usage"] and "container" not in delta["delta"]


async def test_messages_without_hosted_tools_say_nothing_of_them(serve, make_gateway):
    url, headers = await served(serve, make_gateway, "plain", "steps:\n  - text: Hi\n")
    events = await data_events(url, "/v1/messages", request("messages"), headers)
    [delta] = [e for e in events if e["type"] == "message_delta"]
    assert set(delta["delta"]) == {"stop_reason", "stop_sequence", "stop_details"}
    assert "server_tool_use" not in delta["usage"] and "iterations" not in delta["usage"]


# ---------------------------------------------------------------- Chat Completions


async def test_chat_completions_leave_hosted_tools_out(serve, make_gateway):
    url, headers = await served(serve, make_gateway, "hosted", HOSTED)
    async with clients.openai_async(base_url=url + "/v1", api_key="sk-test", max_retries=0) as client:
        completion = await client.chat.completions.create(
            model="gpt-5.6-sol", messages=[{"role": "user", "content": "Hi"}], extra_headers=headers
        )
    [choice] = completion.choices
    assert (choice.message.content, choice.message.tool_calls, choice.finish_reason) == (
        "Let me look.Done.",
        None,
        "stop",
    )


# ---------------------------------------------------------------- load-time problems


@pytest.mark.parametrize(
    ("step", "problem"),
    [
        ("{name: web_serch}", "t.yaml:3: server_tool: unknown name 'web_serch'; did you mean 'web_search'?"),
        ("{name: mcp, tool: ask}", "t.yaml:3: server_tool mcp: needs the server and the tool it calls"),
        ("{name: web_search, server: s}", "t.yaml:3: server_tool web_search: server and tool go with name: mcp only"),
        ("{name: web_search, result: {url: x}}", "t.yaml:3: server_tool web_search result: expected a list of pages"),
        (
            "{name: web_search, result: [{title: x}]}",
            "t.yaml:3: server_tool web_search result: every page needs its url",
        ),
        (
            "{name: code_execution, result: {stdout: 1}}",
            "t.yaml:3: server_tool code_execution result: expected its stdout",
        ),
        ("{name: web_fetch, input: [1]}", "t.yaml:3: server_tool input: expected a mapping, or a JSON object"),
        ("{name: mcp, server: s, tool: t, bogus: 1}", "t.yaml:3: unknown key 'bogus' in server_tool"),
    ],
)
def test_a_wrong_server_tool_is_a_problem_naming_its_line(step, problem):
    assert problem in problems_of(f"steps:\n  - text: hi\n  - server_tool: {step}\n")


@pytest.mark.parametrize(
    ("protocol", "name", "has"),
    [("messages", "file_search", "web_search, web_fetch, code_execution, mcp"), ("chat", "web_search", "it has none")],
)
def test_a_tool_the_matched_protocol_has_not_is_a_problem(protocol, name, has):
    text = f"match: {{protocol: {protocol}}}\nsteps:\n  - server_tool: {{name: {name}, result: []}}\n"
    assert f"server_tool {name}: match protocol {protocol} has no such hosted tool ({has})" in problems_of(text)


def test_validate_names_the_file_and_line_of_a_wrong_server_tool(tmp_path):
    path, said = validate_problems(tmp_path, "steps:\n  - server_tool: {name: web_fetch, result: 7}\n")
    assert f"{path}:2: server_tool web_fetch result: expected the page's text" in said


def test_the_schema_takes_the_hosted_steps_and_finishes():
    schema = json.loads(fakehop_here("schema").stdout)
    for scenario in (
        HOSTED,
        OPENAI_ONLY,
        "finish: pause_turn\nsteps:\n  - server_tool: {name: web_fetch}\n    chunk: 4\n",
    ):
        jsonschema.validate(yaml.safe_load(scenario), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(yaml.safe_load("steps:\n  - server_tool: {name: web_serch}\n"), schema)


# ---------------------------------------------------------------- record and import


def hosted_steps(script) -> list[ServerTool]:
    return [step for step in script.steps if isinstance(step, ServerTool)]


@pytest.mark.parametrize("stream", [True, False])
async def test_a_messages_capture_imports_into_the_same_server_tool_steps(serve, make_gateway, tmp_path, stream):
    url, headers = await served(serve, make_gateway, "hosted", HOSTED)
    capture = await answer_bytes(url, "messages", request("messages", stream), headers)
    script, text = await imported_script(tmp_path, capture, ".sse" if stream else ".json")
    steps = hosted_steps(script)
    assert [(step.name, json.loads(step.input), json.loads(step.result or "null")) for step in steps] == [
        ("web_search", {"query": "cats"}, [{"url": "https://a.example/cats", "title": "Cats", "page_age": "2 days"}]),
        ("code_execution", {"code": "print(6 * 7)"}, {"stdout": "42\n", "stderr": "", "return_code": 0}),
        (
            "web_fetch",
            {"url": "https://b.example/page"},
            {"content": "Page text", "title": "B", "url": "https://b.example/page"},
        ),
    ]
    assert all(step.call_id and step.call_id.startswith("srvtoolu_01") for step in steps)
    assert "finish:" not in text


async def test_a_responses_capture_imports_into_server_tool_steps_that_replay_the_same(serve, make_gateway, tmp_path):
    url, headers = await served(serve, make_gateway, "hosted", OPENAI_ONLY)
    capture = await answer_bytes(url, "responses", request("responses"), headers)
    script, text = await imported_script(tmp_path, capture)
    assert [(step.name, step.server, step.tool) for step in hosted_steps(script)] == [
        ("file_search", None, None),
        ("image_generation", None, None),
        ("mcp", "wiki", "ask"),
    ]
    replay_url, replay_headers = await served(serve, make_gateway, "replayed", text)
    replayed = await answer_bytes(replay_url, "responses", request("responses"), replay_headers)
    done = [
        json.loads(line.removeprefix("data: "))["item"]
        for bytes_ in (capture, replayed)
        for line in bytes_.decode().split("\n")
        if line.startswith("data: ") and '"response.output_item.done"' in line
    ]
    half = len(done) // 2
    assert [without_ids(item) for item in done[:half]] == [without_ids(item) for item in done[half:]]


def without_ids(item: dict) -> dict:
    return {key: value for key, value in item.items() if key != "id"}


async def test_fakehop_record_keeps_the_hosted_calls_of_what_it_proxied(serve, make_gateway, aiohttp_server, tmp_path):
    upstream_url, headers = await served(serve, make_gateway, "hosted", HOSTED)
    out = tmp_path / "recorded"
    out.mkdir()
    proxy = await aiohttp_server(record.create_app(record.Recorder(upstream_url, out)))
    proxied = await answer_bytes(str(proxy.make_url("")).rstrip("/"), "messages", request("messages"), headers)
    assert b"web_search_tool_result" in proxied
    deadline = time.monotonic() + 15
    while not (files := sorted(out.glob("*.yaml"))) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    [path] = files
    script = load_file(path).entries[0].script
    assert script is not None
    assert [step.name for step in hosted_steps(script)] == ["web_search", "code_execution", "web_fetch"]
    assert json.loads(hosted_steps(script)[1].result or "null")["stdout"] == "42\n"


def messages_capture(*blocks: dict, stop: str = "end_turn") -> bytes:
    """A Messages stream of whole blocks (each start then stop), as the real API sends result blocks."""
    events: list[dict] = [
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": "claude-sonnet-5",
            },
        }
    ]
    for index, block in enumerate(blocks):
        events += [
            {"type": "content_block_start", "index": index, "content_block": block},
            {"type": "content_block_stop", "index": index},
        ]
    events += [
        {"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 9}},
        {"type": "message_stop"},
    ]
    return "".join(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n" for event in events).encode()


async def test_a_search_that_failed_imports_as_an_empty_result_said_in_the_header(tmp_path):
    use = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}}
    failed = {
        "type": "web_search_tool_result",
        "tool_use_id": "srvtoolu_1",
        "content": {"type": "web_search_tool_result_error", "error_code": "max_uses_exceeded"},
    }
    script, text = await imported_script(tmp_path, messages_capture(use, failed, {"type": "text", "text": "No luck."}))
    [call] = hosted_steps(script)
    assert (call.name, call.result) == ("web_search", "[]")
    assert "web_search_tool_result blocks of an error (replayed as an empty result)" in text


async def test_a_call_whose_result_never_came_imports_answered_when_output_follows(tmp_path):
    use = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "code_execution", "input": {"code": "1"}}
    script, text = await imported_script(tmp_path, messages_capture(use, {"type": "text", "text": "Then."}))
    [call] = hosted_steps(script)
    assert call.result == "{}"
    assert "server tool calls without a result block (replayed with an empty one)" in text


@pytest.mark.parametrize("protocol", ["messages", "responses"])
async def test_one_seed_gives_the_same_ids_streamed_or_not(serve, make_gateway, protocol):
    url, scenario = await served(serve, make_gateway, "hosted", HOSTED + OPENAI_ONLY.replace("steps:", ""))
    headers = {**scenario, **SEED}
    path = PROTOCOLS[protocol].PATH
    [whole] = await data_events(url, path, request(protocol, stream=False), headers)
    events = await data_events(url, path, request(protocol), headers)
    if protocol == "messages":
        streamed = [e["content_block"] for e in events if e["type"] == "content_block_start"]
        ids = [
            [block.get("id") or block.get("tool_use_id") for block in blocks] for blocks in (whole["content"], streamed)
        ]
        containers = [whole["container"], next(e["delta"]["container"] for e in events if e["type"] == "message_delta")]
        assert containers[0] == containers[1]
    else:
        [completed] = [e["response"] for e in events if e["type"] == "response.completed"]
        ids = [[item["id"] for item in output] for output in (whole["output"], completed["output"])]
    assert ids[0] == ids[1]


async def test_chunk_splits_the_input_and_the_code_a_call_streams(serve, make_gateway):
    text = (
        "steps:\n  - server_tool: {name: code_execution, input: {code: 'print(6 * 7)'}, result: '42'}\n    chunk: 5\n"
    )
    url, headers = await served(serve, make_gateway, "chunked", text)
    messages = await data_events(url, "/v1/messages", request("messages"), headers)
    pieces = [e["delta"]["partial_json"] for e in messages if e["type"] == "content_block_delta"]
    assert pieces == ['{"cod', 'e":"p', "rint(", "6 * 7", ')"}']
    responses = await data_events(url, "/v1/responses", request("responses"), headers)
    code = [e["delta"] for e in responses if e["type"] == "response.code_interpreter_call_code.delta"]
    assert code == ["print", "(6 * ", "7)"]
    message = await streamed_message(url, headers)
    assert message.content[0].input == {"code": "print(6 * 7)"}
