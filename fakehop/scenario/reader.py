"""Scenario files: YAML in, validated immutable objects out.

Every problem in a file is found at load time and reported with the file, the line and the
offending key (with the nearest valid key when one is close), so a bad scenario never
surfaces in the middle of somebody's test run.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeGuard, cast

import re2

from .. import CONTROL_PREFIX
from . import textgen, yamlsource
from .hints import did_you_mean
from .model import (
    DEFAULT_KEEPALIVE,
    DEFAULT_STALL_TIMEOUT,
    FINISH_REASONS,
    MAX_TEXT_CHARS,
    MODERATION_CATEGORIES,
    SERVER_TOOL_NAMES,
    Citation,
    Compaction,
    Delay,
    Disconnect,
    Entry,
    Fail,
    Hang,
    HttpError,
    KeepaliveNow,
    Match,
    Moderation,
    Output,
    Quote,
    QuoteRef,
    RateLimit,
    Raw,
    RedactedThinking,
    Scenario,
    Script,
    ServerTool,
    Stall,
    Step,
    StopDetails,
    TextRule,
    Timing,
    ToolCall,
    TurnRule,
    Usage,
)
from .yamlsource import LineDict, LineList

MAX_FILE_BYTES = 1_000_000
MAX_DURATION = 86_400.0
MAX_USAGE_COUNT = 10**9
MAX_RATE_LIMIT_COUNT = 10**12
MAX_TIMING_SEED = 2**63 - 1
SCENARIOS_SOURCE = f"<POST {CONTROL_PREFIX}/scenarios>"  # the source of a scenario sent to the control API
PROTOCOL_NAMES = ("chat", "responses", "messages")
FAIL_KINDS = ("rate_limit", "server_error", "invalid_prompt", "overloaded", "interrupted")
SCENARIO_SUFFIXES = (".yaml", ".yml")
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")

MIN_KEEPALIVE = 0.001  # a keepalive interval that is not 0 (never); played at least this long after the time scale too
# Headers an http_error may not set: they say how the answer is framed, which is the server's to say.
FRAMING_HEADERS = frozenset(
    (
        "content-type",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "upgrade",
        "te",
        "trailer",
        "content-encoding",
        "host",
    )
)
_HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")  # RFC 9110 token
_HEADER_VALUE = re.compile(r"^[^\x00-\x08\x0a-\x1f\x7f]*$")  # no control characters but tab
_REGEX_OPTIONS = re2.Options()
_REGEX_OPTIONS.log_errors = False  # a pattern RE2 refuses is reported as a scenario problem, not logged

# ---------------------------------------------------------------- errors


@dataclass(frozen=True, slots=True)
class Problem:
    source: str
    line: int
    message: str

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line else self.source
        return f"{where}: {self.message}"


class ScenarioError(Exception):
    """One or more problems in scenario files; str() lists them all, one a line."""

    def __init__(self, problems: Iterable[Problem]):
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


@dataclass
class _Checker:
    """Collects problems while one document is read, so all of them are reported at once."""

    source: str
    problems: list[Problem] = field(default_factory=list)
    text_chars: int = 0  # so far, towards MAX_TEXT_CHARS
    code_run: tuple[ServerTool, int] | None = None  # the latest code_execution step, and its line
    code_ids: dict[int, tuple[ServerTool, str]] = field(default_factory=dict)  # id() of a called one: it, its id

    def add(self, line: int, message: str) -> None:
        self.problems.append(Problem(self.source, line, message))

    def counted(self, line: int, text: str) -> str | None:
        """`text`, counted towards MAX_TEXT_CHARS; None (and a problem, the first time) once over it."""
        before = self.text_chars
        self.text_chars += len(text)
        if self.text_chars <= MAX_TEXT_CHARS:
            return text
        if before <= MAX_TEXT_CHARS:
            self.add(line, f"the scenario's text adds up to more than {MAX_TEXT_CHARS:,} characters")
        return None


def _suggest(key: Any, valid: Iterable[str]) -> str:
    return did_you_mean(key, valid) or f"; valid keys: {', '.join(sorted(valid))}"


def _check_keys(check: _Checker, mapping: LineDict, valid: Iterable[str], where: str) -> None:
    valid = tuple(valid)
    for key in mapping:
        if key not in valid:
            check.add(mapping.key_lines.get(key, mapping.line), f"unknown key {key!r} in {where}{_suggest(key, valid)}")


def _line_of(container: Any, key: Any, default: int = 0) -> int:
    if isinstance(container, LineDict):
        return container.key_lines.get(key, container.line)
    if isinstance(container, LineList) and isinstance(key, int) and key < len(container.item_lines):
        return container.item_lines[key]
    return getattr(container, "line", default)


def _type_name(value: Any) -> str:
    if value is None:
        return "nothing"
    for kind, name in (
        (bool, "true/false"),
        (dict, "a mapping"),
        (list, "a list"),
        (str, "a string"),
        ((int, float), "a number"),
    ):
        if isinstance(value, kind):
            return name
    return type(value).__name__


# ---------------------------------------------------------------- scalar readers

DURATION_PATTERN = r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?\s*$"  # the schema gives editors the same
_DURATION = re.compile(DURATION_PATTERN)
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(value: Any) -> float:
    """Seconds from `0.25`, `250ms`, `2s`, `1.5m`, `1h`; ValueError with a readable message."""
    if isinstance(value, bool) or value is None:
        raise ValueError(f"expected a duration such as 2s or 250ms, got {_type_name(value)}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        found = _DURATION.match(value)
        if not found:
            raise ValueError(f"expected a duration such as 2s, 250ms or 1.5m, got {value!r}")
        seconds = float(found.group(1)) * _UNIT_SECONDS[found.group(2)]
    else:
        raise ValueError(f"expected a duration such as 2s or 250ms, got {_type_name(value)}")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"a duration must be zero or more seconds, got {value!r}")
    if seconds > MAX_DURATION:
        raise ValueError(f"a duration must be at most 24h, got {value!r}")
    return seconds


def _duration(check: _Checker, mapping: LineDict, key: str, default: float) -> float:
    if key not in mapping:
        return default
    try:
        return parse_duration(mapping[key])
    except ValueError as exc:
        check.add(_line_of(mapping, key), f"{key}: {exc}")
        return default


def _string(check: _Checker, mapping: LineDict, key: str, default: str | None = None) -> str | None:
    value = mapping.get(key, default)
    if value is default:
        return default
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        check.add(_line_of(mapping, key), f"{key}: expected a string, got {_type_name(value)}")
        return default
    if isinstance(value, float):  # its text is lost: 0.10 reads as 0.1, 1.0e3 as 1000.0
        check.add(
            _line_of(mapping, key), f"{key}: YAML reads this as the number {value!r}; quote it to keep it as written"
        )
        return default
    return str(value)


def _int(check: _Checker, mapping: LineDict, key: str, low: int, high: int) -> int | None:
    if key not in mapping:
        return None
    value = mapping[key]
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        check.add(_line_of(mapping, key), f"{key}: expected a whole number from {low} to {high}, got {value!r}")
        return None
    return value


# ---------------------------------------------------------------- steps

ACTION_KEYS = (
    "text",
    "reasoning",
    "refusal",
    "tool_call",
    "custom_tool_call",
    "redacted_thinking",
    "delay",
    "keepalive",
    "stall",
    "hang",
    "fail",
    "disconnect",
    "raw",
    "server_tool",
    "compaction",
)
REDACTED_THINKING = RedactedThinking(None)  # its data made up per answer
BARE_STEPS: dict[str, Step] = {
    "keepalive": KeepaliveNow(),
    "stall": Stall(resume=False),
    "hang": Hang(),
    "disconnect": Disconnect(),
    "redacted_thinking": REDACTED_THINKING,
}
ENDING_STEPS: dict[type, str] = {
    Fail: "a fail",
    Disconnect: "a disconnect",
    Hang: "a hang",
}  # and a Stall without resume: see _ending_of
CHUNKED_ACTIONS = ("text", "reasoning", "refusal", "tool_call", "custom_tool_call")
STEP_MODIFIERS = ("chunk", "interval")
STEP_KEYS = {
    "reasoning": ("signature",),
    "text": ("phase", "citations"),
    "server_tool": ("chunk",),
}  # what else a step of these kinds takes
PHASES = ("commentary", "final_answer")
TOOL_CALL_KEYS = ("name", "arguments", "id", "caller")  # the name, its text's, the id, who calls it
TOOL_CALLERS = ("code_execution",)
ID_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
CUSTOM_TOOL_CALL_KEYS = ("name", "input", "id")
CITATION_KEYS = ("url", "title", "cited_text", "start", "end")
ERROR_DETAIL_KEYS = ("type", "code", "param")
FAIL_KEYS = ("kind", "message", "error_event") + ERROR_DETAIL_KEYS
_WORD = re.compile(r"\s*\S+")


def split_deltas(text: str, chunk: Any) -> tuple[str, ...]:
    """Split text into deltas: None = one delta, "word", "char", or N characters a delta."""
    if not text:
        return (text,)
    if chunk is None:
        return (text,)
    if chunk == "char":
        return tuple(text)
    if chunk == "word":
        words = _WORD.findall(text)
        if not words:
            return (text,)
        tail = len(text) - sum(map(len, words))
        if tail:
            words[-1] += text[-tail:]
        return tuple(words)
    return tuple(text[i : i + chunk] for i in range(0, len(text), chunk))


def _chunking(check: _Checker, step: LineDict) -> Any:
    chunk = step.get("chunk")
    if chunk is None or chunk in ("word", "char"):
        return chunk
    if isinstance(chunk, int) and not isinstance(chunk, bool) and chunk > 0:
        return chunk
    check.add(_line_of(step, "chunk"), f"chunk: expected word, char or a positive number of characters, got {chunk!r}")
    return None


def _text_source(check: _Checker, step: LineDict, key: str) -> str | tuple | None:
    """The step's text, or for a quote the pieces of its text (see Quote)."""
    return _text_value(check, step[key], _line_of(step, key), key)


