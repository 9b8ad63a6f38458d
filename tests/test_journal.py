"""The journal's count of events written: what a client's SSE parser would see."""

from __future__ import annotations

import pytest

from fakehop.journal import sse_events


@pytest.mark.parametrize("data,events", [
    (b"", 0),
    (b"data: a\n\n", 1),
    (b": hopbase-keepalive\n\n", 0),
    (b": hopbase-keepalive\n\ndata: a\n\n: hopbase-keepalive\n\n", 1),
    (b"event: x\ndata: {}\n\nevent: y\ndata: {}\n\n: hopbase-keepalive\n\nevent: z\ndata: {}\n\n", 3),
    (b"data: [DONE]\n\n", 1),
])
def test_sse_events_counts_frames_but_not_comments(data, events):
    assert sse_events(data) == events
