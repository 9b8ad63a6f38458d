"""The request journal: what each request sent, what it got, and how its stream ended."""

from __future__ import annotations

import copy
import json
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, overload

from multidict import CIMultiDict, CIMultiDictProxy

from ..style import Tint, plain

DEFAULT_CAPACITY = 1000
DEFAULT_BYTES = 64 * 1024 * 1024  # what all records hold together: headers, bodies (as parsed) and kept frames
KEPT_BODY_BYTES = 1024 * 1024  # of one body; a longer one is kept cut, as text
KEPT_HEADER_BYTES = 64 * 1024  # of one request's headers, names and values; the rest is left out, with a note saying so
CUT_HEADERS = "X-Fakehop-Cut"  # the note's name
# A parsed body takes more memory than its bytes: each JSON value a Python object (an int
# 28 bytes, an empty dict 64) and a pointer to it. Counted per comma, colon and opening
# bracket, this many bytes cover every shape measured, from prose to lists of tiny values.
BYTES_PER_JSON_VALUE = 96
# Every record is counted this much for its body from the start: a body of at most
# SMALL_BODY_BYTES, parsed, takes less (at most some 16 times its bytes), and costs nothing more.
SMALL_BODY_BYTES = 1024
BODY_ALLOWANCE = 16 * SMALL_BODY_BYTES
SECRET_HEADERS = frozenset(("authorization", "proxy-authorization", "x-api-key", "api-key", "cookie"))
SHOWN_SECRET_CHARS = 4  # of a secret longer than twice as many
KEPT_FRAME_BYTES = 32 * 1024  # of one stream's writes; later ones are counted, not kept
# The write that goes past KEPT_FRAME_BYTES, when at most this long, is held whole (and counted
# so) and its head cut only when the frames are read: copying 32 KiB of each long answer as it
# is written cost 33,000 instructions a request (callgrind counts a copy byte by byte).
WHOLE_CUT_WRITE_BYTES = 2 * KEPT_FRAME_BYTES
_JOIN = "".join
_OPENING_OR_PARTING = b",:[{"  # the bytes body_weight counts

# How an answer ended (`Record.end`).
COMPLETED = "completed"  # the protocol's good ending went out
FAILED = "failed"  # an error event inside the stream (or its HTTP form, unstreamed)
HTTP_ERROR = "http_error"  # an HTTP error status before any stream
DISCONNECTED = "disconnected"  # the scenario closed the connection
CLIENT_DISCONNECTED = "client_disconnected"  # the client went away first
REJECTED = "rejected"  # a bad request, answered with a 4xx
UNMATCHED = "unmatched"  # strict mode: no scenario was set up for it, answered with a 400
IN_PROGRESS = "in_progress"
MAX_ERROR_IN_LINE = 160
# What each ending means to whoever reads the log (see fakehop.style).
END_TONES = {
    COMPLETED: "good",
    FAILED: "bad",
    HTTP_ERROR: "bad",
    DISCONNECTED: "bad",
    CLIENT_DISCONNECTED: "warn",
    REJECTED: "warn",
    UNMATCHED: "warn",
    IN_PROGRESS: "faint",
}
NOT_STREAMED_ENDS = frozenset((HTTP_ERROR, REJECTED, UNMATCHED))  # answered before any stream, whatever was asked


def sse_events(data: bytes) -> int:
    """How many SSE events `data` holds: frames ended by a blank line; comments (keepalives) do not count.

    Counted with bytes.count, not by splitting: this runs on every write of every stream.
    """
    comments = data.count(b"\n\n:") + data.startswith(b":")
    return data.count(b"\n\n") - comments


def joined_headers(headers: Mapping[str, str] | list[tuple[str, str]]) -> dict[str, str]:
    """Headers as one JSON object: a name sent more than once keeps every value, joined with
    ", " as HTTP allows, under the spelling it first came with."""
    joined: dict[str, str] = {}
    spelling: dict[str, str] = {}
    for name, value in headers.items() if isinstance(headers, Mapping) else headers:
        first = spelling.setdefault(name.lower(), name)
        joined[first] = f"{joined[first]}, {value}" if first in joined else value
    return joined


