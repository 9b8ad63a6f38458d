"""The immutable model of a scenario: what the reader makes of a scenario file, and what the
player, the protocols and the sessions read. It needs neither YAML nor RE2: a TextRule holds the
pattern the reader compiled."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any, Union

__all__ = [
    "DEFAULT_KEEPALIVE",
    "DEFAULT_STALL_TIMEOUT",
    "FINISH_REASONS",
    "MATCH_PREFIX_CHARS",
    "SERVER_TOOL_NAMES",
    "Citation",
    "Compaction",
    "Delay",
    "Disconnect",
    "Entry",
    "Fail",
    "Hang",
    "HttpError",
    "KeepaliveNow",
    "Match",
    "Moderation",
    "Output",
    "Quote",
    "QuoteRef",
    "RateLimit",
    "Raw",
    "RedactedThinking",
    "Scenario",
    "Script",
    "ServerTool",
    "Stall",
    "Step",
    "StopDetails",
    "TextRule",
    "Timing",
    "ToolCall",
    "TurnRule",
    "Usage",
]

FINISH_REASONS = (
    "stop",
    "length",
    "tool_calls",
    "content_filter",
    "stop_sequence",
    "pause_turn",
    "model_context_window_exceeded",
)
DEFAULT_KEEPALIVE = 10.0
DEFAULT_STALL_TIMEOUT = 120.0
MATCH_PREFIX_CHARS = 100_000  # of a prompt (or any text a `match` key reads): a match looks no further
# The categories of OpenAI's moderation models, as a moderation result names them.
MODERATION_CATEGORIES = (
    "harassment", "harassment/threatening", "hate", "hate/threatening", "illicit", "illicit/violent", "self-harm",
    "self-harm/instructions", "self-harm/intent", "sexual", "sexual/minors", "violence", "violence/graphic",
)  # fmt: skip
MAX_TEXT_CHARS = 2_000_000  # one scenario's text, reasoning, tool-call arguments and custom input, faker text included


@dataclass(frozen=True, slots=True)
class Citation:
    """A text step's citation of a web page: `start` and `end` are character offsets in the
    step's text (once played, in its block's); `title` None where the scenario gives none."""

    url: str
    title: str | None
    cited_text: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Output:
    """`text` or `reasoning`: the output already split into the deltas it streams as."""

    kind: str  # "text" | "reasoning" | "refusal"
    deltas: tuple[str, ...]
    interval: float
    signature: str | None = None  # reasoning only: the thinking block's signature on Messages; default drawn
    part_starts: tuple[int, ...] = ()  # reasoning `parts`: the deltas each part begins with
    phase: str | None = None  # text: what the model says the text is for (Responses' message `phase`)
    citations: tuple[Citation, ...] = ()  # text: the web pages it cites, by `end` in order
    paced: bool = True  # no `interval` or `chunk_interval` set: a `timing:` block paces its deltas


@dataclass(frozen=True, slots=True)
class RedactedThinking:
    """Reasoning whose text is never shown: Messages' `redacted_thinking` block, with `data`."""

    data: str | None  # None: opaque data made up per answer


@dataclass(frozen=True, slots=True)
class QuoteRef:
    """A place in a quoting step's text that the request fills: `prompt`, or `tool_result`
    (of the tool `tool`, or the last one)."""

    source: str
    tool: str | None = None


@dataclass(frozen=True, slots=True)
class Quote:
    """`text` or `reasoning` that quotes the request: literal pieces and QuoteRefs, made into
    an Output for each request (fakehop.quoting), then split as `chunk` says."""

    kind: str  # "text" | "reasoning" | "refusal"
    pieces: tuple[str | QuoteRef, ...]
    chunk: Any  # as split_deltas takes it
    interval: float
    signature: str | None = None  # as Output's
    phase: str | None = None  # as Output's
    paced: bool = True  # as Output's


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: str  # JSON text
    call_id: str | None
    deltas: tuple[str, ...]
    interval: float
    custom: bool = False  # a custom tool's call: `arguments` is its free-text input, not JSON
    paced: bool = True  # as Output's
    caller: str | None = None  # a call the code of a code execution makes: that execution's server_tool_use id


