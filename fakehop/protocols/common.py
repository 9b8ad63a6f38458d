"""What the protocol encoders share: SSE framing, ids, request facts, error tables."""

from __future__ import annotations

import base64
import functools
import itertools
import json
import os
import random
import string
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from json.encoder import encode_basestring
from typing import Any, ClassVar, NamedTuple

from ..play import player as p
from ..play.player import PlayRequest
from ..scenario.model import Output, Quote, Script, ToolCall

KEEPALIVE_FRAME = b": hopbase-keepalive\n\n"
_ID_ALPHABET = string.ascii_letters + string.digits
FRESH = random.Random()  # the ids of answers nobody asked to reproduce
_ID_BYTES = bytes(ord(_ID_ALPHABET[byte % len(_ID_ALPHABET)]) for byte in range(256))  # any byte to an id character


def drawn_ahead(batch: Callable[[], Iterable]) -> Iterator:
    """`batch`'s values one after another, endlessly: a C iterator, which calls `batch` again when one runs out."""
    return itertools.chain.from_iterable(itertools.starmap(batch, itertools.repeat(())))


def drawn_records(ids: tuple[tuple[bytes, int], ...], count: int, to_char: bytes) -> bytes:
    """`count` records drawn at once, each of a space and an id per (prefix, length) of `ids`: the
    prefix (with no space), then `length` random bytes of one FRESH call mapped by `to_char`."""
    record = sum(1 + len(prefix) + length for prefix, length in ids)
    drawn = bytearray(FRESH.randbytes(record * count).translate(to_char))
    position = 0
    for prefix, length in ids:  # the bytes every record has, each written into all records at once
        for byte in b" " + prefix:
            drawn[position::record] = bytes((byte,)) * count
            position += 1
        position += length
    return bytes(drawn)


# json.dumps(value, ensure_ascii=False, separators=(",", ":")) builds an encoder on every call;
# this one is built once and writes the same text.
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def dumps(value: Any) -> str:
    """Compact JSON, as the real APIs write it."""
    return _COMPACT.encode(value)


def data_frame(value: Any) -> bytes:
    return b"data: " + dumps(value).encode() + b"\n\n"


def event_frame(name: str, value: Any) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + dumps(value).encode() + b"\n\n"


class Template:
    """A frame with one string slot, encoded once: `fill(s)` equals framing the whole object.

    Build it from the frame of an object whose slot holds `SLOT`; filling in a string then
    costs one JSON string encoding (`encode_basestring`, what json.dumps(text,
    ensure_ascii=False) calls) instead of one of the whole object. The slot is the frame's
    last `SLOT`: whatever a client sent that comes before it in the frame (its model) may
    hold the same characters and is left as it is.
    """

    SLOT = "\x00slot\x00"
    _SLOT_JSON = encode_basestring(SLOT)

    def __init__(self, frame: bytes):
        head, _, tail = frame.decode().rpartition(self._SLOT_JSON)
        self.head, self.tail = head.encode(), tail.encode()

    def fill(self, text: str) -> bytes:
        return self.head + encode_basestring(text).encode() + self.tail

    def fill_json(self, json_text: str, length: int = 0) -> bytes:
        """The frame with `json_text`, a value already encoded as JSON, in the slot; `length`:
        the characters of output it carries, which ObfuscatedTemplate pads."""
        return self.head + json_text.encode() + self.tail

    def unfilled(self, json_text: str) -> bytes:
        """fill_json, for a frame to build another Template of: what else the frame has to fill stays to fill."""
        return self.fill_json(json_text)


OBFUSCATION_BLOCK = 16  # OpenAI's `obfuscation` pads a delta's text to a multiple of this many characters
_OBFUSCATION_TURNS = 8  # the strings of each length, handed out in turn
_OBFUSCATION_RNG = random.Random(20250805)
OBFUSCATIONS = tuple(
    tuple("".join(_OBFUSCATION_RNG.choices(_ID_ALPHABET, k=length)).encode() for _ in range(_OBFUSCATION_TURNS))
    for length in range(OBFUSCATION_BLOCK)
)


