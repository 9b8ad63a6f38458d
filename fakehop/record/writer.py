"""Captured answers out as scenario files: YAML meant to be read and edited.

A file starts with a comment saying where and when its answer was captured and what of it
fakehop does not play. Its `match` picks it again for the same request. Its steps keep each
piece of output as it streamed and the pauses between them: the wait before a piece (the
first one's counts from the request) as a `delay`, and a run of pieces that came about
equally spaced as one step with an `interval`. Pauses under `min_gap` are dropped; a run
lasts while every piece in it plays within a quarter of the interval (at least `min_gap`)
of when it came. Pieces that fakehop's own `chunk` forms would give are written that way.
"""

from __future__ import annotations

import itertools
import json
import re
import statistics
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import NamedTuple, cast

from ..play.player import FAIL_MESSAGES, estimate_tokens
from ..protocols import messages
from ..scenario.model import DEFAULT_KEEPALIVE, MATCH_PREFIX_CHARS
from ..scenario.reader import MAX_FILE_BYTES, MIN_KEEPALIVE, SCENARIO_SUFFIXES, USAGE_ALIASES, split_deltas
from ..server.jsonshape import shape_of
from .capture import CaptureError
from .capture.facts import (
    CUT,
    FAILED,
    FINISHED,
    LEFT,
    Captured,
    CapturedBlock,
    CapturedCitation,
    CapturedFailure,
    ErrorDetails,
    HttpError,
    Piece,
    RawFrame,
    Request,
    paused,
)

DEFAULT_MIN_GAP = 0.005
CALL_STEPS = {"tool_call": "arguments", "custom_tool_call": "input"}  # the steps of calls, and where their text goes
HOSTED_KINDS = {"server_tool": "server_tool", "compaction": "compaction"}  # blocks written whole, by the Steps method
STEP_ORDER = ("name", "server", "tool", "input", "result", "id")  # a server_tool step's keys, as written
SECRET_HEADERS = ("authorization", "proxy-authorization", "x-api-key", "api-key", "cookie")
REDACTED = "[redacted]"
MIN_SECRET = 8  # characters: a shorter value cannot be told from ordinary text
MAX_NAME = 48
MAX_KINDS = 20  # kinds of what is not kept, named in a file's header
MAX_KIND_CHARS = 100
MAX_SOURCE_CHARS = 1000  # of the header's line saying where an answer came from (a HAR entry's method and path)
MAX_MESSAGE = 500  # characters of an error body that held no error object, written as its message
ENDING_ROOM = 500  # bytes of a file kept for what follows its steps: a delay, how it ended, where it was cut
MAX_JSON_DEPTH = 128  # nesting of tool arguments written as one JSON string, as of a request (intake's bound)
ENTRY_INDENT = 4  # columns a sequence entry's lines are written further in than a scenario's own
SEQUENCE_COUNT = (
    "# {count} attempts of one request, retried: a replay's first request gets the first, and so on; the last repeats."
)
KEEPALIVE_SLACK = 0.05  # a keepalive spacing this close to the default is the default
_YAML_UNSAFE = re.compile("[^\t\n\r\x20-\x7e\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]|[\x85\u2028\u2029\ufeff]")
_COMMENT_UNSAFE = re.compile(f"[\n\r]|{_YAML_UNSAFE.pattern}")  # what would end a comment's line, and what YAML refuses
_NEEDS_DOUBLE_QUOTES = re.compile("[^\x20-\x7e\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]|[\u2028\u2029\ufeff]")
_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_WORDS = re.compile(r"[a-z0-9]+")
_REGEX_SPECIAL = re.compile(r"([\\.^$*+?{}\[\]|()])")
_SSE_LINE_GAP = r"(?:[\r\n]+(?:[^\r\n:]*:[ ]?)?)?"  # a line break and the next line's field name, where SSE may cut
_YAML_WORDS = ("true", "false", "yes", "no", "y", "n", "on", "off", "null")
MESSAGES_USAGE_NAMES = {name: alias for alias, name in USAGE_ALIASES.items()}  # Anthropic's names for the usage counts


@dataclass(frozen=True)
class Origin:
    """Where an answer came from: `source` says it in words ("Recorded by `fakehop record`
    from http://…"), `when` is when it was captured, `timed` whether the capture has timing."""

    source: str
    when: datetime
    timed: bool = True


# ---------------------------------------------------------------- YAML values


def secrets_of(headers, redact: Iterable[str] = ()) -> list[str]:
    """Every secret value a request's headers carry: keys and tokens (with and without their
    scheme), cookies (whole and each value), and the values of the headers named in `redact`."""
    redact = {name.lower() for name in redact}
    found: list[str] = []
    for name, value in headers.items():
        lowered = name.lower()
        if lowered in SECRET_HEADERS or lowered in redact:
            found.extend((value, value.partition(" ")[2]))
        if lowered == "cookie":
            found.extend(part.partition("=")[2].strip() for part in value.split(";"))
    return [secret for secret in found if secret]