def redacted(value: str) -> str:
    """A secret header's value as the journal shows it: its scheme (`Bearer`) and the last
    few characters of a long secret, so a reader can tell keys apart but not use one."""
    scheme, space, secret = value.partition(" ")
    if not space:
        scheme, secret = "", value
    tail = secret[-SHOWN_SECRET_CHARS:] if len(secret) > 2 * SHOWN_SECRET_CHARS else ""
    return f"{scheme}{space}****{tail}"


def shown_headers(headers: Mapping[str, str], secrets: bool) -> list[tuple[str, str]]:
    """The headers as they may leave the process: secret ones redacted unless `secrets`."""
    if secrets:
        return list(headers.items())
    return [(name, redacted(value) if name.lower() in SECRET_HEADERS else value) for name, value in headers.items()]


def header_bytes(headers: Mapping[str, str]) -> int:
    """The bytes of the headers' names and values. Two joins, each one C loop: this runs for
    every request, and a loop of its own over the headers costs several times as much."""
    return len(_JOIN(headers)) + len(_JOIN(headers.values()))


def cut_headers(headers: Mapping[str, str], size: int) -> Mapping[str, str]:
    """Headers of `size` bytes, more than KEPT_HEADER_BYTES, as the journal keeps them: those
    of the first KEPT_HEADER_BYTES, the last one cut, and a note saying so."""
    kept: list[tuple[str, str]] = []
    room = KEPT_HEADER_BYTES
    for name, value in headers.items():
        if room <= len(name):
            break
        kept.append((name, value[: room - len(name)]))
        room -= len(name) + len(kept[-1][1])
    note = f"cut by fakehop: the request had {len(headers):,} headers of {size:,} bytes; the journal keeps the first {KEPT_HEADER_BYTES:,}"
    kept.append((CUT_HEADERS, note))
    return CIMultiDictProxy(CIMultiDict(kept))


def body_weight(raw: bytes) -> int:
    """About the memory a body of `raw`, of more than SMALL_BODY_BYTES, takes once parsed (see
    BYTES_PER_JSON_VALUE), found by counting bytes, not by walking the parsed value: the bytes
    that open a value or part them, counted as what is left once they are taken out (one pass
    in C, where a count of each took four: 289 µs for a body of 528 KB against 635)."""
    values = len(raw) - len(raw.translate(None, _OPENING_OR_PARTING))
    return len(raw) + BYTES_PER_JSON_VALUE * values


def cut_body(raw: bytes) -> str:
    """What the journal keeps of a body longer than KEPT_BODY_BYTES: its start as text, and a note saying so."""
    start = raw[:KEPT_BODY_BYTES].decode("utf-8", "replace")
    return (
        f"{start}… [cut by fakehop: the body had {len(raw):,} bytes; the journal keeps the first {KEPT_BODY_BYTES:,}]"
    )


def read_body(record: Record) -> Any:
    """`Record.body`: a body kept as read (see keep_body) parsed when it is first read, and kept
    parsed from then on (a record read once, by the console or a test, is mostly read again).
    json reads it as the server did: with json where orjson would read it otherwise, else
    with orjson, which reads it as json does (see fakehop.server.intake.body_json)."""
    raw = record._raw
    if raw is not None:
        record._body, record._raw = json.loads(raw.decode("utf-8")), None
    return record._body


def set_body(record: Record, body: Any) -> None:
    record._body, record._raw = body, None


