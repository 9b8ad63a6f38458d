"""`fakehop import`: captured answers of each protocol become scenarios that replay to what
the official SDKs made of the original.

The captures are fakehop's own answers taken with `curl`, streams written by hand as
/work/shared/PROTOCOLS.md describes the real APIs' (errors and parallel tool calls among
them), served byte for byte by a bare handler, and HAR files holding both.

`fakehop import` runs through main() in this process (tests/cli_runs.py), but for one refusal
run as `python -m fakehop import` in a process of its own, for the entry point and its exit status.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from fakehop.cli import main as cli
from fakehop.protocols import PROTOCOLS
from fakehop.record.importer import read_file
from fakehop.record.writer import scenario_text
from fakehop.scenario.library import Library
from fakehop.server.gateway import Gateway

from .agents import QUESTION, RESPONSES_TOOLS, Call, Turn, sdk_loop
from .cli_runs import fakehop_here_async
from .conftest import FAST
from .fidelity_scenarios import FIDELITY, with_fidelity
from .sdk_results import SEED, final_result, request_body

CURLED = [
    "hello",
    "weather-tool",
    "two-tools",
    "think-then-tool",
    "stall-recovers",
    "fail-rate-limit",
    "fail-invalid-prompt",
    "interrupted",
    "disconnect",
    "max-tokens",
    "malformed",
    "rate-limited",
    "server-error",
]
KEY = "sk-har-0123456789abcdef"


async def run(*command: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    stdout, stderr = await process.communicate()
    assert process.returncode is not None  # set once communicate() returns
    return process.returncode, stdout.decode(), stderr.decode()


async def fakehop_import(*files: Path, out: Path) -> dict[str, str]:
    """Runs `fakehop import`; the name of the scenario written from each file (a HAR file's last)."""
    imported = await fakehop_here_async("import", *map(str, files), "--out", str(out))
    assert imported.returncode == 0, imported.stderr
    written = {}
    for line in imported.stdout.splitlines():  # imported FILE -> DIR/NAME.yaml: ...
        source, _, rest = line.removeprefix("imported ").partition(" -> ")
        written[source] = Path(rest.split(":")[0]).stem
    return written


async def replay_server(serve, directory: Path) -> str:
    return await serve(Gateway(Library.load([directory]), time_scale=1.0))


# ---------------------------------------------------------------- fakehop's answers, taken with curl


async def curl(url: str, protocol: str, stream: bool, name: str, path: Path) -> None:
    """`curl -N` for a stream of a bundled scenario (the events alone, as a client printed them),
    `curl -N -i` for a fidelity one's, `curl -i` for a whole answer (status line and headers
    first): an error answer saved without its status line has it read from its body, where a
    type or code of its own cannot tell it."""
    body = json.dumps(request_body(protocol, stream))
    options = (["-N"] + (["-i"] if name in FIDELITY else [])) if stream else ["-i"]
    await run(
        "curl",
        "-s",
        *options,
        url + PROTOCOLS[protocol].PATH,
        "-H",
        f"X-Fakehop-Scenario: {name}",
        "-H",
        "X-Fakehop-Seed: 0",
        "-H",
        "Content-Type: application/json",
        "-d",
        body,
        "-o",
        str(path),
    )


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("protocol", list(PROTOCOLS))
@pytest.mark.parametrize("names", [CURLED, list(FIDELITY)], ids=["bundled", "fidelity"])
async def test_curl_captures_replay_to_the_same_sdk_result(serve, library, tmp_path, names, protocol, stream):
    """The bundled scenarios of CURLED, or every fidelity one, captured at once (none is a
    sequence, whose answer would hang on the order), imported into files that validate."""
    url = await serve(Gateway(with_fidelity(library), time_scale=FAST))
    names = [
        name for name in names if stream or name != "disconnect"
    ]  # a whole answer cut off leaves nothing to capture
    captures = {name: tmp_path / f"{name}.capture" for name in names}
    await asyncio.gather(*(curl(url, protocol, stream, name, path) for name, path in captures.items()))
    written = await fakehop_import(*captures.values(), out=tmp_path / "imported")
    assert cli.main(["validate", str(tmp_path / "imported")]) == 0
    replay_url = await replay_server(serve, tmp_path / "imported")
    for name, path in captures.items():
        original = await final_result(url, protocol, stream, {"X-Fakehop-Scenario": name, **SEED})
        replayed = await final_result(replay_url, protocol, stream, {"X-Fakehop-Scenario": written[str(path)], **SEED})
        assert replayed == original, f"{name}:\n{(tmp_path / 'imported' / (written[str(path)] + '.yaml')).read_text()}"


# ---------------------------------------------------------------- streams written by hand


def data(value: dict) -> str:
    return f"data: {json.dumps(value)}\n\n"


def event(value: dict) -> str:
    return f"event: {value['type']}\ndata: {json.dumps(value)}\n\n"


def chat_chunk(delta: dict, finish: str | None = None) -> str:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    return data(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": "gpt-4o",
            "choices": [choice],
        }
    )


