"""Streams encoded once: an answer's bytes kept per script and request, with holes for what differs.

Under load most answers play one script for one kind of request, and differ only in the
values the encoders ask their Meta for: the model, the creation time, ids and signatures. So
the first such answer is encoded with a Meta that hands out markers and notes what was asked;
each write's bytes are kept cut at the markers, and every later answer asks its own
Meta the same questions in the same order (so a seeded Meta gives the ids encoding afresh
would) and fills them in. Laying out the timeline and encoding each event is then done once
instead of per answer; the bytes are the same.

Before a rendering is kept, it is filled with a probe Meta and compared with encoding afresh
under the same Meta; a script whose own text holds a marker is then encoded afresh each time.
"""

from __future__ import annotations

import functools
import itertools
import operator
import os
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from json.encoder import encode_basestring

from ..play import player
from ..protocols.common import Asks, Meta, ParsedRequest
from ..scenario.model import Script
from ..state.journal import sse_events

# A write as the server sends it: when it is due (seconds from the stream's start), its bytes,
# the SSE events in them (journal.sse_events) and the last happening in it.
TimedWrite = tuple[float, bytes, int, player.Happening]

KEPT_RENDERINGS = 64
KEPT_BYTES = 32 * 1024 * 1024  # all kept renderings together
LARGEST_RENDERING = 4 * 1024 * 1024

_MODEL = "m"
_CREATED = "c"
_CREATED_MARK = 7_391_062_845_173
_TIME = 1  # where the time sits among the values a Holes takes
_HOLE = re.compile(rb"\\u0000fakehop:(m|\d{1,9})\\u0000|" + str(_CREATED_MARK).encode())


def _mark(name: str) -> str:
    return f"\x00fakehop:{name}\x00"


class MarkingMeta(Meta):
    """A Meta whose every value is a marker, and which notes the random values asked of it;
    what the bytes take from the model beside its name is the answer's (`like`)."""

    def __init__(self, like: Meta) -> None:
        super().__init__(model=_mark(_MODEL), created=_CREATED_MARK)
        self.system_fingerprint = like.system_fingerprint
        self.asks: list[tuple[str, tuple]] = []

    def _ask(self, method: str, *args) -> str:
        self.asks.append((method, args))
        return _mark(str(len(self.asks)))

    def new_id(self, prefix: str, length: int = 24) -> str:
        return self._ask("new_id", prefix, length)

    def random_base64(self, nbytes: int) -> str:
        return self._ask("random_base64", nbytes)


@dataclass(frozen=True, slots=True)
class Holes:
    """The holes of one frame with the bytes between them, which fill in to one piece of bytes.

    A stream's frames mostly repeat the same holes (a chat chunk's id, time and model): each
    distinct Holes is filled once per answer, and a write is kept as runs of frames with equal
    Holes, each run filled with one `join`.
    """

    indices: tuple[int, ...]  # where each hole's value sits: the model, the time, then each ask's answer
    between: tuple[bytes, ...]
    # The same as one %-format and what it takes from the values: one C call fills it.
    format: bytes = field(init=False, compare=False, repr=False)
    pick: Callable = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        # the time is an int, written by its %d (as b"%d" % time would be, a call fewer); the rest are bytes
        specs = [b"%d" if index == _TIME else b"%b" for index in self.indices]
        literals = [literal.replace(b"%", b"%%") for literal in (*self.between, b"")]
        object.__setattr__(self, "format", b"".join(itertools.chain.from_iterable(zip(specs, literals))))
        # one value is formatted as itself, several as the tuple of them
        object.__setattr__(self, "pick", operator.itemgetter(*self.indices))

    def is_value(self) -> bool:
        """Whether it fills in to one of the values as it is: an id or the model with nothing around it."""
        return len(self.indices) == 1 and self.indices[0] != _TIME


