"""The request journal: what each request sent, what it got, and how its stream ended."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Callable, Mapping

DEFAULT_CAPACITY = 1000

# How an answer ended (`Record.end`).
COMPLETED = "completed"  # the protocol's good ending went out
FAILED = "failed"  # an error event inside the stream (or its HTTP form, unstreamed)
HTTP_ERROR = "http_error"  # an HTTP error status before any stream
DISCONNECTED = "disconnected"  # the scenario closed the connection
CLIENT_DISCONNECTED = "client_disconnected"  # the client went away first
REJECTED = "rejected"  # a bad request, answered with a 4xx
IN_PROGRESS = "in_progress"
MAX_ERROR_IN_LINE = 160


def sse_events(data: bytes) -> int:
    """How many SSE events `data` holds: frames ended by a blank line; comments (keepalives) do not count.

    Counted with bytes.count, not by splitting: this runs on every write of every stream.
    """
    comments = data.count(b"\n\n:") + data.startswith(b":")
    return data.count(b"\n\n") - comments


def joined_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Headers as one JSON object: a name sent more than once keeps every value, joined with
    ", " as HTTP allows, under the spelling it first came with."""
    joined: dict[str, str] = {}
    spelling: dict[str, str] = {}
    for name, value in headers.items():
        first = spelling.setdefault(name.lower(), name)
        joined[first] = f"{joined[first]}, {value}" if first in joined else value
    return joined


@dataclass(slots=True)
class Record:
    seq: int
    id: str
    method: str
    path: str
    headers: Mapping[str, str]  # as received (a server keeps aiohttp's own read-only mapping); as_json gives a dict
    started_at: float
    protocol: str | None = None
    scenario: str | None = None
    body: Any = None
    stream: bool = False
    status: int | None = None
    end: str = IN_PROGRESS
    events: int = 0  # SSE events written to the client so far (see sse_events)
    error: str | None = None
    duration: float | None = None
    _started: float = field(default_factory=time.monotonic, repr=False)

    def close(self, end: str, status: int | None = None, error: str | None = None) -> None:
        self.end = end
        if status is not None:
            self.status = status
        if error is not None:
            self.error = error
        self.duration = round(time.monotonic() - self._started, 6)

    def as_json(self) -> dict:
        data = asdict(replace(self, headers=joined_headers(self.headers)))
        data.pop("_started")
        return data

    @classmethod
    def from_json(cls, data: dict) -> "Record":
        """A record read back from the control API (keys this version does not know are left out)."""
        known = {f.name for f in fields(cls) if f.init and not f.name.startswith("_")}
        return cls(**{key: value for key, value in data.items() if key in known})

    def log_line(self) -> str:
        """One readable line: when, what was asked, the scenario it got, and how it ended."""
        clock = time.strftime("%H:%M:%S", time.localtime(self.started_at)) + f".{int(self.started_at * 1000) % 1000:03d}"
        duration = "-" if self.duration is None else f"{self.duration:.3f}s"
        line = (f"{clock} #{self.seq:<4} {self.method:<4} {self.path:<22} {self.protocol or '-':<9} "
                f"{self.scenario or '-':<18} {self.status or '-':>3} {self.end:<19} {self.events:>4} events {duration:>8}")
        if self.error:
            error = " ".join(self.error.split())
            line += "  " + (error if len(error) <= MAX_ERROR_IN_LINE else error[: MAX_ERROR_IN_LINE - 1] + "…")
        return line


class Journal:
    """The last `capacity` requests, oldest first; `seq` numbers them from 1 for paging."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY):
        self.records: deque[Record] = deque(maxlen=capacity)
        self.next_seq = 1
        self.listeners: list[Callable[[Record], None]] = []

    def open(self, request_id: str, method: str, path: str, headers: Mapping[str, str]) -> Record:
        record = Record(self.next_seq, request_id, method, path, headers, time.time())
        self.next_seq += 1
        self.records.append(record)
        return record

    def closed(self, record: Record) -> None:
        for listener in self.listeners:
            listener(record)

    def since(self, seq: int = 0) -> list[Record]:
        return [r for r in self.records if r.seq > seq]

    def clear(self) -> None:
        self.records.clear()
