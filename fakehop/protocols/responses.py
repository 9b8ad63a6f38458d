"""OpenAI Responses: `POST /v1/responses`.

Stream: `event: <type>\\ndata: <json>` frames, every event with a `sequence_number` counting
from 0, and no `[DONE]`. `response.created` and `response.in_progress` open the stream with an
empty `output`. Each block is then one output item, numbered by `output_index` in order:
reasoning (and redacted thinking) is a `reasoning` item, with a summary part for each part of
its text (the player shows the text only to requests that ask for `reasoning.summary`, so
without it the item has `summary: []`), and `encrypted_content` when the request includes
`reasoning.encrypted_content`; text is a `message` item with one `output_text` part (its
citations `url_citation` annotations, each added once its text has streamed), a tool call a
`function_call` item, a custom tool's call a `custom_tool_call` item, a hosted tool call its own `*_call` item and a
compaction a `compaction` item (see the section at the end). Every item opens with
`response.output_item.added` and closes with `response.output_item.done`. The terminal event,
`response.completed` (or `response.incomplete` for the `length` and `content_filter`
finishes), carries every item exactly as its `output_item.done` showed it, and the usage.
Keepalives are bare comments and take no sequence number. Delta events end with an
`obfuscation` unless `stream_options.include_obfuscation` is false.

A block's closing events wait for the happening after its BlockEnd: only the Finish that
follows tells whether the last item completed or was cut short (status `incomplete`).

A `fail` is an `error` event, then `response.failed`, then the end of the stream, as the real
API sends them. The `error` event nests the error (`{"type":"error","sequence_number":N,
"error":{type, code, message, param}}`): on that form the Python SDK raises APIError while
iterating, and Node's SDK throws. `response.failed` has status `failed`, `error: {code,
message}`, `output` with the items so far (an unfinished one as far as it got, status
`in_progress`) and `usage: null`. A scenario's `fail` with `error_event: false` sends
`response.failed` alone, the form HopBase's streaming page describes.
"""

from __future__ import annotations

import base64
import functools
import json
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from json.encoder import encode_basestring
from typing import Any, cast

from ..play import player as p
from ..play.player import PlayRequest, estimate_tokens
from ..scenario import model as sc
from ..scenario.model import MATCH_PREFIX_CHARS, MAX_TEXT_CHARS, MODERATION_CATEGORIES, Citation
from .common import (
    EXAMPLE_TOOL_CALLS,
    OPENAI_REQUEST_ID_HEADER,
    OPTIONAL_BOOL,
    BadRequest,
    Conversation,
    History,
    Meta,
    Obfuscation,
    ParsedRequest,
    StreamEncoderBase,
    Template,
    ToolResult,
    at_least_one,
    content_text,
    dumps,
    event_frame,
    example_call_id,
    json_output_asked,
    json_type,
    new_tuple,
    no_error_headers,
    openai_error_body,
    openai_fail_error,
    openai_failure_response,
    openai_request_id,
    require_type,
    required_call,
    served_tier,
    token_logprob,
    tool_names,
    typed_fields,
)
from .common import (
    HTTP_MESSAGES as COMMON_HTTP_MESSAGES,
)

NAME = "responses"
PATH = "/v1/responses"
EXAMPLE_REQUEST = {"model": "gpt-5.6-sol", "input": "Hello", "stream": True}


def example_request(turn: int = 1) -> dict:
    """EXAMPLE_REQUEST as an agent sends it at `turn`, with the whole conversation in `input`:
    after the question, each earlier turn is a `function_call` item for each of the
    EXAMPLE_TOOL_CALLS and a `function_call_output` for each result."""
    if turn == 1:
        return dict(EXAMPLE_REQUEST)
    items: list[dict] = [{"role": "user", "content": EXAMPLE_REQUEST["input"]}]
    for earlier in range(1, turn):
        ids = [example_call_id("call_", earlier, number) for number in range(len(EXAMPLE_TOOL_CALLS))]
        items += [
            {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}
            for call_id, (name, arguments, _) in zip(ids, EXAMPLE_TOOL_CALLS)
        ]
        items += [
            {"type": "function_call_output", "call_id": call_id, "output": result}
            for call_id, (_, _, result) in zip(ids, EXAMPLE_TOOL_CALLS)
        ]
    return {**EXAMPLE_REQUEST, "input": items}


CALL_KINDS = ("tool_call", "custom_tool_call")  # blocks that are calls, with a call id
CALL_ITEM_TYPES = ("function_call", "custom_tool_call")  # their items
# Finish reasons that end a response as `incomplete`, with their `incomplete_details.reason`.
INCOMPLETE_REASONS = {
    "length": "max_output_tokens",
    "content_filter": "content_filter",
    "model_context_window_exceeded": "max_output_tokens",
}
# The `error` event's inner object, in the order the real API writes it.
ERROR_EVENT_FIELDS = ("type", "code", "message", "param")
ITEM_ID_PREFIXES = {
    "text": "msg_",
    "refusal": "msg_",
    "reasoning": "rs_",
    "redacted_thinking": "rs_",
    "tool_call": "fc_",
    "custom_tool_call": "ctc_",
}
ENCRYPTED_CONTENT_BYTES = 192
# `include` values that change the answer.
INCLUDE_ENCRYPTED_REASONING = "reasoning.encrypted_content"
INCLUDE_LOGPROBS = "message.output_text.logprobs"
SUMMARY_ASKED = ("auto", "concise", "detailed")  # `reasoning.summary` values that ask for summaries

# Request fields the response object echoes: (value when the request has none, JSON kinds, what).
ECHOED: dict[str, tuple[Any, tuple[type, ...], str]] = {
    "frequency_penalty": (0.0, (int, float), "a number"),
    "instructions": (None, (str,), "a string"),
    "parallel_tool_calls": (True, (bool,), "a boolean"),
    "presence_penalty": (0.0, (int, float), "a number"),
    "previous_response_id": (None, (str,), "a string"),
    "prompt_cache_key": (None, (str,), "a string"),
    "prompt_cache_retention": (None, (str,), "a string"),
    "reasoning": ({"effort": None, "summary": None}, (dict,), "an object"),
    "safety_identifier": (None, (str,), "a string"),
    "store": (True, (bool,), "a boolean"),
    "temperature": (1.0, (int, float), "a number"),
    "text": ({"format": {"type": "text"}, "verbosity": "medium"}, (dict,), "an object"),
    "tool_choice": ("auto", (str, dict), "a string or an object"),
    "tools": ([], (list,), "an array"),
    "top_logprobs": (0, (int,), "an integer"),
    "top_p": (1.0, (int, float), "a number"),
    "truncation": ("disabled", (str,), "a string"),
    "user": (None, (str,), "a string"),
    "metadata": ({}, (dict,), "an object"),
}
DEFAULT_ECHO = {key: default for key, (default, _, _) in ECHOED.items()}
# The request fields the stream's bytes depend on, beside the model and the token limit.
# Fields the response object shows as asked for only when the request has them (see requested_fields).
REQUESTED_FIELDS = ("background", "conversation", "moderation", "service_tier")
VARIANT_FIELDS = frozenset(ECHOED) | {"max_tool_calls", "include", "stream_options", *REQUESTED_FIELDS}
# The response object's keys, in the order the real API writes them.
RESPONSE_FIELDS = (
    "id", "object", "created_at", "status", "background", "completed_at", "error", "frequency_penalty",
    "incomplete_details", "instructions", "max_output_tokens", "max_tool_calls", "model", "moderation",
    "output", "parallel_tool_calls", "presence_penalty", "previous_response_id", "prompt_cache_key",
    "prompt_cache_retention", "reasoning", "safety_identifier", "service_tier", "store", "temperature",
    "text", "tool_choice", "tools", "top_logprobs", "top_p", "truncation", "usage", "user", "metadata",
)  # fmt: skip
# The same with the `conversation` of a request that names one.
CONVERSATION_FIELDS = (*RESPONSE_FIELDS[:6], "conversation", *RESPONSE_FIELDS[6:])
# gpt-5.6's answers carry fields no request asks for (see latest_fields): who pays, and the
# hosted tools' usage, in the API's order.
LATEST_MODELS = "gpt-5.6"  # the prefix of their names
LATEST_ADDED = {"background": "billing", "tool_choice": "tool_usage"}  # each after the field it follows
LATEST_FIELDS = tuple(field for key in RESPONSE_FIELDS for field in (key, LATEST_ADDED.get(key)) if field is not None)
LATEST_CONVERSATION_FIELDS = (*LATEST_FIELDS[:7], "conversation", *LATEST_FIELDS[7:])
BILLING = {"payer": "developer"}
LATEST_EFFORT = "medium"  # the reasoning effort a request that names none gets
UNDER_WAY = ("queued", "in_progress")  # statuses whose service_tier is the one asked for, `auto` by default
UNFLAGGED_SCORE = 1e-06  # a moderation result's score for a category it does not flag
FLAGGED_SCORE = 0.92  # and for one it flags


