"""Captured answers written as scenario files, without a server: each bundled scenario's bytes
read back and written out play again as the same facts; pauses, runs of pieces, quoting,
`match` and file names, as the writer's rules say."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict

from fakehop.play import player
from fakehop.protocols import PROTOCOLS
from fakehop.record.capture import CUT, FINISHED, LEFT, AnswerReader, Captured
from fakehop.record.capture.facts import CapturedBlock, Piece, Request
from fakehop.record.writer import Origin, Yaml, file_stem, scenario_text, write_new
from fakehop.scenario.library import Library
from fakehop.scenario.reader import parse_text
from fakehop.server.render import render

from .fidelity_scenarios import with_fidelity

LIBRARY = with_fidelity(Library.load())
UNTIMED = Origin("Imported in a test", datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc), timed=False)
TIMED = Origin("Recorded in a test", datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc))


def captured_from(library: Library, name: str, protocol: str, stream: bool) -> Captured:
    """What a client of `protocol` got from scenario `name`, read back (with no timing) as an
    import reads it: a stream that stops short of its terminal event was cut off."""
    body = dict(PROTOCOLS[protocol].EXAMPLE_REQUEST, stream=stream)
    out = bytearray()
    rendered = asyncio.run(render(library, name, protocol, body, write=out.extend))
    reader = AnswerReader(protocol, rendered.status or 200, rendered.headers, sse=stream and rendered.status == 200)
    reader.feed(bytes(out), None)
    return reader.end(None, CUT if stream or not rendered.status else FINISHED)


def facts(captured: Captured) -> tuple:
    """What a replay must give again: blocks (and their summary parts), raw frames, usage with
    its details, finish and how it ended."""
    parts = [
        (p.kind, [piece.text for piece in p.pieces], p.name, p.call_id, p.signature, p.data, p.phase, p.part_starts)
        if isinstance(p, CapturedBlock)
        else p.text
        for p in captured.parts
    ]
    return (
        parts,
        captured.usage,
        captured.usage_details,
        captured.finish,
        captured.stop_sequence,
        captured.ending,
        captured.failure,
        captured.http_error,
        captured.model,
    )


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("protocol", list(PROTOCOLS))
@pytest.mark.parametrize("name", [name for name in LIBRARY.names() if name != "hang"])
def test_a_written_capture_plays_the_same_facts_again(name, protocol, stream):
    captured = captured_from(LIBRARY, name, protocol, stream)
    text = scenario_text(captured, Request(protocol, "m", "Hello"), UNTIMED)
    written = parse_text(text, "<written>", "written")
    assert facts(captured_from(LIBRARY.with_scenario(written), "written", protocol, stream)) == facts(captured)


# ---------------------------------------------------------------- pauses and runs


def text_answer(times: list[float], ended_at: float | None = None, streamed: bool = True) -> Captured:
    pieces = [Piece(at, "x" * (number % 3 + 1)) for number, at in enumerate(times)]  # split by no `chunk`
    return Captured(
        "chat",
        streamed,
        parts=[CapturedBlock("text", times[0], pieces)],
        ending=FINISHED,
        ended_at=ended_at or times[-1],
    )


def steps_of(captured: Captured, min_gap: float = 0.005) -> list[str]:
    text = scenario_text(captured, None, TIMED, min_gap)
    return text.split("steps:\n", 1)[1].splitlines()


def test_the_wait_before_the_first_token_is_a_delay_and_even_gaps_an_interval():
    times = [0.4, 0.45, 0.5, 0.55, 1.55, 1.6, 1.65]
    assert steps_of(text_answer(times)) == [
        "  - delay: 400ms  # before the first token",
        '  - text: ["x", "xx", "xxx", "x"]',
        "    interval: 50ms",
        "  - delay: 1s",
        '  - text: ["xx", "xxx", "x"]',
        "    interval: 50ms",
    ]


def test_gaps_under_the_minimum_are_dropped_not_saved_up():
    times = [0.001 * number for number in range(40)]  # 1 ms apart: 39 ms in all
    steps = "\n".join(steps_of(text_answer(times, ended_at=0.042)))
    assert steps.startswith('  - text: ["x", "xx", "xxx", "x",') and "delay" not in steps and "interval" not in steps
    assert "    interval: 1ms" in steps_of(text_answer(times, ended_at=0.042), min_gap=0.0005)


def test_a_pause_before_the_end_is_kept():
    assert steps_of(text_answer([0.0], ended_at=2.5)) == ['  - text: "x"', "  - delay: 2.5s"]


def test_a_whole_answer_waits_as_long_as_it_took():
    assert steps_of(text_answer([1.25, 1.25], streamed=False)) == [
        "  - delay: 1.25s  # before the first token",
        '  - text: ["x", "xx"]',
    ]


def timeline_offsets(captured: Captured, min_gap: float) -> list[float]:
    script = parse_text(scenario_text(captured, None, TIMED, min_gap), "<t>", "t").entries[0].script
    assert script is not None
    return [at for at, happening in player.timeline(script) if isinstance(happening, player.Delta)]


@settings(max_examples=200, deadline=None)
@given(gaps=st.lists(st.one_of(st.floats(0, 0.004), st.floats(0.005, 3)), min_size=1, max_size=60))
def test_every_piece_plays_near_when_it_came_less_the_dropped_gaps(gaps):
    """Each piece plays within max(min_gap, a quarter of the largest gap) of its time in the
    capture with the gaps under min_gap taken out; nothing drifts, however many runs."""
    min_gap, times = 0.005, []
    for gap in gaps:
        times.append((times[-1] if times else 0.0) + gap)
    targets = targets_of(times, min_gap)
    slack = max(min_gap, max(gaps) / 4) + 0.001  # and half a millisecond of rounding, twice
    for played, target in zip(timeline_offsets(text_answer(times), min_gap), targets, strict=True):
        assert abs(played - target) <= slack


@settings(max_examples=200, deadline=None)
@given(
    gaps=st.lists(st.one_of(st.floats(0, 0.004), st.floats(0.005, 3)), min_size=1, max_size=40),
    starts=st.sets(st.integers(1, 39)),
)
def test_summary_parts_play_as_they_came_however_the_pauses_fall(gaps, starts):
    """A reasoning block of several summary parts, its pieces in runs wherever the pauses cut
    them: the replay gives each part its own pieces, each piece near when it came."""
    times = list(itertools.accumulate(gaps))
    part_starts = sorted(start for start in starts if start < len(times))
    answer = text_answer(times)
    block = replace(answer.parts[0], kind="reasoning", part_starts=part_starts)
    answer = replace(answer, protocol="responses", parts=[block])
    scenario = parse_text(scenario_text(answer, None, TIMED), "<t>", "t")
    parts, offsets = [[]], []
    for at, happening in player.timeline(scenario.entries[0].script, player.PlayRequest(reasoning="shown")):
        if isinstance(happening, player.NextPart):
            parts.append([])
        elif isinstance(happening, player.Delta):
            parts[-1].append(happening.text)
            offsets.append(at)
    bounds = [0, *part_starts, len(times)]
    assert parts == [[piece.text for piece in block.pieces[start:end]] for start, end in zip(bounds, bounds[1:])]
    assert all(
        abs(played - target) <= max(0.005, max(gaps) / 4) + 0.001
        for played, target in zip(offsets, targets_of(times, 0.005))
    )


def targets_of(times: list[float], min_gap: float) -> list[float]:
    """When each piece should play: at its time in the capture, with the gaps under min_gap taken out."""
    targets = [times[0] if times[0] >= min_gap else 0.0]
    for earlier, later in zip(times, times[1:]):
        targets.append(targets[-1] + (later - earlier if later - earlier >= min_gap else 0.0))
    return targets


def test_keepalives_are_written_as_the_spacing_they_came_at():
    answer = text_answer([0.0])
    answer.keepalive_gaps = [1.0, 1.0, 1.02]
    assert "keepalive: 1s  # as the stream's comment frames came" in scenario_text(answer, None, TIMED)
    answer.keepalive_gaps = [10.01, 9.99]
    assert "keepalive" not in scenario_text(answer, None, TIMED)  # the default
    answer.keepalive_gaps = [0.0001, 0.0002]
    assert "keepalive: 1ms" in scenario_text(answer, None, TIMED)  # the least a scenario takes
    answer.keepalive_gaps, answer.longest_silence = [], 30.0
    assert "keepalive: 0  # 30s of silence with no keepalive" in scenario_text(answer, None, TIMED)


# ---------------------------------------------------------------- values, match and names


@given(st.text())
def test_any_text_is_quoted_so_that_yaml_reads_it_back(text):
    assert parse_text(f"steps: [{{text: {Yaml().string(text)}}}]", "<t>", "t").entries[0].script.steps[0].deltas == (
        text,
    )


@given(st.lists(st.text(), min_size=2, max_size=40))
def test_pieces_wrap_and_read_back(pieces):
    yaml = f"steps:\n  - text: {Yaml().pieces(pieces, indent=4)}\n"
    assert parse_text(yaml, "<t>", "t").entries[0].script.steps[0].deltas == tuple(pieces)


def test_the_match_picks_the_exact_prompt_and_model_only():
    prompt = "What is 1+1? (Answer in [brackets]) $5 ^_^ a.b\\c\nsecond line"
    text = scenario_text(text_answer([0.0]), Request("chat", "gpt-4*", prompt), UNTIMED)
    match = parse_text(text, "<t>", "t").match

    def fits(protocol: str, model: str, asked: str) -> bool:
        return match.fits(
            protocol,
            PROTOCOLS["chat"].parse({"model": model, "messages": [{"role": "user", "content": asked}]}),
            CIMultiDict(),
        )

    assert fits("chat", "gpt-4*", prompt)
    assert not fits("chat", "gpt-4o", prompt)
    assert not fits("chat", "gpt-4*", prompt + " more") and not fits("chat", "gpt-4*", "Q: " + prompt)
    assert not fits("messages", "gpt-4*", prompt)


def test_file_names_come_from_the_protocol_and_the_prompt():
    assert file_stem("chat", "What is the weather in Paris?") == "chat-what-is-the-weather-in-paris"
    assert file_stem("responses", "Ünïcödé ✓") == "responses-n-c-d"
    assert (
        file_stem("messages", "") == "messages-answer"
        and file_stem("chat", "★", fallback="capture 3") == "chat-capture-3"
    )
    long = file_stem("chat", "word " * 40)
    assert len(long) <= 48 and long.startswith("chat-word-word")


def test_a_file_is_never_written_over(tmp_path: Path):
    (tmp_path / "chat-hi-2.yml").write_text("steps: [{text: mine}]\n")
    paths = [write_new(tmp_path, "chat-hi", f"# {number}\n") for number in range(3)]
    assert [path.name for path in paths] == ["chat-hi.yaml", "chat-hi-3.yaml", "chat-hi-4.yaml"]
    assert (tmp_path / "chat-hi-2.yml").read_text() == "steps: [{text: mine}]\n"


def test_usage_details_a_replay_would_not_give_again_are_written():
    """Chat shows no reasoning, so a replay could not count its tokens: the file says them.
    Where the reasoning text is kept, the estimate from it is what came, and is left out."""
    chat = captured_from(LIBRARY, "think-then-tool", "chat", True)
    assert "usage: {input_tokens: 40, output_tokens: 30, reasoning_tokens: 13}" in scenario_text(chat, None, UNTIMED)
    messages = captured_from(LIBRARY, "think-then-tool", "messages", True)
    assert "usage: {input_tokens: 40, output_tokens: 30}" in scenario_text(messages, None, UNTIMED)


def test_captured_reasoning_shows_on_replay_whatever_the_request_asks():
    messages = scenario_text(captured_from(LIBRARY, "think-then-tool", "messages", True), None, UNTIMED)
    assert "force_reasoning: true" in messages
    chat = scenario_text(captured_from(LIBRARY, "think-then-tool", "chat", True), None, UNTIMED)
    assert "force_reasoning" not in chat  # nothing of it was captured


def test_a_client_that_went_away_leaves_a_hang_kept_alive_as_long_as_the_stream_was():
    answer = text_answer([0.0])
    answer.ending, answer.ended_at, answer.last_output_at = LEFT, 3.0, 0.0
    assert steps_of(answer)[-1] == "  - hang  # the client went away here" and "delay" not in "".join(steps_of(answer))
    answer.keepalive_gaps, answer.last_comment_at = [1.0, 1.0], 2.0
    assert steps_of(answer)[-2:] == ["  - delay: 3s", "  - hang  # the client went away here"]