class Obfuscation:
    """OpenAI's `obfuscation` strings for one answer's deltas: random-looking characters that
    pad a delta's text to `offset` characters more than a multiple of OBFUSCATION_BLOCK, so
    that a frame's length tells little of its text. They come in turn from a fixed pool, not
    from the Meta: an answer's are the same every time and cost a kept rendering no hole."""

    MARK = "\x00obfuscation\x00"  # where a frame's obfuscation goes
    MARK_JSON = encode_basestring(MARK)[1:-1].encode()

    def __init__(self, offset: int) -> None:
        self.offset = offset
        self.turn = 0

    def padding(self, length: int) -> bytes:
        """The obfuscation for a delta of `length` characters."""
        self.turn = (self.turn + 1) % _OBFUSCATION_TURNS
        return OBFUSCATIONS[(self.offset - length) % OBFUSCATION_BLOCK][self.turn]


class ObfuscatedTemplate(Template):
    """A Template whose frame also holds `Obfuscation.MARK`, after its slot: each fill writes
    the obfuscation for the slot's text there."""

    def __init__(self, frame: bytes, obfuscation: Obfuscation):
        super().__init__(frame)
        self.tail, _, self.end = self.tail.partition(Obfuscation.MARK_JSON)
        self.obfuscation = obfuscation

    def fill(self, text: str) -> bytes:
        return b"".join(
            (self.head, encode_basestring(text).encode(), self.tail, self.obfuscation.padding(len(text)), self.end)
        )

    def fill_json(self, json_text: str, length: int = 0) -> bytes:
        return b"".join((self.head, json_text.encode(), self.tail, self.obfuscation.padding(length), self.end))

    def unfilled(self, json_text: str) -> bytes:
        return b"".join((self.head, json_text.encode(), self.tail, Obfuscation.MARK_JSON, self.end))


SYSTEM_FINGERPRINT = "fp_fakehop"
NO_FINGERPRINT_MODELS = ("gpt-5",)  # the model families whose real Chat answers carry `system_fingerprint: null`


class Meta:
    """Per-answer facts that the encoders write but the scenario does not fix.

    Ids come from `rng`, so a seeded Meta gives the same bytes every time; without one they
    come from FRESH, whole bytes at a time, several times faster than `choices`. Encoders ask
    for every random value through `new_id` and `random_base64`: `prerender` relies on that.
    What the bytes take from the model beside its name, `system_fingerprint`, keys the kept
    renderings. One is built per answer: a plain class, whose __init__ costs less than a
    dataclass's with its __post_init__.
    """

    __slots__ = ("created", "model", "rng", "system_fingerprint")

    def __init__(self, model: str, created: int, rng: random.Random | None = None) -> None:
        self.model = model
        self.created = created
        self.rng = rng
        # Chat's, for the model the answer names
        self.system_fingerprint = None if model.startswith(NO_FINGERPRINT_MODELS) else SYSTEM_FINGERPRINT

    def new_id(self, prefix: str, length: int = 24) -> str:
        if self.rng is None:
            return prefix + FRESH.randbytes(length).translate(_ID_BYTES).decode()
        return prefix + "".join(self.rng.choices(_ID_ALPHABET, k=length))

    def random_base64(self, nbytes: int) -> str:
        """`nbytes` random bytes in base64, for opaque values such as signatures."""
        return base64.b64encode((self.rng or FRESH).randbytes(nbytes)).decode()


class Asks:
    """The random values an encoding asked its Meta for, in order, each a method's name and
    arguments: `answers` asks another Meta the same, in UTF-8. A Meta with no rng gets ids
    drawn ahead, ASKS_DRAWN_AHEAD answers' at once (a randbytes per answer cost a chat answer
    2.5k instructions more, a responses one 5k), and base64 values with the ids of their answer
    from one FRESH call, as one id of their total length would."""

    def __init__(self, asks: tuple[tuple[str, tuple], ...]) -> None:
        self.asks = asks
        places: list[tuple[bytes | None, int, int]] = []  # an id's prefix (None: base64), and where its bytes are
        drawn = 0
        for method, args in asks:
            size = args[1] if method == "new_id" else args[0]
            places.append((args[0].encode() if method == "new_id" else None, drawn, drawn + size))
            drawn += size
        self.nbytes = drawn
        self.places = tuple(places)
        ids = tuple((prefix, end - start) for prefix, start, end in places if prefix is not None)
        every_id = asks and len(ids) == len(asks)
        self.fresh_ids = drawn_ahead(functools.partial(_drawn_answers, ids)) if every_id else None
        self.held_ahead = _held_ahead(ids) if every_id else 0  # bytes the ids drawn ahead take, at most

    def __len__(self) -> int:
        return len(self.asks)

    def answers(self, meta: Meta) -> Sequence[bytes]:
        if meta.rng is not None:
            return [getattr(meta, method)(*args).encode() for method, args in self.asks]
        if self.fresh_ids is not None:  # most answers: their asks are all ids
            return next(self.fresh_ids)
        drawn = FRESH.randbytes(self.nbytes)
        ids = drawn.translate(_ID_BYTES)
        answers = []
        for prefix, start, end in self.places:  # a loop, not a comprehension: one Python frame fewer
            answers.append(prefix + ids[start:end] if prefix is not None else base64.b64encode(drawn[start:end]))
        return answers