@dataclass(frozen=True, slots=True)
class Delay:
    seconds: float


@dataclass(frozen=True, slots=True)
class KeepaliveNow:
    pass


@dataclass(frozen=True, slots=True)
class Stall:
    resume: bool


@dataclass(frozen=True, slots=True)
class Hang:
    pass


@dataclass(frozen=True, slots=True)
class Fail:
    kind: str
    message: str | None
    error_type: str | None = None  # `type`, `code`, `param`: the error's own fields, in place of the kind's
    code: str | None = None
    param: str | None = None
    error_event: bool = True  # Responses: an `error` event before `response.failed`


@dataclass(frozen=True, slots=True)
class Disconnect:
    pass


@dataclass(frozen=True, slots=True)
class Raw:
    data: str


# ---------------------------------------------------------------- hosted tools and compaction

SERVER_TOOL_NAMES = ("web_search", "web_fetch", "file_search", "code_execution", "image_generation", "mcp")


@dataclass(frozen=True, slots=True)
class ServerTool:
    """A tool the provider runs itself (`server_tool`): its call and, unless `result` is None
    (a call the turn pauses on), its result. Input and result are JSON text, so that a script
    stays hashable; `server` and `tool` name an MCP call's server and tool."""

    name: str
    input: str
    result: str | None
    input_deltas: tuple[str, ...]  # the input as it streams (Messages' input_json_delta, Responses' MCP arguments)
    code_deltas: tuple[str, ...]  # code_execution: its code as it streams (Responses' code deltas)
    call_id: str | None = None
    server: str | None = None
    tool: str | None = None
    calls_tools: bool = False  # a code execution whose code calls the client's tools (a tool_call's caller)


@dataclass(frozen=True, slots=True)
class Compaction:
    """The summary a context compaction left in place of the conversation before it."""

    text: str


Step = Union[
    Output,
    Quote,
    ToolCall,
    RedactedThinking,
    Delay,
    KeepaliveNow,
    Stall,
    Hang,
    Fail,
    Disconnect,
    Raw,
    ServerTool,
    Compaction,
]


@dataclass(frozen=True, slots=True)
class Usage:
    """The token counts a scenario sets; None: estimated (input, output, reasoning) or 0."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None  # Messages: thinking_tokens
    cached_tokens: int | None = None  # Messages: cache_read_input_tokens
    cache_write_tokens: int | None = None  # Messages: cache_creation_input_tokens
    input_audio_tokens: int | None = None
    output_audio_tokens: int | None = None
    accepted_prediction_tokens: int | None = None
    rejected_prediction_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class HttpError:
    status: int
    message: str | None = None
    retry_after: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    error_type: str | None = None  # `type`, `code`, `param` of the error body, in place of the status's
    code: str | None = None
    param: str | None = None


@dataclass(frozen=True, slots=True)
class StopDetails:
    """Why an answer was refused, as Messages' `stop_details` says it; None for what the scenario leaves out."""

    category: str | None = None
    explanation: str | None = None


@dataclass(frozen=True, slots=True)
class Moderation:
    """The moderation categories Responses' moderation results flag, for a request that asks for moderation."""

    input: tuple[str, ...] = ()
    output: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RateLimit:
    """The limits a successful answer's rate-limit headers tell, per `window` seconds (see ratelimit)."""

    requests: int = 5_000
    tokens: int = 2_400_000
    input_tokens: int = 2_000_000  # Messages' input and output limits; `tokens` is both together there
    output_tokens: int = 400_000
    window: float = 60.0
    enforce: bool = False  # once the window's requests or tokens are used up, a 429 until it opens again


@dataclass(frozen=True, slots=True)
class Timing:
    """How long a model takes (`timing:`): the time to the first delta, drawn from a log-normal
    with these p50 and p99 seconds, and the pace of later deltas, `tokens_per_second` on
    average with a relative spread `jitter`. With a `seed`, every answer takes the same pauses;
    without, each answer draws its own."""

    first_token_p50: float | None = None
    first_token_p99: float | None = None
    tokens_per_second: float | None = None
    jitter: float = 0.0
    seed: int | None = None