def chat_call(index: int, arguments: str, **first: str) -> str:
    call: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if first:
        call.update(id=first["id"], type="function")
        call["function"]["name"] = first["name"]
    return chat_chunk({"tool_calls": [call]})


CHAT_PARALLEL_CALLS = "".join(
    [  # two calls whose argument fragments interleave, then usage and [DONE]
        chat_chunk({"role": "assistant", "content": "", "refusal": None}),
        chat_chunk({"content": "Checking "}),
        chat_chunk({"content": "both."}),
        chat_call(0, "", id="call_w", name="get_weather"),
        chat_call(1, "", id="call_t", name="get_time"),
        chat_call(0, '{"city":'),
        chat_call(1, '{"tz": "CET"}'),
        chat_call(0, ' "Paris"}'),
        chat_chunk({}, "tool_calls"),
        data(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion.chunk",
                "created": 1700000000,
                "model": "gpt-4o",
                "choices": [],
                "usage": {"prompt_tokens": 9, "completion_tokens": 21, "total_tokens": 30},
            }
        ),
        "data: [DONE]\n\n",
    ]
)
CHAT_ERROR = "".join(
    [
        chat_chunk({"role": "assistant", "content": "", "refusal": None}),
        chat_chunk({"content": "Partial"}),
        ": hopbase-keepalive\n\n",
        data(
            {
                "error": {
                    "message": "Rate limit reached for gpt-4o",
                    "type": "requests",
                    "param": None,
                    "code": "rate_limit_exceeded",
                }
            }
        ),
    ]
)


def response(status: str, output: list, **fields) -> dict:
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1700000000,
        "status": status,
        "model": "gpt-4.1",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "error": None,
        "incomplete_details": None,
        "usage": None,
        **fields,
    }


def responses_events(*events: dict) -> str:
    return "".join(event({**value, "sequence_number": number}) for number, value in enumerate(events))


def function_call(index: int, call_id: str, name: str, pieces: list[str]) -> tuple[list[dict], dict]:
    item = {
        "id": f"fc_{index}",
        "type": "function_call",
        "status": "in_progress",
        "call_id": call_id,
        "name": name,
        "arguments": "",
    }
    done = {**item, "status": "completed", "arguments": "".join(pieces)}
    events = [{"type": "response.output_item.added", "output_index": index, "item": item}]
    events += [
        {"type": "response.function_call_arguments.delta", "item_id": item["id"], "output_index": index, "delta": piece}
        for piece in pieces
    ]
    events += [
        {
            "type": "response.function_call_arguments.done",
            "item_id": item["id"],
            "output_index": index,
            "arguments": done["arguments"],
        },
        {"type": "response.output_item.done", "output_index": index, "item": done},
    ]
    return events, done


def message_item(index: int, pieces: list[str], status: str = "completed") -> tuple[list[dict], dict]:
    part = {"type": "output_text", "text": "".join(pieces), "annotations": []}
    where = {"item_id": f"msg_{index}", "output_index": index, "content_index": 0}
    done = {"id": f"msg_{index}", "type": "message", "status": status, "role": "assistant", "content": [part]}
    events = [
        {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**done, "status": "in_progress", "content": []},
        },
        {"type": "response.content_part.added", **where, "part": {**part, "text": ""}},
    ]
    events += [{"type": "response.output_text.delta", **where, "delta": piece} for piece in pieces]
    events += [
        {"type": "response.output_text.done", **where, "text": part["text"]},
        {"type": "response.content_part.done", **where, "part": part},
        {"type": "response.output_item.done", "output_index": index, "item": done},
    ]
    return events, done