ASKS_DRAWN_AHEAD = 64  # answers' ids drawn at once, kept by each kept rendering


def _held_ahead(ids: tuple[tuple[bytes, int], ...]) -> int:
    """The memory ASKS_DRAWN_AHEAD answers' `ids` take (see _drawn_answers): a bytes object each, a tuple an answer."""
    answer = sys.getsizeof(tuple(ids)) + sum(sys.getsizeof(prefix) + length for prefix, length in ids)
    return ASKS_DRAWN_AHEAD * answer


def _drawn_answers(ids: tuple[tuple[bytes, int], ...]) -> Iterator[tuple[bytes, ...]]:
    """The ids of ASKS_DRAWN_AHEAD answers, a tuple for each answer."""
    drawn = iter(drawn_records(ids, ASKS_DRAWN_AHEAD, _ID_BYTES).split(b" "))
    next(drawn)  # what precedes the first space
    return zip(*[drawn] * len(ids))


class ToolResult(NamedTuple):
    """One of the tool results a request ends with."""

    call_id: str
    name: str | None  # the tool it answers, from the call in the history with its id; None when none has
    text: str  # the text of its content


class Conversation(NamedTuple):
    """Where a request stands in an agent's conversation, the same in every protocol: read by
    each protocol's parse in its one pass over the messages, for `match`, `conversation:`
    scenarios and quoting steps."""

    turn: int = 1  # 1 + the assistant turns in the request's history
    tool_results: tuple[ToolResult, ...] = ()  # the results the request ends with, in order; () when it ends otherwise
    tools: tuple[str, ...] = ()  # the names of the tools it offers
    system: str = ""  # its system prompt or instructions
    problem: BadRequest | None = None  # the first of the real API's conversation checks it fails
    continues: str | None = None  # the id of the stored response it continues (Responses' previous_response_id)
    keep: bool = False  # whether its answer is stored for later requests to continue (Responses' store)


FIRST_TURN = Conversation()  # a request with no history, tools or system prompt: most of them


NO_OPTIONS: dict = {}  # the options of a request that asks for none: read, never changed


class ParsedRequest(NamedTuple):
    """The facts of a request that fakehop acts on, whatever its protocol (a NamedTuple: one is built per request)."""

    model: str
    stream: bool
    prompt: str  # the last user-authored text (never a tool result), for `match`
    play: PlayRequest
    options: dict = NO_OPTIONS  # read, never changed
    # What else of the request the stream's bytes depend on, beside `play` and the model, as a
    # short string ("" for nothing): the key that tells kept renderings apart (see prerender).
    variant: str = ""
    conversation: Conversation = FIRST_TURN


