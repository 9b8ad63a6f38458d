"""Server-Sent Events cut into frames as the bytes arrive, each with the time it was complete."""

from __future__ import annotations

import re
from dataclasses import dataclass

_LINE_END = re.compile(rb"\r\n|\r|\n")


@dataclass(frozen=True, slots=True)
class Frame:
    """One SSE frame: its `event` and `data` fields (data lines joined with a newline, None
    without any), and its bytes as they came, the blank line that ended it included.
    `at` is when its last byte arrived, in seconds from the request; None without timing."""

    at: float | None
    raw: bytes
    event: str | None = None
    data: str | None = None

    @property
    def is_comment(self) -> bool:
        """A frame of comment lines only (`: hopbase-keepalive`), or of fields SSE ignores."""
        return self.event is None and self.data is None


class FrameReader:
    """Cuts a byte stream into frames. Lines end with CRLF, LF or CR, as SSE allows; a frame
    ends at a blank line. A CR at the very end of what has arrived waits for the next bytes,
    which may begin with its LF."""

    def __init__(self) -> None:
        self.pending = bytearray()  # bytes not yet cut into lines
        self.raw = bytearray()  # the lines of the frame being read, as they came
        self.event: str | None = None
        self.data: list[str] = []

    def feed(self, data: bytes, at: float | None) -> list[Frame]:
        self.pending += data
        frames = []
        start = 0
        while (found := _LINE_END.search(self.pending, start)) is not None:
            if found.group() == b"\r" and found.end() == len(self.pending):
                break
            line = bytes(self.pending[start : found.start()])
            self.raw += self.pending[start : found.end()]
            start = found.end()
            if line:
                self.field(line)
            elif self.raw.strip():
                frames.append(self.frame(at))
            else:
                self.raw.clear()  # a blank line between frames
        del self.pending[:start]
        return frames

    def end(self, at: float | None, keep_unfinished: bool) -> list[Frame]:
        """What is left when the bytes end: a last frame without its blank line counts only
        when `keep_unfinished` (a capture that lost its last newline); a client drops it."""
        frames = self.feed(b"\n", at) if self.pending else []
        if keep_unfinished and (self.event is not None or self.data):
            frames.append(self.frame(at))
        return frames

    def field(self, line: bytes) -> None:
        if line.startswith(b":"):
            return
        name, _, value = line.decode("utf-8", "replace").partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            self.event = value
        elif name == "data":
            self.data.append(value)

    def frame(self, at: float | None) -> Frame:
        frame = Frame(at, bytes(self.raw), self.event, "\n".join(self.data) if self.data else None)
        self.raw.clear()
        self.event, self.data = None, []
        return frame