# ---------------------------------------------------------------- the request


# The fields parse reads, as typed_fields takes them; echoed_fields reads the rest.
FIELDS = (
    ("model", (str,), "a string", True),
    ("input", (str, list), "a string or an array of input items", True),
    ("stream", (bool,), "a boolean", False),
    ("max_output_tokens", (int,), "an integer", False),
    ("max_tool_calls", (int,), "an integer", False),
)
INPUT_KINDS = (str, list)
OPTIONAL_INT = (int, type(None))
PLAIN_REASONING = "summary-unasked"  # what a request that sends no `reasoning` sees of it


def parse(body: dict) -> ParsedRequest:
    # Most requests send none of the VARIANT_FIELDS: their fields are tested inline, as
    # typed_fields tests them, and their options are the plain ones (13k instructions against 29k).
    if not VARIANT_FIELDS.isdisjoint(body):
        return varying_request(body)
    model, given_input, stream, max_output_tokens = (
        body.get("model"),
        body.get("input"),
        body.get("stream"),
        body.get("max_output_tokens"),
    )
    if not (
        type(model) is str
        and type(given_input) in INPUT_KINDS
        and type(stream) in OPTIONAL_BOOL
        and type(max_output_tokens) in OPTIONAL_INT
    ):
        model, given_input, stream, max_output_tokens, _ = typed_fields(body, FIELDS)  # raises BadRequest naming one
    prompt: str | None
    if type(given_input) is str:  # one user message
        items, chars, prompt, history = 1, len(given_input), given_input, None
    else:
        given_items = cast(list, given_input)
        items, (chars, prompt, history) = len(given_items), input_facts(given_items)
    latest = model.startswith(LATEST_MODELS)
    limit = max_output_tokens
    if limit is None:  # most requests: a look-up, where the lru_cache call cost 1.2k instructions
        options, variant = UNLIMITED_REQUESTS[latest]
    else:
        limit = at_least_one("max_output_tokens", limit)
        options, variant = plain_options(limit, None, latest), LATEST_MODELS if latest else ""
    play = new_tuple(PlayRequest, (estimate_tokens(chars) + 3 * items, limit, PLAIN_REASONING, True))
    if history is None:
        return new_tuple(ParsedRequest, (model, stream is True, prompt or "", play, options, variant, KEPT_FIRST_TURN))
    conversation, thread = history.conversation_after(None, options["echo"])
    options = {**options, "history": history, "thread": thread}
    return new_tuple(ParsedRequest, (model, stream is True, prompt or "", play, options, variant, conversation))


def varying_request(body: dict) -> ParsedRequest:
    """The parsed request of one that sends any of the VARIANT_FIELDS."""
    model, given_input, stream, max_output_tokens, max_tool_calls = typed_fields(body, FIELDS)
    prompt: str | None
    if type(given_input) is str:  # one user message
        items, chars, prompt, history = 1, len(given_input), given_input, None
    else:
        items, (chars, prompt, history) = len(given_input), input_facts(given_input)
    limit = at_least_one("max_output_tokens", max_output_tokens)
    varying = sorted(body.keys() & VARIANT_FIELDS)
    tool_calls_limit = at_least_one("max_tool_calls", max_tool_calls)
    latest = model.startswith(LATEST_MODELS)
    echo = echoed_fields(body, varying, limit, tool_calls_limit)
    if latest:
        latest_fields(echo)
    options = answer_options(body, echo)
    shown = "shown" if echo["reasoning"]["summary"] in SUMMARY_ASKED else "summary-unasked"
    play = PlayRequest(
        estimate_tokens(chars + len(echo["instructions"] or "")) + 3 * items,
        limit,
        shown,
        echo["tool_choice"] != "none",
    )
    variant = repr([(key, body[key]) for key in varying])
    if latest:  # its bytes are not another model's with the same fields
        variant = LATEST_MODELS + variant
    history = history or InputHistory(prompt)
    conversation, thread = history.conversation_after(None, echo)
    return ParsedRequest(
        model,
        bool(stream),
        prompt or "",
        play,
        {**options, "history": history, "thread": thread},
        variant,
        conversation,
    )


@functools.lru_cache(maxsize=256)  # most requests send one of a few limits, or none
def plain_options(max_output_tokens: int | None, max_tool_calls: int | None, latest: bool) -> dict:
    """The options of a request that sends none of the VARIANT_FIELDS, built once for its
    limits (and whether its model is one of LATEST_MODELS): shared, read, never changed."""
    echo = echoed_fields({}, [], max_output_tokens, max_tool_calls)
    if latest:
        latest_fields(echo)
    return {"echo": echo, "encrypted_reasoning": False, "top_logprobs": None, "obfuscation": True}


def answer_options(body: dict, echo: dict) -> dict:
    """The options of a request that sends a field the answer follows: what its `include` asks
    for (encrypted reasoning; logprobs, with `top_logprobs` each), and whether its deltas carry
    `obfuscation` (unless `stream_options.include_obfuscation` is false)."""
    include = included(require_type(body, "include", (list,), "an array of strings") or [])
    top_logprobs = echo["top_logprobs"] if INCLUDE_LOGPROBS in include else None
    obfuscation = (require_type(body, "stream_options", (dict,), "an object") or {}).get("include_obfuscation", True)
    if type(obfuscation) is not bool:
        raise BadRequest(
            "Invalid type for 'stream_options.include_obfuscation': expected a boolean.",
            param="stream_options.include_obfuscation",
        )
    requested_fields(body, echo)
    if echo.get("background") and not echo["store"]:
        raise BadRequest(
            "Background mode requires 'store' to be true: a background response is read back by its id.",
            param="background",
        )
    required = required_call(echo["tool_choice"])
    text = echo["text"]
    return {
        **({} if required is None else {"required_tool": required}),
        **json_output_asked(text.get("format") if type(text) is dict else None, "text.format"),
        "echo": echo,
        "background": echo.get("background", False),
        "encrypted_reasoning": INCLUDE_ENCRYPTED_REASONING in include,
        "top_logprobs": top_logprobs,
        "obfuscation": obfuscation,
    }


