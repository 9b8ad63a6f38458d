"""`finish: pause_turn` and `finish: model_context_window_exceeded`: Messages' own stop
reasons, and what Chat Completions and Responses play for them."""

from __future__ import annotations

import pytest
from anthropic.types import MessageParam

from . import clients
from .hosted_scenarios import answer_bytes, imported_script, request, served, streamed_message, validate_problems
from .inline_scenarios import data_events, problems_of

PAUSED = """
steps:
  - text: "Searching."
  - server_tool: {name: web_search, input: {query: "long question"}}
"""
MESSAGES: list[MessageParam] = [{"role": "user", "content": "Hi"}]
FULL = """
finish: model_context_window_exceeded
steps:
  - text: "The context is full"
"""


async def messages_stop(url: str, headers: dict, stream: bool):
    if stream:
        return await streamed_message(url, headers)
    async with clients.anthropic_async(base_url=url, api_key="sk-test", max_retries=0) as client:
        return await client.messages.create(
            model="claude-sonnet-5", max_tokens=1024, messages=MESSAGES, extra_headers=headers
        )


@pytest.mark.parametrize("stream", [True, False])
async def test_a_turn_that_ends_on_an_unanswered_call_pauses(serve, make_gateway, stream):
    url, headers = await served(serve, make_gateway, "paused", PAUSED)
    message = await messages_stop(url, headers, stream)
    assert message.stop_reason == "pause_turn"
    assert [block.type for block in message.content] == ["text", "server_tool_use"]
    assert message.content[-1].input == {"query": "long question"}
    assert message.usage.server_tool_use is None  # the search has not run yet


async def test_pause_turn_written_out_needs_the_unanswered_call(serve, make_gateway):
    url, headers = await served(serve, make_gateway, "paused", "finish: pause_turn\n" + PAUSED)
    events = await data_events(url, "/v1/messages", request("messages"), headers)
    [delta] = [e for e in events if e["type"] == "message_delta"]
    assert delta["delta"]["stop_reason"] == "pause_turn"
    assert [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"] == [
        "text",
        "server_tool_use",
    ]


async def openai_answers(url: str, headers: dict):
    """The whole Chat Completions and Responses answers the SDK makes of the scenario."""
    async with clients.openai_async(base_url=url + "/v1", api_key="sk-test", max_retries=0) as client:
        completion = await client.chat.completions.create(
            model="gpt-5.6-sol", messages=[{"role": "user", "content": "Hi"}], extra_headers=headers
        )
        response = await client.responses.create(model="gpt-5.6-sol", input="Hi", extra_headers=headers)
    return completion, response


async def test_chat_and_responses_end_a_paused_turn_as_a_finished_one(serve, make_gateway):
    url, headers = await served(serve, make_gateway, "paused", PAUSED)
    completion, response = await openai_answers(url, headers)
    assert completion.choices[0].finish_reason == "stop"
    assert response.status == "completed"
    assert [item.type for item in response.output] == ["message", "web_search_call"]
    assert response.output[1].status == "completed" and response.output[1].action.sources == []


async def test_model_context_window_exceeded_in_each_protocol(serve, make_gateway):
    url, headers = await served(serve, make_gateway, "full", FULL)
    message = await messages_stop(url, headers, stream=True)
    assert message.stop_reason == "model_context_window_exceeded"
    completion, response = await openai_answers(url, headers)
    assert completion.choices[0].finish_reason == "length"
    assert response.status == "incomplete"
    assert response.incomplete_details is not None and response.incomplete_details.reason == "max_output_tokens"


def test_pause_turn_without_an_unanswered_call_is_a_problem():
    assert (
        "t.yaml:1: finish: pause_turn goes with a turn that ends on a server_tool call without a result"
        in problems_of("finish: pause_turn\nsteps:\n  - text: hi\n")
    )


def test_an_unanswered_call_before_more_output_is_a_problem(tmp_path):
    path, said = validate_problems(tmp_path, "steps:\n  - server_tool: {name: web_search}\n  - text: more\n")
    assert f"{path}:2: server_tool: a call without a result pauses the turn" in said


async def test_a_paused_capture_imports_and_replays_the_pause(serve, make_gateway, tmp_path):
    url, headers = await served(serve, make_gateway, "paused", PAUSED)
    script, text = await imported_script(tmp_path, await answer_bytes(url, "messages", request("messages"), headers))
    assert "finish:" not in text  # inferred from the unanswered call
    assert script.steps[-1].result is None
    replay_url, replay_headers = await served(serve, make_gateway, "replayed", text)
    assert (await messages_stop(replay_url, replay_headers, stream=True)).stop_reason == "pause_turn"


@pytest.mark.parametrize(
    ("protocol", "finish"), [("messages", "model_context_window_exceeded"), ("responses", "length")]
)
async def test_a_full_context_capture_imports_its_finish(serve, make_gateway, tmp_path, protocol, finish):
    """Responses says only max_output_tokens, which reads back as length."""
    url, headers = await served(serve, make_gateway, "full", FULL)
    script, _ = await imported_script(tmp_path, await answer_bytes(url, protocol, request(protocol), headers))
    assert script.finish == finish


async def test_a_pause_after_text_reads_back_as_an_end_turn_said_in_the_header(tmp_path):
    capture = "".join(
        f"event: {kind}\ndata: {data}\n\n"
        for kind, data in [
            (
                "message_start",
                '{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant",'
                '"content":[],"model":"claude-sonnet-5","stop_reason":null,"usage":{"input_tokens":3,"output_tokens":1}}}',
            ),
            (
                "content_block_start",
                '{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}',
            ),
            (
                "content_block_delta",
                '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}',
            ),
            ("content_block_stop", '{"type":"content_block_stop","index":0}'),
            (
                "message_delta",
                '{"type":"message_delta","delta":{"stop_reason":"pause_turn"},"usage":{"output_tokens":2}}',
            ),
            ("message_stop", '{"type":"message_stop"}'),
        ]
    )
    script, text = await imported_script(tmp_path, capture.encode())
    assert script.finish is None
    assert "pause_turn stops after anything but a server tool call (replayed as end_turn)" in text