def _text_value(check: _Checker, value: Any, line: int, key: str) -> str | tuple | None:
    """A text source's text: a string, Faker's for a faker mapping, or a quote's pieces."""
    if isinstance(value, str):
        return check.counted(line, value)
    if isinstance(value, LineDict) and any(quote_key in value for quote_key in QUOTE_KEYS):
        return _quote(check, value, key, line)
    if isinstance(value, LineDict):
        if check.text_chars > MAX_TEXT_CHARS:
            return None  # over the limit already: generating more would only cost time
        try:
            return check.counted(line, textgen.generate(value))
        except textgen.TextgenError as exc:
            check.add(line, f"{key}: {exc}")
            return None
    check.add(
        line,
        f"{key}: expected a string or a faker mapping such as {{faker: paragraph, seed: 3}}, or a list of pieces, "
        f"or a quote such as {{from: tool_result}}, got {_type_name(value)}",
    )
    return None


def _pieces(check: _Checker, pieces: LineList, line: int, what: str, chunk_line: int | None) -> tuple[str, ...] | None:
    """Explicit deltas (`["Hel", "lo"]`), streamed as they are: each piece a string; `chunk`
    (on `chunk_line`, None when the step has none) has nothing left to split."""
    if chunk_line is not None:
        check.add(chunk_line, f"chunk: {what} is already a list of pieces; leave chunk out")
    if not pieces:
        check.add(line, f'{what}: is an empty list; give at least one piece, such as ["Hel", "lo"]')
        return None
    for index, piece in enumerate(pieces):
        if not isinstance(piece, str):
            check.add(
                _line_of(pieces, index, line),
                f"{what}: piece {index + 1} is {_type_name(piece)}; every piece must be a string",
            )
            return None
    if check.counted(line, "".join(pieces)) is None:
        return None
    return tuple(pieces)


QUOTE_SOURCES = ("prompt", "tool_result")
QUOTE_KEYS = ("from", "tool", "template")
_TEMPLATE_TOKEN = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")


def _quote(check: _Checker, spec: LineDict, key: str, line: int) -> tuple | None:
    """`{from: prompt}`, `{from: tool_result, tool: NAME}` or `{template: "… {tool_result} …"}`."""
    _check_keys(check, spec, QUOTE_KEYS, f"a quoting {key}")
    if "template" in spec:
        if "from" in spec or "tool" in spec:
            check.add(line, f"{key}: a quote takes from (and tool) or template, not both")
            return None
        template = spec["template"]
        if not isinstance(template, str):
            check.add(_line_of(spec, "template"), f"{key}: template: expected a string, got {_type_name(template)}")
            return None
        return _template_pieces(check, _line_of(spec, "template"), key, template)
    if "from" not in spec:
        check.add(line, f"{key}: a quote needs from: {' or '.join(QUOTE_SOURCES)}")
        return None
    reference = _quote_ref(check, _line_of(spec, "from"), key, spec["from"], _string(check, spec, "tool"))
    return None if reference is None else (reference,)


def _quote_ref(check: _Checker, line: int, key: str, source: Any, tool: str | None) -> QuoteRef | None:
    if source not in QUOTE_SOURCES:
        check.add(line, f"{key}: cannot quote {source!r}; a quote takes {' or '.join(QUOTE_SOURCES)}")
        return None
    if tool is not None and source != "tool_result":
        check.add(line, f"{key}: only tool_result takes a tool name, not {source}")
        return None
    return QuoteRef(source, tool or None)


def _template_pieces(check: _Checker, line: int, key: str, template: str) -> tuple | None:
    """A template's literal text and QuoteRefs, in order: `{prompt}`, `{tool_result}`,
    `{tool_result:NAME}`; `{{` and `}}` are the braces themselves."""
    pieces: list[str | QuoteRef] = []
    literal, at = "", 0
    for token in _TEMPLATE_TOKEN.finditer(template):
        literal += template[at : token.start()]
        at = token.end()
        if token.group(0) in ("{{", "}}"):
            literal += token.group(0)[0]
            continue
        if token.group(1) is None:
            check.add(
                line, f"{key}: template: a lone {token.group(0)!r}; write {token.group(0) * 2} for the brace itself"
            )
            return None
        source, _, tool = token.group(1).partition(":")
        reference = _quote_ref(check, line, key, source.strip(), tool.strip() or None)
        if reference is None:
            return None
        pieces += [literal, reference] if literal else [reference]
        literal = ""
    literal += template[at:]
    if literal:
        pieces.append(literal)
    if check.counted(line, "".join(piece for piece in pieces if isinstance(piece, str))) is None:
        return None
    return tuple(pieces)


def _chunk_line(step: LineDict) -> int | None:
    return _line_of(step, "chunk") if "chunk" in step else None


def _output(check: _Checker, step: LineDict, action: str, interval: float, chunk: Any) -> Output | Quote | None:
    """A text, reasoning or refusal step: its pieces as given, or its text split by `chunk`
    (for a quote, once each request fills it in)."""
    value = step[action]
    signature, phase = _string(check, step, "signature"), _phase(check, step)
    if isinstance(value, LineList):
        deltas = _pieces(check, value, _line_of(step, action), action, _chunk_line(step))
    else:
        text = _text_source(check, step, action)
        if isinstance(text, tuple):
            if "citations" in step:
                check.add(_line_of(step, "citations"), "citations: a text that quotes the request cannot cite")
            return Quote(action, text, chunk, interval, signature, phase)
        deltas = None if text is None else split_deltas(text, chunk)
    if deltas is None:
        return None
    citations = _citations(check, step, "".join(deltas)) if "citations" in step else ()
    return Output(kind=action, deltas=deltas, interval=interval, signature=signature, phase=phase, citations=citations)


def _citations(check: _Checker, step: LineDict, text: str) -> tuple[Citation, ...]:
    """A text step's `citations`, by `end` in order (the order they go out in as the text streams)."""
    given = step["citations"]
    line = _line_of(step, "citations")
    if not isinstance(given, LineList) or not given:
        check.add(line, f"citations: expected a list of {{url, title, start, end}} mappings, got {_type_name(given)}")
        return ()
    citations = [_citation(check, spec, _line_of(given, number, line), text) for number, spec in enumerate(given)]
    return tuple(sorted((found for found in citations if found is not None), key=lambda found: found.end))


def _citation(check: _Checker, spec: Any, line: int, text: str) -> Citation | None:
    if not isinstance(spec, LineDict):
        check.add(line, f"citations: each citation is a mapping of url, title, start and end, got {_type_name(spec)}")
        return None
    _check_keys(check, spec, CITATION_KEYS, "a citation")
    url, title = _string(check, spec, "url"), _string(check, spec, "title")
    start, end = _int(check, spec, "start", 0, len(text)), _int(check, spec, "end", 0, len(text))
    if not url:
        check.add(spec.line, "citation: needs a url")
        return None
    if start is None or end is None:
        if "start" not in spec or "end" not in spec:
            check.add(spec.line, f"citation: needs start and end, character offsets in the text (0 to {len(text)})")
        return None
    if start >= end:
        check.add(_line_of(spec, "end"), f"citation: end ({end}) must come after start ({start})")
        return None
    cited_text = _string(check, spec, "cited_text", text[start:end])
    return Citation(url, title, cast(str, cited_text), start, end)