def requested_fields(body: dict, echo: dict) -> None:
    """Set in `echo` the REQUESTED_FIELDS the request sends, as the response object shows them."""
    if require_type(body, "background", (bool,), "a boolean"):
        echo["background"] = True
    conversation = require_type(body, "conversation", (str, dict), "a string or an object")
    if conversation is not None:
        echo["conversation"] = {"id": conversation_id(conversation)}
    tier = require_type(body, "service_tier", (str,), "a string")
    if tier is not None:
        echo["service_tier"] = served_tier(tier)
    moderation = require_type(body, "moderation", (dict,), "an object")
    if moderation is not None:
        try:
            model = require_type(moderation, "model", (str,), "a string", required=True)
        except BadRequest as exc:
            raise named_under("moderation", exc) from None
        result = moderation_result(model)
        echo["moderation"] = {"input": result, "output": result}


def conversation_id(conversation: str | dict) -> str:
    """The id of the conversation a request names: the string, or the object's `id`."""
    if isinstance(conversation, str):
        return conversation
    given = conversation.get("id")
    if type(given) is not str:
        raise BadRequest("Invalid type for 'conversation.id': expected a string.", param="conversation.id")
    return given


def moderation_result(model: str, flagged: tuple[str, ...] = ()) -> dict:
    """A `moderation_result` as the moderation model `model` gives it, flagging the categories `flagged`."""
    return {
        "type": "moderation_result",
        "model": model,
        "flagged": bool(flagged),
        "categories": {category: category in flagged for category in MODERATION_CATEGORIES},
        "category_scores": {
            category: FLAGGED_SCORE if category in flagged else UNFLAGGED_SCORE for category in MODERATION_CATEGORIES
        },
        "category_applied_input_types": {category: ["text"] for category in MODERATION_CATEGORIES},
    }


def scenario_moderation(request: ParsedRequest, start: p.Start | None) -> dict:
    """The response object's fields for the moderation the scenario flags, when the request asks
    for moderation (`{"moderation": …}`); none otherwise."""
    flags = None if start is None else start.moderation
    if flags is None or not request.variant or "moderation" not in request.options["echo"]:
        return {}
    model = request.options["echo"]["moderation"]["input"]["model"]
    return {
        "moderation": {"input": moderation_result(model, flags.input), "output": moderation_result(model, flags.output)}
    }


def included(include: list) -> list[str]:
    """The request's `include` values; BadRequest for one that is not a string."""
    for number, value in enumerate(include):
        if not isinstance(value, str):
            param = f"include[{number}]"
            raise BadRequest(
                f"Invalid type for '{param}': expected a string, but got {json_type(value)} instead.", param=param
            )
    return include


KEPT_FIRST_TURN = Conversation(keep=True)  # a request of one user message, stored as the real API stores by default


def input_facts(items: list) -> tuple[int, str | None, InputHistory | None]:
    """How many characters of text the input items hold, for the input token estimate; the
    last user message's text, for `match` (None without one); and, once an item other than a
    user message comes, the InputHistory of the rest. Each item's shape is checked on the way.
    One plain loop: this runs on every request with a list of items."""
    chars = 0
    prompt = None
    history = None
    for number, item in enumerate(items):
        text = checked_item_text(number, item)
        chars += len(text)
        kind = item.get("type")
        if history is None:
            if kind in MESSAGE_TYPES and item["role"] == "user":
                prompt = text
                continue
            history = InputHistory(prompt)
        history.add(item, kind, text)
    return chars, prompt if history is None else history.prompt, history


def checked_item_text(number: int, item: Any) -> str:
    """The text an input item holds (a message's content, a tool call's output; "" for other
    items), once its shape is checked as the real API checks it."""
    if not isinstance(item, dict):
        param = f"input[{number}]"
        raise BadRequest(
            f"Invalid type for '{param}': expected an input item object, but got {json_type(item)} instead.",
            param=param,
        )
    try:
        kind = require_type(item, "type", (str,), "a string")
        if kind in MESSAGE_TYPES:
            check_message(item)
            content = item["content"]
            return content if type(content) is str else content_text(content)
    except BadRequest as exc:
        raise named_under(f"input[{number}]", exc) from None
    return content_text(item.get("output")) if kind.endswith("_output") else ""


CALL_BYTES = 150  # what a thread's function call holds beside its id's and name's text: the dict's slot, two objects


class Thread:
    """A Responses conversation as far as one request and the stored responses it continues
    go, beside its instructions (which the real API does not carry from one response to the
    next). A chain of stored answers costs memory in proportion to what was sent: a thread
    holds the function calls its own request and answer added, and only a weak reference to
    the thread it continues, whose calls are forgotten once that answer is no longer stored;
    its turns, system text and prompt are the whole conversation's, the text cut where no
    `match` or quote reads further (and shared with the thread it continues while unchanged)."""

    __slots__ = ("__weakref__", "calls", "earlier", "prompt", "system", "turns")

    def __init__(
        self,
        turns: int = 0,
        calls: dict | None = None,
        system: str = "",
        prompt: str | None = None,
        earlier: Thread | None = None,
    ):
        self.turns = turns  # assistant turns
        self.calls = calls or {}  # call id -> tool name, of the function calls it added; read, never changed
        self.system = system  # the text of its system and developer messages, its first MATCH_PREFIX_CHARS
        self.prompt = prompt  # the last user message's text, its first MAX_TEXT_CHARS; None: no user message yet
        self.earlier = None if earlier is None else weakref.ref(earlier)

    def continued(self) -> Thread | None:
        """The thread this one continues, while its answer is stored."""
        return None if self.earlier is None else self.earlier()

    def call_names(self, call_ids: Iterable) -> dict[str, str | None]:
        """Of `call_ids`, those of the conversation's function calls, each with its tool's name
        (None when the call gave none); the newest call of an id wins. Each thread looked at
        costs the fewer of its calls and the ids still looked for."""
        wanted = {call_id for call_id in call_ids if type(call_id) is str}
        found: dict[str, str | None] = {}
        thread: Thread | None = self
        while wanted and thread is not None:
            calls = thread.calls
            if len(wanted) <= len(calls):
                hits = [call_id for call_id in wanted if call_id in calls]
            else:
                hits = [call_id for call_id in calls if call_id in wanted]
            for call_id in hits:
                found[call_id] = calls[call_id]
            wanted.difference_update(hits)
            thread = thread.continued()
        return found

    def own_bytes(self) -> int:
        """About how many bytes it holds beside what the thread it continues holds."""
        earlier = self.continued()
        size = sum(CALL_BYTES + len(call_id) + len(name or "") for call_id, name in self.calls.items())
        if earlier is None or self.system is not earlier.system:
            size += len(self.system)
        if self.prompt is not None and (earlier is None or self.prompt is not earlier.prompt):
            size += len(self.prompt)
        return size


NO_THREAD = Thread()


def carried_system(before: str, added: list[str]) -> str:
    """The system text a thread carries: `before` and the `added` texts, joined, as far as a `match` reads."""
    if not added or len(before) >= MATCH_PREFIX_CHARS:
        return before
    return "\n".join(text for text in (before, *added) if text)[:MATCH_PREFIX_CHARS]