@dataclass(frozen=True, slots=True)
class Script:
    """One answer to one request: either an HTTP error or steps to stream."""

    steps: tuple[Step, ...] = ()
    http_error: HttpError | None = None
    model: str | None = None
    keepalive: float = DEFAULT_KEEPALIVE
    stall_timeout: float = DEFAULT_STALL_TIMEOUT
    usage: Usage = Usage()
    finish: str | None = None
    request_text: bool = False  # some of its text quotes the request: kept renderings and timelines are not kept for it
    stop_sequence: str | None = None  # with finish stop_sequence: the sequence that ended the answer
    force_reasoning: bool = False  # show reasoning even to requests that did not ask for it
    rate_limit: RateLimit | None = None  # None: successful answers carry no rate-limit headers
    stop_details: StopDetails | None = None  # a refusal's category and explanation (Messages)
    timing: Timing | None = None  # None: only the scenario's own pauses
    moderation: Moderation | None = None  # what moderation results flag (Responses); None: nothing


@dataclass(frozen=True, slots=True)
class Entry:
    """One entry of a sequence or a conversation: a script, or `use` of another scenario by name."""

    script: Script | None = None
    use: str | None = None
    line: int = 0


@dataclass(frozen=True, slots=True)
class TextRule:
    """A `match` rule on some text: it holds `text`, or matches `regex` (written "/…/"; an RE2
    pattern, see match_regex), in the text's first MATCH_PREFIX_CHARS."""

    text: str
    regex: Any = None

    def fits(self, text: str) -> bool:
        text = text[:MATCH_PREFIX_CHARS]
        if self.regex is not None:
            return self.regex.search(text) is not None
        return self.text in text


@dataclass(frozen=True, slots=True)
class TurnRule:
    """A `match` rule on the turn: one of `turns`, or `at_least` and on."""

    turns: frozenset[int] = frozenset()
    at_least: int | None = None

    def fits(self, turn: int) -> bool:
        return turn in self.turns or (self.at_least is not None and turn >= self.at_least)


@dataclass(frozen=True, slots=True)
class Match:
    """A scenario's `match` rules; a request must fit all of them."""

    protocol: str | None = None
    model: str | None = None
    prompt: TextRule | None = None
    turn: TurnRule | None = None
    tool_result: bool | str | None = None  # True, False, or the name of a tool
    tools: str | None = None
    system: TextRule | None = None
    headers: tuple[tuple[str, str], ...] = ()  # (name, glob)

    def fits(self, protocol: str, request, headers) -> bool:
        """Whether `request` (a ParsedRequest to the `protocol` route, sent with `headers`,
        a case-insensitive multidict) fits every rule."""
        if self.protocol is not None and self.protocol != protocol:
            return False
        if self.model is not None and not fnmatch.fnmatchcase(request.model or "", self.model):
            return False
        if self.prompt is not None and not self.prompt.fits(request.prompt or ""):
            return False
        conversation = request.conversation
        if self.turn is not None and not self.turn.fits(conversation.turn):
            return False
        if self.tool_result is not None and not self.fits_tool_result(conversation.tool_results):
            return False
        if self.tools is not None and self.tools not in conversation.tools:
            return False
        if self.system is not None and not self.system.fits(conversation.system):
            return False
        return all(
            any(fnmatch.fnmatchcase(value, glob) for value in headers.getall(name, ())) for name, glob in self.headers
        )

    def fits_tool_result(self, results: tuple) -> bool:
        if isinstance(self.tool_result, bool):
            return bool(results) is self.tool_result
        return any(result.name == self.tool_result for result in results)


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    description: str
    source: str
    entries: tuple[Entry, ...]
    is_sequence: bool = False
    match: Match | None = None
    line: int = 1
    is_conversation: bool = False

    def entry_for(self, request_number: int) -> Entry:
        """The entry request number `request_number` (1-based) plays, or for a conversation
        turn number `request_number`; the last repeats."""
        return self.entries[min(request_number, len(self.entries)) - 1]