@dataclass(init=False)
class Record:
    """One request's entry in the journal. Only what every request has is set when it opens;
    the other fields are class-level defaults until set: a record whose 33 fields were all
    set on opening cost some 2,500 more instructions a request (callgrind)."""

    seq: int
    id: str
    method: str
    path: str
    headers: Mapping[str, str]  # as received (a server keeps aiohttp's own read-only mapping); as_json gives a dict
    started_at: float
    session: str | None = None  # None: the global session
    protocol: str | None = None
    scenario: str | None = None
    # The body as parsed; a property: a body of at most SMALL_BODY_BYTES is kept as read, in
    # `_raw`, one object the garbage collector does not track (a parsed body is a dict, and a
    # list and more dicts in most requests), and parsed when it is read; any other in `_body`.
    body: Any = property(read_body, set_body)  # noqa: RUF009 - a descriptor, kept as the class attribute
    stream: bool = False
    status: int | None = None
    end: str = IN_PROGRESS
    events: int = 0  # SSE events written to the client so far (see sse_events)
    sent_bytes: int = 0  # of the stream's writes so far, kept or not
    keepalives: int = 0  # writes that began with a comment: a keepalive on its own, or one that came first
    error: str | None = None
    duration: float | None = None
    body_bytes: int = 0  # the body's size as read
    retry_after: str | None = None  # the Retry-After header an http_error answer sent
    retry_after_ms: str | None = None  # and its retry-after-ms, which the SDKs read before Retry-After
    # A stream's writes, each as (the monotonic time it began, its bytes), as far as they come
    # to KEPT_FRAME_BYTES; `frames_cut` says that what followed was left out. As JSON, times
    # are seconds since the request arrived. (A property: see `_first`.)
    frame_bytes: int = 0  # the bytes of the frames kept
    frames_cut: bool = False
    # The frames that fit whole: the first one's time and bytes in `_first_at` and `_first`,
    # the later ones in `_later`, a list made on the second write (a stream of one write, as
    # most are, keeps no list and no tuple: fewer objects for the garbage collector to count);
    # with `_cut`, the write that went past KEPT_FRAME_BYTES, held whole (see
    # WHOLE_CUT_WRITE_BYTES), and `_cut_bytes` of it beyond what is kept of it.
    _first_at: float = field(default=0.0, repr=False)
    _first: bytes | None = field(default=None, repr=False)
    _later: list[tuple[float, bytes]] | None = field(default=None, repr=False)
    _cut: tuple[float, bytes] | None = field(default=None, repr=False)
    _body: Any = field(default=None, repr=False)
    _raw: bytes | None = field(default=None, repr=False)
    _cut_bytes: int = field(default=0, repr=False)
    # When the write under way began (the monotonic clock), None when no write waits: a write
    # waits only while the client does not read what was sent before.
    write_began: float | None = None
    turn: int | None = None  # the request's turn in its conversation (1 + the assistant turns it sends)
    faults: tuple[str, ...] = ()  # the kinds of the faults laid over its answer
    notes: tuple[str, ...] = ()  # what fakehop noticed of it: a scenario the real API could not give it
    _started: float = field(default=0.0, repr=False)  # when it arrived, on the monotonic clock
    # what it holds: its path and headers, its body as parsed, its kept frames (and all of a
    # `_cut` write) once it has ended
    held_bytes: int = field(default=0, repr=False)

    def __init__(
        self,
        seq: int,
        id: str,
        method: str,
        path: str,
        headers: Mapping[str, str],
        started_at: float,
        protocol: str | None = None,
    ) -> None:
        self.seq = seq
        self.id = id
        self.method = method
        self.path = path
        self.headers = headers
        self.started_at = started_at
        self._started = time.monotonic()
        self.protocol = protocol

    def sending(self, now: float, data: bytes) -> None:
        """A write of `data` begins at `now` (the monotonic clock, as the event loop's)."""
        self.write_began = now
        length = len(data)
        self.sent_bytes += length
        if data.startswith(b":"):
            self.keepalives += 1
        size = self.frame_bytes + length
        if size <= KEPT_FRAME_BYTES:
            self.frame_bytes = size
            if self._first is None and self._later is None:  # the first, kept without a call: most streams write once
                self._first_at, self._first = now, data
            else:
                self.keep(now, data)
        elif not self.frames_cut:  # the first write that does not fit: its head is kept
            self.frames_cut = True
            room = KEPT_FRAME_BYTES - self.frame_bytes
            if length <= WHOLE_CUT_WRITE_BYTES:
                self._cut, self._cut_bytes = (now, data), length - room
            else:
                self.keep(now, data[:room])
            self.frame_bytes = KEPT_FRAME_BYTES

    def keep(self, at: float, data: bytes) -> None:
        """Keep a frame that fits whole (or the head of one that does not), after those kept before."""
        if self._first is None and self._later is None:
            self._first_at, self._first = at, data
        elif self._later is None:
            self._later = [(at, data)]
        else:
            self._later.append((at, data))

    @property
    def frames(self) -> list[tuple[float, bytes]]:
        """The kept frames, each (the monotonic time its write began, its bytes)."""
        frames = [] if self._first is None else [(self._first_at, self._first)]
        if self._later is not None:
            frames += self._later
        if self._cut is not None:
            at, data = self._cut
            frames.append((at, data[: len(data) - self._cut_bytes]))
        return frames

    @frames.setter
    def frames(self, frames: list[tuple[float, bytes]]) -> None:
        self._first, self._later, self._cut, self._cut_bytes = None, list(frames) or None, None, 0

    def sent(self, events: int) -> None:
        """The write begun by `sending` is done; it held `events` SSE events."""
        self.events += events
        self.write_began = None

    def close(self, end: str, status: int | None = None, error: str | None = None) -> None:
        self.end = end
        if status is not None:
            self.status = status
        if error is not None:
            self.error = error
        self.duration = (
            time.monotonic() - self._started
        )  # rounded when shown: round() costs more than the rest of close

    def as_json(self, secrets: bool = False, frames: bool = False) -> dict:
        """The record as JSON, the headers redacted (see `redacted`) unless `secrets`; the
        stream's frames (`[seconds, text]` each) only when `frames` asks for them. The body may be
        the record's own, not a copy: serialize the result before the record changes, or
        serialize a `snapshot`."""
        data = {name: getattr(self, name) for name in JSON_FIELDS}
        data["headers"] = joined_headers(shown_headers(self.headers, secrets))
        data["duration"] = None if self.duration is None else round(self.duration, 6)
        data["write_began"] = self.since_arrival(self.write_began)
        data["faults"] = list(self.faults)
        data["notes"] = list(self.notes)
        if frames:
            data["frames"] = [[self.since_arrival(at), frame.decode("utf-8", "replace")] for at, frame in self.frames]
        return data

    def snapshot(self) -> Record:
        """A copy of the record as it is now, to read in another thread: the loop's later
        changes (its end, events, frames) do not reach it. The body and headers are shared:
        nothing changes them once kept."""
        copied = copy.copy(self)
        copied.frames = list(self.frames)
        return copied

    @overload
    def since_arrival(self, moment: float) -> float: ...
    @overload
    def since_arrival(self, moment: None) -> None: ...
    def since_arrival(self, moment: float | None) -> float | None:
        """A monotonic `moment` as seconds since the request arrived, to the microsecond."""
        return None if moment is None else round(moment - self._started, 6)

    @classmethod
    def from_json(cls, data: dict) -> Record:
        """A record read back from the control API (keys this version does not know are left out)."""
        record = cls(*(data[name] for name in OPENING_FIELDS))
        for name in KNOWN_FIELDS.intersection(data):
            setattr(record, name, data[name])
        record.faults = tuple(record.faults)
        record.notes = tuple(record.notes)
        return record

    @property
    def streamed(self) -> bool:
        """Whether the answer is (or was) an event stream: asked for, and not refused or an HTTP error first."""
        return self.stream and self.end not in NOT_STREAMED_ENDS

    def log_line(self, tint: Tint = plain) -> str:
        """One readable line: when, what was asked, the scenario it got, how it ended and whether
        it streamed; `tint` colours its parts by what they mean."""
        clock = (
            time.strftime("%H:%M:%S", time.localtime(self.started_at)) + f".{int(self.started_at * 1000) % 1000:03d}"
        )
        duration = "-" if self.duration is None else f"{self.duration:.3f}s"
        scenario = tint(f"{self.scenario or '-':<18}", "strong")
        end = tint(f"{self.end:<19}", END_TONES.get(self.end, ""))
        line = (
            f"{clock} #{self.seq:<4} {self.method:<4} {self.path:<22} {self.protocol or '-':<9} "
            f"{scenario} {self.status or '-':>3} {end} {self.events:>4} events {duration:>8}"
        )
        if self.streamed:
            line += "  streamed"
        if self.session is not None:
            line += f"  session={self.session}"
        if self.error:
            error = " ".join(self.error.split())
            line += "  " + tint(
                error if len(error) <= MAX_ERROR_IN_LINE else error[: MAX_ERROR_IN_LINE - 1] + "…", "bad"
            )
        return line