class InputHistory(History):
    """The conversation in a request's input items: an assistant turn is a run of the model's
    output items (assistant messages, reasoning, function calls and the other `*_call`
    items); `*_call_output` items are tool results, and each `function_call_output` must
    answer a `function_call` of the input or of the stored response it continues, as the real
    API checks (see PROTOCOLS.md)."""

    def __init__(self, prompt: str | None) -> None:
        super().__init__()
        self.prompt = prompt
        self.calls: dict[str, str | None] = {}
        self.outputs: list[Any] = []  # the call ids of the function_call_output items
        # (call id, text) of the tool results since the last other item, named once the calls are all known
        self.unnamed_results: list[tuple[str, str]] = []
        self.in_run = False  # whether the last item was the model's

    def add(self, item: dict, kind: str | None, text: str) -> None:
        if kind in MESSAGE_TYPES:
            role = item["role"]
            if role == "assistant":
                self.model_item(item)
                return
            self.in_run, self.unnamed_results = False, []
            if role == "user":
                self.prompt = text
            elif role in ("system", "developer"):
                self.system.append(text)
        elif kind.endswith("_output"):
            self.in_run = False
            if kind == "function_call_output":
                self.outputs.append(item.get("call_id"))
            self.unnamed_results.append((str(item.get("call_id")), text))
        elif kind == "reasoning" or kind.endswith("_call"):
            self.model_item(item)

    def model_item(self, item: dict) -> None:
        """One of the model's output items: the first of a run is an assistant turn."""
        if type(item.get("call_id")) is str:
            self.calls[item["call_id"]] = item.get("name") if type(item.get("name")) is str else None
        if not self.in_run:
            self.turns, self.in_run = self.turns + 1, True
        self.unnamed_results = []

    def conversation_after(self, earlier: Thread | None, echo: dict) -> tuple[Conversation, Thread]:
        """The request's Conversation and Thread when it continues `earlier` (None: none, or
        not looked up yet, when the function_call_output check waits for it)."""
        before = earlier or NO_THREAD
        system = carried_system(before.system, self.system)
        prompt = before.prompt if self.prompt is None else self.prompt[:MAX_TEXT_CHARS]
        thread = Thread(before.turns + self.turns, self.calls, system, prompt, earlier)
        answered = [*self.outputs, *(call_id for call_id, _ in self.unnamed_results)]
        named = thread.call_names(answered) if answered else {}
        problem = self.problem
        if problem is None and (earlier is not None or echo["previous_response_id"] is None):
            problem = unanswered_output(self.outputs, named)
        results = tuple([ToolResult(call_id, named.get(call_id), text) for call_id, text in self.unnamed_results])
        instructions_and_system = "\n".join(text for text in (echo["instructions"], system) if text)
        tools = tool_names(echo["tools"])
        conversation = Conversation(
            thread.turns + 1,
            results,
            tools,
            instructions_and_system,
            problem,
            echo["previous_response_id"],
            echo["store"],
        )
        return conversation, thread


def unanswered_output(call_ids: list, calls: dict) -> BadRequest | None:
    for call_id in call_ids:
        if type(call_id) is not str or call_id not in calls:
            return BadRequest(f"No tool call found for function call output with call_id {call_id}.", param="input")
    return None


def chained(parsed: ParsedRequest, earlier: Thread) -> ParsedRequest:
    """`parsed` continuing the stored conversation `earlier` (its previous_response_id's)."""
    options = parsed.options
    history = options["history"]
    conversation, thread = history.conversation_after(earlier, options["echo"])
    prompt = parsed.prompt if history.prompt is not None else thread.prompt or ""
    return parsed._replace(prompt=prompt, options={**options, "thread": thread}, conversation=conversation)


def thread_after(before: Thread | str, response: dict) -> Thread:
    """The conversation that a request continuing `response` continues: that of the request it
    answered (`before`: its Thread, or for a request of one user message that message's
    text), and its own output."""
    thread = Thread(prompt=before) if type(before) is str else cast(Thread, before)
    output = response.get("output") or []
    calls = {item["call_id"]: item.get("name") for item in output if item.get("type") in CALL_ITEM_TYPES}
    turns, calls = thread.turns + (1 if output else 0), {**thread.calls, **calls} if calls else thread.calls
    return Thread(turns, calls, thread.system, thread.prompt, thread.continued())


def named_under(prefix: str, exc: BadRequest) -> BadRequest:
    """The same BadRequest with its parameter named under `prefix`: `input[2].content`."""
    param = f"{prefix}.{exc.param}"
    return BadRequest(exc.message.replace(f"'{exc.param}'", f"'{param}'"), param=param)


MESSAGE_TYPES = (None, "message")  # messages may leave out their `type`; every other input item names its own


def check_message(message: dict) -> None:
    """A message item needs a string role and content that is a string or a list of part objects."""
    require_type(message, "role", (str,), "a string", required=True)
    content = require_type(message, "content", (str, list), "a string or an array of content parts", required=True)
    for number, part in enumerate(content if isinstance(content, list) else []):
        if not isinstance(part, dict):
            where = f"content[{number}]"
            raise BadRequest(
                f"Invalid type for '{where}': expected a content part object, but got {json_type(part)} instead.",
                param=where,
            )


def echoed_fields(body: dict, sent: list[str], max_output_tokens: int | None, max_tool_calls: int | None) -> dict:
    """The request's values of the fields the response object echoes, defaults filled in;
    `sent` names the VARIANT_FIELDS the body has."""
    # The defaults are shared: read, never changed.
    echo = {**DEFAULT_ECHO, "max_output_tokens": max_output_tokens, "max_tool_calls": max_tool_calls}
    for key in sent:
        if key not in ECHOED:
            continue
        default, kinds, what = ECHOED[key]
        value = require_type(body, key, kinds, what)
        if value is not None:
            echo[key] = {**default, **value} if isinstance(default, dict) else value
    return echo


def latest_fields(echo: dict) -> None:
    """Set in `echo` what gpt-5.6's answers show unasked: `billing`, the 24-hour prompt cache
    retention and the reasoning effort used, unless the request named its own."""
    echo["billing"] = BILLING
    echo["tool_usage"] = None
    if echo["prompt_cache_retention"] is None:
        echo["prompt_cache_retention"] = "24h"
    if echo["reasoning"]["effort"] is None:  # the default is shared: replaced, never changed
        echo["reasoning"] = {**echo["reasoning"], "effort": LATEST_EFFORT}


# The options and variant of a request that sends none of the VARIANT_FIELDS nor max_output_tokens, by
# whether its model is one of LATEST_MODELS (the bytes of their answers are not another model's).
UNLIMITED_REQUESTS = {
    latest: (plain_options(None, None, latest), LATEST_MODELS if latest else "") for latest in (False, True)
}


# ---------------------------------------------------------------- objects both answers share


def usage_object(usage: p.TokenUsage) -> dict:
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens, "cache_write_tokens": usage.cache_write_tokens},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.total_tokens,
    }