def _phase(check: _Checker, step: LineDict) -> str | None:
    phase = _string(check, step, "phase")
    if phase is not None and phase not in PHASES:
        check.add(_line_of(step, "phase"), f"phase: expected one of {', '.join(PHASES)}, got {phase!r}")
        return None
    return phase


def is_parts(value: Any) -> bool:
    """Whether a reasoning step's value is its `{parts: [...]}` form: a mapping that is neither faker's nor a quote."""
    return isinstance(value, LineDict) and "faker" not in value and not any(key in value for key in QUOTE_KEYS)


def _reasoning_parts(check: _Checker, step: LineDict, interval: float, chunk: Any) -> Output | None:
    """`reasoning: {parts: [...]}`: one reasoning step of several summary parts, each a text
    source or a list of pieces."""
    spec = step["reasoning"]
    _check_keys(check, spec, ("parts",), "reasoning")
    if "parts" not in spec:
        if not spec:
            check.add(
                _line_of(step, "reasoning"),
                "reasoning: expected a string, {parts: [texts]} or a faker mapping, got an empty mapping",
            )
        return None
    parts = spec["parts"]
    line = _line_of(spec, "parts")
    if not isinstance(parts, LineList) or not parts:
        check.add(line, f"reasoning parts: expected a non-empty list of texts, got {_type_name(parts)}")
        return None
    split = [_part_deltas(check, part, _line_of(parts, number, line), chunk) for number, part in enumerate(parts)]
    if None in split:
        return None
    deltas: list[str] = []
    part_starts: list[int] = []
    for part_deltas in cast("list[tuple[str, ...]]", split):
        part_starts.append(len(deltas))
        deltas.extend(part_deltas)
    return Output(
        kind="reasoning",
        deltas=tuple(deltas),
        interval=interval,
        part_starts=tuple(part_starts),
        signature=_string(check, step, "signature"),
    )


def _part_deltas(check: _Checker, part: Any, line: int, chunk: Any) -> tuple[str, ...] | None:
    """One summary part's deltas: its pieces as given, or its text split by the step's `chunk`."""
    if isinstance(part, LineList):
        return _pieces(check, part, line, "reasoning part", None)
    text = _text_value(check, part, line, "reasoning part")
    if isinstance(text, tuple):
        check.add(line, "reasoning part: a part cannot quote the request; quote it in a reasoning step of its own")
        return None
    return None if text is None else split_deltas(text, chunk)


def _call_spec(check: _Checker, step: LineDict, action: str, keys: tuple[str, ...]) -> tuple[LineDict, str] | None:
    """A call step's mapping (of `keys`, the second its text's) and its name; None, with a problem, without them."""
    spec = step[action]
    line = _line_of(step, action)
    if not isinstance(spec, LineDict):
        check.add(line, f"{action}: expected a mapping with name and {keys[1]}, got {_type_name(spec)}")
        return None
    _check_keys(check, spec, keys, action)
    name = _string(check, spec, "name")
    if not name:
        check.add(line, f"{action}: needs a name")
        return None
    return spec, name


def _tool_call(check: _Checker, step: LineDict, interval: float, chunk: Any) -> ToolCall | None:
    found = _call_spec(check, step, "tool_call", TOOL_CALL_KEYS)
    if found is None:
        return None
    spec, name = found
    arguments = _arguments(check, step, spec, chunk)
    if arguments is None:
        return None
    text, deltas = arguments
    call_id = _string(check, spec, "id")
    if "caller" not in spec:
        return ToolCall(name=name, arguments=text, call_id=call_id, deltas=deltas, interval=interval)
    caller = _caller_id(check, spec)
    return None if caller is None else ToolCall(name, text, call_id, deltas, interval, caller=caller)


def _caller_id(check: _Checker, spec: LineDict) -> str | None:
    """`caller: code_execution`: the server_tool_use id of the latest code_execution step before
    the call, whose code makes it. A step without an id of its own is given a fixed one, so that
    every answer, and a later turn's call, names the same."""
    line, caller = _line_of(spec, "caller"), spec["caller"]
    if caller not in TOOL_CALLERS:
        check.add(line, f"tool_call caller: expected one of {', '.join(TOOL_CALLERS)}, got {caller!r}")
        return None
    if check.code_run is None:
        check.add(line, "tool_call caller: code_execution needs a server_tool code_execution step before the call")
        return None
    tool, tool_line = check.code_run
    named = check.code_ids.setdefault(id(tool), (tool, tool.call_id or fixed_server_tool_id(check.source, tool_line)))
    return named[1]


def fixed_server_tool_id(source: str, line: int) -> str:
    """A server_tool_use id that stays the same for the step at `line` of `source`."""
    digest = hashlib.sha256(f"{source}:{line}".encode()).digest()
    return "srvtoolu_01" + "".join(ID_ALPHABET[byte % len(ID_ALPHABET)] for byte in digest[:22])


def _arguments(check: _Checker, step: LineDict, spec: LineDict, chunk: Any) -> tuple[str, tuple[str, ...]] | None:
    """A tool call's argument text and its deltas. A mapping or a JSON string is checked as
    JSON and split by `chunk`; pieces are the text as it streamed, unchecked, so that a call
    a stream cut short keeps what it had."""
    arguments = spec.get("arguments", LineDict())
    line = _line_of(spec, "arguments", _line_of(step, "tool_call"))
    if isinstance(arguments, LineList):
        pieces = _pieces(check, arguments, line, "tool_call arguments", _chunk_line(step))
        return None if pieces is None else ("".join(pieces), pieces)
    if isinstance(arguments, str):
        try:
            json.loads(arguments)
        except ValueError as exc:
            check.add(line, f"tool_call arguments: not valid JSON ({exc})")
            return None
        except RecursionError:
            check.add(line, "tool_call arguments: nested too deep to read as JSON")
            return None
        text = arguments
    elif isinstance(arguments, dict):
        try:
            text = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"), default=str)
        except RecursionError:
            check.add(line, "tool_call arguments: nested too deep to write as JSON")
            return None
    else:
        check.add(
            line,
            f"tool_call arguments: expected a mapping, a JSON string or a list of pieces, got {_type_name(arguments)}",
        )
        return None
    if check.counted(line, text) is None:
        return None
    return text, split_deltas(text, chunk)


def _custom_tool_call(check: _Checker, step: LineDict, interval: float, chunk: Any) -> ToolCall | None:
    """`custom_tool_call: {name, input, id}`: a call of a custom tool, whose input is free text
    (a string, split by `chunk`, or its pieces)."""
    found = _call_spec(check, step, "custom_tool_call", CUSTOM_TOOL_CALL_KEYS)
    if found is None:
        return None
    spec, name = found
    given = spec.get("input", "")
    input_line = _line_of(spec, "input", _line_of(step, "custom_tool_call"))
    deltas: tuple[str, ...] | None
    if isinstance(given, LineList):
        deltas = _pieces(check, given, input_line, "custom_tool_call input", _chunk_line(step))
    elif isinstance(given, str):
        deltas = None if check.counted(input_line, given) is None else split_deltas(given, chunk)
    else:
        check.add(
            input_line, f"custom_tool_call input: expected free text or a list of pieces, got {_type_name(given)}"
        )
        return None
    if deltas is None:
        return None
    call_id = _string(check, spec, "id")
    return ToolCall(name, "".join(deltas), call_id, deltas, interval, custom=True)


def _error_details(check: _Checker, spec: LineDict) -> dict[str, str | None]:
    """The `type`, `code` and `param` an error sets in place of its defaults, as Fail and HttpError take them."""
    return {
        "error_type": _string(check, spec, "type"),
        "code": _string(check, spec, "code"),
        "param": _string(check, spec, "param"),
    }


def _boolean(check: _Checker, mapping: LineDict, key: str, default: bool) -> bool:
    value = mapping.get(key, default)
    if not isinstance(value, bool):
        check.add(_line_of(mapping, key), f"{key}: expected true or false, got {_type_name(value)}")
        return default
    return value