def reasoning_item(text: str) -> tuple[list[dict], dict]:
    where = {"item_id": "rs_0", "output_index": 0, "summary_index": 0}
    done = {"id": "rs_0", "type": "reasoning", "summary": [{"type": "summary_text", "text": text}]}
    return [
        {"type": "response.output_item.added", "output_index": 0, "item": {**done, "summary": []}},
        {"type": "response.reasoning_summary_part.added", **where, "part": {"type": "summary_text", "text": ""}},
        {"type": "response.reasoning_summary_text.delta", **where, "delta": text},
        {"type": "response.reasoning_summary_text.done", **where, "text": text},
        {"type": "response.output_item.done", "output_index": 0, "item": done},
    ], done


def responses_parallel_calls() -> str:
    parts = [
        reasoning_item("Two lookups."),
        message_item(1, ["Checking", " both."]),
        function_call(2, "call_w", "get_weather", ['{"city"', ': "Paris"}']),
        function_call(3, "call_t", "get_time", ["{}"]),
    ]
    usage = {
        "input_tokens": 9,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 30,
        "output_tokens_details": {"reasoning_tokens": 3},
        "total_tokens": 39,
    }
    created = {"type": "response.created", "response": response("in_progress", [])}
    completed = {
        "type": "response.completed",
        "response": response("completed", [done for _, done in parts], usage=usage),
    }
    return responses_events(created, *(e for events, _ in parts for e in events), completed)


def responses_failed() -> str:
    events, item = message_item(0, ["Part", "ial"])
    failed = response(
        "failed",
        [{**item, "status": "in_progress"}],
        error={"code": "server_error", "message": "Upstream model crashed"},
    )
    return responses_events(
        {"type": "response.created", "response": response("in_progress", [])},
        *events[:-3],
        {"type": "response.failed", "response": failed},
    )


def messages_block(index: int, start: dict, deltas: list[dict]) -> list[dict]:
    return (
        [{"type": "content_block_start", "index": index, "content_block": start}]
        + [{"type": "content_block_delta", "index": index, "delta": delta} for delta in deltas]
        + [{"type": "content_block_stop", "index": index}]
    )


def messages_events(*blocks: list[dict], ending: list[dict], usage: dict | None = None) -> str:
    """A message_start (with `usage`, as the input's counts are known by then), the blocks with a ping after the first one's start, `ending`."""
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": "claude-x",
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage or {"input_tokens": 25, "output_tokens": 1},
        },
    }
    first, *rest = blocks or [[]]
    return "".join(
        event(value)
        for value in [start, *first[:1], {"type": "ping"}, *first[1:], *(e for block in rest for e in block), *ending]
    )


def messages_parallel_calls() -> str:
    thinking = messages_block(
        0,
        {"type": "thinking", "thinking": "", "signature": ""},
        [
            {"type": "thinking_delta", "thinking": "Two "},
            {"type": "thinking_delta", "thinking": "lookups."},
            {"type": "signature_delta", "signature": "RXFzaWduYXR1cmU="},
        ],
    )
    text = messages_block(1, {"type": "text", "text": ""}, [{"type": "text_delta", "text": "Checking both."}])
    weather = messages_block(
        2,
        {"type": "tool_use", "id": "toolu_w", "name": "get_weather", "input": {}},
        [
            {"type": "input_json_delta", "partial_json": ""},
            {"type": "input_json_delta", "partial_json": '{"city": '},
            {"type": "input_json_delta", "partial_json": '"Paris"}'},
        ],
    )
    clock = messages_block(
        3,
        {"type": "tool_use", "id": "toolu_t", "name": "get_time", "input": {}},
        [{"type": "input_json_delta", "partial_json": '{"tz": "CET"}'}],
    )
    ending: list[dict] = [
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 40},
        },
        {"type": "message_stop"},
    ]
    return messages_events(thinking, text, weather, clock, ending=ending)


def messages_error() -> str:
    text = messages_block(0, {"type": "text", "text": ""}, [{"type": "text_delta", "text": "Partial"}])[:-1]
    return messages_events(
        text, ending=[{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}]
    )


