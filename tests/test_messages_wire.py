"""The bytes fakehop writes on /v1/messages follow the event grammar of Anthropic's streaming API."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fakehop.play import player
from fakehop.protocols import messages
from fakehop.protocols.common import event_frame
from fakehop.scenario import reader as sc
from fakehop.scenario.library import Library
from fakehop.server.render import render, seeded_meta

from .golden_files import raw_frames

LIBRARY = Library.load()
KEEPALIVE = ": hopbase-keepalive"
RAW_FRAMES = raw_frames(LIBRARY)
DELTA_TYPES = {"text": "text_delta", "thinking": "thinking_delta", "tool_use": "input_json_delta"}


def streamed(name: str, **body) -> bytes:
    out = bytearray()
    asyncio.run(render(LIBRARY, name, "messages", dict(messages.EXAMPLE_REQUEST, **body), write=out.extend))
    return bytes(out)


def events_of(wire: bytes) -> list[dict]:
    """The SSE events of a stream, keepalive comments and the scenarios' raw frames left out, checking event == type."""
    events = []
    for frame in wire.decode().split("\n\n")[:-1]:
        if frame == KEEPALIVE or frame in RAW_FRAMES:
            continue
        event_line, data_line = frame.split("\n")
        data = json.loads(data_line.removeprefix("data: "))
        assert event_line.removeprefix("event: ") == data["type"]
        events.append(data)
    return events


EMPTY_STARTS = {"text": {"type": "text", "text": ""}, "thinking": {"type": "thinking", "thinking": "", "signature": ""}}


def check_blocks(events: list[dict]) -> None:
    """Blocks numbered from 0, each start -> deltas of its own type -> stop, all closed before
    message_delta; a block starts with an empty accumulator and a thinking block signs last."""
    index, block = -1, None
    deltas: list[str] = []
    for event in events:
        kind = event["type"]
        if kind == "content_block_start":
            assert block is None and event["index"] == index + 1
            index, block, deltas = event["index"], event["content_block"], []
            if block["type"] == "tool_use":
                assert block["input"] == {} and block["id"] and block["name"]
            else:
                assert block == EMPTY_STARTS[block["type"]]
        elif kind == "content_block_delta":
            assert block is not None and event["index"] == index
            deltas.append(event["delta"]["type"])
        elif kind == "content_block_stop":
            assert block is not None and event["index"] == index
            if block["type"] == "thinking":
                assert deltas[-1] == "signature_delta" and deltas.count("signature_delta") == 1
                deltas = deltas[:-1]
            assert set(deltas) <= {DELTA_TYPES[block["type"]]}
            block = None
        elif kind == "message_delta":
            assert block is None


def answered_by_a_stream(name: str) -> bool:
    script = LIBRARY[name].entries[0].script
    return not LIBRARY[name].is_sequence and script is not None and script.http_error is None


STREAMED = {name: streamed(name) for name in LIBRARY.names() if answered_by_a_stream(name)}


@pytest.mark.parametrize("name", sorted(STREAMED))
def test_event_grammar(name):
    events = events_of(STREAMED[name])
    start = events[0]
    assert start["type"] == "message_start"
    assert start["message"]["content"] == [] and start["message"]["stop_reason"] is None
    assert start["message"]["usage"]["output_tokens"] == 1
    assert [e["type"] for e in events].count("message_start") == 1
    check_blocks(events)
    kinds = [e["type"] for e in events]
    if "content_block_start" in kinds:
        first_block = kinds.index("content_block_start")
        assert kinds[first_block + 1] == "ping" and kinds.count("ping") == 1
    if kinds[-1] == "error":
        assert "message_delta" not in kinds and "message_stop" not in kinds
        assert set(events[-1]) == {"type", "error"} and set(events[-1]["error"]) == {"type", "message"}
    elif kinds[-1] == "message_stop":
        assert kinds[-2] == "message_delta"
        assert events[-2]["delta"]["stop_sequence"] is None
        assert events[-2]["usage"]["output_tokens"] >= 1
    else:
        assert isinstance(LIBRARY[name].entries[0].script.steps[-1], (sc.Disconnect, sc.Hang))


