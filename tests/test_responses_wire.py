"""The Responses wire format itself: golden streams read frame by frame, templates, request errors."""

from __future__ import annotations

import json

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fakehop.protocols import responses
from fakehop.protocols.common import Template, dumps, event_frame
from fakehop.scenario.library import Library

from .golden_files import GOLDEN_DIR, raw_frames

# The .sse files of scenarios that answer with an HTTP error hold that error's JSON body instead.
GOLDEN_STREAMS = [
    p for p in sorted((GOLDEN_DIR / "responses").glob("*.sse")) if not p.read_text().startswith('{"error":')
]
TERMINAL = {"response.completed", "response.incomplete", "response.failed"}
KEEPALIVE = ": hopbase-keepalive"
RAW_FRAMES = raw_frames(Library.load())


def events_of(path) -> list[dict]:
    """The JSON events of a golden stream, each checked to be framed as the real API frames it."""
    events = []
    for frame in path.read_text().split("\n\n")[:-1]:
        if frame == KEEPALIVE or frame in RAW_FRAMES:
            continue
        event_line, data_line = frame.split("\n")
        event = json.loads(data_line.removeprefix("data: "))
        assert event_line == f"event: {event['type']}"
        assert data_line == "data: " + dumps(event), "not the bytes of a full json.dumps of the event"
        events.append(event)
    return events


@pytest.mark.parametrize("path", GOLDEN_STREAMS, ids=lambda p: p.name)
def test_golden_stream_sequence_numbers_are_contiguous_from_zero(path):
    events = events_of(path)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events[:2]] == ["response.created", "response.in_progress"]


@pytest.mark.parametrize("path", GOLDEN_STREAMS, ids=lambda p: p.name)
def test_golden_stream_items_are_announced_closed_and_collected(path):
    events = events_of(path)
    added = [e for e in events if e["type"] == "response.output_item.added"]
    done = [e for e in events if e["type"] == "response.output_item.done"]
    assert [e["output_index"] for e in added] == list(range(len(added)))
    assert {e["response"]["id"] for e in events if "response" in e} == {events[0]["response"]["id"]}
    terminal = [e for e in events if e["type"] in TERMINAL]
    if not terminal:
        assert path.stem in ("disconnect", "hang")
        return
    assert terminal == [events[-1]]
    output = events[-1]["response"]["output"]
    if events[-1]["type"] != "response.failed":
        assert [e["output_index"] for e in done] == list(range(len(added)))
        assert output == [e["item"] for e in done]
        assert [(i["id"], i["type"]) for i in output] == [(e["item"]["id"], e["item"]["type"]) for e in added]


@pytest.mark.parametrize(
    "path", [p for p in GOLDEN_STREAMS if "event: response.failed" in p.read_text()], ids=lambda p: p.name
)
def test_golden_failure_is_a_nested_error_event_then_response_failed(path):
    error_event, failed = events_of(path)[-2:]
    assert failed["type"] == "response.failed"
    assert list(error_event) == ["type", "sequence_number", "error"]
    assert list(error_event["error"]) == ["type", "code", "message", "param"]
    assert (error_event["error"]["code"], error_event["error"]["message"]) == (
        failed["response"]["error"]["code"],
        failed["response"]["error"]["message"],
    )


def ends_well(path) -> bool:
    return path.read_text().rsplit("event: ", 1)[-1].startswith(("response.completed", "response.incomplete"))


@pytest.mark.parametrize("path", [p for p in GOLDEN_STREAMS if ends_well(p)], ids=lambda p: p.name)
def test_golden_whole_response_equals_the_streamed_final_response(path):
    final = events_of(path)[-1]
    assert json.loads(path.with_suffix(".json").read_text()) == final["response"]


@given(number=st.integers(min_value=0, max_value=10**9), text=st.text())
def test_sequenced_template_gives_the_bytes_of_the_whole_event(number, text):
    def event(sequence_number, delta):
        fields = {"item_id": "msg_1", "output_index": 3, "content_index": 0, "delta": delta, "logprobs": []}
        return event_frame(
            "response.output_text.delta",
            {"type": "response.output_text.delta", "sequence_number": sequence_number, **fields},
        )

    template = responses.SequencedTemplate(event(responses.SequencedTemplate.NUMBER, Template.SLOT))
    assert template.fill(number, text) == event(number, text)


BAD_REQUESTS = [
    ({"input": "Hi"}, "model"),
    ({"model": 5, "input": "Hi"}, "model"),
    ({"model": "m"}, "input"),
    ({"model": "m", "input": {"role": "user"}}, "input"),
    ({"model": "m", "input": ["Hi"]}, "input[0]"),
    ({"model": "m", "input": [{"role": "user", "content": 5}]}, "input[0].content"),
    ({"model": "m", "input": [{"content": "Hi"}]}, "input[0].role"),
    ({"model": "m", "input": [{"role": "user", "content": ["Hi"]}]}, "input[0].content[0]"),
    ({"model": "m", "input": [{"type": 7}]}, "input[0].type"),
    ({"model": "m", "input": "Hi", "stream": "yes"}, "stream"),
    ({"model": "m", "input": "Hi", "max_output_tokens": 0}, "max_output_tokens"),
    ({"model": "m", "input": "Hi", "max_output_tokens": "9"}, "max_output_tokens"),
    ({"model": "m", "input": "Hi", "instructions": ["x"]}, "instructions"),
    ({"model": "m", "input": "Hi", "tools": {}}, "tools"),
    ({"model": "m", "input": "Hi", "reasoning": "high"}, "reasoning"),
    ({"model": "m", "input": "Hi", "parallel_tool_calls": 1}, "parallel_tool_calls"),
    ({"model": "m", "input": "Hi", "temperature": True}, "temperature"),
]


@pytest.mark.parametrize("body, param", BAD_REQUESTS, ids=[f"{i}-{p}" for i, (_, p) in enumerate(BAD_REQUESTS)])
async def test_bad_requests_are_openai_errors_naming_the_parameter(base_url, body, param):
    async with aiohttp.ClientSession() as session:
        async with session.post(base_url + "/v1/responses", json=body) as answer:
            assert answer.status == 400
            error = (await answer.json())["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", param)
    assert f"'{param}'" in error["message"]