JSON_FIELDS = tuple(
    f.name for f in fields(Record) if not f.name.startswith("_") and f.name not in ("frames", "held_bytes")
)
OPENING_FIELDS = JSON_FIELDS[:6]  # what Record() is given: seq to started_at
KNOWN_FIELDS = frozenset(JSON_FIELDS[6:]) | {"frames"}  # what from_json sets after


class Journal:
    """The last `capacity` requests, oldest first, holding together at most `max_bytes` (the
    oldest go first): their headers, their bodies as parsed (see body_weight) and, once they
    have ended, their kept frames. `seq` numbers them from 1 for paging. `secrets`: the
    headers in `as_json` as sent, API keys included (`--journal-secrets`)."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY, max_bytes: int = DEFAULT_BYTES, secrets: bool = False):
        self.records: deque[Record] = deque()
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.secrets = secrets
        self.bytes = 0  # what the records kept hold: the sum of their held_bytes
        self.next_seq = 1
        self.opened_listeners: list[Callable[[Record], None]] = []  # each told of a record as it opens
        self.listeners: list[Callable[[Record], None]] = []  # each told of a record once it has closed
        self.overflow_listeners: list[Callable[[], None]] = []  # each told when records went to keep within max_bytes

    def open(
        self, request_id: str, method: str, path: str, headers: Mapping[str, str], protocol: str | None = None
    ) -> Record:
        size = header_bytes(headers)
        if size > KEPT_HEADER_BYTES:
            headers, size = cut_headers(headers, size), KEPT_HEADER_BYTES
        record = Record(self.next_seq, request_id, method, path, headers, time.time(), protocol)
        self.next_seq += 1
        records = self.records
        if len(records) >= self.capacity:  # drop_oldest, inline: once the journal is full, every request does this
            self.bytes -= records.popleft().held_bytes
        records.append(record)
        record.held_bytes = size = size + len(path) + BODY_ALLOWANCE
        self.bytes += size
        if self.bytes > self.max_bytes:
            self.drop_to_max()
        for listener in self.opened_listeners:
            listener(record)
        return record

    def drop_oldest(self) -> None:
        self.bytes -= self.records.popleft().held_bytes

    def drop_to_max(self) -> None:
        """The oldest records go until the journal holds at most `max_bytes` (or one record is left)."""
        while self.bytes > self.max_bytes and len(self.records) > 1:
            self.drop_oldest()
        for listener in self.overflow_listeners:
            listener()

    def hold(self, record: Record, size: int) -> None:
        """`record` holds `size` bytes more, counted while the journal keeps it."""
        record.held_bytes += size
        records = self.records
        if records and record.seq >= records[0].seq:  # not cleared or pushed out meanwhile
            self.bytes += size
            if self.bytes > self.max_bytes:
                self.drop_to_max()

    def keep_body(self, record: Record, raw: bytes, body: Any, parsed: bool = False) -> None:
        """Keep the body `record` read (`body`, parsed from `raw`): cut when it is longer than
        KEPT_BODY_BYTES, counted towards `max_bytes` while the record is kept (one of at most
        SMALL_BODY_BYTES was counted when the record opened, and is kept as read, see
        Record.body, unless `parsed`: for a record read as it ends, not to parse it again)."""
        size = record.body_bytes = len(raw)
        if size <= SMALL_BODY_BYTES:
            if parsed:
                record.body = body
            else:
                record._raw = raw
        elif size <= KEPT_BODY_BYTES:
            record.body = body
            self.hold(record, body_weight(raw) - BODY_ALLOWANCE)
        else:
            record.body = cut_body(raw)
            self.hold(record, sys.getsizeof(record.body) - BODY_ALLOWANCE)

    def closed(self, record: Record) -> None:
        if record.frame_bytes:
            self.hold(record, record.frame_bytes + record._cut_bytes)
        for listener in self.listeners:
            listener(record)

    def since(self, seq: int = 0) -> list[Record]:
        return [r for r in self.records if r.seq > seq]

    def page(
        self, since: int, limit: float, max_bytes: float, only_session: str | None = None
    ) -> tuple[list[Record], bool]:
        """At most `limit` records after `since` (only session `only_session`'s, when given),
        holding at most `max_bytes` together (but at least one record), and whether more follow."""
        page: list[Record] = []
        size = 0
        for record in self.records:
            if record.seq <= since or (only_session is not None and record.session != only_session):
                continue
            kept = record.held_bytes
            if len(page) >= limit or (page and size + kept > max_bytes):
                return page, True
            page.append(record)
            size += kept
        return page, False

    def clear(self) -> None:
        self.records.clear()
        self.bytes = 0
