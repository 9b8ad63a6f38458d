"""The player: a script and a clock in, a timed stream of protocol-neutral happenings out.

`timeline()` is pure: it lays every happening of a script at its offset in seconds from the
start of the stream (time scale applied, keepalives inserted into every silence longer than
the keepalive interval). `play()` walks a timeline against a clock, handing out the
happenings in batches as they fall due; offsets are absolute, so pauses never drift.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import math
import os
import random
from collections.abc import AsyncIterator, Generator, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, NamedTuple, Protocol, Union, cast

from ..scenario import model as sc

CHARS_PER_TOKEN = 4
MAX_BATCH = 256
EPSILON = 1e-9  # offsets are sums of floats: a keepalive due "at" an event is not before it
# The shortest keepalive interval played, after the time scale: keepalives at most a thousand a
# second, however short the scenario's and small the scale, and their offsets always moving on.
MIN_PLAYED_KEEPALIVE = 0.001

# ---------------------------------------------------------------- happenings


@dataclass(frozen=True, slots=True)
class Start:
    """The stream opens (headers are out), with what is known of the usage by then."""

    input_tokens: int
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    moderation: sc.Moderation | None = None  # what moderation results flag, for a request that asks for moderation


@dataclass(frozen=True, slots=True)
class BlockStart:
    """An output block begins: text, reasoning, refusal, redacted_thinking, or one tool call.
    `index` counts the blocks the stream shows, from 0; `data` is a redacted_thinking block's,
    `phase` a text block's."""

    kind: str
    index: int
    name: str | None = None
    call_id: str | None = None
    signature: str | None = None  # a reasoning block's own, from the scenario
    data: str | None = None
    phase: str | None = None
    cited: bool = False  # a text block whose first step cites
    caller: str | None = None  # a tool call's: the id of the code execution whose code makes it


@dataclass(frozen=True, slots=True)
class Delta:
    """More of the current block: text, reasoning text, or tool-call argument JSON."""

    text: str


@dataclass(frozen=True, slots=True)
class Cite:
    """A citation of the open text block, once the text it cites has streamed; its offsets are
    the block's, and `text_before` the characters of the text blocks before it (Chat's message
    holds them all)."""

    citation: sc.Citation
    text_before: int


@dataclass(frozen=True, slots=True)
class NextPart:
    """The open reasoning block's next part begins (on Responses, a summary part of its own)."""


@dataclass(frozen=True, slots=True)
class BlockEnd:
    """The current block is over; `cut`: the token limit ended it partway."""

    cut: bool = False


@dataclass(frozen=True, slots=True)
class Keepalive:
    pass


@dataclass(frozen=True, slots=True)
class Failure:
    """An error inside the stream; the stream ends after it. `error_type`, `code` and `param`,
    when set, replace what the kind says; `error_event`: see scenario.Fail; `stated`: False when
    `message` is the kind's default (FAIL_MESSAGES), which a protocol may word its own way."""

    kind: str
    message: str
    error_type: str | None = None
    code: str | None = None
    param: str | None = None
    error_event: bool = True
    stated: bool = True


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
    """The usage an answer reports; the detail counts are what the scenario set, or 0."""

    input_tokens: int
    output_tokens: int
    reasoning_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    input_audio_tokens: int = 0
    output_audio_tokens: int = 0
    accepted_prediction_tokens: int = 0
    rejected_prediction_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True, slots=True)
class HostedCall:
    """A hosted tool the provider ran (a server_tool step), written whole: `index` counts the
    blocks as Messages shows them, where an answered call is two (the call, then its result)."""

    index: int
    tool: sc.ServerTool


@dataclass(frozen=True, slots=True)
class Compacted:
    """A compaction's summary, written whole as one block."""

    index: int
    text: str


@dataclass(frozen=True, slots=True)
class HostedUsage:
    """What an answer's hosted tools and compactions add to its usage: the searches and fetches
    it ran, whether it ran code (in a container), and the output tokens of each compaction."""

    web_search_requests: int = 0
    web_fetch_requests: int = 0
    ran_code: bool = False
    compaction_tokens: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Finish:
    """The stream ends well. `reason`: one of the scenario's FINISH_REASONS, or refusal (the
    answer refused, which the scenario does not set)."""

    reason: str
    usage: TokenUsage
    stop_sequence: str | None = None
    stop_details: sc.StopDetails | None = None  # for the reasons that are refusals, what the scenario says of it
    hosted: HostedUsage | None = None  # None: the answer ran no hosted tool and compacted nothing


REFUSAL_REASONS = ("refusal", "content_filter")
NO_STOP_DETAILS = sc.StopDetails()