CHAT_REFUSAL = "".join(
    [  # a refusal, and usage with every detail the real API counts
        chat_chunk({"role": "assistant", "content": None, "refusal": ""}),
        chat_chunk({"refusal": "I can't"}),
        chat_chunk({"refusal": " do that."}),
        chat_chunk({}, "stop"),
        data(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion.chunk",
                "created": 1700000000,
                "model": "gpt-4o",
                "choices": [],
                "usage": {
                    "prompt_tokens": 30,
                    "completion_tokens": 12,
                    "total_tokens": 42,
                    "prompt_tokens_details": {"cached_tokens": 16, "audio_tokens": 4},
                    "completion_tokens_details": {
                        "reasoning_tokens": 0,
                        "audio_tokens": 3,
                        "accepted_prediction_tokens": 2,
                        "rejected_prediction_tokens": 1,
                    },
                },
            }
        ),
        "data: [DONE]\n\n",
    ]
)


def responses_phases() -> str:
    """Two message items in a row, commentary then the final answer, each with its phase."""
    commentary, first = message_item(0, ["Checking", " now."])
    answer, second = message_item(1, ["It is", " sunny."])
    commentary[0]["item"]["phase"] = first["phase"] = "commentary"
    answer[0]["item"]["phase"] = second["phase"] = "final_answer"
    usage = {
        "input_tokens": 9,
        "input_tokens_details": {"cached_tokens": 4, "cache_write_tokens": 5},
        "output_tokens": 6,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 15,
    }
    return responses_events(
        {"type": "response.created", "response": response("in_progress", [])},
        *commentary,
        *answer,
        {"type": "response.completed", "response": response("completed", [first, second], usage=usage)},
    )


def responses_summary_parts() -> str:
    """A reasoning item whose summary came in two parts, then a refusal."""
    where = {"item_id": "rs_0", "output_index": 0}
    parts = ["**Plan** Look.", "**Then** Answer."]
    done = {"id": "rs_0", "type": "reasoning", "summary": [{"type": "summary_text", "text": text} for text in parts]}
    events = [{"type": "response.output_item.added", "output_index": 0, "item": {**done, "summary": []}}]
    for number, text in enumerate(parts):
        part = {**where, "summary_index": number}
        events += [
            {"type": "response.reasoning_summary_part.added", **part, "part": {"type": "summary_text", "text": ""}},
            *(
                {"type": "response.reasoning_summary_text.delta", **part, "delta": piece}
                for piece in (text[:8], text[8:])
            ),  # "**Plan**", " Look."
            {"type": "response.reasoning_summary_text.done", **part, "text": text},
        ]
    refusal = {
        "id": "msg_1",
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "refusal", "refusal": "No."}],
    }
    at = {"item_id": "msg_1", "output_index": 1, "content_index": 0}
    events += [
        {"type": "response.output_item.done", "output_index": 0, "item": done},
        {
            "type": "response.output_item.added",
            "output_index": 1,
            "item": {**refusal, "status": "in_progress", "content": []},
        },
        {"type": "response.content_part.added", **at, "part": {"type": "refusal", "refusal": ""}},
        {"type": "response.refusal.delta", **at, "delta": "No."},
        {"type": "response.refusal.done", **at, "refusal": "No."},
        {"type": "response.output_item.done", "output_index": 1, "item": refusal},
    ]
    usage = {
        "input_tokens": 5,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 8,
        "output_tokens_details": {"reasoning_tokens": 6},
        "total_tokens": 13,
    }
    return responses_events(
        {"type": "response.created", "response": response("in_progress", [])},
        *events,
        {"type": "response.completed", "response": response("completed", [done, refusal], usage=usage)},
    )


def messages_refusal() -> str:
    """Text cut short by a refusal stop, a redacted thinking block before it, and Anthropic's usage with its cache counts
    (message_start's, as the input's are known by then, and message_delta's again)."""
    redacted = messages_block(0, {"type": "redacted_thinking", "data": "RURBVEFEQVRB"}, [])
    text = messages_block(
        1,
        {"type": "text", "text": ""},
        [{"type": "text_delta", "text": "I won't"}, {"type": "text_delta", "text": " go on."}],
    )
    cache = {"input_tokens": 25, "cache_creation_input_tokens": 7, "cache_read_input_tokens": 9}
    start = {
        **cache,
        "cache_creation": {"ephemeral_5m_input_tokens": 7, "ephemeral_1h_input_tokens": 0},
        "output_tokens": 1,
    }
    usage = {**cache, "output_tokens": 11, "output_tokens_details": {"thinking_tokens": 4}}
    ending: list[dict] = [
        {"type": "message_delta", "delta": {"stop_reason": "refusal", "stop_sequence": None}, "usage": usage},
        {"type": "message_stop"},
    ]
    return messages_events(redacted, text, ending=ending, usage=start)


