"""Captured answers read back into protocol-neutral facts (facts.Captured).

`AnswerReader` reads one answer as its bytes arrive, with the time each came: an HTTP
error's body, a whole JSON answer, or an SSE stream, whose frames go one by one to the
reader of the answer's protocol (chat.py, responses.py, messages.py). `Requests` reads the
requests they answered, for their `match`. `detect` names the protocol of a capture that
does not say, from its events.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from ...protocols import PROTOCOLS
from ...protocols.common import BadRequest, ParsedRequest, dumps
from ...scenario.reader import is_header
from ...state.stored import StoredResponses
from .chat import ChatReader
from .facts import (
    CUT,
    FAILED,
    FINISHED,
    HTTP_ERROR,
    LEFT,
    Captured,
    HttpError,
    Reader,
    Request,
    clean,
    error_details,
    json_object,
)
from .messages import MessagesReader
from .responses import ResponsesReader
from .sse import Frame, FrameReader

READERS: dict[str, type[Reader]] = {reader.NAME: reader for reader in (ChatReader, ResponsesReader, MessagesReader)}
RATE_LIMIT_PREFIXES = ("x-ratelimit-", "anthropic-ratelimit-", "ratelimit")
RETRY_HEADERS = ("retry-after", "retry-after-ms", "x-should-retry")  # what the SDKs read before retrying

__all__ = [
    "CUT",
    "FAILED",
    "FINISHED",
    "HTTP_ERROR",
    "LEFT",
    "READERS",
    "AnswerReader",
    "Asked",
    "CaptureError",
    "Captured",
    "Request",
    "Requests",
    "detect",
    "json_object",
    "names_event_stream",
    "payload_protocol",
]


class CaptureError(Exception):
    """An answer that cannot be written as a scenario; the message says why, in a line."""


class AnswerReader:
    """One answer, read as it arrives. `headers` are the answer's; `sse` says whether its body
    is an event stream (from its Content-Type, or what a capture looks like); `dropped` names
    headers never to keep, lowercase."""

    def __init__(self, protocol: str, status: int, headers: Mapping[str, str], sse: bool, dropped: Iterable[str] = ()):
        if not (status == 200 or 400 <= status <= 599):
            raise CaptureError(f"an HTTP {status} answer has no scenario form")
        self.protocol = protocol
        self.status = status
        self.headers = headers
        self.dropped = frozenset(dropped)
        self.frames = FrameReader() if sse and status == 200 else None
        self.reader = READERS[protocol](streamed=self.frames is not None)
        self.body = bytearray()

    def feed(self, data: bytes, at: float | None) -> None:
        if self.frames is None:
            self.body += data
            return
        for frame in self.frames.feed(data, at):
            self.reader.frame(frame)

    def end(self, at: float | None, how: str = FINISHED, keep_unfinished: bool = False) -> Captured:
        """The facts, once the body ended (`how`: FINISHED), broke (CUT) or the client left (LEFT)."""
        captured = self.reader.captured
        captured.status = self.status
        if self.frames is not None:
            for frame in self.frames.end(at, keep_unfinished):
                self.reader.frame(frame)
        elif self.status != 200:
            captured.http_error = self.http_error()
            self.reader.end(HTTP_ERROR, at)
        elif how == FINISHED:
            self.read_whole(at)
        self.reader.end(how, at)
        return captured

    def read_whole(self, at: float | None) -> None:
        body = json_object(bytes(self.body))
        if body is None:
            raise CaptureError("the answer is neither an event stream nor a JSON object")
        try:
            self.reader.whole(body, at)
        except (TypeError, RecursionError):  # a field of a type the protocol does not give, or nested too deep to write
            raise CaptureError(f"the answer is not a {self.protocol} answer fakehop can read") from None

    def http_error(self) -> HttpError:
        headers = {name.lower(): clean(value) for name, value in self.headers.items()}
        wanted = {name: value for name, value in headers.items() if keeps(name) and name not in self.dropped}
        sendable = {name: value for name, value in wanted.items() if is_header(name, value)}  # a HAR may hold any text
        if len(sendable) < len(wanted):
            self.reader.captured.left_out["headers no HTTP answer can carry"] += len(wanted) - len(sendable)
        retry_after = sendable.pop("retry-after", None)
        kept = tuple(sendable.items())
        message, error = error_object(bytes(self.body))
        written = PROTOCOLS[self.protocol].error_body(self.status, "")
        defaults = {name: value for name, value in written.get("error", {}).items() if name != "message"}
        details = error_details(error, defaults, f"HTTP {self.status}'s", self.reader.captured.left_out)
        from_body = not isinstance(error.get("message"), str)
        return HttpError(self.status, message, retry_after, kept, details, from_body)


def names_event_stream(content_type: str) -> bool | None:
    """Whether a Content-Type is an event stream's; None for no Content-Type at all."""
    return content_type.split(";", maxsplit=1)[0].strip().lower() == "text/event-stream" if content_type else None