@dataclass(frozen=True, slots=True)
class Write:
    """The frames due at one offset, their SSE event count and the last happening.

    The bytes are, for each run of frames with equal Holes, `h.join(literals)` with `h` those
    holes filled: the first literal is what comes before the run's first holes (the write's
    head, for the first run), each other one what follows a frame's holes. A write with no
    holes is its one literal; a run names its Holes by the place of their filling among
    `Rendering.filled_holes`.
    """

    offset: float
    runs: tuple[tuple[int, tuple[bytes, ...]], ...]
    events: int
    last: player.Happening
    # A write of several runs is filled around its spine, the run with the most literals: the
    # runs before it are joined into the first of its literals, the runs after it into the last,
    # in a copy of a list of its literals kept for that, which is joined with the spine's holes.
    # The literals where the runs meet the spine are joined ahead, once (see _around_spine).
    # Loops, a list copy and four joins: responses bench-short's write 15.4k instructions (one
    # flat list of every run's literals and holes) -> 12.5k, bench-long's 47.4k (comprehensions,
    # the literals sliced and unpacked) -> 36.9k.
    _spine: int = field(init=False, compare=False, repr=False)  # the place of the spine's holes among the filled
    _middle: list = field(init=False, compare=False, repr=False)  # the spine's literals, its first and last None
    _before: tuple[bytes, tuple[tuple[int, tuple[bytes, ...]], ...]] = field(init=False, compare=False, repr=False)
    _after: tuple[bytes, tuple[tuple[int, tuple[bytes, ...]], ...]] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        runs = self.runs
        if len(runs) > 1:
            spine = max(range(len(runs)), key=lambda number: len(runs[number][1]))
            holes, literals = runs[spine]  # a write of several runs has holes in each, so two literals or more
            object.__setattr__(self, "_spine", holes)
            object.__setattr__(self, "_middle", [None, *literals[1:-1], None])
            object.__setattr__(self, "_before", _around_spine(runs[:spine], literals[0], before=True))
            object.__setattr__(self, "_after", _around_spine(runs[spine + 1 :], literals[-1], before=False))

    def fill(self, filled_holes: list) -> bytes:
        runs = self.runs
        if len(runs) == 1:  # most writes
            holes, literals = runs[0]
            return filled_holes[holes].join(literals) if holes >= 0 else literals[0]
        (before, runs_before), (after, runs_after) = self._before, self._after
        for holes, literals in runs_before:
            before += filled_holes[holes].join(literals)
        for holes, literals in runs_after:
            after += filled_holes[holes].join(literals)
        middle = self._middle.copy()
        middle[0], middle[-1] = before, after
        return filled_holes[self._spine].join(middle)

    def size(self) -> int:
        return sum(len(literal) for _, literals in self.runs for literal in literals)


def _around_spine(
    runs: tuple[tuple[int, tuple[bytes, ...]], ...], literal: bytes, before: bool
) -> tuple[bytes, tuple[tuple[int, tuple[bytes, ...]], ...]]:
    """The runs on one side of a write's spine with the spine's `literal` on that side joined onto
    the literal next to it, for Write.fill: the bytes its side starts as (`literal` itself when
    no run is on that side), and the runs."""
    if not runs:
        return literal, ()
    if before:
        *others, (holes, literals) = runs
        return b"", (*others, (holes, (*literals[:-1], literals[-1] + literal)))
    (holes, literals), *others = runs
    return b"", ((holes, (literal + literals[0], *literals[1:])), *others)


@dataclass(frozen=True, slots=True)
class Rendering:
    writes: tuple[Write, ...]
    holes: tuple[Holes, ...]  # each distinct Holes of the writes once, in the order of their first frames
    asks: Asks
    # the format and the pick of each Holes that is not a value as it is (see filled_places), in order
    _formats: tuple[tuple[bytes, Callable], ...] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        formats = tuple((holes.format, holes.pick) for holes in self.holes if not holes.is_value())
        object.__setattr__(self, "_formats", formats)

    def filled_holes(self, meta: Meta) -> list:
        """The values for `meta`, the random ones drawn here in the encoders' order, then every
        Holes that is not one of them filled: what `Write.fill` takes (see filled_places). A
        Holes that is a value as it is (the id of each of a Responses answer's output items)
        costs no %-format (a Responses answer filled 20.7k instructions -> 15.1k)."""
        filled = [_inside_json_string(meta.model), meta.created, *self.asks.answers(meta)]
        for format, pick in self._formats:  # a loop, not a comprehension: one Python frame fewer
            filled.append(format % pick(filled))
        return filled

    def writes_for(self, meta: Meta) -> Iterator[TimedWrite]:
        """The writes filled for `meta`, each when it is read; an answer of one write (most of them) at once."""
        filled = self.filled_holes(meta)
        writes = self.writes
        if len(writes) == 1:
            write = writes[0]
            return iter(((write.offset, write.fill(filled), write.events, write.last),))
        return ((write.offset, write.fill(filled), write.events, write.last) for write in writes)

    def size(self) -> int:
        return sum(write.size() for write in self.writes)

    def fillable(self) -> bool:
        """Whether every hole names a value there is: a marker that came in with the request
        (a client's text may look like one) names one past the asks."""
        values = 2 + len(self.asks)
        return all(index < values for holes in self.holes for index in holes.indices)


def filled_places(holes: tuple[Holes, ...], values: int) -> dict[Holes | None, int]:
    """Where the filling of each of `holes` sits in Rendering.filled_holes: a Holes that is one
    value as it is sits at that value's place; the others follow the `values`, in order. No
    holes: -1."""
    formatted = [each for each in holes if not each.is_value()]
    places: dict[Holes | None, int] = {None: -1}
    places.update((each, values + number) for number, each in enumerate(formatted))
    places.update((each, each.indices[0]) for each in holes if each.is_value())
    return places


