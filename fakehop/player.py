"""The player: a script and a clock in, a timed stream of protocol-neutral happenings out.

`timeline()` is pure: it lays every happening of a script at its offset in seconds from the
start of the stream (time scale applied, keepalives inserted into every silence longer than
the keepalive interval). `play()` walks a timeline against a clock, handing out the
happenings in batches as they fall due; offsets are absolute, so pauses never drift.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
from dataclasses import dataclass, field
from typing import AsyncIterator, Iterator, NamedTuple, Protocol, Union

from . import scenario as sc

CHARS_PER_TOKEN = 4
MAX_BATCH = 256
EPSILON = 1e-9  # offsets are sums of floats: a keepalive due "at" an event is not before it
# The shortest keepalive interval played, after the time scale: keepalives at most a thousand a
# second, however short the scenario's and small the scale, and their offsets always moving on.
MIN_PLAYED_KEEPALIVE = 0.001

# ---------------------------------------------------------------- happenings


@dataclass(frozen=True, slots=True)
class Start:
    """The stream opens (headers are out)."""

    input_tokens: int


@dataclass(frozen=True, slots=True)
class BlockStart:
    """An output block begins: text, reasoning, or one tool call. `index` counts blocks from 0."""

    kind: str
    index: int
    name: str | None = None
    call_id: str | None = None
    signature: str | None = None  # a reasoning block's own, from the scenario


@dataclass(frozen=True, slots=True)
class Delta:
    """More of the current block: text, reasoning text, or tool-call argument JSON."""

    text: str


@dataclass(frozen=True, slots=True)
class BlockEnd:
    pass


@dataclass(frozen=True, slots=True)
class Keepalive:
    pass


@dataclass(frozen=True, slots=True)
class Failure:
    """An error inside the stream; the stream ends after it."""

    kind: str
    message: str


@dataclass(frozen=True, slots=True)
class Disconnect:
    pass


@dataclass(frozen=True, slots=True)
class Hang:
    pass


@dataclass(frozen=True, slots=True)
class RawBytes:
    data: bytes


@dataclass(frozen=True, slots=True)
class TokenUsage:
    input_tokens: int
    output_tokens: int
    reasoning_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True, slots=True)
class Finish:
    """The stream ends well. `reason`: stop | length | tool_calls | content_filter."""

    reason: str
    usage: TokenUsage


Happening = Union[Start, BlockStart, Delta, BlockEnd, Keepalive, Failure, Disconnect, Hang, RawBytes, Finish]
KEEPALIVE = Keepalive()
BLOCK_END = BlockEnd()

ENDINGS = (Failure, Disconnect, Hang, Finish)

FAIL_MESSAGES = {
    "rate_limit": "Rate limit reached, please retry after a short wait",
    "server_error": "The server had an error while processing your request",
    "invalid_prompt": "Invalid prompt: the request was flagged by the content policy",
    "overloaded": "Overloaded",
    "interrupted": "Response stream interrupted, please retry",
}


class PlayRequest(NamedTuple):
    """What the player needs to know of a request, whatever its protocol.

    A NamedTuple, not a frozen dataclass: one is built for every request and it keys the
    kept timelines and renderings, and a tuple is built and hashed in C."""

    input_tokens: int = 0
    max_output_tokens: int | None = None


def parse_time_scale(text: str) -> float:
    """A time scale: a finite number more than 0; ValueError saying so otherwise."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"expected a number more than 0, got {text!r}")
    return value


def time_scale_from_env(default: float = 1.0) -> float:
    """FAKEHOP_TIME_SCALE, or `default` when it is not set; ValueError naming it when it is not a time scale."""
    value = os.environ.get("FAKEHOP_TIME_SCALE")
    if not value:
        return default
    try:
        return parse_time_scale(value)
    except ValueError as exc:
        raise ValueError(f"FAKEHOP_TIME_SCALE: {exc}") from None


