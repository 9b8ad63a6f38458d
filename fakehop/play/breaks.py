"""Breaks: an answer's timeline broken or slowed the way a fault says, whatever the protocol.

The player lays out what a scenario says; a break cuts that timeline after some of its output
deltas (text, reasoning and tool-call argument pieces) and ends it with the same happenings a
scenario's `fail:`, `disconnect`, `stall`, `hang` or `raw` step plays, so every encoder writes
them as it writes those steps. A latency moves the deltas later. Keepalives are laid into every
silence the changes make, at the script's interval.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ..scenario import model as sc
from .player import (
    ENDINGS,
    EPSILON,
    FAIL_MESSAGES,
    KEEPALIVE,
    Delta,
    Disconnect,
    Failure,
    Finish,
    Hang,
    Happening,
    RawBytes,
    Start,
    played_keepalive,
    stalled,
)

__all__ = ["BREAK_KINDS", "Break", "Latency", "broken"]

BREAK_KINDS = ("interrupt", "truncate", "stall", "hang", "malformed")

Timeline = Iterator[tuple[float, Happening]]


@dataclass(frozen=True, slots=True)
class Break:
    """An answer ended early: after `after` output deltas, as `kind` (one of BREAK_KINDS) says.

    `error` and `message`: an interrupt's `fail:` kind and message (None: the kind's own).
    `timeout`: a stall's silence in seconds as the scenario would say them (None: its
    stall_timeout); `resume`: after it, the rest of the answer rather than the stall error.
    `raw`: what a malformed answer writes before it closes."""

    kind: str
    after: int = 1
    error: str = "interrupted"
    message: str | None = None
    timeout: float | None = None
    resume: bool = False
    raw: bytes = b""


@dataclass(frozen=True, slots=True)
class Latency:
    """`first` seconds more before the first delta, `between` more before each later one."""

    first: float = 0.0
    between: float = 0.0


def broken(
    events: Timeline, script: sc.Script, time_scale: float, ending: Break | None, latencies: Sequence[Latency] = ()
) -> Timeline:
    """`events` (the timeline of `script` at `time_scale`) slowed by each of `latencies`, then ended by `ending`."""
    for latency in latencies:
        events = slowed(events, latency.first * time_scale, latency.between * time_scale)
    if ending is not None:
        events = ended(events, ending, script, time_scale)
    interval = played_keepalive(script, time_scale)
    return kept_alive(events, interval) if interval else events


def slowed(events: Timeline, first: float, between: float) -> Timeline:
    shift = 0.0
    deltas = 0
    for offset, happening in events:
        if type(happening) is Delta:
            shift += between if deltas else first
            deltas += 1
        yield offset + shift, happening


def ended(events: Timeline, ending: Break, script: sc.Script, time_scale: float) -> Timeline:
    """The happenings up to the break, then the break's own. The break comes right after the
    `after`-th delta (after the stream's start for none); an answer with fewer deltas breaks
    where it would have ended well, and one the scenario ends otherwise first ends as it says."""
    deltas = 0
    for offset, happening in events:
        kind = type(happening)
        if kind is Finish:
            yield from breaking(offset, ending, script, time_scale, ((offset, happening),))
            return
        yield offset, happening
        if kind in ENDINGS:
            return
        if kind is Delta:
            deltas += 1
        if (kind is Delta and deltas == ending.after) or (kind is Start and ending.after == 0):
            yield from breaking(offset, ending, script, time_scale, events)
            return


def breaking(offset: float, ending: Break, script: sc.Script, time_scale: float, rest) -> Timeline:
    """The happenings that end the answer at `offset`; a stall that resumes plays `rest` after it."""
    kind = ending.kind
    if kind == "interrupt":
        message = ending.message or FAIL_MESSAGES[ending.error]
        yield offset, Failure(ending.error, message, stated=bool(ending.message))
    elif kind == "truncate":
        yield offset, Disconnect()
    elif kind == "hang":
        yield offset, Hang()
    elif kind == "malformed":
        yield offset, RawBytes(ending.raw)
        yield offset, Disconnect()
    else:
        timeout = script.stall_timeout if ending.timeout is None else ending.timeout
        silence = timeout * time_scale
        if not ending.resume:
            yield offset + silence, stalled(timeout)
            return
        for later, happening in rest:
            yield later + silence, happening


def kept_alive(events: Timeline, interval: float) -> Timeline:
    """`events` with a keepalive in every silence longer than `interval`, as the player lays them."""
    last_write = 0.0
    for offset, happening in events:
        while offset - last_write > interval + EPSILON:
            last_write += interval
            yield last_write, KEEPALIVE
        last_write = offset
        yield offset, happening