class BadRequest(Exception):
    """A request the real API would refuse; answered in the protocol's error shape."""

    def __init__(
        self,
        message: str,
        param: str | None = None,
        status: int = 400,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
        details: Mapping[str, Any] | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status
        self.code = code
        self.headers = headers  # beside the protocol's own error headers
        self.details = details  # the error's `details` (Anthropic's `error_code` and what goes with it)


def require_type(body: dict, key: str, kinds: tuple, what: str, required: bool = False) -> Any:
    """body[key] if it has one of `kinds`; raises BadRequest naming the field otherwise."""
    value = body.get(key)
    if type(value) in kinds:  # most calls, in one test: JSON values have exact types, and a bool's is not int
        return value
    if value is None:
        if required:
            raise BadRequest(f"Missing required parameter: '{key}'.", param=key)
        return None
    if isinstance(value, bool) and bool not in kinds:
        raise BadRequest(f"Invalid type for '{key}': expected {what}, but got a boolean instead.", param=key)
    if not isinstance(value, kinds):
        raise BadRequest(f"Invalid type for '{key}': expected {what}, but got {json_type(value)} instead.", param=key)
    return value


# The kinds of an optional field's value, as typed_fields accepts them, for a parse to test its usual fields inline.
OPTIONAL_BOOL = (bool, type(None))
OPTIONAL_OBJECT = (dict, type(None))
# new_tuple(SomeNamedTuple, values) builds one without the __new__ a NamedTuple writes in
# Python: about 1.4k instructions less each, measured. `values` holds every field.
new_tuple = tuple.__new__


def typed_fields(body: dict, fields: tuple[tuple[str, tuple, str, bool], ...], refuse: Callable = require_type) -> list:
    """The body's value of each field, (key, kinds, what, required), in their order: None
    for one not sent. A value of another type goes to `refuse` (require_type by default),
    which raises BadRequest naming it, or gives None for a null that is not required.
    One loop instead of a call per field: this runs on every request."""
    values = []
    for key, kinds, what, required in fields:
        value = body.get(key)
        # JSON values have exact types, and a bool's is not int; most fields not sent are optional.
        if type(value) not in kinds and (value is not None or required):
            value = refuse(body, key, kinds, what, required)
        values.append(value)
    return values


def lone_question(messages: list) -> str | None:
    """The text of `messages` when they are one user message with a string for content, as most
    requests' are; None otherwise."""
    message = messages[0]
    if len(messages) == 1 and type(message) is dict and message.get("role") == "user":
        content = message.get("content")
        if type(content) is str:
            return content
    return None


def positive_int(body: dict, key: str, required: bool = False) -> int | None:
    return at_least_one(key, require_type(body, key, (int,), "an integer", required))


def at_least_one(key: str, value: int | None) -> int | None:
    """`value` (of the field `key`) when it is None or at least 1; BadRequest otherwise."""
    if value is not None and value < 1:
        raise BadRequest(
            f"Invalid '{key}': integer below minimum value. Expected a value >= 1, but got {value} instead.", param=key
        )
    return value


def json_type(value: Any) -> str:
    for kind, name in (
        (bool, "a boolean"),
        (str, "a string"),
        (dict, "an object"),
        (list, "an array"),
        ((int, float), "a number"),
    ):
        if isinstance(value, kind):
            return name
    return "null"


def content_text(content: Any) -> str:
    """The text of a message's content: a string, or a list of parts with text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "") for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


# OpenAI's `service_tier` values, each with the tier an answer says served it: `auto` is the
# project's tier ("default" unless set otherwise), and `fast` is shown as `priority`.
SERVED_TIERS = {
    "auto": "default",
    "default": "default",
    "flex": "flex",
    "scale": "scale",
    "priority": "priority",
    "fast": "priority",
    "ultrafast": "ultrafast",
}


def served_tier(tier: str) -> str:
    """The `service_tier` an OpenAI answer shows for the request's; BadRequest for an unknown one."""
    served = SERVED_TIERS.get(tier)
    if served is None:
        raise BadRequest(
            f"Invalid value for 'service_tier': expected one of {', '.join(map(repr, SERVED_TIERS))}, got {tier!r}.",
            param="service_tier",
        )
    return served


def required_call(tool_choice: Any) -> str | None:
    """What a request's `tool_choice` requires of the answer: "" a call to any tool (`required`,
    Messages' `any`, `allowed_tools` in mode `required`), a tool's name a call to that one
    (Chat's and Responses' `function`, Messages' `tool`); None nothing."""
    if tool_choice == "required":
        return ""
    if type(tool_choice) is not dict:
        return None
    kind = tool_choice.get("type")
    allowed = tool_choice.get("allowed_tools")
    mode = allowed.get("mode") if type(allowed) is dict else tool_choice.get("mode")
    if kind == "any" or (kind == "allowed_tools" and mode == "required"):
        return ""
    if kind not in ("function", "tool", "custom"):
        return None
    inner = tool_choice.get(kind)
    name = (inner if type(inner) is dict else tool_choice).get("name")
    return name if type(name) is str else ""


def unmet_tool_choice(required: str, script: Script, label: str) -> str | None:
    """Why scenario `label`'s answer `script` is one the real API cannot give to a request whose
    tool_choice requires a call (`required`, see required_call); None when it can."""
    if script.http_error is not None:
        return None
    calls = [step.name for step in script.steps if type(step) is ToolCall]
    wanted = f"a call to '{required}'" if required else "a tool call"
    if not calls:
        return f"tool_choice requires {wanted}, but scenario '{label}' answers without one: the real API cannot give this answer"
    if required and calls[0] != required:
        return (
            f"tool_choice requires {wanted}, but scenario '{label}' calls '{calls[0]}': "
            "the real API cannot give this answer"
        )
    return None


JSON_OUTPUTS = ("json_schema", "json_object")  # the output formats that make an answer's text JSON


def json_output_asked(output_format: Any, field: str) -> dict:
    """The option of a request whose `field` (`output_format`, the object holding its `type`)
    asks for JSON output: {"json_output": field}; {} when it does not."""
    kind = output_format.get("type") if type(output_format) is dict else None
    return {"json_output": field} if kind in JSON_OUTPUTS else {}


def unmet_json_output(field: str, script: Script, label: str) -> str | None:
    """Why scenario `label`'s answer `script` is one the real API cannot give to a request whose
    `field` asks for JSON output: its text is not JSON (which the SDKs' parse() then fails on);
    None when it is, or cannot be told before it is played (text that quotes the request, an
    answer cut short or with no text)."""
    if script.http_error is not None or script.request_text or script.finish == "length":
        return None
    if any(type(step) is Quote for step in script.steps):
        return None
    text = "".join(
        delta for step in script.steps if type(step) is Output and step.kind == "text" for delta in step.deltas
    )
    if not text:
        return None
    try:
        json.loads(text)
    except ValueError:
        return (
            f"{field} asks for JSON output, but scenario '{label}' answers with text that is not JSON: "
            "the real API cannot give this answer, and the SDKs' parse() fails on it"
        )
    return None


def tool_names(tools: list | None) -> tuple[str, ...]:
    """The names of the tools a request offers: each tool's `name`, or the `name` inside the
    object its `type` names (Chat Completions' {"type": "function", "function": {"name": …}})."""
    names = []
    for tool in tools or ():
        if type(tool) is not dict:
            continue
        kind = tool.get("type")
        named = tool if "name" in tool else tool.get(kind) if type(kind) is str else None
        if type(named) is dict and type(named.get("name")) is str:
            names.append(named["name"])
    return tuple(names)


class History:
    """What a pass over a request's messages gathers beside their text, for its Conversation:
    used only for a request that holds more than user messages."""

    def __init__(self) -> None:
        self.turns = 0
        self.results: list[ToolResult] = []  # the tool results since the last other message
        self.system: list[str] = []
        self.problem: BadRequest | None = None

    def refuse(self, message: str, param: str) -> None:
        """Note a conversation check the request fails; the first one is the one answered."""
        if self.problem is None:
            self.problem = BadRequest(message, param=param)

    def conversation(self, tools: tuple[str, ...], system: str | None = None) -> Conversation:
        """The Conversation gathered; `system` is the protocol's own system prompt, when it has one apart from the messages."""
        joined = "\n".join(self.system) if system is None else system
        return Conversation(self.turns + 1, tuple(self.results), tools, joined, self.problem)


# The tool calls of each earlier turn in a protocol's example_request: (name, arguments, result).
EXAMPLE_TOOL_CALLS = (
    ("get_time", '{"timezone":"Europe/Paris"}', "14:05"),
    ("get_weather", '{"city":"Paris"}', "Sunny, 21 °C"),
)


def example_call_id(prefix: str, turn: int, number: int) -> str:
    return f"{prefix}{turn}_{number}"


# ---------------------------------------------------------------- logprobs

# Made-up logprobs: each delta is one token, chosen with CHOSEN_LOGPROB, and its top_logprobs
# are itself and then as many of ALTERNATIVE_TOKENS as asked for, each less likely than the last.
CHOSEN_LOGPROB = -0.0001
ALTERNATIVE_TOKENS = (
    " the",
    " a",
    ",",
    ".",
    " and",
    " of",
    " to",
    " in",
    " is",
    " that",
    " it",
    " for",
    " on",
    " with",
    " as",
    " I",
    " be",
    " at",
    " by",
    " this",
    " not",
)


def token_logprob(token: str, top: int, with_bytes: bool) -> dict:
    """The logprobs entry of one token, with `top` top_logprobs; `bytes` (its UTF-8) where the protocol has them."""
    alternatives = [(token, CHOSEN_LOGPROB)] + [
        (other, -1.0 - rank) for rank, other in enumerate(o for o in ALTERNATIVE_TOKENS if o != token)
    ]
    return {
        **logprob(token, CHOSEN_LOGPROB, with_bytes),
        "top_logprobs": [logprob(other, value, with_bytes) for other, value in alternatives[:top]],
    }


def logprob(token: str, value: float, with_bytes: bool) -> dict:
    return (
        {"token": token, "logprob": value, "bytes": list(token.encode())}
        if with_bytes
        else {"token": token, "logprob": value}
    )


# ---------------------------------------------------------------- errors

# How each fail kind reads on the OpenAI protocols: (code, type).
OPENAI_FAIL = {
    "rate_limit": ("rate_limit_exceeded", "requests"),
    "server_error": ("server_error", "server_error"),
    "invalid_prompt": ("invalid_prompt", "invalid_request_error"),
    "overloaded": ("server_error", "server_error"),
    "interrupted": ("server_error", "server_error"),
}

# The HTTP status a fail kind becomes when the request was not streamed.
FAIL_STATUS = {"rate_limit": 429, "invalid_prompt": 400, "server_error": 500, "interrupted": 500}

ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}