class Yaml:
    """Writes values as YAML scalars, every string scrubbed of the secrets first."""

    def __init__(self, secrets: Iterable[str] = ()):
        self.secrets = sorted({secret for secret in secrets if len(secret) >= MIN_SECRET}, key=len, reverse=True)
        self.exact = [re.compile(re.escape(secret)) for secret in self.secrets]
        self.across_lines = [re.compile(_SSE_LINE_GAP.join(map(re.escape, secret))) for secret in self.secrets]

    def scrub(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, REDACTED)
        return text

    def scrub_block(self, block: CapturedBlock) -> CapturedBlock:
        """`block` with a secret that spans pieces taken out too: the pieces it touches become
        one, at the time of the first (and a part that began inside it begins with that one)."""
        texts = [piece.text for piece in block.pieces]
        spans = found_spans(self.exact, "".join(texts))
        if not spans:
            return block
        pieces: list[Piece] = []
        part_starts: list[int] = []
        for first, text in joined_across(texts, spans):
            if first in block.part_starts:
                part_starts.append(len(pieces))
            pieces.append(Piece(block.pieces[first].at, self.scrub(text)))
        return replace(block, pieces=pieces, part_starts=part_starts)

    def scrub_frames(self, frames: list[RawFrame]) -> list[RawFrame]:
        """Consecutive frames the protocol could not read, with the secrets taken out of them.
        Such frames are kept as they came, so an upstream may cut a secret anywhere SSE lets
        it: across frames, across the data lines of one, or in a line that is no field at all.
        A secret is sought in the frames' joined text with, between any two of its characters,
        a line break and the field name of the next line allowed; the frames one spans become
        one, at the time of the first, with the secret out of it."""
        texts = [frame.text for frame in frames]
        spans = found_spans(self.across_lines, "".join(texts))
        if not spans:
            return frames
        return [RawFrame(frames[first].at, self.scrub_lines(text)) for first, text in joined_across(texts, spans)]

    def scrub_lines(self, text: str) -> str:
        for pattern in self.across_lines:
            text = pattern.sub(REDACTED, text)
        return text

    def scrub_parts(self, parts: list[CapturedBlock | RawFrame]) -> list[CapturedBlock | RawFrame]:
        """The answer's parts with the secrets taken out: a block's, and each run of raw frames'."""
        scrubbed: list[CapturedBlock | RawFrame] = []
        for is_raw, run in itertools.groupby(parts, key=lambda part: isinstance(part, RawFrame)):
            if is_raw:
                scrubbed.extend(self.scrub_frames(cast("list[RawFrame]", list(run))))
            else:
                scrubbed.extend(map(self.scrub_block, cast("Iterator[CapturedBlock]", run)))
        return scrubbed

    def comment(self, text: str) -> str:
        """Text for a comment: scrubbed, with an escape for each character that would end its
        line (or that YAML refuses in a file), so that nothing in it is read as YAML."""
        return _COMMENT_UNSAFE.sub(escaped, self.scrub(text))

    def string(self, text: str) -> str:
        """A quoted scalar: single quotes for text with `"` or `\\` that needs no escapes (JSON
        reads best so), else double quotes with JSON's escapes and YAML's for what YAML refuses."""
        text = self.scrub(text)
        if ('"' in text or "\\" in text) and not _NEEDS_DOUBLE_QUOTES.search(text):
            return "'" + text.replace("'", "''") + "'"
        return _YAML_UNSAFE.sub(escaped, json.dumps(text, ensure_ascii=False))

    def flow(self, value: object) -> str:
        """A JSON value in YAML's flow style, on one line, each string quoted as `string` quotes it."""
        if isinstance(value, dict):
            return "{" + ", ".join(f"{self.string(str(key))}: {self.flow(item)}" for key, item in value.items()) + "}"
        if isinstance(value, list):
            return "[" + ", ".join(self.flow(item) for item in value) + "]"
        return self.string(value) if isinstance(value, str) else json.dumps(value)

    def name(self, text: str) -> str:
        """A model, tool or error name: plain when it reads as one, else quoted."""
        text = self.scrub(text)
        return text if _PLAIN.match(text) and text.lower() not in _YAML_WORDS else self.string(text)

    def pieces(self, pieces: list[str], indent: int) -> str:
        """A flow list of strings, wrapped to lines of about 100 characters; `indent` is the
        column its key starts at, and the lines after the first go two further in."""
        lines: list[str] = []
        line = "["
        for number, piece in enumerate(pieces):
            item = self.string(piece) + ("," if number < len(pieces) - 1 else "]")
            column = len(line) + (indent + 8 if not lines else 0)  # the first line begins after its key
            if line.strip() != "[" and column + len(item) > 100:
                lines.append(line.rstrip())
                line = " " * (indent + 2)
            line += item + " "
        lines.append(line.rstrip())
        return "\n".join(lines)


def escaped(found: re.Match) -> str:
    """A character as JSON and YAML's double quotes escape it."""
    return {"\n": "\\n", "\r": "\\r"}.get(found.group(), f"\\u{ord(found.group()):04x}")


def found_spans(patterns: Iterable[re.Pattern], text: str) -> list[tuple[int, int]]:
    """Where each pattern is found in `text`, in the order they start."""
    return sorted((found.start(), found.end()) for pattern in patterns for found in pattern.finditer(text))


def joined_across(texts: list[str], spans: list[tuple[int, int]]) -> list[tuple[int, str]]:
    """The texts, each that begins inside one of the spans of their joined text joined onto the
    one before: (the index of the first text joined, the joined text)."""
    joined: list[tuple[int, str]] = []
    offset, next_span, covered_to = 0, 0, 0
    for number, text in enumerate(texts):
        while next_span < len(spans) and spans[next_span][0] < offset:
            covered_to = max(covered_to, spans[next_span][1])
            next_span += 1
        if joined and offset < covered_to:
            joined[-1] = (joined[-1][0], joined[-1][1] + text)
        else:
            joined.append((number, text))
        offset += len(text)
    return joined


