"""Compaction and the MCP connector: the blocks the stable Anthropic helper drops.

The real Messages API sends a `compaction` block that starts with `content: null` and is
filled by `compaction_delta`s, and an `mcp_tool_use` block whose input comes in
`input_json_delta`s. `client.beta.messages.stream()` keeps both; `client.messages.stream()`
ends with the compaction's content None and the MCP input {}. fakehop sends both, so a test
against it shows which helper a client uses."""

from __future__ import annotations

import base64
import json

from openai.types.responses import ResponseCompactionItem

from fakehop.scenario.model import Compaction, ServerTool

from . import clients
from .hosted_scenarios import answer_bytes, imported_script, request, served, streamed_message
from .inline_scenarios import data_events, problems_of

FORECAST = "Sunny \u2600\ufe0f, then rain \U0001f327\u2028."  # beyond the BMP, and a line separator YAML escapes
SUMMARY = "The user asked for the weather in Paris; it was sunny."
SCENARIO = f"""
steps:
  - compaction: "{SUMMARY}"
  - server_tool:
      name: mcp
      server: weather
      tool: forecast
      input: {{city: Paris, days: 2}}
      result: "Sunny ☀️, then rain 🌧\u2028."
    chunk: 6
  - text: "Sunny, then rain."
"""


async def test_the_beta_helper_keeps_the_compaction_and_the_mcp_call(serve, make_gateway):
    url, headers = await served(serve, make_gateway, "compacted", SCENARIO)
    message = await streamed_message(url, headers, beta=True)
    compaction, use, result, text = message.content
    assert (compaction.type, compaction.content) == ("compaction", SUMMARY)
    assert (use.type, use.server_name, use.name, use.input) == (
        "mcp_tool_use",
        "weather",
        "forecast",
        {"city": "Paris", "days": 2},
    )
    assert use.id.startswith("mcptoolu_01")
    assert (result.type, result.tool_use_id, result.is_error) == ("mcp_tool_result", use.id, False)
    assert [part.text for part in result.content] == [FORECAST]
    assert text.text == "Sunny, then rain."
    assert [(entry.type, entry.output_tokens) for entry in message.usage.iterations or []] == [
        ("compaction", 14),
        ("message", message.usage.output_tokens),
    ]


async def test_the_stable_helper_ends_with_no_summary_and_an_empty_mcp_input(serve, make_gateway):
    url, headers = await served(serve, make_gateway, "compacted", SCENARIO)
    message = await streamed_message(url, headers)
    compaction, use, result, _ = message.content
    assert (compaction.type, getattr(compaction, "content", None)) == ("compaction", None)
    assert (use.type, getattr(use, "input", None)) == ("mcp_tool_use", {})
    assert result.type == "mcp_tool_result"


async def test_the_wire_starts_the_compaction_empty_and_streams_the_mcp_input(serve, make_gateway):
    url, headers = await served(serve, make_gateway, "compacted", SCENARIO)
    events = await data_events(url, "/v1/messages", request("messages"), headers)
    blocks = [e for e in events if e["type"].startswith("content_block")]
    assert blocks[0]["content_block"] == {"type": "compaction", "content": None}
    summary = [e["delta"] for e in blocks if e["index"] == 0 and e["type"] == "content_block_delta"]
    assert summary == [{"type": "compaction_delta", "content": SUMMARY}]
    assert [e["content_block"] for e in blocks if e["index"] == 1 and e["type"] == "content_block_start"][0][
        "input"
    ] == {}
    pieces = [e["delta"]["partial_json"] for e in blocks if e["index"] == 1 and e["type"] == "content_block_delta"]
    assert len(pieces) > 1 and all(len(piece) <= 6 for piece in pieces)
    assert json.loads("".join(pieces)) == {"city": "Paris", "days": 2}
    assert [e["type"] for e in blocks if e["index"] == 2] == ["content_block_start", "content_block_stop"]
    [delta] = [e for e in events if e["type"] == "message_delta"]
    assert [entry["type"] for entry in delta["usage"]["iterations"]] == ["compaction", "message"]


async def test_a_whole_message_holds_the_summary_and_the_input(serve, make_gateway):
    url, headers = await served(serve, make_gateway, "compacted", SCENARIO)
    [message] = await data_events(url, "/v1/messages", request("messages", stream=False), headers)
    assert message["content"][0] == {"type": "compaction", "content": SUMMARY}
    assert message["content"][1]["input"] == {"city": "Paris", "days": 2}
    assert message["usage"]["iterations"][0]["type"] == "compaction"


async def test_responses_give_a_compaction_item_and_an_mcp_call(serve, make_gateway):
    url, headers = await served(serve, make_gateway, "compacted", SCENARIO)
    async with clients.openai_async(base_url=url + "/v1", api_key="sk-test", max_retries=0) as client:
        async with client.responses.stream(model="gpt-5.6-sol", input="Weather?", extra_headers=headers) as stream:
            events = [event.type async for event in stream]
            final = await stream.get_final_response()
    compaction, listed, call, _ = final.output
    assert isinstance(compaction, ResponseCompactionItem) and compaction.id.startswith("cmp_")
    assert compaction.encrypted_content.startswith("gAAAAAB")
    assert base64.b64decode(compaction.encrypted_content.removeprefix("gAAAAAB")).decode() == SUMMARY
    assert (listed.type, listed.server_label, [tool.name for tool in listed.tools]) == (
        "mcp_list_tools",
        "weather",
        ["forecast"],
    )
    assert (call.type, call.server_label, call.name, json.loads(call.arguments), call.output) == (
        "mcp_call",
        "weather",
        "forecast",
        {"city": "Paris", "days": 2},
        FORECAST,
    )
    assert events[2:5] == ["response.output_item.added", "response.compaction.compacting", "response.output_item.done"]


def test_a_compaction_takes_a_string_and_streams_it_whole():
    assert "t.yaml:2: compaction: expected the summary's text as a string, got a mapping" in problems_of(
        "steps:\n  - compaction: {a: 1}\n"
    )
    assert "t.yaml:3: unknown key 'chunk' in a compaction step" in problems_of(
        "steps:\n  - compaction: a b\n    chunk: word\n"
    )


async def test_chat_completions_leave_the_compaction_out(serve, make_gateway):
    url, headers = await served(serve, make_gateway, "compacted", SCENARIO)
    [completion] = await data_events(url, "/v1/chat/completions", request("chat", stream=False), headers)
    assert completion["choices"][0]["message"]["content"] == "Sunny, then rain."


async def test_a_messages_capture_imports_into_the_same_compaction_and_mcp_steps(serve, make_gateway, tmp_path):
    url, headers = await served(serve, make_gateway, "compacted", SCENARIO)
    script, _ = await imported_script(tmp_path, await answer_bytes(url, "messages", request("messages"), headers))
    compaction, call = script.steps[:2]
    assert compaction == Compaction(SUMMARY)
    assert isinstance(call, ServerTool)
    assert (call.name, call.server, call.tool, json.loads(call.input), json.loads(call.result or "null")) == (
        "mcp",
        "weather",
        "forecast",
        {"city": "Paris", "days": 2},
        FORECAST,
    )


async def test_a_responses_capture_imports_its_compaction(serve, make_gateway, tmp_path):
    url, headers = await served(serve, make_gateway, "compacted", SCENARIO)
    script, _ = await imported_script(tmp_path, await answer_bytes(url, "responses", request("responses"), headers))
    assert script.steps[0] == Compaction(SUMMARY)
    assert isinstance(script.steps[1], ServerTool) and script.steps[1].server == "weather"