Happening = Union[
    Start,
    BlockStart,
    Delta,
    NextPart,
    BlockEnd,
    Keepalive,
    Failure,
    Disconnect,
    Hang,
    RawBytes,
    Finish,
    HostedCall,
    Compacted,
    Cite,
]
KEEPALIVE = Keepalive()
NEXT_PART = NextPart()
BLOCK_END = BlockEnd()
CUT_BLOCK_END = BlockEnd(cut=True)

ENDINGS = (Failure, Disconnect, Hang, Finish)
WHOLE_BLOCKS = {HostedCall: "server_tool", Compacted: "compaction"}  # happenings that are a block each, by kind
# The usage counts a scenario gives as they are (0 when it gives none).
USAGE_DETAILS = (
    "cached_tokens",
    "cache_write_tokens",
    "input_audio_tokens",
    "output_audio_tokens",
    "accepted_prediction_tokens",
    "rejected_prediction_tokens",
)

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
    reasoning: str = "shown"  # one of REASONING_SHOWS
    tool_calls: bool = True  # False: the request's tool_choice is "none", and the scenario's tool calls are left out


# How much of a script's reasoning a request gets to see (PlayRequest.reasoning), as (blocks,
# their text); a reasoning step takes its time whatever is shown, and what is not shown is
# silence, kept alive by keepalives.
REASONING_SHOWS = {
    "shown": (True, True),
    "omitted": (True, False),  # blocks without their text, as the request asked (Messages' display: omitted)
    "summary-unasked": (True, False),  # blocks without their text, which the request did not ask for (Responses)
    "unasked": (False, False),  # no blocks and no reasoning tokens: the request did not enable thinking (Messages)
    "never": (False, False),  # no blocks: the protocol has no place for them (Chat Completions)
}
# What a scenario's force_reasoning makes of what the request did not ask for.
FORCED_REASONING = {"summary-unasked": "shown", "unasked": "shown"}
MERGING_KINDS = (
    "text",
    "reasoning",
    "refusal",
)  # a step of one of these right after another of it (and its phase) continues its block


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


def played_keepalive(script: sc.Script, time_scale: float) -> float:
    """The interval between keepalives in a silence, after the time scale; 0: the script sends none."""
    return max(script.keepalive * time_scale, MIN_PLAYED_KEEPALIVE) if script.keepalive > 0 else 0.0


def stalled(timeout: float) -> Failure:
    """The gateway's error when a stream has written no output for `timeout` seconds (as the scenario says them)."""
    return Failure("server_error", f"Stream stalled: no output for {timeout:g}s")


# ---------------------------------------------------------------- the timeline

Z_99 = 2.3263478740408408  # the standard normal's 99th percentile: a log-normal's p99 is exp(mu + Z_99 sigma)
_FRESH_DRAWS = random.Random()  # the pauses of a timing with no seed, drawn anew for each answer
os.register_at_fork(after_in_child=_FRESH_DRAWS.seed)  # a forked process draws pauses of its own


class _Pauses:
    """The pauses a `timing:` block draws for one answer: the time to the first delta, a
    log-normal fitted to its p50 and p99, and each later paced delta's tokens at the mean
    rate, times a factor drawn evenly within 1 ± jitter."""

    __slots__ = ("draws", "first_token", "jitter", "per_char")

    def __init__(self, timing: sc.Timing):
        self.draws = _FRESH_DRAWS if timing.seed is None else random.Random(timing.seed)
        p50, p99 = timing.first_token_p50, timing.first_token_p99
        self.first_token = (
            None
            if p50 is None or p99 is None
            else self.draws.lognormvariate(math.log(p50), (math.log(p99) - math.log(p50)) / Z_99)
        )
        rate = timing.tokens_per_second
        self.per_char = None if rate is None else 1.0 / (CHARS_PER_TOKEN * rate)
        self.jitter = timing.jitter

    def tokens(self, text: str) -> float:
        """The time the model takes to write `text`."""
        jitter = self.jitter
        spread = self.draws.uniform(1.0 - jitter, 1.0 + jitter) if jitter else 1.0
        return len(text) * cast(float, self.per_char) * spread