def response_object(
    response_id: str, meta: Meta, request: ParsedRequest, status: str, output: list, **fields: Any
) -> dict:
    """The `response` object; `fields` sets `usage`, `error` or `incomplete_details`."""
    values = {
        # unless the request asked for them (see requested_fields)
        "background": False,
        "moderation": None,
        "service_tier": "default",
        **request.options["echo"],
        "id": response_id,
        "object": "response",
        "created_at": meta.created,
        "status": status,
        "completed_at": meta.created if status == "completed" else None,  # the answer's own time: one hole less to fill
        "error": None,
        "incomplete_details": None,
        "model": meta.model,
        "output": output,
        "usage": None,
        **fields,
    }
    if "billing" in values:
        return latest_object(values, request.options["echo"], status, output)
    return {key: values[key] for key in (CONVERSATION_FIELDS if "conversation" in values else RESPONSE_FIELDS)}


def latest_object(values: dict, echo: dict, status: str, output: list) -> dict:
    """The response object of a gpt-5.6 answer: `service_tier` is the one asked for (`auto`)
    while it is under way, the one that served it after; `tool_usage` comes at the end."""
    if status in UNDER_WAY:
        values["service_tier"] = echo.get("service_tier", "auto")
    else:
        values["tool_usage"] = tool_usage(output)
    return {key: values[key] for key in (LATEST_CONVERSATION_FIELDS if "conversation" in values else LATEST_FIELDS)}


def tool_usage(output: list) -> dict:
    """The hosted tools' usage: the searches among the output's web search calls (opening a
    page is not one); no image tokens."""
    searches = sum(item["type"] == "web_search_call" and item["action"]["type"] == "search" for item in output)
    return {
        "image_gen": {
            "input_tokens": 0,
            "input_tokens_details": {"image_tokens": 0, "text_tokens": 0},
            "output_tokens": 0,
            "total_tokens": 0,
        },
        "web_search": {"num_requests": searches},
    }


def output_text_part(text: str, logprobs: list | None = None, annotations: list | None = None) -> dict:
    return {"type": "output_text", "text": text, "annotations": annotations or [], "logprobs": logprobs or []}


def url_citation(citation: Citation) -> dict:
    """A citation as an `output_text` part's `url_citation` annotation."""
    return {
        "type": "url_citation",
        "start_index": citation.start,
        "end_index": citation.end,
        "url": citation.url,
        "title": citation.title or "",
    }


def custom_tool_call_item(item_id: str, status: str, call_id: str | None, name: str | None, text: str) -> dict:
    return {
        "id": item_id,
        "type": "custom_tool_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        "input": text,
    }


def text_logprobs(tokens: list[str], top: int | None, with_bytes: bool) -> list:
    """The logprobs of text deltas, one entry each, when the request includes them (the part's
    and the delta events' entries have `bytes`, `output_text.done`'s do not); [] otherwise."""
    return [] if top is None else [token_logprob(token, top, with_bytes) for token in tokens]


def refusal_part(text: str) -> dict:
    return {"type": "refusal", "refusal": text}


def summary_part(text: str) -> dict:
    return {"type": "summary_text", "text": text}


def reasoning_item(item_id: str, summaries: list[str], encrypted: str | None) -> dict:
    return {
        "id": item_id,
        "type": "reasoning",
        "summary": [summary_part(text) for text in summaries],
        "content": [],
        "encrypted_content": encrypted,
    }


def encrypted_content(meta: Meta, request: ParsedRequest) -> str | None:
    """A reasoning item's `encrypted_content` when the request includes it: opaque, as the real one is."""
    return "gAAAAAB" + meta.random_base64(ENCRYPTED_CONTENT_BYTES) if request.options["encrypted_reasoning"] else None


def message_item(item_id: str, status: str, content: list, phase: str | None = None) -> dict:
    """A message item; `phase` only where the scenario gives one, as only some models set it."""
    item = {"id": item_id, "type": "message", "status": status, "role": "assistant", "content": content}
    if phase is not None:
        item["phase"] = phase
    return item


def function_call_item(item_id: str, status: str, call_id: str | None, name: str | None, arguments: str) -> dict:
    return {
        "id": item_id,
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }


def item_object(
    kind: str,
    item_id: str,
    text: str,
    status: str,
    name: str | None = None,
    call_id: str | None = None,
    phase: str | None = None,
    logprobs: list | None = None,
    annotations: list | None = None,
) -> dict:
    """A message (of text or a refusal), function call or custom tool call item with all its
    text, as `response.output_item.done` and the final `output` show it."""
    if kind == "text":
        return message_item(item_id, status, [output_text_part(text, logprobs, annotations)], phase)
    if kind == "refusal":
        return message_item(item_id, status, [refusal_part(text)])
    if kind == "custom_tool_call":
        return custom_tool_call_item(item_id, status, call_id, name, text)
    return function_call_item(item_id, status, call_id, name, text)


error_body = openai_error_body
failure_response = openai_failure_response
error_headers = no_error_headers
REQUEST_ID_HEADER = OPENAI_REQUEST_ID_HEADER
fresh_request_id = openai_request_id
HTTP_MESSAGES = COMMON_HTTP_MESSAGES


def complete(meta: Meta, request: ParsedRequest, outcome: p.Outcome) -> dict:
    """The non-streaming `response` object: the same as the streamed terminal event's."""
    finish = cast(p.Finish, outcome.ending)
    response_id = meta.new_id("resp_")
    incomplete = INCOMPLETE_REASONS.get(finish.reason)
    output: list[dict] = []
    for number, block in enumerate(outcome.blocks):
        if block.whole is not None:
            output += whole_items(meta, block.whole, output)
            continue
        item_id = meta.new_id(ITEM_ID_PREFIXES[block.kind])
        if block.kind in REASONING_KINDS:
            output.append(reasoning_item(item_id, block.parts, encrypted_content(meta, request)))
            continue
        call_id = (block.call_id or meta.new_id("call_")) if block.kind in CALL_KINDS else None
        cut = incomplete is not None and number == len(outcome.blocks) - 1
        logprobs = text_logprobs(block.pieces, request.options["top_logprobs"], with_bytes=True)
        item = item_object(
            block.kind,
            item_id,
            block.text,
            "incomplete" if cut else "completed",
            block.name,
            call_id,
            block.phase,
            logprobs,
            [url_citation(citation) for citation in block.citations],
        )
        output.append(item if block.caller is None else called_by(block.caller, item))
    moderation = scenario_moderation(request, outcome.start)
    if incomplete is None:
        return response_object(
            response_id, meta, request, "completed", output, usage=usage_object(finish.usage), **moderation
        )
    return response_object(
        response_id,
        meta,
        request,
        "incomplete",
        output,
        usage=usage_object(finish.usage),
        incomplete_details={"reason": incomplete},
        **moderation,
    )


# ---------------------------------------------------------------- the stream


class SequencedTemplate:
    """An event frame with two slots, its sequence number and one string, encoded once.

    `fill(n, s)` equals framing the whole event with `n` and `s` in place, for the price of one
    JSON string encoding of `s`. Build it from the frame of an event whose `sequence_number` is `NUMBER`
    and whose string slot holds `Template.SLOT`.
    """

    NUMBER = "\x00number\x00"

    def __init__(self, frame: bytes):
        head, _, rest = frame.decode().partition(dumps(self.NUMBER))
        middle, _, tail = rest.rpartition(dumps(Template.SLOT))
        self.head, self.middle, self.tail = head.encode(), middle.encode(), tail.encode()

    def fill(self, number: int, text: str) -> bytes:
        return b"".join((self.head, str(number).encode(), self.middle, encode_basestring(text).encode(), self.tail))