def test_keepalives_are_comment_frames_between_events():
    wire = streamed("stall")
    assert wire.split(b"\n\n").count(b": hopbase-keepalive") == wire.count(b"hopbase-keepalive") == 11
    assert wire.endswith(
        b'event: error\ndata: {"type":"error","error":{"type":"api_error","message":"Stream stalled: no output for 120s"}}\n\n'
    )


def test_raw_bytes_go_out_as_they_are():
    assert b"\n\nevent: content_block_delta\ndata: {not json\n\nevent: content_block_stop\n" in STREAMED["malformed"]


def test_interrupted_ends_with_the_gateway_error_event():
    assert STREAMED["interrupted"].endswith(
        b'event: error\ndata: {"type":"error","error":{"type":"api_error","message":"Response stream interrupted, please retry"}}\n\n'
    )


def test_signature_is_deterministic_base64_from_the_seed():
    wire = streamed("think-then-tool")
    signature = [e for e in events_of(wire) if e.get("delta", {}).get("type") == "signature_delta"][0]["delta"][
        "signature"
    ]
    assert base64.b64decode(signature, validate=True)
    assert streamed("think-then-tool") == wire
    assert messages.signature(seeded_meta(messages.EXAMPLE_REQUEST["model"], 1)) != messages.signature(
        seeded_meta(messages.EXAMPLE_REQUEST["model"], 2)
    )


@pytest.mark.parametrize(
    ("kind", "delta_type", "key"),
    [
        ("text", "text_delta", "text"),
        ("reasoning", "thinking_delta", "thinking"),
        ("tool_call", "input_json_delta", "partial_json"),
    ],
)
@given(text=st.text())
def test_templated_delta_equals_the_whole_event_encoded(kind, delta_type, key, text):
    encoder = messages.StreamEncoder(seeded_meta("m", 0), messages.parse(messages.EXAMPLE_REQUEST))
    encoder.encode(player.BlockStart(kind, 3, "f", "call_1"))
    whole = event_frame(
        "content_block_delta", {"type": "content_block_delta", "index": 3, "delta": {"type": delta_type, key: text}}
    )
    assert encoder.encode(player.Delta(text)) == whole


def test_streamed_and_whole_answers_share_ids_for_one_seed():
    out = bytearray()
    asyncio.run(
        render(LIBRARY, "think-then-tool", "messages", dict(messages.EXAMPLE_REQUEST, stream=False), write=out.extend)
    )
    whole = json.loads(out)
    events = events_of(streamed("think-then-tool"))
    assert whole["id"] == events[0]["message"]["id"]
    assert whole["content"][0]["signature"] == next(
        e["delta"]["signature"]
        for e in events
        if e["type"] == "content_block_delta" and e["delta"]["type"] == "signature_delta"
    )
    assert whole["content"][2]["id"] == next(
        e["content_block"]["id"] for e in events if e["type"] == "content_block_start" and e["index"] == 2
    )


def test_a_scenario_signature_signs_its_thinking_block_streamed_and_whole():
    library = LIBRARY.with_scenario(
        sc.parse_text('steps: [{reasoning: [Hm], signature: "c2lnbmVk"}, {text: ok}]', "<t>", "signed")
    )
    for stream in (True, False):
        out = bytearray()
        asyncio.run(
            render(library, "signed", "messages", dict(messages.EXAMPLE_REQUEST, stream=stream), write=out.extend)
        )
        if stream:
            [signature] = [
                e["delta"]["signature"]
                for e in events_of(bytes(out))
                if e.get("delta", {}).get("type") == "signature_delta"
            ]
        else:
            signature = json.loads(out)["content"][0]["signature"]
        assert signature == "c2lnbmVk"