def rounded(seconds: float) -> float:
    """A pause as written: to the millisecond, or to a tenth of one below a millisecond."""
    return round(seconds, 3) if seconds >= 0.001 else round(seconds, 4)


def duration(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3f}".rstrip("0").rstrip(".") + "s"
    return f"{seconds * 1000:.1f}".rstrip("0").rstrip(".") + "ms"


# ---------------------------------------------------------------- steps


@dataclass(frozen=True, slots=True)
class Run:
    """Pieces of one block played as one step, `interval` apart; `first` is the block's index
    of the first of them."""

    pieces: list[str]
    interval: float
    first: int = 0


class Steps:
    """Lays the captured parts out as step lines.

    Two clocks, in seconds from the request: `target`, the capture's own time with every gap
    under min_gap taken out (those gaps are dropped, not saved up), and `played`, where the
    replay of the lines so far stands. Each delay is written from one to the other, so that
    neither rounding nor a run's slack adds up to drift. The lines take at most `budget` bytes
    where the parts are laid out by part_within.
    """

    def __init__(self, yaml: Yaml, min_gap: float, budget: int = MAX_FILE_BYTES, indent: int = 0):
        self.yaml = yaml
        self.min_gap = min_gap
        self.played = 0.0
        self.target = 0.0
        self.last_at = 0.0  # the capture's time of the last thing laid out
        self.lines: list[str] = []
        self.budget = budget  # bytes the lines may take
        self.indent = indent  # columns each line is written further in (an entry of a sequence's)
        self.used = 0  # bytes the lines measured so far take
        self.measured = 0  # how many lines those are
        self.output_chars = 0  # characters of output laid out
        self.cut: str | None = None  # where the answer was cut to keep within the budget, in words

    def size(self) -> int:
        """The bytes the lines take so far."""
        self.used += byte_size(self.lines[self.measured :], self.indent)
        self.measured = len(self.lines)
        return self.used

    def mark(self) -> Mark:
        return Mark(len(self.lines), self.size(), self.played, self.target, self.last_at)

    def back_to(self, mark: Mark) -> None:
        del self.lines[mark.lines :]
        self.measured, self.used, self.played, self.target, self.last_at = mark

    def part_within(self, part: CapturedBlock | RawFrame) -> bool:
        """Lay out `part`, or as much of its start as fits within the budget; False when not all
        of it fits, with `cut` saying where it was cut. A block's text is cut short (each try
        keeps as much of it as the last one's size says may fit); any other part is left out."""
        mark = self.mark()
        self.part(part)
        whole = len(part.text) if isinstance(part, RawFrame) else len(part.text())
        if self.size() <= self.budget:
            self.output_chars += whole
            return True
        kept = whole if isinstance(part, CapturedBlock) else 0
        while kept > 0 and self.size() > self.budget:
            fits = kept * (self.budget - mark.used) * 49 // ((self.size() - mark.used) * 50)  # aiming 2% under
            kept = max(0, min(kept - 1, fits))
            self.back_to(mark)
            if kept:
                self.part(first_chars(cast(CapturedBlock, part), kept))  # only a block keeps some
        if self.size() > self.budget:
            self.back_to(mark)
        self.output_chars += kept
        at = first_left_out(part, kept)
        self.cut = f"after {self.output_chars:,} characters of output"
        self.cut += f", {duration(rounded(at))} into the answer" if at is not None else ""
        return False

    def advance(self, at: float | None) -> float:
        """The target time of what the capture has at `at` (None: no timing, no gap)."""
        if at is not None:
            gap = at - self.last_at
            if gap >= self.min_gap:
                self.target += gap
            self.last_at = max(self.last_at, at)  # pieces of calls that streamed side by side may come out of order
        return self.target

    def wait_until(self, at: float | None, why: str = "") -> None:
        self.wait_for(self.advance(at), why)

    def wait_for(self, target: float, why: str = "") -> None:
        """A `delay` to reach `target`, unless it is under min_gap away."""
        if target - self.played < self.min_gap:
            return
        written = rounded(target - self.played)
        self.lines.append(f"  - delay: {duration(written)}{why}")
        self.played += written

    def part(self, part: CapturedBlock | RawFrame) -> None:
        if isinstance(part, RawFrame):
            self.wait_until(part.at)
            self.lines.append(f"  - raw: {self.yaml.string(part.text)}")
        elif part.kind in CALL_STEPS:
            self.tool_call(part)
        elif part.citations:
            self.cited(part)
        elif part.kind in HOSTED_KINDS:
            self.wait_until(part.at)
            self.lines.append(getattr(self, HOSTED_KINDS[part.kind])(part))
        elif part.kind == "redacted_thinking":
            self.wait_until(part.at)
            data = f": {self.yaml.string(part.data)}" if part.data else "  # reasoning that showed no text"
            self.lines.append(f"  - redacted_thinking{data}")
        else:
            for number, run in enumerate(self.runs(part)):
                self.output(part, run, signed=number == 0)

    def targets(self, block: CapturedBlock) -> list[float]:
        """When each piece of `block` should play; the replay has waited for the first."""
        first = block.pieces[0].at if block.pieces else block.at
        self.wait_until(first, "  # before the first token" if not self.lines else "")
        return [self.target] + [self.advance(piece.at) for piece in block.pieces[1:]]

    def runs(self, block: CapturedBlock) -> Iterator[Run]:
        """The block's pieces in runs, each as long as its pieces keep to one interval; the
        delay before each run after the first is laid out once the one before it is. A run
        that begins inside a summary part ends where the next part begins: only a run that
        begins a part can begin more of them."""
        texts = [piece.text for piece in block.pieces] or [""]
        targets = self.targets(block)
        starts = {0, *block.part_starts}
        start = 0
        while start < len(texts):
            if start:
                self.wait_for(targets[start])
            base = self.played  # where the replay stands at the run's first piece: behind its target by up to a slack
            interval = max(0.0, rounded(targets[start + 1] - base)) if start + 1 < len(texts) else 0.0
            slack = max(self.min_gap, interval / 4)
            end = start + 1
            while (
                end < len(texts)
                and abs(targets[end] - base - (end - start) * interval) <= slack
                and (start in starts or end not in starts)
            ):
                end += 1
            if end - start == 2 and end < len(texts):  # a lone gap before others: a delay reads better
                end, interval = start + 1, 0.0
            self.played += (end - start - 1) * interval
            yield Run(texts[start:end], interval, start)
            start = end

    def output(self, block: CapturedBlock, run: Run, signed: bool) -> None:
        parts = [start - run.first for start in block.part_starts if run.first <= start < run.first + len(run.pieces)]
        if parts:  # the run begins a summary part after the first, or holds the start of one
            self.parts(run, ([0] if parts[0] else []) + parts)
        else:
            self.lines.append(f"  - {block.kind}: " + self.text(run.pieces, indent=4, chunk_indent=4))
            self.interval(run)
        if block.phase:
            self.lines.append(f"    phase: {block.phase}")
        if signed and block.signature:
            self.lines.append(f"    signature: {self.yaml.string(block.signature)}")

    def parts(self, run: Run, starts: list[int]) -> None:
        """A reasoning step of summary parts: each a string, split by one `chunk` for all, or a list of pieces.
        The first part begins a part of its own, unless it is the block's first."""
        parts = [run.pieces[start:end] for start, end in zip(starts, starts[1:] + [len(run.pieces)])]
        chunks = {chunk_of(part) for part in parts}
        chunk = chunks.pop() if len(chunks) == 1 else None
        self.lines.append("  - reasoning:")
        self.lines.append("      parts:")
        for part in parts:
            joined = self.yaml.string("".join(part))
            self.lines.append(
                "        - " + (joined if chunk is not None or len(part) == 1 else self.yaml.pieces(part, indent=8))
            )
        if chunk:
            self.lines.append(f"    chunk: {chunk}")
        self.interval(run)

    def text(self, pieces: list[str], indent: int, chunk_indent: int, json_only: bool = False) -> str:
        """The pieces as one string with the `chunk` that splits it so, or as a list of them."""
        joined = "".join(pieces)
        chunk = chunk_of(pieces)
        if chunk is not None and not (json_only and not is_json(joined)):
            written = self.yaml.string(joined)
            return written if chunk == "" else f"{written}\n{' ' * chunk_indent}chunk: {chunk}"
        return self.yaml.pieces(pieces, indent)

    def interval(self, run: Run) -> None:
        if run.interval and len(run.pieces) > 1:
            self.lines.append(f"    interval: {duration(run.interval)}")

    def one_run(self, block: CapturedBlock) -> Run:
        """All of the block's pieces as one run, spaced by their mean gap."""
        targets = self.targets(block)
        gaps = [later - earlier for earlier, later in zip(targets, targets[1:])]
        run = Run([piece.text for piece in block.pieces] or [""], rounded(statistics.fmean(gaps)) if gaps else 0.0)
        self.played += run.interval * len(gaps)
        return run

    def tool_call(self, block: CapturedBlock) -> None:
        """A tool call (or a custom tool's) is one step: its pieces spaced by their mean gap."""
        run = self.one_run(block)
        field = CALL_STEPS[block.kind]
        self.lines.append(f"  - {block.kind}:")
        self.lines.append(f"      name: {self.yaml.name(block.name or 'tool')}")
        if block.call_id:
            self.lines.append(f"      id: {self.yaml.name(block.call_id)}")
        if block.caller:
            self.lines.append(f"      caller: {block.caller}")
        json_only = block.kind == "tool_call"
        self.lines.append(f"      {field}: " + self.text(run.pieces, indent=6, chunk_indent=4, json_only=json_only))
        self.interval(run)

    def cited(self, block: CapturedBlock) -> None:
        """Text that cites is one step, as a tool call is, so that its citations' offsets are in its one text."""
        run = self.one_run(block)
        self.lines.append("  - text: " + self.text(run.pieces, indent=4, chunk_indent=4))
        self.interval(run)
        if block.phase:
            self.lines.append(f"    phase: {block.phase}")
        self.lines += self.citation_lines(block.citations, "".join(run.pieces))

    def citation_lines(self, citations: list[CapturedCitation], text: str) -> list[str]:
        """A `citations:` key with those of `citations` that fall within `text`."""
        lines = []
        for citation in citations:
            span = placed(citation, text)
            if span is None:
                continue
            start, end = span
            lines.append(f"      - url: {self.yaml.string(citation.url)}")
            if citation.title is not None:
                lines.append(f"        title: {self.yaml.string(citation.title)}")
            if citation.cited_text is not None and citation.cited_text != text[start:end]:
                lines.append(f"        cited_text: {self.yaml.string(citation.cited_text)}")
            lines += [f"        start: {start}", f"        end: {end}"]
        return ["    citations:", *lines] if lines else []

    def server_tool(self, block: CapturedBlock) -> str:
        """A hosted call is one step, in JSON (which YAML reads): its input as far as it came."""
        hosted = block.hosted or {}
        try:
            tool_input = json.loads(block.text() or "{}")
        except ValueError:
            tool_input = {}  # cut short
        given = {**hosted, "input": tool_input if isinstance(tool_input, dict) else {}}
        step = {key: given[key] for key in STEP_ORDER if given.get(key) is not None}
        return f"  - server_tool: {self.yaml.flow(step)}"

    def compaction(self, block: CapturedBlock) -> str:
        return f"  - compaction: {self.yaml.string(block.text())}"

    def ending(self, captured: Captured) -> None:
        if captured.ending == FAILED:
            self.wait_until(captured.ended_at)
            self.lines.append(f"  - fail: {fail_value(captured, self.yaml)}")
        elif captured.ending == CUT:
            self.wait_until(captured.ended_at)
            self.lines.append("  - disconnect")
        elif captured.ending == LEFT:
            last_output, last_comment = captured.last_output_at, captured.last_comment_at
            if last_comment is not None and (last_output is None or last_comment > last_output):
                self.wait_until(captured.ended_at)  # keepalives came until the client went: they play until then too
            self.lines.append("  - hang  # the client went away here")
        else:
            self.wait_until(captured.ended_at)