class ObfuscatedSequencedTemplate(SequencedTemplate):
    """A SequencedTemplate whose event also holds `Obfuscation.MARK`, after its string slot:
    each fill writes the obfuscation for the string there."""

    def __init__(self, frame: bytes, obfuscation: Obfuscation):
        super().__init__(frame)
        self.tail, _, self.end = self.tail.partition(Obfuscation.MARK_JSON)
        self.obfuscation = obfuscation

    def fill(self, number: int, text: str) -> bytes:
        parts = (
            self.head,
            str(number).encode(),
            self.middle,
            encode_basestring(text).encode(),
            self.tail,
            self.obfuscation.padding(len(text)),
            self.end,
        )
        return b"".join(parts)


@dataclass
class OpenItem:
    """The output item being streamed, with its text so far and the frame of its deltas.

    A reasoning item opens its summary parts as its deltas come: `delta` is None while it has
    no part open, and `summaries` holds the text of the parts it has closed."""

    kind: str
    item_id: str
    output_index: int
    delta: SequencedTemplate | None
    name: str | None = None
    call_id: str | None = None
    parts: list[str] = field(default_factory=list)
    summaries: list[str] = field(default_factory=list)
    encrypted: str | None = None
    phase: str | None = None
    top_logprobs: int | None = None  # a text item's, when the request includes logprobs
    caller: str | None = None  # a function call's: the call id of the program item whose code makes it
    annotations: list | None = None  # a text item's url_citation annotations, once it has any

    def where(self) -> dict:
        return {"item_id": self.item_id, "output_index": self.output_index, "content_index": 0}

    def text(self) -> str:
        return "".join(self.parts)

    def object(self, status: str) -> dict:
        if self.kind == "reasoning":
            return reasoning_item(
                self.item_id, self.summaries + ([self.text()] if self.delta is not None else []), self.encrypted
            )
        logprobs = text_logprobs(self.parts, self.top_logprobs, with_bytes=True)
        item = item_object(
            self.kind,
            self.item_id,
            self.text(),
            status,
            self.name,
            self.call_id,
            self.phase,
            logprobs,
            self.annotations,
        )
        return item if self.caller is None else called_by(self.caller, item)


REASONING_KINDS = (
    "reasoning",
    "redacted_thinking",
)  # blocks that are reasoning items; redacted thinking shows no summary
# The methods that open and close an item of each kind.
STARTERS = {
    "text": "start_message",
    "refusal": "start_message",
    "reasoning": "start_reasoning",
    "redacted_thinking": "start_reasoning",
    "tool_call": "start_function_call",
    "custom_tool_call": "start_custom_tool_call",
}
CLOSERS = {
    "text": "close_message",
    "refusal": "close_message",
    "reasoning": "close_reasoning",
    "tool_call": "close_function_call",
    "custom_tool_call": "close_custom_tool_call",
}