def messages_stop_sequence() -> str:
    text = messages_block(0, {"type": "text", "text": ""}, [{"type": "text_delta", "text": "1, 2, 3"}])
    ending: list[dict] = [
        {
            "type": "message_delta",
            "delta": {"stop_reason": "stop_sequence", "stop_sequence": "###"},
            "usage": {"output_tokens": 5},
        },
        {"type": "message_stop"},
    ]
    return messages_events(text, ending=ending)


HAND_MADE = {
    ("chat", "refusal"): CHAT_REFUSAL,
    ("responses", "phases"): responses_phases(),
    ("responses", "summary-parts"): responses_summary_parts(),
    ("messages", "refusal"): messages_refusal(),
    ("messages", "stop-sequence"): messages_stop_sequence(),
    ("chat", "parallel-calls"): CHAT_PARALLEL_CALLS,
    ("chat", "error"): CHAT_ERROR,
    ("responses", "parallel-calls"): responses_parallel_calls(),
    ("responses", "failed"): responses_failed(),
    ("messages", "parallel-calls"): messages_parallel_calls(),
    ("messages", "error"): messages_error(),
}


@pytest.fixture
async def bare(aiohttp_server):
    """serve_bytes(data, status, headers) -> the URL of a handler that answers every POST with them."""

    async def start(body: bytes, status: int = 200, headers: dict | None = None) -> str:
        async def answer(request: web.Request) -> web.Response:
            return web.Response(body=body, status=status, headers=headers or {"Content-Type": "text/event-stream"})

        app = web.Application()
        app.router.add_post("/{path:.*}", answer)
        server = await aiohttp_server(app)
        return str(server.make_url("")).rstrip("/")

    return start


@pytest.mark.parametrize(("protocol", "name"), list(HAND_MADE))
async def test_hand_made_streams_replay_to_the_same_sdk_result(bare, serve, tmp_path, protocol, name):
    stream = HAND_MADE[protocol, name].encode()
    capture = tmp_path / f"{name}.sse"
    capture.write_bytes(stream)
    written = await fakehop_import(capture, out=tmp_path / "imported")
    original = await final_result(await bare(stream), protocol, True)
    assert HAND_MADE_SHOWS.get(name, lambda result: "error" in result)(original), original
    replayed = await final_result(await replay_server(serve, tmp_path / "imported"), protocol, True)
    assert replayed == original, (tmp_path / "imported" / f"{written[str(capture)]}.yaml").read_text()


HAND_MADE_SHOWS = {  # what the SDKs got from each hand-made stream, that its replay must give again; for the rest, an error
    "parallel-calls": lambda result: (
        len(result.get("tool_calls") or result.get("output") or result.get("content")) >= 2
    ),
    "refusal": lambda result: result.get("refusal") == "I can't do that." or result.get("stop") == "refusal",
    "phases": lambda result: [item[2] for item in result["output"]] == ["commentary", "final_answer"],
    "summary-parts": lambda result: result["output"][0] == ("reasoning", ["**Plan** Look.", "**Then** Answer."]),
    "stop-sequence": lambda result: result["stop_sequence"] == "###",
}


async def test_a_parallel_call_keeps_its_own_fragments_though_they_interleave(tmp_path):
    capture = tmp_path / "calls.sse"
    capture.write_text(CHAT_PARALLEL_CALLS)
    await fakehop_import(capture, out=tmp_path / "out")
    steps = Library.load([tmp_path / "out"], bundled=False)["chat-calls"].entries[0].script.steps
    calls = [(step.call_id, step.name, step.deltas) for step in steps if hasattr(step, "call_id")]
    assert calls == [("call_w", "get_weather", ('{"city":', ' "Paris"}')), ("call_t", "get_time", ('{"tz": "CET"}',))]


def test_what_a_recording_cannot_play_is_said_in_its_header(tmp_path):
    """Events and blocks fakehop has no step for are counted; a nested error event before
    response.failed (the real API's form) is what a `fail` plays, and needs no word."""
    events, _ = message_item(0, ["Hi"])
    capture = tmp_path / "nested.sse"
    capture.write_text(
        responses_events(
            {"type": "response.created", "response": response("in_progress", [])},
            {"type": "response.audio.delta", "delta": "UklGRg=="},
            *events[:-3],
            {
                "type": "error",
                "error": {"type": "server_error", "code": "server_error", "message": "Boom", "param": None},
            },
            {
                "type": "response.failed",
                "response": response("failed", [], error={"code": "server_error", "message": "Boom"}),
            },
        )
    )
    [answer] = read_file(capture)
    text = scenario_text(answer.captured, answer.request, answer.origin)
    assert "# Not kept: 1 response.audio.delta events." in text
    assert "error event" not in text
    assert text.endswith('  - fail: {kind: server_error, message: "Boom"}\n')