class _Layout:
    """Lays the steps of one script out in time; see `timeline`."""

    def __init__(self, script: sc.Script, request: PlayRequest, time_scale: float):
        self.script = script
        self.request = request
        self.scale = time_scale
        self.keepalive = played_keepalive(script, time_scale)
        self.now = 0.0
        self.last_write = 0.0
        self.block: BlockStart | None = None  # the open block
        self.block_has_text = False
        self.block_base = 0  # the characters of output (not reasoning) before the open block
        self.text_before = 0  # the characters of the text blocks before the open block
        self.blocks = 0
        shown = (
            FORCED_REASONING.get(request.reasoning, request.reasoning) if script.force_reasoning else request.reasoning
        )
        self.reasoning_blocks, self.reasoning_text = REASONING_SHOWS[shown]
        self.thinks = (
            shown != "unasked"
        )  # a model asked not to think writes no reasoning: its time passes, its tokens are none
        self.budget = None if request.max_output_tokens is None else request.max_output_tokens * CHARS_PER_TOKEN
        self.output_chars = 0
        self.reasoning_chars = 0
        self.tool_calls = 0
        self.refused = False
        self.hosted: HostedUsage | None = None  # see HostedUsage; None until a hosted step plays
        self.paused = False  # the turn ends on a hosted call without its result (which must be the last output)
        self.input_tokens = request.input_tokens if script.usage.input_tokens is None else script.usage.input_tokens
        self.pauses = None if script.timing is None else _Pauses(script.timing)
        self.outputs = 0  # output steps laid out so far, counted when the script has a timing

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
        """Start a block, unless the open one is of a merging kind and this is more of it."""
        open_block = self.block
        if (
            open_block is not None
            and open_block.kind == start.kind
            and start.kind in MERGING_KINDS
            and open_block.phase == start.phase
        ):
            return
        if open_block is not None:
            if open_block.kind == "text":
                self.text_before += self.output_chars - self.reasoning_chars - self.block_base
            yield from self.at(BLOCK_END)
        self.block = start
        self.block_has_text = False
        self.block_base = self.output_chars - self.reasoning_chars
        self.blocks += 1
        yield from self.at(start)

    def close_block(self, cut: bool = False) -> Iterator[tuple[float, Happening]]:
        if self.block is not None:
            self.block = None
            yield from self.at(CUT_BLOCK_END if cut else BLOCK_END)

    def output(self, step: sc.Output | sc.ToolCall) -> Generator[tuple[float, Happening], None, bool]:
        """Deltas of a text, reasoning or tool-call step, as far as the request shows them; the
        time passes either way. Returns True if the token limit cut it."""
        part_starts: tuple[int, ...]
        citations: tuple[sc.Citation, ...] = ()
        if isinstance(step, sc.ToolCall):
            self.tool_calls += 1
            kind = "custom_tool_call" if step.custom else "tool_call"
            start, part_starts = BlockStart(kind, self.blocks, step.name, step.call_id, caller=step.caller), ()
        else:
            citations = step.citations
            start, part_starts = (
                BlockStart(step.kind, self.blocks, signature=step.signature, phase=step.phase, cited=bool(citations)),
                step.part_starts,
            )
            self.refused = self.refused or step.kind == "refusal"
        reasoning = start.kind == "reasoning"
        shows_text = self.reasoning_text or not reasoning
        pauses = self.pauses
        paced = pauses is not None and self.timed_output(pauses) and step.paced
        if self.reasoning_blocks or not reasoning:
            yield from self.open_block(start)
        waiting = list(citations)  # each goes out once its text has streamed
        base, streamed = self.output_chars - self.reasoning_chars - self.block_base, 0
        for number, text in enumerate(step.deltas):
            if paced:
                if number or self.outputs > 1:  # the answer's first delta comes after the time to it alone
                    self.wait(cast(_Pauses, pauses).tokens(text))
            elif number:
                self.wait(step.interval)
            if reasoning and not self.thinks:
                continue
            cut = self.budget is not None and self.output_chars + len(text) > self.budget
            if cut:
                text = text[: cast(int, self.budget) - self.output_chars]
            self.count(step, text)
            if shows_text and (text or not (cut or reasoning)):  # reasoning shows no empty deltas
                if number in part_starts and self.block_has_text:
                    yield from self.at(NEXT_PART)
                self.block_has_text = True
                yield from self.at(Delta(text))
            if waiting:
                streamed += len(text)
                while waiting and waiting[0].end <= streamed:
                    yield from self.cited(waiting.pop(0), base)
            if cut:
                return True
        return False

    def cited(self, citation: sc.Citation, base: int) -> Iterator[tuple[float, Happening]]:
        """A citation, its offsets moved `base` characters on: to the block's, whose earlier text steps come first."""
        moved = dataclasses.replace(citation, start=citation.start + base, end=citation.end + base)
        yield from self.at(Cite(moved, self.text_before))

    def timed_output(self, pauses: _Pauses) -> bool:
        """Count one more output step, waiting first for the time to the first delta before the
        answer's first; whether the timing paces the deltas."""
        self.outputs += 1
        if pauses.first_token is not None:
            self.wait(pauses.first_token)
            pauses.first_token = None
        return pauses.per_char is not None

    def redacted_thinking(self, step: sc.RedactedThinking) -> Iterator[tuple[float, Happening]]:
        if self.reasoning_blocks:
            yield from self.open_block(BlockStart("redacted_thinking", self.blocks, data=step.data))

    def count(self, step, text: str) -> None:
        self.output_chars += len(text)
        if isinstance(step, sc.Output) and step.kind == "reasoning":
            self.reasoning_chars += len(text)

    def finish(self, cut: bool = False) -> Iterator[tuple[float, Happening]]:
        """The good ending; `cut`: the request's token limit ended the output."""
        yield from self.close_block(cut)
        script = self.script
        reason = "length" if cut else script.finish or self.inferred_finish()
        if cut:
            output_tokens = cast(int, self.budget) // CHARS_PER_TOKEN
        elif script.usage.output_tokens is not None:
            output_tokens = script.usage.output_tokens
        else:
            output_tokens = estimate_tokens(self.output_chars)
        stop_sequence = script.stop_sequence if reason == "stop_sequence" else None
        stop_details = (script.stop_details or NO_STOP_DETAILS) if reason in REFUSAL_REASONS else None
        yield from self.at(Finish(reason, self.usage(output_tokens), stop_sequence, stop_details, self.hosted))

    def inferred_finish(self) -> str:
        """The finish of an answer whose script names none."""
        if self.tool_calls:
            return "tool_calls"
        if self.refused:
            return "refusal"
        return "pause_turn" if self.paused else "stop"

    def usage(self, output_tokens: int) -> TokenUsage:
        given = self.script.usage
        reasoning = (
            min(output_tokens, estimate_tokens(self.reasoning_chars))
            if given.reasoning_tokens is None
            else given.reasoning_tokens
        )
        details = {key: getattr(given, key) or 0 for key in USAGE_DETAILS}
        return TokenUsage(self.input_tokens, output_tokens, reasoning, **details)

    def steps(self) -> Iterator[tuple[float, Happening]]:
        given = self.script.usage
        yield from self.at(
            Start(self.input_tokens, given.cached_tokens or 0, given.cache_write_tokens or 0, self.script.moderation)
        )
        for step in self.script.steps:
            kind = type(step)  # mypy does not narrow `step` on it: the casts below say what it is
            if kind is sc.ToolCall and not self.request.tool_calls:
                continue  # tool_choice "none": the rest of the answer, without its tool calls
            if kind is sc.Output or kind is sc.ToolCall:
                cut = yield from self.output(cast("sc.Output | sc.ToolCall", step))
                if cut:
                    yield from self.finish(cut=True)
                    return
            elif kind is sc.RedactedThinking:
                yield from self.redacted_thinking(cast(sc.RedactedThinking, step))
            elif kind is sc.Delay:
                self.wait(cast(sc.Delay, step).seconds)
                if self.pauses is not None:  # a delay the scenario sets wins over the drawn time to the first delta
                    self.pauses.first_token = None
            elif kind is sc.KeepaliveNow:
                yield from self.at(KEEPALIVE)
            elif kind is sc.Stall:
                self.wait(self.script.stall_timeout)
                if not cast(sc.Stall, step).resume:
                    yield from self.at(stalled(self.script.stall_timeout))
                    return
            elif kind is sc.Raw:
                yield from self.at(RawBytes(cast(sc.Raw, step).data.encode("utf-8")))
            elif kind is sc.Fail:
                step = cast(sc.Fail, step)
                message = step.message or FAIL_MESSAGES[step.kind]
                yield from self.at(
                    Failure(
                        step.kind, message, step.error_type, step.code, step.param, step.error_event, bool(step.message)
                    )
                )
                return
            elif kind is sc.Disconnect:
                yield from self.at(Disconnect())
                return
            elif kind is sc.Hang:
                yield from self.at(Hang())
                return
            elif kind in HOSTED_STEPS:
                yield from getattr(self, HOSTED_STEPS[kind])(step)
        yield from self.finish()

    # -------------------------------------------- hosted tools and compaction

    def server_tool(self, step: sc.ServerTool) -> Iterator[tuple[float, Happening]]:
        yield from self.close_block()
        yield from self.at(HostedCall(self.blocks, step))
        self.blocks += 1 if step.result is None else 2
        self.output_chars += len(step.input)
        self.paused = step.result is None
        ran = step.name if step.result is not None else None  # a call the turn pauses on has not run yet
        hosted = self.hosted or HostedUsage()
        self.hosted = replace(
            hosted,
            web_search_requests=hosted.web_search_requests + (ran == "web_search"),
            web_fetch_requests=hosted.web_fetch_requests + (ran == "web_fetch"),
            ran_code=hosted.ran_code or ran == "code_execution",
        )

    def compaction(self, step: sc.Compaction) -> Iterator[tuple[float, Happening]]:
        yield from self.close_block()
        yield from self.at(Compacted(self.blocks, step.text))
        self.blocks += 1
        hosted = self.hosted or HostedUsage()
        tokens = hosted.compaction_tokens + (estimate_tokens(len(step.text)),)
        self.hosted = replace(hosted, compaction_tokens=tokens)