class StreamEncoder(StreamEncoderBase):
    """Turns happenings into Responses SSE bytes, one answer's worth."""

    def __init__(self, meta: Meta, request: ParsedRequest):
        self.meta = meta
        self.request = request
        self.response_id = meta.new_id("resp_")
        self.sequence_number = 0
        self.items: list[dict] = []  # finished items, as their output_item.done showed them
        self.open: OpenItem | None = None
        self.closing = False  # the open item's block ended; its done events wait for what follows
        self.obfuscation = Obfuscation(0) if request.options["obfuscation"] else None  # deltas pad to 16 characters
        self.moderation: dict = {}  # the fields of the moderation the scenario flags (see scenario_moderation)

    def encode(self, happening: p.Happening) -> bytes:
        handler = self.handlers[type(happening)]
        if self.closing and type(happening) is not p.Finish:
            return self.close_item("completed") + handler(self, happening)
        return handler(self, happening)

    def next_number(self) -> int:
        number = self.sequence_number
        self.sequence_number += 1
        return number

    def event(self, event_type: str, **fields: Any) -> bytes:
        return event_frame(event_type, {"type": event_type, "sequence_number": self.next_number(), **fields})

    def delta_template(self, event_type: str, **fields: Any) -> SequencedTemplate:
        """The frame of this item's delta events, `delta` being the string slot, and their obfuscation."""
        event = {"type": event_type, "sequence_number": SequencedTemplate.NUMBER, **fields}
        if self.obfuscation is None:
            return SequencedTemplate(event_frame(event_type, event))
        return ObfuscatedSequencedTemplate(
            event_frame(event_type, {**event, "obfuscation": Obfuscation.MARK}), self.obfuscation
        )

    def lifecycle(self, event_type: str, status: str, output: list, **fields: Any) -> bytes:
        response = response_object(
            self.response_id, self.meta, self.request, status, output, **self.moderation, **fields
        )
        return self.event(event_type, response=response)

    def start(self, start: p.Start) -> bytes:
        self.moderation = scenario_moderation(self.request, start)
        if self.request.options["echo"].get("background"):  # queued first, as a background answer is
            queued = self.lifecycle("response.created", "queued", []) + self.lifecycle("response.queued", "queued", [])
            return queued + self.lifecycle("response.in_progress", "in_progress", [])
        return self.lifecycle("response.created", "in_progress", []) + self.lifecycle(
            "response.in_progress", "in_progress", []
        )

    # -------------------------------------------- items

    def block_start(self, start: p.BlockStart) -> bytes:
        item_id = self.meta.new_id(ITEM_ID_PREFIXES[start.kind])
        return getattr(self, STARTERS[start.kind])(item_id, len(self.items), start)

    def start_message(self, item_id: str, index: int, start: p.BlockStart) -> bytes:
        """A message item with its one content part: `output_text`, or for a refusal `refusal`."""
        where = {"item_id": item_id, "output_index": index, "content_index": 0}
        if start.kind == "refusal":
            delta, part = self.delta_template("response.refusal.delta", **where, delta=Template.SLOT), refusal_part("")
        else:
            delta, part = (
                self.delta_template("response.output_text.delta", **where, delta=Template.SLOT, logprobs=[]),
                output_text_part(""),
            )
        top = self.request.options["top_logprobs"] if start.kind == "text" else None
        self.open = OpenItem(start.kind, item_id, index, delta, phase=start.phase, top_logprobs=top)
        item = message_item(item_id, "in_progress", [], start.phase)
        return self.event("response.output_item.added", output_index=index, item=item) + self.event(
            "response.content_part.added", **where, part=part
        )

    def start_reasoning(self, item_id: str, index: int, start: p.BlockStart) -> bytes:
        """A reasoning item, its summary parts still to come (for redacted thinking, none)."""
        self.open = OpenItem("reasoning", item_id, index, None, encrypted=encrypted_content(self.meta, self.request))
        return self.event(
            "response.output_item.added", output_index=index, item=reasoning_item(item_id, [], self.open.encrypted)
        )

    def open_summary_part(self, item: OpenItem) -> bytes:
        where = {"item_id": item.item_id, "output_index": item.output_index, "summary_index": len(item.summaries)}
        item.delta = self.delta_template("response.reasoning_summary_text.delta", **where, delta=Template.SLOT)
        return self.event("response.reasoning_summary_part.added", **where, part=summary_part(""))

    def close_summary_part(self, item: OpenItem) -> bytes:
        where = {"item_id": item.item_id, "output_index": item.output_index, "summary_index": len(item.summaries)}
        text = item.text()
        item.summaries.append(text)
        item.parts, item.delta = [], None
        return self.event("response.reasoning_summary_text.done", **where, text=text) + self.event(
            "response.reasoning_summary_part.done", **where, part=summary_part(text)
        )

    def start_function_call(self, item_id: str, index: int, start: p.BlockStart) -> bytes:
        return self.start_call(item_id, index, start, "response.function_call_arguments.delta", function_call_item)

    def start_call(self, item_id: str, index: int, start: p.BlockStart, delta_type: str, make_item) -> bytes:
        """A call's item (made by `make_item`), its text to come in `delta_type` events."""
        call_id = start.call_id or self.meta.new_id("call_")
        delta = self.delta_template(delta_type, item_id=item_id, output_index=index, delta=Template.SLOT)
        self.open = OpenItem(start.kind, item_id, index, delta, start.name, call_id, caller=start.caller)
        item = make_item(item_id, "in_progress", call_id, start.name, "")
        if start.caller is not None:
            called_by(start.caller, item)
        return self.event("response.output_item.added", output_index=index, item=item)

    def delta(self, delta: p.Delta) -> bytes:
        item: OpenItem = self.open  # type: ignore[assignment]  # deltas come only while an item is open
        if item.top_logprobs is not None:
            item.parts.append(delta.text)
            logprobs = text_logprobs([delta.text], item.top_logprobs, with_bytes=True)
            padding = (
                {} if self.obfuscation is None else {"obfuscation": self.obfuscation.padding(len(delta.text)).decode()}
            )
            return self.event(
                "response.output_text.delta", **item.where(), delta=delta.text, logprobs=logprobs, **padding
            )
        opened = b"" if item.delta is not None else self.open_summary_part(item)
        item.parts.append(delta.text)
        return opened + item.delta.fill(self.next_number(), delta.text)  # type: ignore[union-attr]  # opened if None

    def next_part(self, next_part: p.NextPart) -> bytes:
        return self.close_summary_part(cast(OpenItem, self.open))

    def block_end(self, end: p.BlockEnd) -> bytes:
        self.closing = True
        return b""

    def close_item(self, status: str) -> bytes:
        """The open item's done events, ending with `response.output_item.done`."""
        item, self.open, self.closing = cast(OpenItem, self.open), None, False
        text = item.text()
        done = item.object(status)
        self.items.append(done)
        return getattr(self, CLOSERS[item.kind])(item, text) + self.event(
            "response.output_item.done", output_index=item.output_index, item=done
        )

    def close_message(self, item: OpenItem, text: str) -> bytes:
        where = item.where()
        if item.kind == "refusal":
            return self.event("response.refusal.done", **where, refusal=text) + self.event(
                "response.content_part.done", **where, part=refusal_part(text)
            )
        logprobs = text_logprobs(item.parts, item.top_logprobs, with_bytes=False)
        part = output_text_part(text, text_logprobs(item.parts, item.top_logprobs, with_bytes=True), item.annotations)
        return self.event("response.output_text.done", **where, text=text, logprobs=logprobs) + self.event(
            "response.content_part.done", **where, part=part
        )

    def close_reasoning(self, item: OpenItem, text: str) -> bytes:
        return b"" if item.delta is None else self.close_summary_part(item)

    def close_function_call(self, item: OpenItem, text: str) -> bytes:
        return self.event(
            "response.function_call_arguments.done",
            item_id=item.item_id,
            output_index=item.output_index,
            arguments=text,
        )

    # -------------------------------------------- custom tool calls and citations

    def start_custom_tool_call(self, item_id: str, index: int, start: p.BlockStart) -> bytes:
        return self.start_call(item_id, index, start, "response.custom_tool_call_input.delta", custom_tool_call_item)

    def close_custom_tool_call(self, item: OpenItem, text: str) -> bytes:
        return self.event(
            "response.custom_tool_call_input.done", item_id=item.item_id, output_index=item.output_index, input=text
        )

    def cite(self, cite: p.Cite) -> bytes:
        """An `annotation.added` event, the annotation kept for the part and the item."""
        item = cast(OpenItem, self.open)
        annotation = url_citation(cite.citation)
        item.annotations = [*(item.annotations or ()), annotation]
        return self.event(
            "response.output_text.annotation.added",
            **item.where(),
            annotation_index=len(item.annotations) - 1,
            annotation=annotation,
        )

    # -------------------------------------------- endings

    def failure(self, failure: p.Failure) -> bytes:
        """The nested `error` event (unless the scenario leaves it out), then `response.failed`."""
        output = self.items + ([self.open.object("in_progress")] if self.open else [])
        details = openai_fail_error(failure)
        error_event = (
            self.event("error", error={key: details[key] for key in ERROR_EVENT_FIELDS}) if failure.error_event else b""
        )
        error = {"code": details["code"], "message": failure.message}
        return error_event + self.lifecycle("response.failed", "failed", output, error=error)

    def finish(self, finish: p.Finish) -> bytes:
        incomplete = INCOMPLETE_REASONS.get(finish.reason)
        closed = self.close_item("completed" if incomplete is None else "incomplete") if self.closing else b""
        usage = usage_object(finish.usage)
        if incomplete is None:
            return closed + self.lifecycle("response.completed", "completed", self.items, usage=usage)
        return closed + self.lifecycle(
            "response.incomplete", "incomplete", self.items, usage=usage, incomplete_details={"reason": incomplete}
        )

    # -------------------------------------------- hosted tools and compaction (see below)

    def hosted_call(self, call: p.HostedCall) -> bytes:
        """A hosted tool's item: added, `in_progress`, its work (a search's `searching`, code's or
        an MCP call's deltas), `completed`, done."""
        tool = call.tool
        if tool.calls_tools:
            return self.program(tool)
        listed = self.tools_listed(tool) if unlisted_server(tool, self.items) else b""
        prefix, _, word = HOSTED_ITEMS[tool.name]
        item_id, index = self.meta.new_id(prefix), len(self.items)
        container_id = self.meta.new_id("cntr_") if tool.name == "code_execution" else None
        where = {"item_id": item_id, "output_index": index}
        frames = [
            self.event(
                "response.output_item.added", output_index=index, item=hosted_item(tool, item_id, container_id, False)
            ),
            self.event(f"response.{word}.in_progress", **where),
        ]
        if word in WORKING_EVENTS:
            frames.append(self.event(f"response.{word}.{WORKING_EVENTS[word]}", **where))
        elif word == "code_interpreter_call":
            code = str(json.loads(tool.input).get("code", ""))
            delta = self.delta_template("response.code_interpreter_call_code.delta", **where, delta=Template.SLOT)
            frames += [
                *(delta.fill(self.next_number(), piece) for piece in tool.code_deltas),
                self.event("response.code_interpreter_call_code.done", **where, code=code),
                self.event("response.code_interpreter_call.interpreting", **where),
            ]
        else:
            delta = self.delta_template("response.mcp_call_arguments.delta", **where, delta=Template.SLOT)
            frames += [
                *(delta.fill(self.next_number(), piece) for piece in tool.input_deltas),
                self.event("response.mcp_call_arguments.done", **where, arguments=tool.input),
            ]
        done = hosted_item(tool, item_id, container_id, True)
        self.items.append(done)
        frames += [
            self.event(f"response.{word}.completed", **where),
            self.event("response.output_item.done", output_index=index, item=done),
        ]
        return listed + b"".join(frames)

    def program(self, tool: sc.ServerTool) -> bytes:
        """A code execution whose code calls the client's tools: a `program` item, then (with a
        result) its `program_output`, each added and done whole, as no events stream their parts."""
        frames = []
        for item in program_items(self.meta, tool):
            index = len(self.items)
            self.items.append(item)
            frames += [
                self.event("response.output_item.added", output_index=index, item=item),
                self.event("response.output_item.done", output_index=index, item=item),
            ]
        return b"".join(frames)

    def tools_listed(self, tool: sc.ServerTool) -> bytes:
        """An `mcp_list_tools` item: the tools of the server an MCP call is the first of this response to call."""
        item_id, index = self.meta.new_id("mcpl_"), len(self.items)
        where = {"item_id": item_id, "output_index": index}
        done = mcp_list_item(item_id, tool, listed=True)
        self.items.append(done)
        return b"".join(
            [
                self.event("response.output_item.added", output_index=index, item=mcp_list_item(item_id, tool, False)),
                self.event("response.mcp_list_tools.in_progress", **where),
                self.event("response.mcp_list_tools.completed", **where),
                self.event("response.output_item.done", output_index=index, item=done),
            ]
        )

    def compacted(self, compacted: p.Compacted) -> bytes:
        """A `compaction` item: added, `response.compaction.compacting`, done."""
        item_id, index = self.meta.new_id("cmp_"), len(self.items)
        item = compaction_item(item_id, compacted.text)
        self.items.append(item)
        return b"".join(
            [
                self.event("response.output_item.added", output_index=index, item=item),
                self.event("response.compaction.compacting", item_id=item_id, output_index=index),
                self.event("response.output_item.done", output_index=index, item=item),
            ]
        )


