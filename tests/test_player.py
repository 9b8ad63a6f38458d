"""The player lays a script out in time: pure, so checked exactly."""

from __future__ import annotations

import asyncio
import textwrap

from fakehop.play import player as p
from fakehop.scenario import reader as sc
from fakehop.scenario.reader import parse_text


def script(text: str):
    return parse_text(textwrap.dedent(text), "t.yaml", "t").entries[0].script


def laid_out(text: str, request=p.PlayRequest(), scale: float = 1.0):
    return [(round(at, 6), h) for at, h in p.timeline(script(text), request, scale)]


def kinds(events) -> list[str]:
    return [type(h).__name__ for _, h in events]


def test_text_then_finish():
    events = laid_out("steps: [{text: 'a b', chunk: word, interval: 1s}]")
    assert events == [
        (0.0, p.Start(0)),
        (0.0, p.BlockStart("text", 0)),
        (0.0, p.Delta("a")),
        (1.0, p.Delta(" b")),
        (1.0, p.BLOCK_END),
        (1.0, p.Finish("stop", p.TokenUsage(0, 1, 0))),
    ]


def test_keepalives_fill_silence_longer_than_the_interval():
    events = laid_out("keepalive: 2s\nsteps: [{delay: 7s}, {text: x}]")
    assert [at for at, h in events if h is p.KEEPALIVE] == [2.0, 4.0, 6.0]
    assert events[-3][0] == 7.0


def test_no_keepalive_when_output_comes_in_time_or_when_disabled():
    assert p.KEEPALIVE not in [h for _, h in laid_out("keepalive: 2s\nsteps: [{delay: 2s}, {text: x}]")]
    assert p.KEEPALIVE not in [h for _, h in laid_out("keepalive: 0\nsteps: [{delay: 60s}, {text: x}]")]


def test_time_scale_multiplies_every_duration():
    events = laid_out("keepalive: 10s\nsteps: [{delay: 25s}, {text: x}]", scale=0.01)
    assert [at for at, h in events if h is p.KEEPALIVE] == [0.1, 0.2]
    assert events[-1][0] == 0.25


def test_stall_keeps_alive_then_fails_with_its_duration():
    events = laid_out("keepalive: 10s\nstall_timeout: 30s\nsteps: [{text: a}, stall]")
    assert [at for at, h in events if h is p.KEEPALIVE] == [10.0, 20.0]
    assert events[-1] == (30.0, p.Failure("server_error", "Stream stalled: no output for 30s"))


def test_stall_continue_resumes():
    events = laid_out("stall_timeout: 5s\nsteps: [{text: a}, {stall: continue}, {text: b}]")
    assert kinds(events) == ["Start", "BlockStart", "Delta", "Delta", "BlockEnd", "Finish"]
    assert events[3] == (5.0, p.Delta("b"))


def test_blocks_open_and_close_by_kind():
    events = laid_out("""
        steps:
          - reasoning: r
          - text: a
          - delay: 1s
          - text: b
          - tool_call: {name: f}
          - tool_call: {name: g}
    """)
    starts = [h for _, h in events if isinstance(h, p.BlockStart)]
    assert [(s.kind, s.index, s.name) for s in starts] == [
        ("reasoning", 0, None),
        ("text", 1, None),
        ("tool_call", 2, "f"),
        ("tool_call", 3, "g"),
    ]
    assert kinds(events).count("BlockEnd") == 4
    assert events[-1][1].reason == "tool_calls"


def test_endings_stop_the_script():
    """A file cannot hold steps after an ending (see test_scenario); a script made in Python can,
    and the player stops at the ending all the same."""
    text, never = sc.Output("text", ("a",), 0.0), sc.Output("text", ("never",), 0.0)
    for step, ending in [
        (sc.Fail("rate_limit", None), p.Failure),
        (sc.Disconnect(), p.Disconnect),
        (sc.Hang(), p.Hang),
        (sc.Stall(resume=False), p.Failure),
    ]:
        events = list(p.timeline(sc.Script(steps=(text, step, never))))
        assert type(events[-1][1]) is ending
        assert p.Delta("never") not in [h for _, h in events]


def test_fail_has_default_message_and_override():
    assert laid_out("steps: [{fail: interrupted}]")[-1][1].message == "Response stream interrupted, please retry"
    assert laid_out("steps: [{fail: {kind: overloaded, message: busy}}]")[-1][1] == p.Failure("overloaded", "busy")


def test_output_token_limit_cuts_and_finishes_with_length():
    events = laid_out("steps: [{text: 'abcdefghij', chunk: 3}]", p.PlayRequest(max_output_tokens=2))
    deltas = [h.text for _, h in events if isinstance(h, p.Delta)]
    assert "".join(deltas) == "abcdefgh"
    assert events[-1][1] == p.Finish("length", p.TokenUsage(0, 2, 0))


def test_usage_estimated_unless_given():
    finish = laid_out("steps: [{reasoning: '12345678'}, {text: '1234'}]", p.PlayRequest(input_tokens=7))[-1][1]
    assert finish.usage == p.TokenUsage(7, 3, 2)
    given = laid_out(
        "usage: {input_tokens: 1, output_tokens: 2}\nsteps: [{text: long text here}]", p.PlayRequest(input_tokens=7)
    )[-1][1]
    assert given.usage == p.TokenUsage(1, 2, 0)


def test_play_batches_what_is_due_together():
    events = list(p.timeline(script("steps: [{text: 'a b c', chunk: word}, {delay: 1s}, {text: d}]")))

    class FakeClock:
        def __init__(self):
            self.t = 0.0
            self.sleeps = []

        def now(self):
            return self.t

        async def sleep_until(self, when):
            self.sleeps.append(when)
            self.t = when

    clock = FakeClock()

    async def collect():
        return [batch async for batch in p.play(iter(events), clock)]

    batches = asyncio.run(collect())
    assert [len(b) for b in batches] == [5, 3]
    assert clock.sleeps == [1.0]


def test_outcome_gathers_blocks():
    happenings = [
        h
        for _, h in p.timeline(
            script("steps: [{reasoning: r}, {text: 'a b', chunk: word}, {tool_call: {name: f, arguments: {x: 1}}}]")
        )
    ]
    outcome = p.Outcome.gather(happenings)
    assert [(b.kind, b.text, b.name) for b in outcome.blocks] == [
        ("reasoning", "r", None),
        ("text", "a b", None),
        ("tool_call", '{"x":1}', "f"),
    ]
    assert outcome.ending.reason == "tool_calls"


def test_no_keepalive_at_the_moment_of_an_event_despite_float_sums():
    events = laid_out("keepalive: 1s\nstall_timeout: 6s\nsteps: [{text: a}, stall]", scale=0.1)
    assert [at for at, h in events if h is p.KEEPALIVE] == [0.1, 0.2, 0.3, 0.4, 0.5]