def placed(citation: CapturedCitation, text: str) -> tuple[int, int] | None:
    """Where in `text` a citation is: its own offsets, or (with none) where its cited text is,
    else all of it; None when that is not inside the text (cut short, or scrubbed of a secret)."""
    start, end = citation.start, citation.end
    if start is None or end is None:
        found = text.find(citation.cited_text) if citation.cited_text else -1
        start, end = (found, found + len(cast(str, citation.cited_text))) if found >= 0 else (0, len(text))
    return (start, end) if 0 <= start < end <= len(text) else None


def default_fail_message(protocol: str, kind: str) -> str:
    """The message a `fail` of `kind` that names none plays with on `protocol`."""
    own = messages.OWN_FAIL_MESSAGES if protocol == messages.NAME else {}
    return own.get(kind, FAIL_MESSAGES[kind])


def fail_value(captured: Captured, yaml: Yaml) -> str:
    """The `fail` that gives the captured error again: its kind, and its message, type, code
    and param and Responses' `error_event: false` where they are not the kind's."""
    failure = cast(CapturedFailure, captured.failure)  # asked only of an answer that failed
    fields = [f"kind: {failure.kind}"]
    if failure.message != default_fail_message(captured.protocol, failure.kind):
        fields.append(f"message: {yaml.string(failure.message)}")
    fields.extend(f"{name}: {yaml.name(value)}" for name, value in detail_fields(failure.details))
    if not failure.error_event:
        fields.append("error_event: false")
    return failure.kind if len(fields) == 1 else "{" + ", ".join(fields) + "}"