def test_response_failed_alone_is_written_as_it_came(tmp_path):
    events, _ = message_item(0, ["Hi"])
    capture = tmp_path / "alone.sse"
    capture.write_text(
        responses_events(
            {"type": "response.created", "response": response("in_progress", [])},
            *events[:-3],
            {
                "type": "response.failed",
                "response": response("failed", [], error={"code": "insufficient_quota", "message": "Pay"}),
            },
        )
    )
    [answer] = read_file(capture)
    text = scenario_text(answer.captured, answer.request, answer.origin)
    assert text.endswith(
        '  - fail: {kind: rate_limit, message: "Pay", code: insufficient_quota, error_event: false}\n'
    )  # a quota error comes with a 429


@pytest.mark.parametrize(
    ("protocol", "error", "written"),
    [
        (
            "chat",
            {
                "message": "Too long",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            },
            '{kind: invalid_prompt, message: "Too long", code: context_length_exceeded, param: messages}',
        ),
        (
            "chat",
            {"message": "Slow down", "type": "tokens", "param": None, "code": "rate_limit_exceeded"},
            '{kind: rate_limit, message: "Slow down", type: tokens}',
        ),
        (
            "chat",
            {"message": "Overloaded", "type": "server_error", "param": None, "code": "server_error"},
            "overloaded",
        ),
        (
            "responses",
            {
                "type": "invalid_request_error",
                "code": "context_length_exceeded",
                "message": "Too long",
                "param": "input",
            },
            '{kind: invalid_prompt, message: "Too long", code: context_length_exceeded, param: input}',
        ),
        (
            "messages",
            {"type": "permission_error", "message": "Not yours"},
            '{kind: invalid_prompt, message: "Not yours", type: permission_error}',
        ),
        (
            "messages",
            {"type": "timeout_error", "message": "Too slow"},
            '{kind: server_error, message: "Too slow", type: timeout_error}',
        ),
        (
            "messages",
            {"type": "overloaded_error", "message": "Overloaded. https://docs.claude.com/en/api/errors"},
            "overloaded",
        ),
        (
            "messages",
            {"type": "overloaded_error", "message": "Overloaded"},
            '{kind: overloaded, message: "Overloaded"}',
        ),
    ],
)
def test_an_errors_kind_is_read_from_its_code_else_its_type(tmp_path, protocol, error, written):
    """A code or type of the kind's own, or one that comes with the kind's status; what is not the kind's is kept."""
    streams = {
        "chat": lambda: chat_chunk({"role": "assistant", "content": "", "refusal": None}) + data({"error": error}),
        "responses": lambda: responses_events(
            {"type": "response.created", "response": response("in_progress", [])}, {"type": "error", "error": error}
        ),
        "messages": lambda: messages_events(ending=[{"type": "error", "error": error}]),
    }
    capture = tmp_path / "error.sse"
    capture.write_text(streams[protocol]())
    [answer] = read_file(capture)
    assert scenario_text(answer.captured, answer.request, answer.origin).endswith(f"  - fail: {written}\n")


# ---------------------------------------------------------------- HAR files


def har_entry(
    protocol: str, stream: bool, status: int, content_type: str, text: str, base64_encoded: bool = False
) -> dict:
    body = request_body(protocol, stream)
    content = {"mimeType": content_type, "text": base64.b64encode(text.encode()).decode() if base64_encoded else text}
    if base64_encoded:
        content["encoding"] = "base64"
    return {
        "startedDateTime": "2026-03-04T05:06:07.089Z",
        "request": {
            "method": "POST",
            "url": f"https://gateway.example{PROTOCOLS[protocol].PATH}?trace=1",
            "headers": [
                {"name": "Authorization", "value": f"Bearer {KEY}"},
                {"name": "Cookie", "value": "sid=har-cookie-value-77"},
            ],
            "postData": {"mimeType": "application/json", "text": json.dumps(body)},
        },
        "response": {
            "status": status,
            "headers": [
                {"name": "Content-Type", "value": content_type},
                {"name": "retry-after", "value": "7"},
                {"name": "x-ratelimit-limit-requests", "value": "60"},
                {"name": "set-cookie", "value": "sid=har-cookie-value-77"},
            ],
            "content": content,
        },
    }