def _fail(check: _Checker, step: LineDict) -> Fail | None:
    spec = step["fail"]
    line = _line_of(step, "fail")
    details: dict[str, Any]
    if not isinstance(spec, LineDict):
        kind, message, details = spec, None, {}
    else:
        _check_keys(check, spec, FAIL_KEYS, "fail")
        kind, message, line = spec.get("kind"), _string(check, spec, "message"), _line_of(spec, "kind", line)
        details = dict(_error_details(check, spec), error_event=_boolean(check, spec, "error_event", True))
    if kind not in FAIL_KINDS:
        check.add(line, f"fail: unknown kind {kind!r}{_suggest(kind, FAIL_KINDS).replace('valid keys', 'kinds')}")
        return None
    return Fail(kind=kind, message=message, **details)


def _chunked(
    check: _Checker, raw: LineDict, action: str, chunk_interval: float | None
) -> Output | Quote | ToolCall | None:
    """A text, reasoning, refusal or tool_call step, split into its deltas; paced by a `timing:`
    block unless it or the scenario sets the pause between them (`chunk_interval` None: unset)."""
    chunk = _chunking(check, raw)
    interval = _duration(check, raw, "interval", chunk_interval or 0.0)
    step: Output | Quote | ToolCall | None
    if action == "tool_call":
        step = _tool_call(check, raw, interval, chunk)
    elif action == "custom_tool_call":
        step = _custom_tool_call(check, raw, interval, chunk)
    elif action == "reasoning" and is_parts(raw[action]):
        step = _reasoning_parts(check, raw, interval, chunk)
    else:
        step = _output(check, raw, action, interval, chunk)
    if step is not None and (chunk_interval is not None or "interval" in raw):
        step = replace(step, paced=False)
    return step


def _redacted_thinking(check: _Checker, raw: LineDict) -> RedactedThinking | None:
    value = raw["redacted_thinking"]
    if value is None:
        return REDACTED_THINKING
    if not isinstance(value, str) or not value:
        got = "an empty string" if value == "" else _type_name(value)
        check.add(
            _line_of(raw, "redacted_thinking"),
            f"redacted_thinking: expected the block's opaque data as a string, or nothing, got {got}",
        )
        return None
    return RedactedThinking(check.counted(_line_of(raw, "redacted_thinking"), value))


# ---------------------------------------------------------------- hosted tools and compaction

SERVER_TOOL_KEYS = ("name", "input", "result", "id", "server", "tool")
MCP_KEYS = ("server", "tool")
# The hosted tools each protocol has; a scenario that only that protocol plays may use no other.
PROTOCOL_SERVER_TOOLS = {
    "chat": (),
    "responses": ("web_search", "web_fetch", "file_search", "code_execution", "image_generation", "mcp"),
    "messages": ("web_search", "web_fetch", "code_execution", "mcp"),
}
OUTPUT_STEPS = (Output, Quote, ToolCall, RedactedThinking, ServerTool, Compaction)


def _server_tool(check: _Checker, raw: LineDict) -> ServerTool | None:
    """`server_tool: {name, input, result, id}` (an MCP call also names its `server` and `tool`);
    without `result`, a call the turn pauses on."""
    spec, line = raw["server_tool"], _line_of(raw, "server_tool")
    if not isinstance(spec, LineDict):
        check.add(line, f"server_tool: expected a mapping with name, input and result, got {_type_name(spec)}")
        return None
    _check_keys(check, spec, SERVER_TOOL_KEYS, "server_tool")
    name = spec.get("name")
    if name not in SERVER_TOOL_NAMES:
        hint = did_you_mean(name, SERVER_TOOL_NAMES) or f"; hosted tools: {', '.join(SERVER_TOOL_NAMES)}"
        check.add(_line_of(spec, "name", line), f"server_tool: unknown name {name!r}{hint}")
        return None
    tool_input = _server_tool_input(check, spec, line)
    server, tool = _string(check, spec, "server"), _string(check, spec, "tool")
    if name == "mcp" and not (server and tool):
        check.add(line, "server_tool mcp: needs the server and the tool it calls, as server: NAME and tool: NAME")
        return None
    if name != "mcp" and (server is not None or tool is not None):
        check.add(line, f"server_tool {name}: server and tool go with name: mcp only")
        return None
    result = _server_tool_result(check, spec, name, tool_input) if "result" in spec else None
    if tool_input is None or ("result" in spec and result is None):
        return None
    text, chunk = _json_text(tool_input), _chunking(check, raw)
    code = split_deltas(str(tool_input.get("code", "")), chunk) if name == "code_execution" else ()
    step = ServerTool(name, text, result, split_deltas(text, chunk), code, _string(check, spec, "id"), server, tool)
    if name == "code_execution":
        check.code_run = (step, line)
    return step


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _server_tool_input(check: _Checker, spec: LineDict, line: int) -> dict | None:
    """The call's input: a mapping, or a JSON object as text; {} when left out."""
    value = spec.get("input", {})
    line = _line_of(spec, "input", line)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            value = None
    if not isinstance(value, dict):
        check.add(line, "server_tool input: expected a mapping, or a JSON object as a string")
        return None
    try:
        check.counted(line, _json_text(value))
    except RecursionError:
        check.add(line, "server_tool input: nested too deep to write as JSON")
        return None
    return value


# What each hosted tool's `result` is, written as its problem says it.
RESULT_FORMS = {
    "web_search": "a list of pages, each {url, title, page_age}",
    "web_fetch": "the page's text, or {content, title, url}",
    "file_search": "a list of hits, each {file_id, filename, score, text}",
    "code_execution": "its stdout, or {stdout, stderr, return_code}",
    "image_generation": "the image as a base64 string",
    "mcp": "the tool's text output",
}
ENTRY_FIELDS: dict[str, dict] = {
    "web_search": {"url": str, "title": str, "page_age": str},
    "file_search": {"file_id": str, "filename": str, "score": (int, float), "text": str},
}
RECORD_FIELDS: dict[str, tuple[dict, str]] = {
    "web_fetch": ({"content": str, "title": str, "url": str}, "content"),
    "code_execution": ({"stdout": str, "stderr": str, "return_code": int}, "stdout"),
}


def _server_tool_result(check: _Checker, spec: LineDict, name: str, tool_input: dict | None) -> str | None:
    """The result as JSON text in one form per tool (see RESULT_FORMS); None, with a problem, when it is not one."""
    value, line = spec["result"], _line_of(spec, "result")
    result: Any
    if name in ENTRY_FIELDS:
        result = _result_entries(value, ENTRY_FIELDS[name])
    elif name in RECORD_FIELDS:
        fields, text_field = RECORD_FIELDS[name]
        result = _result_record({text_field: value} if isinstance(value, str) else value, fields)
    else:
        result = value if isinstance(value, str) else None
    if result is None:
        check.add(line, f"server_tool {name} result: expected {RESULT_FORMS[name]}")
        return None
    if name == "web_search" and not all(entry.get("url") for entry in result):
        check.add(line, "server_tool web_search result: every page needs its url")
        return None
    if name == "web_fetch" and "url" not in result and isinstance((tool_input or {}).get("url"), str):
        result["url"] = cast(dict, tool_input)["url"]
    return check.counted(line, _json_text(result))


def _result_entries(value: Any, fields: dict) -> list | None:
    if not isinstance(value, list):
        return None
    entries = [_result_record(entry, fields) for entry in value]
    return None if None in entries else entries


def _result_record(value: Any, fields: dict) -> dict | None:
    """A mapping of some of `fields`, each of its type; None when it is not one."""
    if not isinstance(value, dict) or any(key not in fields for key in value):
        return None
    for key, kinds in fields.items():
        if key in value and (isinstance(value[key], bool) or not isinstance(value[key], kinds)):
            return None
    return dict(value)


def _compaction(check: _Checker, raw: LineDict) -> Compaction | None:
    value, line = raw["compaction"], _line_of(raw, "compaction")
    if not isinstance(value, str):
        check.add(line, f"compaction: expected the summary's text as a string, got {_type_name(value)}")
        return None
    text = check.counted(line, value)
    return None if text is None else Compaction(text)


HOSTED_STEPS = {"server_tool": _server_tool, "compaction": _compaction}