def detail_fields(details: ErrorDetails) -> list[tuple[str, str]]:
    """An error's own type, code and param, by their scenario keys."""
    given = (("type", details.error_type), ("code", details.code), ("param", details.param))
    return [(name, value) for name, value in given if value is not None]


class Mark(NamedTuple):
    """Where laying out steps stood, to go back to."""

    lines: int
    used: int
    played: float
    target: float
    last_at: float


def first_chars(block: CapturedBlock, kept: int) -> CapturedBlock:
    """`block` with only the first `kept` characters of its text."""
    pieces = []
    for piece in block.pieces:
        if kept <= 0:
            break
        pieces.append(Piece(piece.at, piece.text[:kept]))
        kept -= len(piece.text)
    return replace(block, pieces=pieces, part_starts=[start for start in block.part_starts if start < len(pieces)])


def first_left_out(part: CapturedBlock | RawFrame, kept: int) -> float | None:
    """When the first character of `part` after the first `kept` came (None: no timing)."""
    if isinstance(part, RawFrame):
        return part.at
    for piece in part.pieces:
        kept -= len(piece.text)
        if kept < 0:
            return piece.at
    return part.at


def chunk_of(pieces: list[str]) -> str | int | None:
    """The `chunk` that splits the joined pieces into these: "" for one piece, word, char or N;
    None when none does, or for two pieces, which one of them could split by chance."""
    if len(pieces) == 1:
        return ""
    if len(pieces) == 2:
        return None
    joined = "".join(pieces)
    for chunk in ("word", "char") + ((len(pieces[0]),) if len(pieces[0]) > 1 else ()):
        if split_deltas(joined, chunk) == tuple(pieces):
            return chunk
    return None


def is_json(text: str) -> bool:
    """Whether `text` is JSON a scenario file may hold as one string: no deeper than MAX_JSON_DEPTH
    (much deeper, the loader's parse could pass the depth Python reads, where this one did not)."""
    raw = text.encode("utf-8", "surrogatepass")
    if raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH and shape_of(raw, len(raw)).depth > MAX_JSON_DEPTH:
        return False
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


