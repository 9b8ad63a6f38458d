"""What a captured answer said, whatever its protocol: the facts a scenario is written from.

A protocol's reader (chat.py, responses.py, messages.py) takes the answer's SSE frames one by
one, or its whole JSON body, and fills in a Captured: its blocks with each piece of text and
when it arrived, the model, usage, finish and how the answer ended. What fakehop cannot play
is counted in `left_out`, by what it was, so that a recording can say what it did not keep.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ...play.player import FAIL_MESSAGES
from ...protocols.common import OPENAI_FAIL
from ...scenario.model import FINISH_REASONS, Usage
from ...scenario.reader import MAX_FILE_BYTES
from .sse import Frame

# How an answer ended (Captured.ending).
FINISHED = "finished"  # the protocol's good ending, or the body's end without an error
FAILED = "failed"  # an error event inside the stream
CUT = "cut"  # the connection broke before the body ended
LEFT = "left"  # the client went away while the answer was still coming
HTTP_ERROR = "http_error"

# Characters of an answer's output kept. Each takes a byte of a scenario file at least, so no
# file holds more than MAX_FILE_BYTES of them; twice that leaves the scrubbing of secrets
# (header values) whole text to find them in, up to the last character a file may hold.
MAX_KEPT_CHARS = 2 * MAX_FILE_BYTES
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class Request:
    """What a scenario's `match` picks an answer again by: the request's protocol, its model,
    the text of its last user message, its turn in its conversation and whether it ends with
    tool results (None for what is not known). `unknown_chain` names the stored response a
    Responses request continues when no answer read before it was that one."""

    protocol: str
    model: str | None = None
    prompt: str | None = None
    turn: int | None = None
    tool_result: bool | None = None
    unknown_chain: str | None = None


@dataclass(slots=True)
class Piece:
    at: float | None  # seconds from the request; None when the capture has no timing
    text: str


@dataclass(slots=True)
class CapturedCitation:
    """A web page a text block cites; `start` and `end` are offsets in the block's text, None
    where the protocol gives none (Messages): then it cites where its `cited_text` is, or the
    whole block."""

    url: str
    title: str | None
    cited_text: str | None
    start: int | None = None
    end: int | None = None


@dataclass(slots=True)
class CapturedBlock:
    """One output block: text, a refusal, reasoning, redacted thinking or one tool call, with
    its pieces as they streamed. Reasoning that came in several summary parts says where each
    part after the first begins, as the index of its first piece."""

    kind: str  # "text" | "refusal" | "reasoning" | "redacted_thinking" | "tool_call" | "custom_tool_call"
    #   | "server_tool" | "compaction"
    at: float | None  # when it opened
    pieces: list[Piece] = field(default_factory=list)
    name: str | None = None
    call_id: str | None = None
    signature: str | None = None
    data: str | None = None  # redacted thinking's opaque data
    phase: str | None = None  # text: Responses' message phase
    part_starts: list[int] = field(default_factory=list)
    part: Any = None  # the protocol's key of the part the last piece went to
    citations: list[CapturedCitation] = field(default_factory=list)  # a text block's
    hosted: dict | None = None  # a server_tool block's step, but for its input (its pieces): see HostedCall
    caller: str | None = None  # a tool call's: "code_execution" when the code of the capture's latest one made it

    def text(self) -> str:
        return "".join(piece.text for piece in self.pieces)


@dataclass(frozen=True, slots=True)
class RawFrame:
    """A frame that is not an event of the protocol (its data is not JSON, or not in the
    protocol's shape): kept as it came."""

    at: float | None
    text: str


@dataclass(frozen=True, slots=True)
class ErrorDetails:
    """An error's own `type`, `code` and `param` where they are not what fakehop writes for its
    kind or status (None: the same, or not given)."""

    error_type: str | None = None
    code: str | None = None
    param: str | None = None


@dataclass(frozen=True, slots=True)
class CapturedFailure:
    kind: str  # a scenario fail kind
    message: str
    details: ErrorDetails = ErrorDetails()
    error_event: bool = True  # Responses: an `error` event came before `response.failed`


@dataclass(frozen=True, slots=True)
class HttpError:
    status: int
    message: str | None
    retry_after: str | None
    headers: tuple[tuple[str, str], ...]
    details: ErrorDetails = ErrorDetails()
    from_body: bool = False  # the message is the text of a body that held no error object


@dataclass
class Captured:
    protocol: str
    streamed: bool
    model: str | None = None
    parts: list[CapturedBlock | RawFrame] = field(default_factory=list)
    usage: Usage | None = None
    # reasoning_tokens, cached_tokens, …: scenario.Usage's names
    usage_details: dict[str, int] = field(default_factory=dict)
    finish: str | None = None  # a scenario finish reason, when the answer said one
    stop_sequence: str | None = None  # the sequence a stop_sequence finish names
    answer_id: str | None = None  # Responses: the response's id, which a later request's previous_response_id names
    ending: str | None = None  # FINISHED, FAILED, CUT, LEFT or HTTP_ERROR; None until the answer ends
    ended_at: float | None = None
    failure: CapturedFailure | None = None
    http_error: HttpError | None = None
    status: int = 200
    answered: bool = True  # False: the upstream sent no status at all (it closed, or the client left first)
    events: int = 0  # SSE events (comments not counted)
    keepalive_gaps: list[float] = field(default_factory=list)  # the silence before each comment frame
    longest_silence: float = 0.0  # between two frames
    last_output_at: float | None = None  # the last frame that was not a comment
    last_comment_at: float | None = None
    left_out: Counter = field(default_factory=Counter)  # what fakehop does not play, and how often
    notes: list[str] = field(default_factory=list)  # other things a reader of the file should know
    kept_chars: int = 0  # characters of output kept in `parts`

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def blocks(self) -> list[CapturedBlock]:
        return [part for part in self.parts if isinstance(part, CapturedBlock)]


def paused(blocks: list[CapturedBlock]) -> bool:
    """Whether the answer ends on a server tool call without its result, as a pause_turn stop does."""
    return bool(blocks) and blocks[-1].kind == "server_tool" and "result" not in (blocks[-1].hosted or {})


def clean(text: Any) -> str:
    """Text from JSON, as a str a scenario can hold: a lone UTF-16 surrogate half (which no
    UTF-8 file can) becomes U+FFFD."""
    text = text if isinstance(text, str) else ""
    return _LONE_SURROGATE.sub("\ufffd", text) if _LONE_SURROGATE.search(text) else text


def kind_of(kinds: list[str], message: str) -> str:
    """Of the fail kinds an error reads as, the one whose own message this is, else the first;
    server_error when it reads as none."""
    for kind in kinds:
        if FAIL_MESSAGES[kind] == message:
            return kind
    return kinds[0] if kinds else "server_error"


def kind_for_status(status: int | None) -> str:
    """The fail kind of an error that comes with this HTTP status (None: not known)."""
    if status == 429:
        return "rate_limit"
    if status in (503, 529):
        return "overloaded"
    return "invalid_prompt" if status is not None and 400 <= status < 500 else "server_error"


def error_details(error: dict, defaults: dict[str, Any], instead: str, left_out: Counter) -> ErrorDetails:
    """The `type`, `code` and `param` of an error object that are not their `defaults` (what
    fakehop writes for its kind or status, by those names). A field the error holds as null
    where fakehop writes one has no scenario form: it is counted in `left_out`, as replayed
    `instead`."""
    own = {}
    for name, default in defaults.items():
        value = error.get(name, default)
        if value == default:
            continue
        if value is None:
            left_out[f"null error {name} (replayed as {instead})"] += 1
        else:
            own[name] = clean(value if isinstance(value, str) else str(value))
    return ErrorDetails(own.get("type"), own.get("code"), own.get("param"))


def json_object(text: str | bytes | None) -> dict | None:
    """`text` read as a JSON object; None when it is not one (nor one nested too deep to read)."""
    try:
        value = json.loads(text or "")
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def object_in(value: dict, key: str) -> dict:
    """value[key] when it is an object, else an empty one."""
    found = value.get(key)
    return found if isinstance(found, dict) else {}


def detail(usage: dict, part: str, name: str) -> Any:
    """usage[part][name], or None."""
    details = usage.get(part)
    return details.get(name) if isinstance(details, dict) else None


def number(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


class Reader:
    """Reads one protocol's answer into a Captured; a protocol's reader names its events'
    handlers in EVENTS (by the payload's `type`) and the events it knowingly skips in SKIPPED."""

    NAME = ""
    TERMINATOR: str | None = None  # the data of a frame that ends the stream (Chat's [DONE])
    EVENTS: dict[Any, str] = {}  # looked up by whatever JSON value `type` holds
    SKIPPED: frozenset[str] = frozenset()
    FINISHES: dict[str, str] = {reason: reason for reason in FINISH_REASONS}

    def __init__(self, streamed: bool = True):
        self.captured = Captured(self.NAME, streamed)
        self.open: dict[Any, CapturedBlock] = {}  # blocks by the protocol's key for them
        self.last_frame_at: float | None = None
        self.grown: list[
            tuple[CapturedBlock, int, int, Any]
        ] = []  # each block the event being read added to, as it was before

    # -------------------------------------------- frames

    def frame(self, frame: Frame) -> None:
        if self.captured.ending is not None:
            return  # after the terminator or an error: a client reads no further
        self.note_time(frame)
        if frame.is_comment:
            return
        self.captured.events += 1
        self.captured.last_output_at = frame.at
        if self.TERMINATOR is not None and (frame.data or "").startswith(self.TERMINATOR):
            self.end(FINISHED, frame.at)
            return
        payload = json_object(frame.data)
        if payload is None or not self.read_event(frame, payload):
            text = frame.raw.decode("utf-8", "replace")
            if self.keeps(text):
                self.captured.parts.append(RawFrame(frame.at, text))

    def read_event(self, frame: Frame, payload: dict) -> bool:
        """Whether the event could be read. One with a field of a type its protocol never gives
        (a list for a type, a number for a list), or nested too deep to write again, cannot: it
        is kept as it came instead, and the output it gave before that field was reached is
        taken back, so that the replay does not give it twice (what else it set stays)."""
        parts, kept, self.grown = len(self.captured.parts), self.captured.kept_chars, []
        try:
            self.event(frame, payload)
        except (TypeError, RecursionError):
            self.take_back(parts, kept)
            return False
        return True

    def take_back(self, parts: int, kept: int) -> None:
        """Undo the blocks opened and the pieces added since the answer had `parts` parts and `kept` characters."""
        for block, pieces, part_starts, part in reversed(self.grown):
            del block.pieces[pieces:], block.part_starts[part_starts:]
            block.part = part
        opened = {id(block) for block in self.captured.parts[parts:]}
        self.open = {key: block for key, block in self.open.items() if id(block) not in opened}
        del self.captured.parts[parts:]
        self.captured.kept_chars = kept

    def note_time(self, frame: Frame) -> None:
        captured, at = self.captured, frame.at
        if at is not None and self.last_frame_at is not None:
            silence = at - self.last_frame_at
            captured.longest_silence = max(captured.longest_silence, silence)
            if frame.is_comment:
                captured.keepalive_gaps.append(silence)
        if frame.is_comment:
            captured.last_comment_at = at
        self.last_frame_at = at

    def event(self, frame: Frame, payload: dict) -> None:
        kind = payload.get("type")
        handler = self.EVENTS.get(kind)
        if handler is not None:
            getattr(self, handler)(frame.at, payload)
        elif kind not in self.SKIPPED:
            self.captured.left_out[f"{kind or frame.event or 'untyped'} events"] += 1

    # -------------------------------------------- what readers note

    def piece(self, key: Any, kind: str, text: Any, at: float | None, part: Any = None, **facts: Any) -> CapturedBlock:
        """`text` onto the block `key` names, opened (with `facts`) if it is new; `part` is the
        protocol's key of the summary part it belongs to, where a block has several."""
        block = self.open.get(key)
        if block is None:
            block = self.open[key] = CapturedBlock(kind, at, **facts)
            if self.keeps(""):
                self.captured.parts.append(block)
        text = clean(text)
        if text and self.keeps(text):
            self.grown.append((block, len(block.pieces), len(block.part_starts), block.part))
            if part != block.part and block.pieces:
                block.part_starts.append(len(block.pieces))
            block.part = part
            block.pieces.append(Piece(at, text))
        return block

    def cite(self, block: CapturedBlock | None, citation: dict, start: Any = None, end: Any = None) -> None:
        """A citation of the text `block` (None: of no text fakehop keeps) with the `url` and
        `title` of `citation`; one without a url is counted as left out."""
        url = clean(citation.get("url"))
        if block is None or block.kind != "text" or not url:
            self.captured.left_out["citations of no text"] += 1
            return
        title = clean(citation["title"]) if isinstance(citation.get("title"), str) else None
        cited = clean(citation["cited_text"]) if isinstance(citation.get("cited_text"), str) else None
        block.citations.append(CapturedCitation(url, title, cited, number(start), number(end)))

    def keeps(self, text: str) -> bool:
        """Whether there is room for `text` in the answer's output: once it holds MAX_KEPT_CHARS,
        no more is kept, so that an endless answer takes no more memory."""
        if self.captured.kept_chars >= MAX_KEPT_CHARS:
            return False
        self.captured.kept_chars += len(text)
        return True

    def usage(self, input_tokens: Any, output_tokens: Any) -> None:
        """The answer's token counts; a count not given keeps the one an earlier event gave."""
        before = self.captured.usage or Usage()
        given_input, given_output = number(input_tokens), number(output_tokens)
        self.captured.usage = Usage(
            before.input_tokens if given_input is None else given_input,
            before.output_tokens if given_output is None else given_output,
        )

    def details(self, **counts: Any) -> None:
        """Usage detail counts, those the answer gave."""
        self.captured.usage_details.update((name, count) for name, count in counts.items() if number(count) is not None)

    def model(self, value: Any) -> None:
        if isinstance(value, str) and value:
            self.captured.model = clean(value)

    def finish(self, reason: Any) -> None:
        """The answer's finish reason, in the protocol's words (a stop_sequence one once its
        sequence is known); one fakehop cannot play is noted."""
        if reason is None:
            return
        finish = self.FINISHES.get(reason)
        if finish is None or (
            finish == "stop_sequence" and self.captured.stop_sequence is None
        ):  # no scenario form without the sequence
            self.captured.left_out[f"finish reason {reason!r} (replayed as the inferred one)"] += 1
            finish = None
        self.captured.finish = finish

    def end(self, ending: str, at: float | None) -> None:
        if self.captured.ending is None:
            self.captured.ending, self.captured.ended_at = ending, at

    def fail(self, at: float | None, error: dict, error_event: bool = True) -> None:
        """An error inside the stream, from its error object: the kind it reads as, and its
        own type, code and param, for the scenario to give again."""
        message = clean(error.get("message"))
        kind = self.fail_kind(error, message)
        details = error_details(error, self.fail_defaults(kind), f"the {kind} kind's", self.captured.left_out)
        self.captured.failure = CapturedFailure(kind, message or FAIL_MESSAGES[kind], details, error_event)
        self.end(FAILED, at)

    def fail_kind(self, error: dict, message: str) -> str:
        """The fail kind an error object of the protocol reads as."""
        raise NotImplementedError

    def fail_defaults(self, kind: str) -> dict[str, str | None]:
        """What the protocol's error object holds for a fail of `kind`, beside its message."""
        raise NotImplementedError

    def whole(self, body: dict, at: float | None) -> None:
        """Read an answer that came whole, as one JSON object."""
        raise NotImplementedError


# Codes and types of OpenAI errors that are no fail kind's own, and the kind of the status they come with.
OPENAI_OTHER_KINDS = {
    "insufficient_quota": "rate_limit",
    "tokens": "rate_limit",
    "context_length_exceeded": "invalid_prompt",
}


class OpenAIReader(Reader):
    """What the two OpenAI protocols' readers share: how their error objects read."""

    def fail_kind(self, error: dict, message: str) -> str:
        """By the error's code, one a fail kind writes or another known one; else by its type."""
        code, error_type = error.get("code"), error.get("type")
        by_code = [kind for kind, (written, _) in OPENAI_FAIL.items() if written == code]
        others = [
            OPENAI_OTHER_KINDS[value]
            for value in (code, error_type)
            if isinstance(value, str) and value in OPENAI_OTHER_KINDS
        ]
        by_type = [kind for kind, (_, written) in OPENAI_FAIL.items() if written == error_type]
        return kind_of(by_code or others or by_type, message)

    def fail_defaults(self, kind: str) -> dict[str, str | None]:
        code, error_type = OPENAI_FAIL[kind]
        return {"type": error_type, "code": code, "param": None}
