"""The journal's count of events written (what a client's SSE parser would see), and its headers as JSON."""

from __future__ import annotations

import json

import pytest
from multidict import CIMultiDict

from fakehop.state import journal as jr
from fakehop.state.journal import joined_headers, sse_events


@pytest.mark.parametrize(
    "data,events",
    [
        (b"", 0),
        (b"data: a\n\n", 1),
        (b": hopbase-keepalive\n\n", 0),
        (b": hopbase-keepalive\n\ndata: a\n\n: hopbase-keepalive\n\n", 1),
        (b"event: x\ndata: {}\n\nevent: y\ndata: {}\n\n: hopbase-keepalive\n\nevent: z\ndata: {}\n\n", 3),
        (b"data: [DONE]\n\n", 1),
    ],
)
def test_sse_events_counts_frames_but_not_comments(data, events):
    assert sse_events(data) == events


def test_repeated_headers_keep_every_value_under_their_first_spelling():
    headers = CIMultiDict([("X-Tag", "a"), ("Accept", "*/*"), ("x-tag", "b"), ("X-TAG", "c")])
    assert joined_headers(headers) == {"X-Tag": "a, b, c", "Accept": "*/*"}
    assert joined_headers({"Authorization": "Bearer k"}) == {"Authorization": "Bearer k"}


def test_a_body_weighs_its_bytes_and_a_value_s_worth_for_each_byte_that_opens_or_parts_values():
    message = {"role": "user", "content": "commas, colons: [brackets] {braces} inside a string count too"}
    raw = json.dumps({"model": "m", "messages": [message] * 40}).encode()
    counted = sum(byte in b",:[{" for byte in raw)
    # the body's { : , : [, each message's { : , : and the four in its text, the 39 commas between them
    assert counted == 5 + 40 * 8 + 39
    assert jr.body_weight(raw) == len(raw) + jr.BYTES_PER_JSON_VALUE * counted