HTTP_MESSAGES = {
    400: "Bad request",
    401: "Invalid API key",
    402: "Payment required",
    403: "Permission denied",
    404: "Not found",
    405: "Method not allowed",
    408: "Request timeout",
    409: "Conflict",
    413: "Request too large",
    422: "Unprocessable entity",
    429: "Rate limit reached, please retry after a short wait",
    500: "The server had an error while processing your request",
    502: "Bad gateway",
    503: "The server is overloaded or not ready yet",
    504: "Gateway timeout",
    529: "Overloaded",
}


def default_message(status: int, messages: dict[int, str] = HTTP_MESSAGES) -> str:
    return messages.get(status, "Request failed")


def openai_fail_error(failure: p.Failure) -> dict:
    """The inner `error` object of a failure on the OpenAI protocols: the kind's code and type,
    unless the scenario set its own."""
    code, error_type = OPENAI_FAIL[failure.kind]
    return {
        "message": failure.message,
        "type": failure.error_type or error_type,
        "param": failure.param,
        "code": failure.code or code,
    }


def openai_failure_response(failure: p.Failure, request_id: str | None = None) -> tuple[int, dict]:
    """Status and body of a non-streamed `fail` on the OpenAI protocols (overloaded is a 503)."""
    return FAIL_STATUS.get(failure.kind, 503), {"error": openai_fail_error(failure)}