WHOLE_MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-x",
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "content": [
        {"type": "thinking", "thinking": "Hm.", "signature": "c2ln"},
        {"type": "text", "text": "Hi"},
        {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}},
    ],
    "usage": {"input_tokens": 25, "output_tokens": 40},
}
RATE_LIMITED = {
    "error": {"message": f"Slow down, {KEY}", "type": "requests", "param": None, "code": "rate_limit_exceeded"}
}
HAR = {
    "log": {
        "version": "1.2",
        "creator": {"name": "hand", "version": "1"},
        "entries": [
            har_entry("chat", True, 200, "text/event-stream", CHAT_PARALLEL_CALLS),
            har_entry("messages", False, 200, "application/json", json.dumps(WHOLE_MESSAGE), base64_encoded=True),
            har_entry("responses", False, 429, "application/json", json.dumps(RATE_LIMITED)),
            {
                "request": {"method": "GET", "url": "https://gateway.example/v1/models"},
                "response": {"status": 200, "content": {"text": "{}"}},
            },
        ],
    }
}


async def test_a_har_file_imports_each_answer_with_its_request(bare, serve, tmp_path):
    har = tmp_path / "session.har"
    har.write_text(json.dumps(HAR))
    await fakehop_import(har, out=tmp_path / "imported")
    files = sorted((tmp_path / "imported").glob("*.yaml"))
    assert [path.stem for path in files] == ["chat-hello", "messages-hello", "responses-hello"]
    for path in files:
        text = path.read_text()
        assert KEY not in text and "har-cookie-value-77" not in text
        assert (
            "# Imported by `fakehop import` from session.har, entry" in text and "on 2026-03-04 at 05:06:07 UTC" in text
        )
        assert 'prompt: "/^Hello$/"' in text
    assert 'retry_after: "7"' in files[2].read_text() and 'x-ratelimit-limit-requests: "60"' in files[2].read_text()
    replay_url = await replay_server(serve, tmp_path / "imported")
    originals = [
        ("chat", True, await bare(CHAT_PARALLEL_CALLS.encode())),
        (
            "messages",
            False,
            await bare(json.dumps(WHOLE_MESSAGE).encode(), headers={"Content-Type": "application/json"}),
        ),
        ("responses", False, await bare(json.dumps(RATE_LIMITED).encode(), 429, {"Content-Type": "application/json"})),
    ]
    for protocol, stream, url in originals:  # no header: each request finds its answer by its match
        original = await final_result(url, protocol, stream)
        replayed = await final_result(replay_url, protocol, stream)
        if "error" in original:  # the key in the error's message was redacted, as it must be
            original["body"] = json.loads(json.dumps(original["body"]).replace(KEY, "[redacted]"))
        assert replayed == original, protocol


async def posted(session: aiohttp.ClientSession, url: str, body: dict) -> dict:
    async with session.post(url + PROTOCOLS["responses"].PATH, json=body) as response:
        assert response.status == 200, await response.text()
        return await response.json()


def har_of(exchanges: list[tuple[dict, dict]]) -> dict:
    """A HAR file of Responses requests and the whole answers they got, in order."""
    entries = [
        {
            "request": {
                "method": "POST",
                "url": "https://gateway.example/v1/responses",
                "postData": {"text": json.dumps(body)},
            },
            "response": {
                "status": 200,
                "headers": [{"name": "Content-Type", "value": "application/json"}],
                "content": {"text": json.dumps(answer)},
            },
        }
        for body, answer in exchanges
    ]
    return {"log": {"entries": entries}}