def timeline(
    script: sc.Script,
    request: PlayRequest = PlayRequest(),  # noqa: B008 - a tuple
    time_scale: float = 1.0,
) -> Iterator[tuple[float, Happening]]:
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
    if script.request_text or drawn_per_answer(script):  # made for this answer alone: kept, it would crowd out the rest
        return _Layout(script, request, time_scale).steps()
    events = _Layout(script, request, time_scale).steps()
    laid_out = tuple(itertools.islice(events, KEPT_HAPPENINGS + 1))
    if len(laid_out) > KEPT_HAPPENINGS:
        _kept_timelines.put(script, key, _TOO_LONG_TO_KEEP)
        return itertools.chain(iter(laid_out), events)
    _kept_timelines.put(script, key, laid_out)
    return iter(laid_out)


def drawn_per_answer(script: sc.Script) -> bool:
    """Whether each answer of `script` takes pauses of its own: a timing with no seed."""
    return script.timing is not None and script.timing.seed is None


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
            self.clear()
        self._kept[(id(script), key)] = (script, value)
        self.size += size

    def clear(self) -> None:
        self._kept.clear()
        self.size = 0


HOSTED_STEPS = {sc.ServerTool: "server_tool", sc.Compaction: "compaction"}  # the _Layout method that plays each
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
    data: str | None = None
    phase: str | None = None
    # the text, as the parts it came in (none for a block with no deltas)
    parts: list[str] = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)  # the text, as the deltas it came in
    citations: tuple[sc.Citation, ...] = ()  # a text block's, with its offsets
    whole: HostedCall | Compacted | None = None  # a block that came whole, as it came
    caller: str | None = None  # as BlockStart's

    def close(self, pieces: list[str]) -> None:
        """The block's last part is `pieces`, and its text is complete."""
        if pieces:
            self.parts.append("".join(pieces))
            self.pieces.extend(pieces)
        self.text = "".join(self.parts)