def openai_error_body(
    status: int,
    message: str,
    request_id: str | None = None,
    param: str | None = None,
    code: str | None = None,
    error_type: str | None = None,
) -> dict:
    """OpenAI's error body for a status; `error_type` and `code`, when given, replace the status's."""
    if status == 429:
        kind, code = "requests", code or "rate_limit_exceeded"
    elif status >= 500:
        kind = "server_error"
    elif status == 401:
        kind, code = "invalid_request_error", code or "invalid_api_key"
    else:
        kind = "invalid_request_error"
    return {"error": {"message": message, "type": error_type or kind, "param": param, "code": code}}


OPENAI_REQUEST_ID_HEADER = "x-request-id"  # the header each SDK reads its answers' request id from
ANTHROPIC_REQUEST_ID_HEADER = "request-id"
BASE58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
BASE58_OF_BYTE = bytes((BASE58 * 5).encode()[:256])  # a random byte as a base58 digit, in C (the slight bias is moot)


DRAWN_AHEAD = 256  # request ids drawn at once


def _openai_request_ids() -> list[str]:
    return ("req_" + FRESH.randbytes(12 * DRAWN_AHEAD).hex(" ", 12).replace(" ", " req_")).split(" ")


def _anthropic_request_ids() -> list[str]:
    return drawn_records(((b"req_011C", 20),), DRAWN_AHEAD, BASE58_OF_BYTE).decode().split()