# ---------------------------------------------------------------- the whole file


@dataclass(frozen=True)
class ScenarioFile:
    """A scenario file to write: the stem of its name, its text, and where the answer was cut
    to keep the file within the size a scenario file may have (None: it was not)."""

    stem: str
    text: str
    cut: str | None = None


def scenario_file(
    captured: Captured,
    request: Request | None,
    origin: Origin,
    name_from: str | None = None,
    min_gap: float = DEFAULT_MIN_GAP,
    secrets: Iterable[str] = (),
) -> ScenarioFile:
    """The scenario file for one captured answer, named by the words of `name_from` (the prompt,
    or what else names the capture), secrets taken out before they are cut to a name. Its steps
    stop where the file would pass MAX_FILE_BYTES; CaptureError for an answer whose file would
    pass it even so."""
    yaml = Yaml(secrets)
    lines = [f"# {yaml.comment(line)}" for line in header(captured, origin, min_gap, yaml)]
    lines += asked_lines(captured, request, yaml)
    answer, cut = answer_lines(captured, origin, min_gap, yaml, MAX_FILE_BYTES - byte_size(lines))
    text = within_size("\n".join(lines + answer) + "\n")
    return ScenarioFile(file_stem(captured.protocol, yaml.scrub(name_from or "")), text, cut)


def asked_lines(captured: Captured, request: Request | None, yaml: Yaml) -> list[str]:
    """What was asked: the description and the `match`."""
    return [
        f"description: {yaml.string(description(captured, request, yaml))}",
        *match_lines(captured.protocol, request, yaml),
    ]


def answer_lines(
    captured: Captured, origin: Origin, min_gap: float, yaml: Yaml, budget: int, indent: int = 0
) -> tuple[list[str], str | None]:
    """The answer as a scenario's body (its http_error, or its settings and steps) in at most
    `budget` bytes as far as its steps go, each line `indent` columns further in, and where they
    were cut to keep within it (None: not cut)."""
    if captured.http_error is not None:
        return http_error_lines(captured.http_error, yaml), None
    lines = setting_lines(captured, yaml)
    min_gap = min_gap if origin.timed else float("inf")
    steps = steps_within(captured, yaml, min_gap, budget - byte_size(lines, indent), indent)
    return lines + ["steps:", *steps.lines], steps.cut


