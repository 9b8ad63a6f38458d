"""Kept timelines: an answer that repeats a timeline gets exactly the one laid out afresh."""

from __future__ import annotations

import textwrap
import tracemalloc

from fakehop.play import player as p
from fakehop.scenario.reader import parse_text


def script(text: str):
    return parse_text(textwrap.dedent(text), "t.yaml", "t").entries[0].script


def fresh(script, request=p.PlayRequest(), scale=1.0) -> list:
    return list(p._Layout(script, request, scale).steps())


def test_a_repeated_timeline_is_the_one_laid_out_afresh():
    paced = script("keepalive: 1s\nsteps: [{text: 'a b c', chunk: word, interval: 700ms}, {delay: 3s}, {text: d}]")
    first, again = list(p.timeline(paced)), list(p.timeline(paced))
    assert first == again == fresh(paced)


def test_kept_timelines_follow_the_request_and_the_time_scale():
    words = script("steps: [{text: 'one two three four', chunk: word, interval: 1s}]")
    for request, scale in [
        (p.PlayRequest(3), 1.0),
        (p.PlayRequest(3, max_output_tokens=1), 1.0),
        (p.PlayRequest(3), 0.5),
    ]:
        assert list(p.timeline(words, request, scale)) == fresh(words, request, scale)


def test_a_timeline_too_long_to_keep_still_plays_whole():
    long = script(f"steps: [{{text: '{'x' * (p.KEPT_HAPPENINGS + 10)}', chunk: char}}]")
    events = list(p.timeline(long))
    assert events == fresh(long)
    assert sum(isinstance(h, p.Delta) for _, h in events) == p.KEPT_HAPPENINGS + 10
    assert list(p.timeline(long)) == events


def test_a_timeline_too_long_to_keep_is_laid_out_as_it_plays():
    long = script(f"steps: [{{text: '{'y' * (p.KEPT_HAPPENINGS + 10)}', chunk: char}}]")
    list(p.timeline(long))  # the first play finds it too long to keep
    tracemalloc.start()
    try:
        events = p.timeline(long)
        next(events)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held < 50_000  # laid out ahead, its first KEPT_HAPPENINGS happenings would hold some 400 KB
    assert [next(events) for _ in range(3)] == fresh(long)[1:4]


def test_kept_timelines_stay_few():
    for number in range(p.KEPT_TIMELINES * 2):
        p.timeline(script(f"steps: [{{text: 'n{number}'}}]"))
    assert len(p._kept_timelines) <= p.KEPT_TIMELINES


def test_kept_values_are_dropped_together_past_their_total_size():
    kept = p.KeptPerScript(entries=10, total_size=100)
    first, second = script("steps: [{text: a}]"), script("steps: [{text: b}]")
    kept.put(first, ("k",), "one", size=60)
    assert kept.get(first, ("k",)) == "one" and kept.get(first, ("other",)) is p.KeptPerScript.MISSING
    kept.put(second, ("k",), "two", size=60)
    assert kept.get(first, ("k",)) is p.KeptPerScript.MISSING
    assert kept.get(second, ("k",)) == "two" and len(kept) == 1