# Drawn ahead: a randbytes a request cost 3.2k instructions (OpenAI) and 4k (Anthropic), these 1.2k and 2.2k.
_OPENAI_REQUEST_IDS = drawn_ahead(_openai_request_ids)
_ANTHROPIC_REQUEST_IDS = drawn_ahead(_anthropic_request_ids)


def _drawn_afresh() -> None:
    """In a process forked from this one: ids of its own, not the ones drawn ahead before the
    fork, which the parent hands out too (Python reseeds only `random`'s own generator)."""
    global _OPENAI_REQUEST_IDS, _ANTHROPIC_REQUEST_IDS
    FRESH.seed()
    _OPENAI_REQUEST_IDS = drawn_ahead(_openai_request_ids)
    _ANTHROPIC_REQUEST_IDS = drawn_ahead(_anthropic_request_ids)


os.register_at_fork(after_in_child=_drawn_afresh)


def openai_request_id() -> str:
    """A fresh request id as fakehop writes them for the OpenAI protocols."""
    return next(_OPENAI_REQUEST_IDS)


def anthropic_request_id() -> str:
    """A fresh request id as the Anthropic API writes them: `req_011C` and 20 base58 digits."""
    return next(_ANTHROPIC_REQUEST_IDS)


def no_error_headers(status: int) -> tuple[tuple[str, str], ...]:
    """The OpenAI protocols' error answers carry no headers of their own."""
    return ()


def anthropic_error_type(status: int) -> str:
    if status in ANTHROPIC_ERROR_TYPES:
        return ANTHROPIC_ERROR_TYPES[status]
    return "api_error" if status >= 500 else "invalid_request_error"


def anthropic_error_body(
    status: int, message: str, request_id: str | None = None, error_type: str | None = None
) -> dict:
    body = {"type": "error", "error": {"type": error_type or anthropic_error_type(status), "message": message}}
    if request_id:
        body["request_id"] = request_id
    return body


class StreamEncoderBase:
    """Hands each happening to the method for its kind; a protocol's encoder writes the frames.

    Keepalives and raw bytes go out the same in every protocol; a happening a protocol writes
    nothing for (the stream's start, a block's end or next part, a disconnect or hang) defaults
    to nothing.
    The table holds each class's functions, not an encoder's bound methods: those would make
    every encoder a reference cycle, left for the garbage collector to find.
    """

    METHODS = {
        p.Start: "start",
        p.BlockStart: "block_start",
        p.Delta: "delta",
        p.NextPart: "next_part",
        p.BlockEnd: "block_end",
        p.Keepalive: "keepalive",
        p.RawBytes: "raw",
        p.Failure: "failure",
        p.Finish: "finish",
        p.Disconnect: "nothing",
        p.Hang: "nothing",
        p.Cite: "cite",
        p.HostedCall: "hosted_call",
        p.Compacted: "compacted",
    }
    handlers: ClassVar[dict[type, Callable[[Any, Any], bytes]]]  # each happening's class to its method of METHODS

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        cls.handlers = {kind: getattr(cls, name) for kind, name in StreamEncoderBase.METHODS.items()}

    def encode(self, happening: p.Happening) -> bytes:
        return self.handlers[type(happening)](self, happening)

    def nothing(self, happening: p.Happening) -> bytes:
        return b""

    def start(self, start: p.Start) -> bytes:
        return b""

    def block_end(self, end: p.BlockEnd) -> bytes:
        return b""

    def hosted_call(self, call: p.HostedCall) -> bytes:
        return b""  # a protocol without hosted tools leaves them out

    def compacted(self, compacted: p.Compacted) -> bytes:
        return b""

    def next_part(self, part: p.NextPart) -> bytes:
        return b""

    def cite(self, cite: p.Cite) -> bytes:
        return b""

    def keepalive(self, keepalive: p.Keepalive) -> bytes:
        return KEEPALIVE_FRAME

    def raw(self, raw: p.RawBytes) -> bytes:
        return raw.data