def _check_unanswered(check: _Checker, steps: list[Step | None], lines: list[int]) -> None:
    """A server_tool without a result pauses the turn: no output may follow it."""
    outputs = [index for index, step in enumerate(steps) if type(step) in OUTPUT_STEPS]
    for index in outputs[:-1]:
        step = steps[index]
        if type(step) is ServerTool and step.result is None:
            check.add(
                lines[index],
                "server_tool: a call without a result pauses the turn (finish: pause_turn), so it must be the "
                "last output; give it a result, or move the steps after it to the next turn",
            )
            return


def _check_pause(check: _Checker, doc: LineDict, steps: tuple[Step, ...], finish: str | None) -> None:
    """`finish: pause_turn` needs the turn to end on a server_tool call without a result."""
    outputs = [step for step in steps if type(step) in OUTPUT_STEPS]
    last = outputs[-1] if outputs else None
    paused = type(last) is ServerTool and last.result is None
    if finish == "pause_turn" and not paused and "finish" in doc:
        check.add(
            _line_of(doc, "finish"),
            "finish: pause_turn goes with a turn that ends on a server_tool call without a result",
        )


def _with_code_ids(check: _Checker, entries: list[Entry]) -> list[Entry]:
    """The entries, each code_execution step a tool call names as its caller marked so, with the id it names."""

    def named(step: Step) -> Step:
        found = check.code_ids.get(id(step))
        if found is None or found[0] is not step:
            return step
        return replace(found[0], call_id=found[1], calls_tools=True)

    return [
        replace(entry, script=replace(entry.script, steps=tuple(named(step) for step in entry.script.steps)))
        if entry.script is not None
        else entry
        for entry in entries
    ]


def _check_protocol_tools(check: _Checker, protocol: str | None, entries: list[Entry]) -> None:
    """A scenario that only one protocol plays may use only the hosted tools that protocol has."""
    if protocol not in PROTOCOL_SERVER_TOOLS:
        return
    has = PROTOCOL_SERVER_TOOLS[protocol]
    for entry in entries:
        for step in entry.script.steps if entry.script is not None else ():
            if type(step) is ServerTool and step.name not in has:
                name = step.name
                check.add(
                    entry.line,
                    f"server_tool {name}: match protocol {protocol} has no such hosted tool"
                    f" ({', '.join(has) if has else 'it has none'})",
                )
                return


def _step(check: _Checker, raw: Any, line: int, chunk_interval: float | None) -> Step | None:
    if isinstance(raw, str):
        if raw in BARE_STEPS:
            return BARE_STEPS[raw]
        check.add(line, f"unknown step {raw!r}{_suggest(raw, BARE_STEPS).replace('valid keys', 'steps written alone')}")
        return None
    if not isinstance(raw, LineDict):
        check.add(
            line,
            f"a step must be a mapping such as {{text: hi}} or one of {', '.join(BARE_STEPS)}, got {_type_name(raw)}",
        )
        return None
    actions = [key for key in raw if key in ACTION_KEYS]
    if len(actions) != 1:
        unknown = [key for key in raw if key not in ACTION_KEYS + STEP_MODIFIERS]
        if unknown:
            _check_keys(check, raw, ACTION_KEYS + STEP_MODIFIERS, "a step")
        else:
            found = ", ".join(actions) if actions else "none"
            check.add(raw.line, f"a step needs exactly one of {', '.join(ACTION_KEYS)} (found {found})")
        return None
    action = actions[0]
    allowed = (action,) + (STEP_MODIFIERS if action in CHUNKED_ACTIONS else ()) + STEP_KEYS.get(action, ())
    _check_keys(check, raw, allowed, f"a {action} step")
    if action in CHUNKED_ACTIONS:
        return _chunked(check, raw, action, chunk_interval)
    value = raw[action]
    if action == "delay":
        return Delay(_duration(check, raw, "delay", 0.0))
    if action == "fail":
        return _fail(check, raw)
    if action == "redacted_thinking":
        return _redacted_thinking(check, raw)
    if action in HOSTED_STEPS:
        return HOSTED_STEPS[action](check, raw)
    if action == "raw":
        if not isinstance(value, str):
            check.add(_line_of(raw, "raw"), f"raw: expected a string of bytes to write, got {_type_name(value)}")
            return None
        return Raw(value)
    if action == "stall":
        if value is None or value is True:
            return Stall(resume=False)
        if value == "continue":
            return Stall(resume=True)
        check.add(_line_of(raw, "stall"), f"stall: expected nothing or 'continue', got {value!r}")
        return None
    if value is not None:
        check.add(_line_of(raw, action), f"{action}: takes no value, got {value!r}")
        return None
    return BARE_STEPS[action]


def _steps(check: _Checker, doc: LineDict, chunk_interval: float | None) -> tuple[Step, ...]:
    raw_steps = doc["steps"]
    line = _line_of(doc, "steps")
    if not isinstance(raw_steps, LineList):
        check.add(line, f"steps: expected a list of steps, got {_type_name(raw_steps)}")
        return ()
    if not raw_steps:
        check.add(line, "steps: is empty; give at least one step, such as - text: Hello")
        return ()
    lines = [_line_of(raw_steps, index, line) for index in range(len(raw_steps))]
    steps = [_step(check, raw, step_line, chunk_interval) for raw, step_line in zip(raw_steps, lines)]
    _check_ending(check, steps, lines)
    _check_unanswered(check, steps, lines)
    return tuple(step for step in steps if step is not None)


def _ending_of(step: Step | None) -> str | None:
    """How `step` ends the stream, written as a problem names it; None for a step the stream goes on after."""
    kind = type(step)
    if kind is Stall:
        return None if cast(Stall, step).resume else "a stall without continue"
    return ENDING_STEPS.get(kind)


def _check_ending(check: _Checker, steps: list[Step | None], lines: list[int]) -> None:
    """Steps after one that ends the stream would never play: a problem at the first of them."""
    for index, step in enumerate(steps[:-1]):
        ending = _ending_of(step)
        if ending is not None:
            hint = "; or write stall: continue to go on after the stall" if type(step) is Stall else ""
            check.add(
                lines[index + 1],
                f"steps after {ending} never play: it ends the stream (line {lines[index]}); "
                f"remove them, or move them before it{hint}",
            )
            return


# ---------------------------------------------------------------- scripts and scenarios

SETTING_KEYS = (
    "model",
    "keepalive",
    "stall_timeout",
    "chunk_interval",
    "usage",
    "finish",
    "stop_sequence",
    "force_reasoning",
    "rate_limit",
    "stop_details",
    "timing",
    "moderation",
)
BODY_KEYS = ("steps", "http_error")
ENTRY_LISTS = ("sequence", "conversation")
TOP_KEYS = ("name", "description", "match") + ENTRY_LISTS + BODY_KEYS + SETTING_KEYS
ENTRY_KEYS = BODY_KEYS + ("use",) + SETTING_KEYS
HTTP_ERROR_KEYS = ("status", "message", "retry_after", "headers") + ERROR_DETAIL_KEYS
USAGE_FIELDS = tuple(Usage.__dataclass_fields__)
# Other names a usage count goes by, as Anthropic names them: either name sets it.
USAGE_ALIASES = {
    "thinking_tokens": "reasoning_tokens",
    "cache_read_input_tokens": "cached_tokens",
    "cache_creation_input_tokens": "cache_write_tokens",
}
USAGE_KEYS = USAGE_FIELDS + tuple(USAGE_ALIASES)
MATCH_KEYS = ("protocol", "model", "prompt", "turn", "tool_result", "tools", "system", "header")
_AT_LEAST_TURN = re.compile(r"^\s*>=\s*(\d+)\s*$")


def _http_error(check: _Checker, doc: LineDict) -> HttpError | None:
    spec = doc["http_error"]
    line = _line_of(doc, "http_error")
    if not isinstance(spec, LineDict):
        check.add(line, f"http_error: expected a mapping with a status, got {_type_name(spec)}")
        return None
    _check_keys(check, spec, HTTP_ERROR_KEYS, "http_error")
    status = _int(check, spec, "status", 400, 599)
    if "status" not in spec:
        check.add(line, "http_error: needs a status from 400 to 599")
    retry_after = spec.get("retry_after")
    if retry_after is not None:
        if isinstance(retry_after, bool) or not isinstance(retry_after, (int, float, str)):
            check.add(_line_of(spec, "retry_after"), f"retry_after: expected seconds, got {_type_name(retry_after)}")
        retry_after = str(retry_after)
    retry_after, headers = _retry_after_header(check, spec, retry_after, _error_headers(check, spec))
    if status is None:
        return None
    return HttpError(
        status=status,
        message=_string(check, spec, "message"),
        retry_after=retry_after,
        headers=tuple((k, str(v)) for k, v in headers.items()),
        **_error_details(check, spec),
    )