def within_size(text: str) -> str:
    """`text`, when a scenario file may hold it; else CaptureError."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_FILE_BYTES:
        raise CaptureError(f"its scenario would take {size:,} bytes, more than the {MAX_FILE_BYTES:,} a file may hold")
    return text


@dataclass(frozen=True)
class Retried:
    """The attempts of one request so far (the same path and body: a client's retries of it) as
    one `sequence:` scenario, an entry for each in the order they came, so that a replay's
    requests get them in that order. `head` is the first attempt's: its source, description
    and `match`; each entry is laid out once, when its attempt ends."""

    head: tuple[str, ...]
    pauses: str  # the comment line on what pauses are left out
    entries: tuple[tuple[str, ...], ...]
    cut: str | None = None  # where the last attempt's answer was cut to keep within the file's size

    @classmethod
    def begun(
        cls, captured: Captured, request: Request | None, origin: Origin, min_gap: float, secrets: Iterable[str]
    ) -> Retried:
        """The request's first attempt, to be followed by its retries."""
        yaml = Yaml(secrets)
        source, _, pauses, *_ = header(captured, origin, min_gap, yaml)
        head = (f"# {yaml.comment(source)}", *asked_lines(captured, request, yaml))
        return cls(head, f"# {yaml.comment(pauses)}", ()).then(captured, origin, min_gap, secrets)

    def then(self, captured: Captured, origin: Origin, min_gap: float, secrets: Iterable[str]) -> Retried:
        """These attempts and the next; CaptureError when the file would pass MAX_FILE_BYTES even
        with its steps cut."""
        yaml = Yaml(secrets)
        said = [f"Attempt {len(self.entries) + 1}, {attempt_said(captured, origin)}", *kept_out(captured, yaml)]
        comments = [f"  # {yaml.comment(line)}" for line in said]
        budget = MAX_FILE_BYTES - byte_size([*self.lines(), SEQUENCE_COUNT, *comments])
        answer, cut = answer_lines(captured, origin, min_gap, yaml, budget, ENTRY_INDENT)
        entry = (*comments, "  - " + answer[0], *(" " * ENTRY_INDENT + line for line in answer[1:]))
        retried = replace(self, entries=(*self.entries, entry), cut=cut)
        within_size(retried.text())
        return retried

    def lines(self) -> list[str]:
        said = SEQUENCE_COUNT.format(count=len(self.entries))
        return [self.head[0], said, self.pauses, *self.head[1:], "sequence:", *itertools.chain(*self.entries)]

    def text(self) -> str:
        return "\n".join(self.lines()) + "\n"


def cut_said(written: ScenarioFile | Retried) -> str:
    """What a line saying a file was written adds when its answer was cut."""
    return f"; cut {written.cut} to keep within the {MAX_FILE_BYTES:,} bytes a file may hold" if written.cut else ""


def scenario_text(
    captured: Captured,
    request: Request | None,
    origin: Origin,
    min_gap: float = DEFAULT_MIN_GAP,
    secrets: Iterable[str] = (),
) -> str:
    """The text of the scenario file for one captured answer."""
    return scenario_file(captured, request, origin, None, min_gap, secrets).text


def steps_within(captured: Captured, yaml: Yaml, min_gap: float, budget: int, indent: int = 0) -> Steps:
    """The answer's steps in at most `budget` bytes: its parts as far as they fit, then a comment
    saying where it was cut if they did not all fit, then how it ended."""
    failure = byte_size([fail_value(captured, yaml)], indent) if captured.ending == FAILED else 0
    steps = Steps(yaml, min_gap, budget - ENDING_ROOM - failure, indent)
    for part in yaml.scrub_parts(captured.parts):
        if not steps.part_within(part):
            steps.lines.append(f"  # Cut here, {steps.cut}: the rest would take the file past {MAX_FILE_BYTES:,} bytes")
            break
    steps.ending(captured)
    if not steps.lines:
        steps.lines.append('  - text: ""')
    return steps


def byte_size(lines: Iterable[str], indent: int = 0) -> int:
    """The bytes `lines` take in a file, each with its line end (and `indent` columns further in)."""
    return sum(len(line.encode("utf-8", "surrogatepass")) + 1 + indent for line in lines)


def header(captured: Captured, origin: Origin, min_gap: float, yaml: Yaml) -> list[str]:
    source = cut_short(yaml.scrub(origin.source), MAX_SOURCE_CHARS)
    lines = [source, attempt_said(captured, origin)]
    lines.append(
        f"Pauses under {duration(min_gap)} are left out."
        if origin.timed
        else "The capture has no timing: no pauses are written."
    )
    return lines + kept_out(captured, yaml)


def attempt_said(captured: Captured, origin: Origin) -> str:
    """When the answer came, and what it was: `on 2026-05-04 at 10:29:50 UTC: an answer, HTTP 429.`"""
    when = f"on {origin.when:%Y-%m-%d at %H:%M:%S %Z}"
    if not captured.answered:
        return f"{when}: no answer, not even an HTTP status."
    kind = "a streamed answer" if captured.streamed else "an answer"
    events = f", {captured.events} events" if captured.streamed else ""
    return f"{when}: {kind}, {status_said(captured)}{events}."


def status_said(captured: Captured) -> str:
    return f"HTTP {captured.status}" if captured.answered else "no HTTP status"


def kept_out(captured: Captured, yaml: Yaml) -> list[str]:
    """What of the answer a file does not keep, and the capture's notes."""
    return ([f"Not kept: {left_out(captured, yaml)}."] if captured.left_out else []) + captured.notes


def left_out(captured: Captured, yaml: Yaml) -> str:
    """What of the answer fakehop does not play: the first MAX_KINDS kinds, each named in at most
    MAX_KIND_CHARS characters once its secrets are out, and how many more (an upstream may
    send kinds without end)."""
    counts = list(captured.left_out.items())
    said = [f"{count} {cut_short(yaml.scrub(what), MAX_KIND_CHARS)}" for what, count in counts[:MAX_KINDS]]
    more = counts[MAX_KINDS:]
    return "; ".join(said + ([f"{sum(count for _, count in more)} of {len(more)} other kinds"] if more else []))


def cut_short(text: str, most: int) -> str:
    """`text`, or its start and "..." when it is longer than `most` characters."""
    return text if len(text) <= most else text[: most - 3] + "..."


def usage_details(captured: Captured) -> list[tuple[str, int]]:
    """The usage detail counts a replay would not give again unless the file says them: the
    reasoning tokens it would estimate from the reasoning text otherwise (0 when the answer
    gave none), and the others, 0. On Messages they go by Anthropic's names."""
    output_tokens = captured.usage.output_tokens if captured.usage and captured.usage.output_tokens is not None else 0
    reasoning_chars = sum(len(block.text()) for block in captured.blocks() if block.kind == "reasoning")
    replayed = {"reasoning_tokens": min(output_tokens, estimate_tokens(reasoning_chars))}
    given = {
        **dict.fromkeys(replayed, 0),
        **captured.usage_details,
    }  # a count the answer did not give was none to its client
    names = MESSAGES_USAGE_NAMES if captured.protocol == "messages" else {}
    return [(names.get(name, name), count) for name, count in given.items() if count != replayed.get(name, 0)]


def description(captured: Captured, request: Request | None, yaml: Yaml) -> str:
    """What was asked, its prompt cut short once its secrets are out (a secret cut first would no longer be found)."""
    if request is None or request.prompt is None:
        return f"A {captured.protocol} answer, captured."
    return f'A {captured.protocol} answer to "{cut_short(yaml.scrub(request.prompt), 60)}", captured.'


def match_lines(protocol: str, request: Request | None, yaml: Yaml) -> list[str]:
    if request is None:
        return [
            "match:  # the capture holds no request: this answers any request of its protocol",
            f"  protocol: {protocol}",
        ]
    unknown = (
        f"  # it continues {yaml.string(request.unknown_chain)}, an answer not captured here: its turn is not known"
        if request.unknown_chain
        else ""
    )
    lines = ["match:" + unknown, f"  protocol: {protocol}"]
    if request.model is not None:
        lines.append(f"  model: {yaml.name(glob_escape(yaml.scrub(request.model)))}")
    if request.prompt is not None:
        lines.append(prompt_line(yaml.scrub(request.prompt), yaml))
    if request.turn is not None:
        lines.append(f"  turn: {request.turn}")
        if request.turn > 1 and request.tool_result is not None:
            lines.append(f"  tool_result: {'true' if request.tool_result else 'false'}")
    return lines


def prompt_line(prompt: str, yaml: Yaml) -> str:
    """The match of the last user message: exactly, as far as a match reads it."""
    pattern = yaml.string("/^" + regex_escape(prompt[:MATCH_PREFIX_CHARS]) + "$/")
    if len(prompt) <= MATCH_PREFIX_CHARS:
        return f"  prompt: {pattern}  # the last user message, exactly"
    return f"  prompt: {pattern}  # the last user message, as far as a match reads ({MATCH_PREFIX_CHARS:,} characters)"


def regex_escape(text: str) -> str:
    """`text` as a regular expression that matches only itself, escaping no more than it must."""
    return _REGEX_SPECIAL.sub(r"\\\1", text)


def glob_escape(text: str) -> str:
    """`text` as a glob that matches only itself."""
    return re.sub(r"([*?\[])", r"[\1]", text)


def http_error_lines(error: HttpError, yaml: Yaml) -> list[str]:
    lines = ["http_error:", f"  status: {error.status}"]
    if error.message is not None:
        message = yaml.scrub(error.message)
        lines.append(f"  message: {yaml.string(message[:MAX_MESSAGE] if error.from_body else message)}")
    lines.extend(f"  {name}: {yaml.name(value)}" for name, value in detail_fields(error.details))
    if error.retry_after is not None:
        lines.append(f"  retry_after: {yaml.string(error.retry_after)}")
    if error.headers:
        lines.append("  headers:")
        lines.extend(f"    {yaml.name(name)}: {yaml.string(value)}" for name, value in error.headers)
    return lines


def setting_lines(captured: Captured, yaml: Yaml) -> list[str]:
    lines = []
    if captured.model:
        lines.append(f"model: {yaml.name(captured.model)}")
    keepalive = keepalive_line(captured)
    if keepalive:
        lines.append(keepalive)
    usage = captured.usage
    if usage is not None and captured.ending == FINISHED:
        given = (("input_tokens", usage.input_tokens), ("output_tokens", usage.output_tokens), *usage_details(captured))
        counts = [f"{name}: {value}" for name, value in given if value is not None]
        if counts:
            lines.append(f"usage: {{{', '.join(counts)}}}")
    if any(
        (block.kind == "reasoning" and block.text()) or block.kind == "redacted_thinking" for block in captured.blocks()
    ):
        lines.append("force_reasoning: true  # the reasoning shows as it was captured, whatever a request asks")
    lines.extend(finish_lines(captured, yaml))
    return lines


def finish_lines(captured: Captured, yaml: Yaml) -> list[str]:
    """The finish, when it is not the one a replay infers; a stop_sequence one with its sequence."""
    blocks = captured.blocks()
    if any(block.kind in CALL_STEPS for block in blocks):
        inferred = "tool_calls"
    else:
        inferred = "pause_turn" if paused(blocks) else "stop"
    if captured.finish is None or captured.finish == inferred:
        return []
    if captured.finish == "stop_sequence":  # a reader gives it only with its sequence
        return ["finish: stop_sequence", f"stop_sequence: {yaml.string(cast(str, captured.stop_sequence))}"]
    return [f"finish: {captured.finish}"]


def keepalive_line(captured: Captured) -> str | None:
    """The keepalive spacing the stream showed: the usual silence before a comment frame; or
    0 when it went quiet for longer than the default spacing with none."""
    if captured.keepalive_gaps:
        spacing = max(MIN_KEEPALIVE, rounded(statistics.median(captured.keepalive_gaps)))
        if abs(spacing - DEFAULT_KEEPALIVE) <= DEFAULT_KEEPALIVE * KEEPALIVE_SLACK:
            return None
        return f"keepalive: {duration(spacing)}  # as the stream's comment frames came"
    if captured.longest_silence > DEFAULT_KEEPALIVE * (1 + KEEPALIVE_SLACK):
        return f"keepalive: 0  # {duration(rounded(captured.longest_silence))} of silence with no keepalive"
    return None


# ---------------------------------------------------------------- files


def file_stem(protocol: str, words_from: str | None, fallback: str = "answer") -> str:
    """`chat-what-is-the-weather`: the protocol and the first words of the prompt (or of `fallback`)."""
    words = _WORDS.findall((words_from or "").lower()) or _WORDS.findall(fallback.lower()) or ["answer"]
    stem = protocol
    for word in words:
        if len(stem) + 1 + len(word) > MAX_NAME:
            break
        stem += "-" + word
    return stem if stem != protocol else f"{protocol}-{words[0][: MAX_NAME - len(protocol) - 1]}"


def write_new(directory: Path, stem: str, text: str) -> Path:
    """Write `text` to DIRECTORY/STEM.yaml, or STEM-2.yaml, STEM-3.yaml…: never over a file
    (nor beside one of the same stem, whose name it would share)."""
    number = 1
    while True:
        name = stem if number == 1 else f"{stem}-{number}"
        if not any((directory / (name + suffix)).exists() for suffix in SCENARIO_SUFFIXES):
            try:
                with open(directory / f"{name}.yaml", "x", encoding="utf-8") as out:
                    out.write(text)
                return directory / f"{name}.yaml"
            except FileExistsError:  # written by another at the same moment
                pass
        number += 1