@dataclass
class Outcome:
    """A whole stream gathered up, for the non-streaming answer: `add` takes its happenings a
    batch at a time, so that a long answer is gathered between other clients' turns."""

    blocks: list[Block] = field(default_factory=list)
    ending: Happening | None = None
    start: Start | None = None
    _pieces: list[str] = field(default_factory=list, repr=False, compare=False)  # the open block's deltas so far

    @classmethod
    def gather(cls, happenings: list[Happening]) -> Outcome:
        outcome = cls()
        outcome.add(happenings)
        return outcome

    def add(self, happenings: list[Happening]) -> None:
        for happening in happenings:
            kind = type(happening)
            if kind is Delta:
                if TYPE_CHECKING:  # kind is type(happening), which mypy does not follow
                    assert isinstance(happening, Delta)
                self._pieces.append(happening.text)
            elif kind is BlockStart:
                if TYPE_CHECKING:
                    assert isinstance(happening, BlockStart)
                self.blocks.append(
                    Block(
                        happening.kind,
                        "",
                        happening.name,
                        happening.call_id,
                        happening.signature,
                        happening.data,
                        happening.phase,
                        caller=happening.caller,
                    )
                )
            elif kind is NextPart:
                self.blocks[-1].parts.append("".join(self._pieces))
                self.blocks[-1].pieces.extend(self._pieces)
                self._pieces = []
            elif kind is BlockEnd:
                self.blocks[-1].close(self._pieces)
                self._pieces = []
            elif kind in ENDINGS:
                if self.blocks:
                    self.blocks[-1].close(self._pieces)
                self.ending = happening
            elif kind is Cite:
                self.blocks[-1].citations += (cast(Cite, happening).citation,)
            elif kind in WHOLE_BLOCKS:
                self.blocks.append(Block(WHOLE_BLOCKS[kind], whole=happening))  # type: ignore[arg-type]
            elif kind is Start:
                if TYPE_CHECKING:
                    assert isinstance(happening, Start)
                self.start = happening