@functools.lru_cache(maxsize=256)  # most answers name one of a few models; a model has at most intake.MAX_MODEL_CHARS
def _inside_json_string(text: str) -> bytes:
    """`text` as it is written inside a JSON string, in UTF-8."""
    return encode_basestring(text)[1:-1].encode()


def _value_index(hole: bytes | None) -> int:
    """Where a marker's value sits among the model, the time and the asks' answers (the time's marker has no name)."""
    if hole is None:
        return _TIME
    return 0 if hole == _MODEL.encode() else 1 + int(hole)


def _runs(data: bytes) -> list[tuple[Holes | None, tuple[bytes, ...]]]:
    """`data` as runs of equal Holes (see Write); bytes with no holes as one run with None."""
    matches = list(_HOLE.finditer(data))
    if not matches:
        return [(None, (data,))]
    frames = [[matches[0]]]  # the markers of each frame: none of the bytes between them ends a frame
    for before, match in zip(matches, matches[1:]):
        if b"\n\n" in data[before.end() : match.start()]:
            frames.append([match])
        else:
            frames[-1].append(match)
    holes = [
        Holes(
            tuple(_value_index(m.group(1)) for m in marks),
            tuple(data[a.end() : b.start()] for a, b in zip(marks, marks[1:])),
        )
        for marks in frames
    ]
    after = [data[marks[-1].end() : following[0].start()] for marks, following in zip(frames, frames[1:])] + [
        data[frames[-1][-1].end() :]
    ]
    runs: list[tuple[Holes, list[bytes]]] = []
    for frame_holes, literal in zip(holes, after):
        if runs and runs[-1][0] == frame_holes:
            runs[-1][1].append(literal)
        else:
            runs.append((frame_holes, [b"", literal]))
    runs[0][1][0] = data[: matches[0].start()]
    return [(frame_holes, tuple(literals)) for frame_holes, literals in runs]


def stream_writes(
    protocol, script: Script, parsed: ParsedRequest, meta: Meta, time_scale: float
) -> Iterator[TimedWrite]:
    """The writes of one streamed answer: filled in from the kept rendering, or encoded afresh
    when there is none."""
    rendering = kept(protocol, script, parsed, meta, time_scale)
    if rendering is not None:
        return rendering.writes_for(meta)
    if player.drawn_per_answer(script) and not script.request_text:
        return retimed_writes(protocol, script, parsed, meta, time_scale)
    return encoded_writes(protocol, meta, parsed, player.timeline(script, parsed.play, time_scale))


def retimed_writes(
    protocol, script: Script, parsed: ParsedRequest, meta: Meta, time_scale: float
) -> Iterator[TimedWrite]:
    """The writes of an answer whose pauses each answer draws (a timing with no seed): the kept
    bytes of the first such answer, at the offsets of this one's own timeline, when the two
    batch their happenings alike; encoded afresh when they do not (keepalives filled the
    silences of one differently) or the answer is too long to keep."""
    events = player.timeline(script, parsed.play, time_scale)
    laid_out = tuple(itertools.islice(events, player.KEPT_HAPPENINGS + 1))
    if len(laid_out) > player.KEPT_HAPPENINGS or len(parsed.variant) > LARGEST_RENDERING:
        return encoded_writes(protocol, meta, parsed, itertools.chain(laid_out, events))
    offsets, shape = _batches(laid_out)
    key = (protocol.NAME, parsed.play, parsed.variant, meta.system_fingerprint, time_scale)
    first = _retimed.get(script, key)
    if first is player.KeptPerScript.MISSING:
        rendering = rendered(protocol, parsed, meta, laid_out)
        first = None if rendering is None else (rendering, shape)
        _retimed.put(script, key, first, kept_bytes(parsed, rendering))
    if first is None or first[1] != shape:
        return encoded_writes(protocol, meta, parsed, laid_out)
    return ((offset, data, events, last) for offset, (_, data, events, last) in zip(offsets, first[0].writes_for(meta)))


def _batches(events: tuple[tuple[float, player.Happening], ...]) -> tuple[list[float], tuple]:
    """The offset of each write encoded_writes makes of `events`, and their shape: how many
    happenings each write holds, and where among them the keepalives are (the rest are the
    same in every answer of one script and request, whatever was drawn)."""
    offsets: list[float] = []
    sizes: list[int] = []
    keepalives = []
    count = 0
    for number, (offset, happening) in enumerate(events):
        if count and (offset != offsets[-1] or count >= player.MAX_BATCH):
            sizes.append(count)
            count = 0
        if not count:
            offsets.append(offset)
        count += 1
        if type(happening) is player.Keepalive:
            keepalives.append(number)
    sizes.append(count)
    return offsets, (tuple(sizes), tuple(keepalives))