def _error_headers(check: _Checker, spec: LineDict) -> dict:
    """http_error's `headers`: names that are HTTP tokens, values without line breaks, and none
    of the headers that frame the answer (which would garble the connection for the next one)."""
    headers = spec.get("headers", LineDict())
    if not isinstance(headers, dict) or not all(
        isinstance(k, str) and isinstance(v, (str, int, float)) for k, v in headers.items()
    ):
        check.add(_line_of(spec, "headers"), "headers: expected a mapping of header names to values")
        return {}
    for name, value in headers.items():
        line = _line_of(headers, name, _line_of(spec, "headers"))
        if not _HEADER_NAME.match(name):
            check.add(line, f"headers: {name!r} is not a header name (letters, digits and !#$%&'*+-.^_`|~ only)")
        elif name.lower() in FRAMING_HEADERS:
            check.add(
                line, f"headers: {name} frames the answer and is the server's to set; an http_error may not set it"
            )
        elif isinstance(value, bool):
            check.add(line, f"headers: the value of {name} reads as true/false; quote it to send it as written")
        elif not _HEADER_VALUE.match(str(value)):
            check.add(line, f"headers: the value of {name} holds a line break or another control character")
    return headers


def is_header(name: str, value: str) -> bool:
    """Whether an http_error may send a header of this name and value."""
    return bool(_HEADER_NAME.match(name) and _HEADER_VALUE.match(value))


def _retry_after_header(
    check: _Checker, spec: LineDict, retry_after: str | None, headers: dict
) -> tuple[str | None, dict]:
    """A Retry-After among http_error's `headers`, in any case, taken as its `retry_after`: the
    one header that the answer, the journal and the verdicts read by name."""
    named = [name for name in headers if name.lower() == "retry-after"]
    if not named:
        return retry_after, headers
    line = _line_of(headers, named[-1], _line_of(spec, "headers"))
    if len(named) > 1:
        check.add(line, f"headers: Retry-After is given twice ({', '.join(named)}); give it once")
    elif retry_after is not None:
        check.add(line, f"headers: {named[0]} says again what retry_after says; give the wait once")
    return retry_after or str(headers[named[0]]), {name: value for name, value in headers.items() if name not in named}


def _mapping_setting(check: _Checker, doc: LineDict, key: str, example: str) -> LineDict | None:
    """doc[key] when it is a mapping; None when it is not there, or (with a problem) not a mapping."""
    if key not in doc:
        return None
    spec = doc[key]
    if not isinstance(spec, LineDict):
        check.add(_line_of(doc, key), f"{key}: expected a mapping such as {example}, got {_type_name(spec)}")
        return None
    return spec


def _usage(check: _Checker, doc: LineDict, inherited: Usage) -> Usage:
    spec = _mapping_setting(check, doc, "usage", "{input_tokens: 14, output_tokens: 52}")
    if spec is None:
        return inherited
    _check_keys(check, spec, USAGE_KEYS, "usage")
    counts = {key: _int(check, spec, key, 0, MAX_USAGE_COUNT) for key in USAGE_KEYS if key in spec}
    for alias, key in USAGE_ALIASES.items():
        if alias in spec and key in spec:
            check.add(_line_of(spec, alias), f"usage: {alias} and {key} name the same count; give one")
        counts[key] = counts.pop(alias, counts.get(key))
    return Usage(**counts)


@dataclass(frozen=True, slots=True)
class _Settings:
    model: str | None = None
    keepalive: float = DEFAULT_KEEPALIVE
    stall_timeout: float = DEFAULT_STALL_TIMEOUT
    chunk_interval: float | None = None  # None: not set, and a `timing:` block paces the deltas
    usage: Usage = Usage()  # noqa: RUF009 - frozen
    finish: str | None = None
    stop_sequence: str | None = None
    force_reasoning: bool = False
    rate_limit: RateLimit | None = None
    stop_details: StopDetails | None = None
    timing: Timing | None = None
    moderation: Moderation | None = None


RATE_LIMIT_COUNTS = ("requests", "tokens", "input_tokens", "output_tokens")


def _rate_limit(check: _Checker, doc: LineDict, inherited: RateLimit | None) -> RateLimit | None:
    """`rate_limit:`, the limits of the success headers; what it leaves out keeps its default."""
    spec = _mapping_setting(check, doc, "rate_limit", "{requests: 60, window: 1m}")
    if spec is None:
        return inherited
    _check_keys(check, spec, RATE_LIMIT_COUNTS + ("window", "enforce"), "rate_limit")
    given: dict[str, Any] = {
        key: _int(check, spec, key, 1, MAX_RATE_LIMIT_COUNT) for key in RATE_LIMIT_COUNTS if key in spec
    }
    if "window" in spec:
        given["window"] = _duration(check, spec, "window", 0.0) or None
        if given["window"] is None:
            check.add(_line_of(spec, "window"), "rate_limit window: must be longer than 0s")
    given["enforce"] = _boolean(check, spec, "enforce", False)
    return RateLimit(**{key: value for key, value in given.items() if value is not None})


TIMING_KEYS = ("first_token", "tokens_per_second", "seed")
TIMING_EXAMPLE = "{first_token: {p50: 800ms, p99: 2.5s}, tokens_per_second: {mean: 60, jitter: 0.2}}"


def _timing(check: _Checker, doc: LineDict, inherited: Timing | None) -> Timing | None:
    """`timing:`, how long the model takes: the time to the first delta and the pace after it."""
    spec = _mapping_setting(check, doc, "timing", TIMING_EXAMPLE)
    if spec is None:
        return inherited
    return timing_of(check, spec, _line_of(doc, "timing"))


def timing_of(check: _Checker, spec: LineDict, line: int) -> Timing | None:
    """The Timing a `timing:` mapping sets; None (with problems) when it is not one."""
    problems = len(check.problems)
    _check_keys(check, spec, TIMING_KEYS, "timing")
    if not any(key in spec for key in TIMING_KEYS[:2]):
        check.add(line, f"timing: give first_token, tokens_per_second or both, such as {TIMING_EXAMPLE}")
    p50, p99 = _first_token(check, spec)
    mean, jitter = _tokens_per_second(check, spec)
    seed = _int(check, spec, "seed", 0, MAX_TIMING_SEED)
    if len(check.problems) > problems:
        return None
    return Timing(p50, p99, mean, jitter, seed)


def _first_token(check: _Checker, spec: LineDict) -> tuple[float | None, float | None]:
    """`first_token: {p50, p99}`: two durations more than 0, the p50 no more than the p99."""
    given = _mapping_setting(check, spec, "first_token", "{p50: 800ms, p99: 2.5s}")
    if given is None:
        return None, None
    _check_keys(check, given, ("p50", "p99"), "timing first_token")
    p50, p99 = (_positive_duration(check, given, key, "first_token") for key in ("p50", "p99"))
    if p50 is not None and p99 is not None and p50 > p99:
        check.add(_line_of(given, "p99"), f"timing first_token: p99 ({given['p99']}) is less than p50 ({given['p50']})")
    return p50, p99


def _positive_duration(check: _Checker, spec: LineDict, key: str, where: str) -> float | None:
    if key not in spec:
        check.add(spec.line, f"timing {where}: needs {key}, a duration such as 800ms")
        return None
    problems = len(check.problems)
    seconds = _duration(check, spec, key, 0.0)
    if len(check.problems) > problems:
        return None
    if seconds <= 0:
        check.add(_line_of(spec, key), f"timing {where} {key}: must be longer than 0s, got {spec[key]!r}")
        return None
    return seconds


def _tokens_per_second(check: _Checker, spec: LineDict) -> tuple[float | None, float]:
    """`tokens_per_second: {mean, jitter}`: a rate more than 0, and a relative spread from 0 to 1."""
    given = _mapping_setting(check, spec, "tokens_per_second", "{mean: 60, jitter: 0.2}")
    if given is None:
        return None, 0.0
    _check_keys(check, given, ("mean", "jitter"), "timing tokens_per_second")
    mean = _rate_number(check, given, "mean", None, 1e-9, 1_000_000, "a number of tokens a second more than 0")
    jitter = _rate_number(check, given, "jitter", 0.0, 0.0, 1.0, "0 to 1")
    return mean, 0.0 if jitter is None else jitter