def keeps(header: str) -> bool:
    """Whether an HTTP error's header is kept: the rate-limit ones and what the SDKs retry by."""
    return header.startswith(RATE_LIMIT_PREFIXES) or header in RETRY_HEADERS


def error_object(body: bytes) -> tuple[str | None, dict]:
    """An error body's message and its error object ({} for none), in either protocol's
    shape; a body that is not one has its text as the message (the writer cuts it short)."""
    value = json_object(body)
    error = value.get("error") if value is not None else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return clean(error["message"]), error
    text = body.decode("utf-8", "replace").strip()
    return clean(text) or None, error if isinstance(error, dict) else {}


class Asked(NamedTuple):
    """A request as Requests read it: its `match` facts, whether it asked for a stream, and
    the protocol's parse of it (None for a body the protocol refuses)."""

    request: Request
    stream: bool
    parsed: ParsedRequest | None = None


class Requests:
    """The requests of one recording, or of one import, read for their `match`: by the
    protocol's own parse, or as far as a body fakehop would refuse allows. A Responses request
    that continues an earlier answer (previous_response_id) is read in that answer's
    conversation, as the server reads it, when the answer was one of those read here: they
    are kept as the server keeps its own."""

    def __init__(self) -> None:
        self.answers = StoredResponses()

    def read(self, protocol, body: bytes) -> Asked:
        value = json_object(body)
        if value is None:
            return Asked(Request(protocol.NAME), False)
        try:
            parsed = protocol.parse(value)
        except BadRequest:
            model = value.get("model")
            return Asked(Request(protocol.NAME, model if isinstance(model, str) else None), value.get("stream") is True)
        unknown = parsed.conversation.continues
        if unknown is not None:
            try:
                parsed, unknown = self.answers.continued(parsed), None
            except BadRequest:  # an answer given before these: what it said is not known
                return Asked(
                    Request(protocol.NAME, parsed.model, parsed.prompt or None, unknown_chain=unknown),
                    parsed.stream,
                    parsed,
                )
        conversation = parsed.conversation
        return Asked(
            Request(protocol.NAME, parsed.model, parsed.prompt, conversation.turn, bool(conversation.tool_results)),
            parsed.stream,
            parsed,
        )

    def answered(self, asked: Asked, captured: Captured) -> None:
        """Keep a Responses answer, as the server would, for the requests that continue it:
        its id, and its output as far as the conversation reads it (which items, and each
        function call's id and name)."""
        parsed = asked.parsed
        if parsed is None or captured.answer_id is None or not parsed.conversation.keep:
            return
        output = [
            {"type": "function_call", "call_id": block.call_id, "name": block.name}
            if block.kind == "tool_call"
            else {"type": block.kind}
            for block in captured.blocks()
        ]
        kept = {"id": captured.answer_id, "output": output}
        self.answers.keep(parsed, dumps(kept).encode(), True)


# ---------------------------------------------------------------- which protocol a capture speaks

MESSAGES_EVENTS = frozenset(MessagesReader.EVENTS) - {"error"} | {"ping", "content_block_stop"}


def detect(frames: list[Frame]) -> str | None:
    """The protocol of a stream, from its first event that tells."""
    for frame in frames:
        payload = json_object(frame.data)
        protocol = payload_protocol(payload, frame.event) if payload is not None else None
        if protocol is not None:
            return protocol
    return None


def payload_protocol(payload: dict, event: str | None = None) -> str | None:
    """The protocol an event, or a whole answer, belongs to; None when it could be several."""
    kind, name = payload.get("type"), payload.get("object")
    kind = kind if isinstance(kind, str) else None  # a type that is no string is read as none
    if name in ("chat.completion.chunk", "chat.completion"):
        return "chat"
    if name == "response" or (kind is not None and kind.startswith("response.")):
        return "responses"
    if kind in MESSAGES_EVENTS or kind == "message" or event in MESSAGES_EVENTS:
        return "messages"
    if kind == "error":  # Messages' error event; Responses' carries a sequence number
        return "responses" if "sequence_number" in payload else "messages"
    if "error" in payload and kind is None:
        return "chat"
    return None