def encoded_writes(protocol, meta: Meta, parsed: ParsedRequest, events) -> Iterator[TimedWrite]:
    """The timeline encoded afresh as it is read: the happenings due at one offset, at most
    MAX_BATCH of them, make one write."""
    encoder = protocol.StreamEncoder(meta, parsed)
    batch: list[player.Happening] = []
    batch_offset = 0.0
    for offset, happening in events:
        if batch and (offset != batch_offset or len(batch) >= player.MAX_BATCH):
            yield _encoded(encoder, batch_offset, batch)
            batch = []
        batch_offset = offset
        batch.append(happening)
    if batch:
        yield _encoded(encoder, batch_offset, batch)


def _encoded(encoder, offset: float, happenings: list[player.Happening]) -> TimedWrite:
    data = b"".join([encoder.encode(happening) for happening in happenings])
    return offset, data, sse_events(data), happenings[-1]


def _probe_meta(like: Meta) -> Meta:
    probe = Meta(model='probe "model" \\ é\x01', created=1_234_567_890, rng=random.Random(20261130))
    probe.system_fingerprint = like.system_fingerprint
    return probe


def render(protocol, script: Script, parsed: ParsedRequest, meta: Meta, time_scale: float) -> Rendering | None:
    """The kept form of this answer (`meta`'s, whose values become holes), or None when it is
    too long to keep or not fillable."""
    events = player.timeline(script, parsed.play, time_scale)
    laid_out = tuple(itertools.islice(events, player.KEPT_HAPPENINGS + 1))
    if len(laid_out) > player.KEPT_HAPPENINGS:
        return None
    return rendered(protocol, parsed, meta, laid_out)


def rendered(
    protocol, parsed: ParsedRequest, meta: Meta, laid_out: tuple[tuple[float, player.Happening], ...]
) -> Rendering | None:
    """The kept form of the answer of these happenings; None when it is too large or not fillable."""
    marking = MarkingMeta(meta)
    encoded = [
        (offset, _runs(data), event_count, last)
        for offset, data, event_count, last in encoded_writes(protocol, marking, parsed, laid_out)
    ]
    holes = tuple(
        dict.fromkeys(frame_holes for _, runs, _, _ in encoded for frame_holes, _ in runs if frame_holes is not None)
    )
    asks = Asks(tuple(marking.asks))
    places = filled_places(holes, 2 + len(asks))
    writes = tuple(
        Write(offset, tuple((places[frame_holes], literals) for frame_holes, literals in runs), count, last)
        for offset, runs, count, last in encoded
    )
    rendering = Rendering(writes, holes, asks)
    if rendering.size() > LARGEST_RENDERING or not rendering.fillable():
        return None
    expected = [data for _, data, _, _ in encoded_writes(protocol, _probe_meta(meta), parsed, laid_out)]
    filled = rendering.filled_holes(_probe_meta(meta))
    if [write.fill(filled) for write in rendering.writes] != expected:
        return None
    return rendering


def kept(protocol, script: Script, parsed: ParsedRequest, meta: Meta, time_scale: float) -> Rendering | None:
    """The rendering for this script and request, made on first use and kept; None: encode afresh."""
    if len(parsed.variant) > LARGEST_RENDERING:  # the fields it stands for are in the stream: too long to keep
        return None
    key = (protocol.NAME, parsed.play, parsed.variant, meta.system_fingerprint, time_scale)
    rendering = _kept.get(script, key)
    if rendering is player.KeptPerScript.MISSING:
        if script.request_text or player.drawn_per_answer(script):  # made for this answer alone: never asked again
            return None
        rendering = render(protocol, script, parsed, meta, time_scale)
        _kept.put(script, key, rendering, kept_bytes(parsed, rendering))
    return rendering


def kept_bytes(parsed: ParsedRequest, rendering: Rendering | None) -> int:
    """What a kept rendering counts towards KEPT_BYTES: its bytes, the ids it draws ahead and
    the request fields it is kept for."""
    return len(parsed.variant) + (rendering.size() + rendering.asks.held_ahead if rendering is not None else 0)


_kept = player.KeptPerScript(KEPT_RENDERINGS, KEPT_BYTES)
_retimed = player.KeptPerScript(KEPT_RENDERINGS, KEPT_BYTES)  # with the shape of the answer each was made of
# A forked process makes renderings of its own: the kept ones hold ids drawn ahead, which the parent hands out too.
os.register_at_fork(after_in_child=_kept.clear)
os.register_at_fork(after_in_child=_retimed.clear)