def estimate_tokens(chars: int) -> int:
    return -(-chars // CHARS_PER_TOKEN)


def _format_seconds(seconds: float) -> str:
    return f"{seconds:g}s"


# ---------------------------------------------------------------- the timeline


class _Layout:
    """Lays the steps of one script out in time; see `timeline`."""

    def __init__(self, script: sc.Script, request: PlayRequest, time_scale: float):
        self.script = script
        self.scale = time_scale
        self.keepalive = max(script.keepalive * time_scale, MIN_PLAYED_KEEPALIVE) if script.keepalive > 0 else 0.0
        self.now = 0.0
        self.last_write = 0.0
        self.block: str | None = None  # the kind of the open block
        self.blocks = 0
        self.budget = None if request.max_output_tokens is None else request.max_output_tokens * CHARS_PER_TOKEN
        self.output_chars = 0
        self.reasoning_chars = 0
        self.tool_calls = 0
        self.input_tokens = request.input_tokens if script.usage.input_tokens is None else script.usage.input_tokens

    def at(self, happening: Happening) -> Iterator[tuple[float, Happening]]:
        """`happening` now, after the keepalives the silence before it calls for."""
        if self.keepalive > 0:
            while self.now - self.last_write > self.keepalive + EPSILON:
                self.last_write += self.keepalive
                yield self.last_write, KEEPALIVE
        self.last_write = self.now
        yield self.now, happening

    def wait(self, seconds: float) -> None:
        self.now += seconds * self.scale

    def open_block(self, start: BlockStart) -> Iterator[tuple[float, Happening]]:
        """Start a block, unless the open one is text or reasoning and this is more of it."""
        if self.block == start.kind and start.kind != "tool_call":
            return
        if self.block is not None:
            yield from self.at(BLOCK_END)
        self.block = start.kind
        self.blocks += 1
        yield from self.at(start)

    def close_block(self) -> Iterator[tuple[float, Happening]]:
        if self.block is not None:
            self.block = None
            yield from self.at(BLOCK_END)

    def output(self, step: sc.Output | sc.ToolCall) -> Iterator[tuple[float, Happening]]:
        """Deltas of a text, reasoning or tool-call step. Returns True if the token limit cut it."""
        if isinstance(step, sc.ToolCall):
            self.tool_calls += 1
            yield from self.open_block(BlockStart("tool_call", self.blocks, step.name, step.call_id))
        else:
            yield from self.open_block(BlockStart(step.kind, self.blocks, signature=step.signature))
        for number, text in enumerate(step.deltas):
            if number:
                self.wait(step.interval)
            if self.budget is not None and self.output_chars + len(text) > self.budget:
                text = text[: self.budget - self.output_chars]
                if text:
                    self.count(step, text)
                    yield from self.at(Delta(text))
                return True
            self.count(step, text)
            yield from self.at(Delta(text))
        return False

    def count(self, step, text: str) -> None:
        self.output_chars += len(text)
        if isinstance(step, sc.Output) and step.kind == "reasoning":
            self.reasoning_chars += len(text)

    def finish(self, cut: bool = False) -> Iterator[tuple[float, Happening]]:
        """The good ending; `cut`: the request's token limit ended the output."""
        yield from self.close_block()
        script = self.script
        reason = "length" if cut else script.finish or ("tool_calls" if self.tool_calls else "stop")
        if cut:
            output_tokens = self.budget // CHARS_PER_TOKEN
        elif script.usage.output_tokens is not None:
            output_tokens = script.usage.output_tokens
        else:
            output_tokens = estimate_tokens(self.output_chars)
        usage = TokenUsage(self.input_tokens, output_tokens, min(output_tokens, estimate_tokens(self.reasoning_chars)))
        yield from self.at(Finish(reason, usage))

    def steps(self) -> Iterator[tuple[float, Happening]]:
        yield from self.at(Start(self.input_tokens))
        for step in self.script.steps:
            kind = type(step)
            if kind is sc.Output or kind is sc.ToolCall:
                cut = yield from self.output(step)
                if cut:
                    yield from self.finish(cut=True)
                    return
            elif kind is sc.Delay:
                self.wait(step.seconds)
            elif kind is sc.KeepaliveNow:
                yield from self.at(KEEPALIVE)
            elif kind is sc.Stall:
                self.wait(self.script.stall_timeout)
                if not step.resume:
                    message = f"Stream stalled: no output for {_format_seconds(self.script.stall_timeout)}"
                    yield from self.at(Failure("server_error", message))
                    return
            elif kind is sc.Raw:
                yield from self.at(RawBytes(step.data.encode("utf-8")))
            elif kind is sc.Fail:
                yield from self.at(Failure(step.kind, step.message or FAIL_MESSAGES[step.kind]))
                return
            elif kind is sc.Disconnect:
                yield from self.at(Disconnect())
                return
            elif kind is sc.Hang:
                yield from self.at(Hang())
                return
        yield from self.finish()


def timeline(script: sc.Script, request: PlayRequest = PlayRequest(), time_scale: float = 1.0) -> Iterator[tuple[float, Happening]]:
    """Every happening of `script` with its offset in seconds from the start of the stream.

    A timeline depends on nothing else, so one of up to KEPT_HAPPENINGS is laid out once and
    kept for the next answer with the same script, request facts and time scale (unless the
    script was made for one request, quoting it): under load
    most answers repeat one, and laying it out is most of the player's work per event. A
    longer one is laid out as it plays, and only the first time ahead of it, to find it is
    longer: a stream holds none of its happenings but those it is sending.
    """
    key = (request, time_scale)
    kept = _kept_timelines.get(script, key)
    if kept is _TOO_LONG_TO_KEEP:
        return _Layout(script, request, time_scale).steps()
    if kept is not KeptPerScript.MISSING:
        return iter(kept)
    if script.request_text:  # made for this request alone (see quoting): kept, it would only crowd out the rest
        return _Layout(script, request, time_scale).steps()
    events = _Layout(script, request, time_scale).steps()
    laid_out = tuple(itertools.islice(events, KEPT_HAPPENINGS + 1))
    if len(laid_out) > KEPT_HAPPENINGS:
        _kept_timelines.put(script, key, _TOO_LONG_TO_KEEP)
        return itertools.chain(iter(laid_out), events)
    _kept_timelines.put(script, key, laid_out)
    return iter(laid_out)


class KeptPerScript:
    """What is worked out from a script once, kept for the next answer that asks for the same.

    Entries are keyed by the script's identity and the rest of a key; each holds its script,
    so that no other script can take over its id. All are dropped at once when `entries` or
    `total_size` would be passed: rare, and safe when a thread server and the main thread
    both play.
    """

    MISSING = object()

    def __init__(self, entries: int, total_size: int | None = None):
        self.entries = entries
        self.total_size = total_size
        self.size = 0
        self._kept: dict[tuple, tuple[sc.Script, object]] = {}

    def __len__(self) -> int:
        return len(self._kept)

    def get(self, script: sc.Script, key: tuple):
        """The value kept for `script` and `key`, or MISSING."""
        entry = self._kept.get((id(script), key))
        return entry[1] if entry is not None and entry[0] is script else self.MISSING

    def put(self, script: sc.Script, key: tuple, value, size: int = 0) -> None:
        too_big = self.total_size is not None and self.size + size > self.total_size
        if len(self._kept) >= self.entries or too_big:
            self._kept.clear()
            self.size = 0
        self._kept[(id(script), key)] = (script, value)
        self.size += size


KEPT_HAPPENINGS = 4096
KEPT_TIMELINES = 64
_TOO_LONG_TO_KEEP = object()  # kept in place of a timeline longer than KEPT_HAPPENINGS
_kept_timelines = KeptPerScript(KEPT_TIMELINES)


# ---------------------------------------------------------------- playing against a clock


class Clock(Protocol):
    def now(self) -> float: ...

    async def sleep_until(self, when: float) -> None: ...


class LoopClock:
    """The event loop's monotonic clock."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()

    def now(self) -> float:
        return self._loop.time()

    async def sleep_until(self, when: float) -> None:
        delay = when - self._loop.time()
        if delay > 0:
            await asyncio.sleep(delay)


class InstantClock:
    """A clock on which every pause is already over: for printing a stream without waiting."""

    def now(self) -> float:
        return 0.0

    async def sleep_until(self, when: float) -> None:
        return None


async def play(events: Iterator[tuple[float, Happening]], clock: Clock) -> AsyncIterator[list[Happening]]:
    """Batches of happenings, each handed out once its time has come (late ones together)."""
    start = now = clock.now()
    batch: list[Happening] = []
    for offset, happening in events:
        due = start + offset
        if due > now and due > (now := clock.now()):  # the clock is read only when `now` is not late enough
            if batch:
                yield batch
                batch = []
            await clock.sleep_until(due)
            now = clock.now()
        batch.append(happening)
        if len(batch) >= MAX_BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


# ---------------------------------------------------------------- one answer, collected


@dataclass
class Block:
    kind: str
    text: str = ""
    name: str | None = None
    call_id: str | None = None
    signature: str | None = None


@dataclass
class Outcome:
    """A whole stream gathered up, for the non-streaming answer: `add` takes its happenings a
    batch at a time, so that a long answer is gathered between other clients' turns."""

    blocks: list[Block] = field(default_factory=list)
    ending: Happening | None = None
    _parts: list[str] = field(default_factory=list, repr=False, compare=False)  # the open block's text so far

    @classmethod
    def gather(cls, happenings: list[Happening]) -> "Outcome":
        outcome = cls()
        outcome.add(happenings)
        return outcome

    def add(self, happenings: list[Happening]) -> None:
        for happening in happenings:
            kind = type(happening)
            if kind is Delta:
                self._parts.append(happening.text)
            elif kind is BlockStart:
                self.blocks.append(Block(happening.kind, "", happening.name, happening.call_id, happening.signature))
            elif kind is BlockEnd:
                self.blocks[-1].text = "".join(self._parts)
                self._parts = []
            elif kind in ENDINGS:
                if self._parts and self.blocks:
                    self.blocks[-1].text = "".join(self._parts)
                self.ending = happening