# ---------------------------------------------------------------- hosted tools and compaction

# Each hosted tool's item: its id prefix, its type, and the word its events are named by
# (`response.<word>.in_progress`, …); web_fetch is a web search that opens a page.
HOSTED_ITEMS = {
    "web_search": ("ws_", "web_search_call", "web_search_call"),
    "web_fetch": ("ws_", "web_search_call", "web_search_call"),
    "file_search": ("fs_", "file_search_call", "file_search_call"),
    "code_execution": ("ci_", "code_interpreter_call", "code_interpreter_call"),
    "image_generation": ("ig_", "image_generation_call", "image_generation_call"),
    "mcp": ("mcp_", "mcp_call", "mcp_call"),
}
# The event each item's work goes on with between `in_progress` and `completed`: a search
# searches, an image generates; code and MCP calls stream their code or arguments instead.
WORKING_EVENTS = {
    "web_search_call": "searching",
    "file_search_call": "searching",
    "image_generation_call": "generating",
}
PROGRAM_FINGERPRINT_BYTES = 48  # opaque, to be sent back as given
COMPACTION_PREFIX = "gAAAAAB"  # an encrypted_content's opening, as the real one's


def hosted_item(tool: sc.ServerTool, item_id: str, container_id: str | None, done: bool) -> dict:
    """A hosted tool's output item: as it opens (`done` False), or whole with its result; a
    call without a result (a turn Messages would pause) shows an empty one."""
    tool_input = json.loads(tool.input)
    result = json.loads(tool.result) if done and tool.result is not None else None
    status = "completed" if done else "in_progress"
    item: dict[str, Any] = {"id": item_id, "type": HOSTED_ITEMS[tool.name][1], "status": status}
    if tool.name == "web_search":
        action: dict[str, Any] = {"type": "search", "query": str(tool_input.get("query", ""))}
        if done:
            action["sources"] = [{"type": "url", "url": page["url"]} for page in result or []]
        item["action"] = action
    elif tool.name == "web_fetch":
        item["action"] = {"type": "open_page", "url": tool_input.get("url")}
    elif tool.name == "file_search":
        queries = tool_input.get("queries") or [tool_input.get("query", "")]
        hits = [{"attributes": {}, **hit} for hit in result or []] if done else None
        item.update(queries=queries, results=hits)
    elif tool.name == "code_execution":
        logs = (result or {}).get("stdout", "") + (result or {}).get("stderr", "")
        outputs = ([{"type": "logs", "logs": logs}] if logs else []) if done else None
        item.update(code=str(tool_input.get("code", "")) if done else "", container_id=container_id, outputs=outputs)
    elif tool.name == "image_generation":
        item["result"] = result
    else:
        item.update(
            name=tool.tool,
            server_label=tool.server,
            arguments=tool.input if done else "",
            output=result,
            error=None,
            approval_request_id=None,
        )
    return item


def compaction_item(item_id: str, text: str) -> dict:
    """A `compaction` item: its summary is opaque to the client, as `encrypted_content`."""
    encrypted = COMPACTION_PREFIX + base64.b64encode(text.encode()).decode()
    return {"id": item_id, "type": "compaction", "encrypted_content": encrypted}


def whole_items(meta: Meta, whole: p.HostedCall | p.Compacted, output: list[dict]) -> list[dict]:
    """A hosted call's or a compaction's item, as the whole response holds it, after the
    `output` before it (and for an MCP call to a server it lists no tools of, its list first)."""
    if type(whole) is p.Compacted:
        return [compaction_item(meta.new_id("cmp_"), whole.text)]
    tool = cast(p.HostedCall, whole).tool
    if tool.calls_tools:
        return program_items(meta, tool)
    listed = [mcp_list_item(meta.new_id("mcpl_"), tool, listed=True)] if unlisted_server(tool, output) else []
    item_id = meta.new_id(HOSTED_ITEMS[tool.name][0])
    container_id = meta.new_id("cntr_") if tool.name == "code_execution" else None
    return [*listed, hosted_item(tool, item_id, container_id, done=True)]


def program_items(meta: Meta, tool: sc.ServerTool) -> list[dict]:
    """A code execution whose code calls the client's tools, as programmatic tool calling shows it:
    a `program` item holding the code, and with a result its `program_output` (the code's stdout)."""
    call_id = cast(str, tool.call_id)  # the reader gives every code execution a call names its id
    code = str(json.loads(tool.input).get("code", ""))
    fingerprint = meta.random_base64(PROGRAM_FINGERPRINT_BYTES)
    items = [
        {"id": meta.new_id("prg_"), "type": "program", "call_id": call_id, "code": code, "fingerprint": fingerprint}
    ]
    if tool.result is not None:
        result = json.loads(tool.result)
        output = {
            "type": "program_output",
            "call_id": call_id,
            "result": result.get("stdout", ""),
            "status": "completed",
        }
        items.append({"id": meta.new_id("prgo_"), **output})
    return items


def called_by(program_call_id: str, item: dict) -> dict:
    """A function call item the code of a program makes: it names the program as its caller."""
    item["caller"] = {"type": "program", "caller_id": program_call_id}
    return item


def unlisted_server(tool: sc.ServerTool, items: list[dict]) -> bool:
    """Whether `tool` is an MCP call to a server no `mcp_list_tools` item of `items` lists."""
    return tool.name == "mcp" and not any(
        item["type"] == "mcp_list_tools" and item["server_label"] == tool.server for item in items
    )


def mcp_list_item(item_id: str, tool: sc.ServerTool, listed: bool) -> dict:
    """The tools of an MCP call's server, as far as the scenario knows them: the one it calls."""
    tools = [{"name": tool.tool, "input_schema": {"type": "object"}, "annotations": None, "description": None}]
    return {"id": item_id, "type": "mcp_list_tools", "server_label": tool.server, "tools": tools if listed else []}
