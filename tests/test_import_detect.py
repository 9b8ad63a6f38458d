"""`fakehop import` tells a stream's protocol from its first event that tells, read a piece at a
time: wherever that event falls among the pieces, and whatever follows it."""

from __future__ import annotations

import pytest

from fakehop.record.importer import DETECTED_IN, read_file, stream_protocol

MESSAGE_START = (
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","type":"message",'
    b'"role":"assistant","content":[],"model":"claude-x","stop_reason":null,"stop_sequence":null,'
    b'"usage":{"input_tokens":1,"output_tokens":1}}}\n\n'
)
CHAT_CHUNK = b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[]}\n\n'
PING = b": " + b"p" * 60 + b"\n\n"  # a comment of 64 bytes, which tells nothing


def pings(size: int) -> bytes:
    assert size % len(PING) == 0
    return PING * (size // len(PING))


@pytest.mark.parametrize(
    "before",
    [0, DETECTED_IN - len(PING), DETECTED_IN, 3 * DETECTED_IN],
    ids=["first", "across-the-first-piece-s-end", "at-the-second-piece", "in-the-fourth-piece"],
)
def test_the_first_event_that_tells_is_found_wherever_it_falls(before):
    assert stream_protocol(pings(before) + MESSAGE_START + CHAT_CHUNK) == "messages"
    assert stream_protocol(pings(before) + CHAT_CHUNK + MESSAGE_START) == "chat"


def test_a_stream_with_no_event_that_tells_tells_nothing():
    assert stream_protocol(pings(3 * DETECTED_IN) + b'data: {"x": 1}\n\n') is None


def test_an_event_that_tells_cut_off_at_the_end_still_tells():
    assert stream_protocol(pings(2 * DETECTED_IN) + CHAT_CHUNK.rstrip(b"\n")) == "chat"


def test_a_file_whose_first_event_comes_late_imports_as_its_protocol(tmp_path):
    capture = tmp_path / "late.sse"
    capture.write_bytes(pings(2 * DETECTED_IN - len(PING)) + MESSAGE_START)
    [answer] = read_file(capture)
    assert answer.captured.protocol == "messages"