def _rate_number(
    check: _Checker, spec: LineDict, key: str, default: float | None, low: float, high: float, expected: str
) -> float | None:
    value = spec.get(key, default)
    if not _is_number(value) or not low <= value <= high:
        check.add(_line_of(spec, key), f"timing tokens_per_second {key}: expected {expected}, got {value!r}")
        return None
    return float(value)


def _is_number(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _moderation(check: _Checker, doc: LineDict, inherited: Moderation | None) -> Moderation | None:
    """`moderation:`, the categories Responses' moderation results flag for the `input` and the `output`."""
    spec = _mapping_setting(check, doc, "moderation", "{output: [violence]}")
    if spec is None:
        return inherited
    _check_keys(check, spec, ("input", "output"), "moderation")
    return Moderation(*(_categories(check, spec, key) for key in ("input", "output")))


def _categories(check: _Checker, spec: LineDict, key: str) -> tuple[str, ...]:
    given = spec.get(key, [])
    if not isinstance(given, list):
        check.add(_line_of(spec, key), f"moderation {key}: expected a list of categories, got {_type_name(given)}")
        return ()
    for category in given:
        if category not in MODERATION_CATEGORIES:
            check.add(
                _line_of(spec, key),
                f"moderation {key}: {category!r} is not a moderation category"
                + (did_you_mean(category, MODERATION_CATEGORIES) or f"; one of {', '.join(MODERATION_CATEGORIES)}"),
            )
    return tuple(category for category in given if category in MODERATION_CATEGORIES)


# The categories of a refusal, as Anthropic's RefusalStopDetails names them.
REFUSAL_CATEGORIES = ("cyber", "bio", "frontier_llm", "reasoning_extraction", "general_harms")


def _stop_details(check: _Checker, doc: LineDict, inherited: StopDetails | None) -> StopDetails | None:
    """`stop_details:`, what Messages says of a refusal: its `category` and `explanation`."""
    spec = _mapping_setting(check, doc, "stop_details", "{category: cyber}")
    if spec is None:
        return inherited
    _check_keys(check, spec, ("category", "explanation"), "stop_details")
    category = _string(check, spec, "category")
    if category is not None and category not in REFUSAL_CATEGORIES:
        check.add(
            _line_of(spec, "category"),
            f"stop_details category: expected one of {', '.join(REFUSAL_CATEGORIES)}, got {category!r}",
        )
        category = None
    return StopDetails(category, _string(check, spec, "explanation"))


def _keepalive(check: _Checker, doc: LineDict, inherited: float) -> float:
    seconds = _duration(check, doc, "keepalive", inherited)
    if 0 < seconds < MIN_KEEPALIVE:
        check.add(
            _line_of(doc, "keepalive"),
            f"keepalive: must be 0 (never) or at least {MIN_KEEPALIVE * 1000:g}ms, got {doc['keepalive']!r}",
        )
        return inherited
    return seconds


def _finish(check: _Checker, doc: LineDict, inherited: _Settings) -> tuple[str | None, str | None]:
    """`finish` and `stop_sequence`, which go together: one needs the other."""
    finish = doc.get("finish", inherited.finish)
    if finish is not None and finish not in FINISH_REASONS:
        check.add(_line_of(doc, "finish"), f"finish: expected one of {', '.join(FINISH_REASONS)}, got {finish!r}")
        finish = None
    stop_sequence = _string(check, doc, "stop_sequence", inherited.stop_sequence)
    if "finish" in doc or "stop_sequence" in doc:
        if finish == "stop_sequence" and not stop_sequence:
            check.add(_line_of(doc, "finish"), 'finish: stop_sequence needs the sequence, as stop_sequence: "..."')
        elif stop_sequence is not None and finish != "stop_sequence":
            check.add(_line_of(doc, "stop_sequence"), "stop_sequence: goes with finish: stop_sequence")
    return finish, stop_sequence


def _settings(check: _Checker, doc: LineDict, inherited: _Settings) -> _Settings:
    finish, stop_sequence = _finish(check, doc, inherited)
    return _Settings(
        model=_string(check, doc, "model", inherited.model),
        keepalive=_keepalive(check, doc, inherited.keepalive),
        stall_timeout=_duration(check, doc, "stall_timeout", inherited.stall_timeout),
        chunk_interval=(
            _duration(check, doc, "chunk_interval", 0.0) if "chunk_interval" in doc else inherited.chunk_interval
        ),
        usage=_usage(check, doc, inherited.usage),
        finish=finish,
        stop_sequence=stop_sequence,
        force_reasoning=_boolean(check, doc, "force_reasoning", inherited.force_reasoning),
        rate_limit=_rate_limit(check, doc, inherited.rate_limit),
        stop_details=_stop_details(check, doc, inherited.stop_details),
        timing=_timing(check, doc, inherited.timing),
        moderation=_moderation(check, doc, inherited.moderation),
    )


def _script(check: _Checker, doc: LineDict, settings: _Settings) -> Script | None:
    has = [key for key in BODY_KEYS if key in doc]
    if len(has) != 1:
        check.add(
            doc.line,
            "needs exactly one of steps or http_error" if not has else "has both steps and http_error; keep one",
        )
        return None
    common: dict[str, Any] = dict(
        model=settings.model,
        keepalive=settings.keepalive,
        stall_timeout=settings.stall_timeout,
        usage=settings.usage,
        finish=settings.finish,
        stop_sequence=settings.stop_sequence,
        force_reasoning=settings.force_reasoning,
        rate_limit=settings.rate_limit,
        stop_details=settings.stop_details,
        timing=settings.timing,
        moderation=settings.moderation,
    )
    if has[0] == "http_error":
        error = _http_error(check, doc)
        return None if error is None else Script(http_error=error, **common)
    steps = _steps(check, doc, settings.chunk_interval)
    _check_pause(check, doc, steps, settings.finish)
    if "stop_details" in doc and not _refuses(steps, settings.finish):
        check.add(
            _line_of(doc, "stop_details"),
            "stop_details: goes with a refusal: a refusal step, or finish: content_filter",
        )
    return Script(steps=steps, **common, request_text=any(type(step) is Quote for step in steps))


def _refuses(steps: tuple[Step, ...], finish: str | None) -> bool:
    """Whether these steps end as a refusal, unless `finish` says otherwise."""
    if finish is not None:
        return finish == "content_filter"
    return any(type(step) in (Output, Quote) and cast("Output | Quote", step).kind == "refusal" for step in steps)


def _entries(check: _Checker, doc: LineDict, key: str, settings: _Settings) -> list[Entry]:
    """The entries of a `sequence` or a `conversation`."""
    if any(body_key in doc for body_key in BODY_KEYS):
        check.add(_line_of(doc, key), f"{key}: a scenario has either a {key} or its own steps/http_error, not both")
    raw_entries = doc[key]
    if not isinstance(raw_entries, LineList) or not raw_entries:
        check.add(_line_of(doc, key), f"{key}: expected a non-empty list of entries")
        return []
    entries = [_entry(check, raw, _line_of(raw_entries, index), settings, key) for index, raw in enumerate(raw_entries)]
    return [entry for entry in entries if entry is not None]


def _entry(check: _Checker, raw: Any, line: int, settings: _Settings, key: str) -> Entry | None:
    if not isinstance(raw, LineDict):
        check.add(line, f"a {key} entry must be a mapping with steps, http_error or use, got {_type_name(raw)}")
        return None
    _check_keys(check, raw, ENTRY_KEYS, f"a {key} entry")
    if "use" in raw:
        use = raw["use"]
        if not isinstance(use, str) or not use:
            check.add(_line_of(raw, "use"), f"use: expected a scenario name, got {_type_name(use)}")
            return None
        others = [key for key in raw if key != "use"]
        if others:
            check.add(
                _line_of(raw, others[0]), f"use: an entry with use takes no other keys (found {', '.join(others)})"
            )
        return Entry(use=use, line=_line_of(raw, "use"))
    script = _script(check, raw, _settings(check, raw, settings))
    return None if script is None else Entry(script=script, line=raw.line)


def _match(check: _Checker, doc: LineDict) -> Match | None:
    spec = doc.get("match")
    if spec is None:
        return None
    if not isinstance(spec, LineDict):
        check.add(
            _line_of(doc, "match"),
            f"match: expected a mapping of rules such as protocol, model and prompt, got {_type_name(spec)}",
        )
        return None
    _check_keys(check, spec, MATCH_KEYS, "match")
    protocol = _string(check, spec, "protocol")
    if protocol is not None and protocol not in PROTOCOL_NAMES:
        check.add(
            _line_of(spec, "protocol"), f"match protocol: expected one of {', '.join(PROTOCOL_NAMES)}, got {protocol!r}"
        )
    return Match(
        protocol=protocol,
        model=_string(check, spec, "model"),
        prompt=_text_rule(check, spec, "prompt"),
        turn=_turn_rule(check, spec),
        tool_result=_tool_result_rule(check, spec),
        tools=_string(check, spec, "tools"),
        system=_text_rule(check, spec, "system"),
        headers=_header_rules(check, spec),
    )


def _text_rule(check: _Checker, spec: LineDict, key: str) -> TextRule | None:
    """A substring, or "/a regular expression/"."""
    text = _string(check, spec, key)
    return None if text is None else TextRule(text, match_regex(check, spec, key, text))


def _turn_rule(check: _Checker, spec: LineDict) -> TurnRule | None:
    """`turn: 2`, `turn: [1, 3]` or `turn: ">=3"`."""
    if "turn" not in spec:
        return None
    given = spec["turn"]
    turns: set[int] = set()
    at_least: int | None = None
    for value in given if isinstance(given, list) and given else [given]:
        at_least_found = _AT_LEAST_TURN.match(value) if isinstance(value, str) else None
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            turns.add(value)
        elif at_least_found and (turn := int(at_least_found.group(1))) >= 1:
            at_least = turn if at_least is None else min(at_least, turn)
        else:
            check.add(
                _line_of(spec, "turn"),
                f'match turn: expected a turn number from 1, a list of them, or ">=N", got {value!r}',
            )
            return None
    return TurnRule(frozenset(turns), at_least)


def _tool_result_rule(check: _Checker, spec: LineDict) -> bool | str | None:
    value = spec.get("tool_result")
    if value is None or isinstance(value, bool) or (isinstance(value, str) and value):
        return value
    check.add(
        _line_of(spec, "tool_result"),
        f"match tool_result: expected true, false or a tool's name, got {_type_name(value)}",
    )
    return None


def _header_rules(check: _Checker, spec: LineDict) -> tuple[tuple[str, str], ...]:
    """`header: {X-Tenant: "acme-*"}`: the header's value (any of them, when sent more than once) fits the glob."""
    headers = spec.get("header")
    if headers is None:
        return ()
    if not isinstance(headers, dict) or not all(
        isinstance(name, str) and isinstance(glob, (str, int, float)) and not isinstance(glob, bool)
        for name, glob in headers.items()
    ):
        check.add(
            _line_of(spec, "header"),
            'match header: expected a mapping of header names to globs, such as {X-Tenant: "acme-*"}',
        )
        return ()
    for name in headers:
        if not _HEADER_NAME.match(name):
            check.add(
                _line_of(headers, name, _line_of(spec, "header")),
                f"match header: {name!r} is not a header name (letters, digits and !#$%&'*+-.^_`|~ only), so no request sends it",
            )
    return tuple((name, str(glob)) for name, glob in headers.items())


def match_regex(check: _Checker, spec: LineDict, key: str, value: str | None):
    """The RE2 pattern of a `match` value written `/regex/`; None for any other value (or, with
    a problem naming the line, for a pattern RE2 does not take). RE2 matches in time linear in
    the text, so no pattern can hold the server up; it takes no backreferences or look-around."""
    if not value or len(value) < 2 or not (value.startswith("/") and value.endswith("/")):
        return None
    try:
        return re2.compile(value[1:-1], _REGEX_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        check.add(
            _line_of(spec, key),
            f"match {key}: not a valid regular expression ({reason}); "
            "match regexes run on RE2, which takes no backreferences or look-around",
        )
        return None


def parse_document(doc: Any, source: str, default_name: str | None) -> Scenario:
    """Turn one parsed YAML document into a Scenario, or raise ScenarioError listing every problem."""
    check = _Checker(source)
    if not isinstance(doc, LineDict):
        check.add(
            getattr(doc, "line", 1),
            f"a scenario must be a mapping with steps, http_error, sequence or conversation, got {_type_name(doc)}",
        )
        raise ScenarioError(check.problems)
    _check_keys(check, doc, TOP_KEYS, "the scenario")
    name = _string(check, doc, "name", default_name)
    if not name:
        check.add(doc.line, "needs a name")
    elif not NAME_PATTERN.match(name):
        check.add(
            _line_of(doc, "name"), f"name: {name!r} may hold only letters, digits, '.', '_' and '-' (at most 128)"
        )
    description = _string(check, doc, "description", "") or ""
    settings = _settings(check, doc, _Settings())
    lists = [key for key in ENTRY_LISTS if key in doc]
    if len(lists) > 1:
        check.add(_line_of(doc, lists[1]), "a scenario has either a sequence or a conversation, not both")
    if lists:
        entries = _entries(check, doc, lists[0], settings)
    else:
        script = _script(check, doc, settings)
        entries = [] if script is None else [Entry(script=script, line=doc.line)]
    match = _match(check, doc)
    _check_protocol_tools(check, match.protocol if match is not None else None, entries)
    if check.code_ids:
        entries = _with_code_ids(check, entries)
    if check.problems:
        raise ScenarioError(check.problems)
    return Scenario(
        name=cast(str, name),  # a scenario without one is a problem, raised above
        description=description,
        source=source,
        entries=tuple(entries),
        is_sequence=lists[:1] == ["sequence"],
        match=match,
        line=doc.line,
        is_conversation=lists[:1] == ["conversation"],
    )


def parse_text(text: str, source: str, default_name: str | None = None) -> Scenario:
    """Parse scenario YAML (or JSON) text."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_FILE_BYTES:
        raise ScenarioError([Problem(source, 0, f"larger than the limit of {MAX_FILE_BYTES:,} bytes")])
    try:
        doc = yamlsource.load(text)
    except yamlsource.YamlProblem as exc:
        raise ScenarioError([Problem(source, exc.line, exc.message)]) from None
    return parse_document(doc, source, default_name)


def load_file(path: Path) -> Scenario:
    return parse_text(_file_text(path), str(path), default_name=path.stem)


def _file_text(path: Path) -> str:
    """The text of a YAML file; ScenarioError naming it when it is too large or cannot be read."""
    source = str(path)
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise ScenarioError([Problem(source, 0, f"larger than the limit of {MAX_FILE_BYTES:,} bytes")])
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ScenarioError([Problem(source, 0, "not a UTF-8 text file")]) from None
    except OSError as exc:
        raise ScenarioError([Problem(source, 0, f"cannot be read: {exc.strerror or exc}")]) from None


def load_timing(path: Path) -> Timing:
    """The `timing:` block a YAML file holds; ScenarioError naming the file and line of each problem."""
    source = str(path)
    try:
        doc = yamlsource.load(_file_text(path))
    except yamlsource.YamlProblem as exc:
        raise ScenarioError([Problem(source, exc.line, exc.message)]) from None
    check = _Checker(source)
    if not isinstance(doc, LineDict) or "timing" not in doc:
        check.add(
            getattr(doc, "line", 1), f"expected a mapping holding a timing: block, such as timing: {TIMING_EXAMPLE}"
        )
        raise ScenarioError(check.problems)
    _check_keys(check, doc, ("timing",), "a timing file")
    timing = _timing(check, doc, None)
    if check.problems or timing is None:
        raise ScenarioError(check.problems)
    return timing


def scenario_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.suffix in SCENARIO_SUFFIXES and p.is_file())


def free_inline_name(names) -> str:
    """The first of inline-1, inline-2, ... that is not in `names`."""
    number = 1
    while f"inline-{number}" in names:
        number += 1
    return f"inline-{number}"


def scenario_json(scenario: Scenario) -> dict:
    """What a scenario plays, for reading: each of its objects as a mapping of its fields, its
    kind under `type` (`output`, `delay`, `http_error`, …); a step's `deltas` are the pieces
    its text streams as."""
    return _plain(scenario)


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    if isinstance(value, frozenset):
        return sorted(value)
    if not hasattr(value, "__dataclass_fields__"):
        return value
    plain = {"type": re.sub(r"(?<!^)(?=[A-Z])", "_", type(value).__name__).lower()}
    for name in value.__dataclass_fields__:
        if not (isinstance(value, TextRule) and name == "regex"):  # compiled; `text` holds its source
            plain[name] = _plain(getattr(value, name))
    return plain