async def test_a_chained_har_entry_is_read_in_the_answer_it_continues(serve, library, tmp_path):
    """agent-weather's two turns as a Responses agent chains them: the second entry sends only
    the tool's output and the first answer's id, and imports with turn 2 (and the question as
    its prompt); the same chained loop replays both turns."""
    url = await serve(Gateway(library, default="agent-weather", time_scale=FAST))
    asked = {"model": "gpt-5.6-sol", "input": [{"role": "user", "content": QUESTION}], "tools": RESPONSES_TOOLS}
    async with aiohttp.ClientSession() as session:
        first = await posted(session, url, asked)
        [call] = [item for item in first["output"] if item["type"] == "function_call"]
        output = {"type": "function_call_output", "call_id": call["call_id"], "output": "Rain, 12 °C"}
        chained = {
            "model": "gpt-5.6-sol",
            "input": [output],
            "previous_response_id": first["id"],
            "tools": RESPONSES_TOOLS,
        }
        second = await posted(session, url, chained)
    har = tmp_path / "agent.har"
    har.write_text(json.dumps(har_of([(asked, first), (chained, second)])))
    await fakehop_import(har, out=tmp_path / "imported")
    turn_1, turn_2 = sorted(
        (tmp_path / "imported").glob("*.yaml"), key=lambda path: len(path.stem)
    )  # the second answer's name has -2
    assert "  turn: 1\n" in turn_1.read_text() and "  turn: 2\n  tool_result: true\n" in turn_2.read_text()
    replay = Gateway(Library.load([tmp_path / "imported"]), time_scale=FAST)
    replayed = await sdk_loop(await serve(replay), "responses", {"get_weather": "Rain, 12 °C"}, chain=True)
    assert replayed == (
        Turn("Let me check the weather in Paris.", [Call(call["call_id"], "get_weather", {"city": "Paris"})]),
        Turn("The weather in Paris: Rain, 12 °C.", []),
    )
    assert [(request.turn, request.scenario) for request in replay.journal.since()] == [
        (1, turn_1.stem),
        (2, turn_2.stem),
    ]


def test_an_error_field_a_fail_cannot_write_is_said_in_the_header(tmp_path):
    """A null code has no scenario form (a fail without one writes its kind's): the file says so."""
    capture = tmp_path / "null.sse"
    capture.write_text(
        chat_chunk({"role": "assistant", "content": "", "refusal": None})
        + data({"error": {"message": "The server had an error", "type": "server_error", "param": None, "code": None}})
    )
    [answer] = read_file(capture)
    text = scenario_text(answer.captured, answer.request, answer.origin)
    assert "# Not kept: 1 null error code (replayed as the server_error kind's).\n" in text
    assert text.endswith('  - fail: {kind: server_error, message: "The server had an error"}\n')


# ---------------------------------------------------------------- what cannot be imported


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"", "no event or answer of Chat Completions, Responses or Messages in it"),
        (b"hello\n", "no event or answer"),
        (b'data: {"foo": 1}\n\n', "no event or answer"),
        (
            json.dumps(
                {"log": {"entries": [{"request": {"url": "https://x/v1/embeddings"}, "response": {}}]}}
            ).encode(),
            "a HAR file with no request to",
        ),
        (
            json.dumps({"log": {"entries": [har_entry("chat", True, 200, "text/event-stream", "")]}}).encode(),
            "entry 1: its HTTP 200 answer has no body in the file: nothing of it was kept",
        ),
    ],
)
async def test_a_file_with_no_answer_is_refused_in_one_line(tmp_path, content, says):
    good, bad = tmp_path / "good.sse", tmp_path / "bad.txt"
    good.write_text(CHAT_ERROR)
    bad.write_bytes(content)
    refused = await fakehop_here_async("import", str(good), str(bad), "--out", str(tmp_path / "out"))
    assert refused.returncode == 2
    assert refused.stderr.startswith(f"fakehop: {bad}: {says}") and refused.stderr.count("\n") == 1
    assert not (tmp_path / "out").exists()  # nothing is written when one file cannot be read


async def test_a_missing_file_and_an_out_that_is_a_file_are_refused(tmp_path):
    code, _, stderr = await run(
        sys.executable, "-m", "fakehop", "import", str(tmp_path / "nope.sse"), "--out", str(tmp_path / "out")
    )
    assert (
        code == 2
        and stderr.startswith(f"fakehop: {tmp_path / 'nope.sse'}: cannot be read")
        and "Traceback" not in stderr
    )
    (tmp_path / "capture.sse").write_text(CHAT_ERROR)
    (tmp_path / "taken").write_text("")
    refused = await fakehop_here_async("import", str(tmp_path / "capture.sse"), "--out", str(tmp_path / "taken"))
    assert refused.returncode == 2 and refused.stderr == f"fakehop: --out {tmp_path / 'taken'} is not a directory\n"
