"""Anthropic Messages: `POST /v1/messages`.

Stream: `event: <type>` + `data: <json>` frames, no terminator. `message_start` (empty
`content`, output_tokens 1), then per block `content_block_start` / `content_block_delta`s /
`content_block_stop` with a `ping` after the first block's start, then `message_delta`
(stop_reason, cumulative usage) and `message_stop`. Reasoning is a `thinking` block that
ends with one `signature_delta` (the player shows it only to requests that enable `thinking`,
and without its text to `display: omitted`); a redacted_thinking step is a
`redacted_thinking` block with its `data` and no deltas; tool calls are `tool_use` blocks fed
by `input_json_delta`s (a custom tool's call too, its input `{"input": TEXT}`); a text
step's citations are `citations_delta`s. A refusal's `stop_details` is Anthropic's RefusalStopDetails. A `fail`
is one `event: error`, after which the stream simply ends. Hosted tool calls and compactions
are blocks of their own (see the section at the end).
"""

from __future__ import annotations

import json
import time
from json.encoder import encode_basestring
from typing import Any, NamedTuple, cast

from ..play import player as p
from ..play.player import PlayRequest, estimate_tokens
from ..scenario import model as sc
from ..scenario.model import Citation
from .common import (
    ANTHROPIC_REQUEST_ID_HEADER,
    EXAMPLE_TOOL_CALLS,
    FAIL_STATUS,
    FIRST_TURN,
    NO_OPTIONS,
    OPTIONAL_BOOL,
    OPTIONAL_OBJECT,
    BadRequest,
    Conversation,
    History,
    Meta,
    ParsedRequest,
    StreamEncoderBase,
    Template,
    ToolResult,
    anthropic_error_body,
    anthropic_request_id,
    content_text,
    event_frame,
    example_call_id,
    json_output_asked,
    lone_question,
    new_tuple,
    required_call,
    tool_names,
    typed_fields,
)
from .common import (
    HTTP_MESSAGES as COMMON_HTTP_MESSAGES,
)

NAME = "messages"
PATH = "/v1/messages"
EXAMPLE_REQUEST: dict[str, Any] = {
    "model": "claude-sonnet-5",
    "max_tokens": 1024,
    "messages": [{"role": "user", "content": "Hello"}],
    "thinking": {"type": "adaptive"},
    "stream": True,
}


def example_request(turn: int = 1) -> dict:
    """EXAMPLE_REQUEST as an agent sends it at `turn`: after the question, each earlier turn is
    an assistant message with a `tool_use` block for each of the EXAMPLE_TOOL_CALLS and a user
    message with a `tool_result` block for each result."""
    messages = list(EXAMPLE_REQUEST["messages"])
    for earlier in range(1, turn):
        ids = [example_call_id("toolu_01", earlier, number) for number in range(len(EXAMPLE_TOOL_CALLS))]
        uses = [
            {"type": "tool_use", "id": call_id, "name": name, "input": json.loads(arguments)}
            for call_id, (name, arguments, _) in zip(ids, EXAMPLE_TOOL_CALLS)
        ]
        results = [
            {"type": "tool_result", "tool_use_id": call_id, "content": result}
            for call_id, (_, _, result) in zip(ids, EXAMPLE_TOOL_CALLS)
        ]
        messages += [{"role": "assistant", "content": uses}, {"role": "user", "content": results}]
    return {**EXAMPLE_REQUEST, "messages": messages}


STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "refusal",
    "stop_sequence": "stop_sequence",
    "refusal": "refusal",
    "pause_turn": "pause_turn",
    "model_context_window_exceeded": "model_context_window_exceeded",
}
FAIL_TYPES = {
    "rate_limit": "rate_limit_error",
    "server_error": "api_error",
    "invalid_prompt": "invalid_request_error",
    "overloaded": "overloaded_error",
    "interrupted": "api_error",
}
FAIL_STATUSES = {**FAIL_STATUS, "overloaded": 529}
OVERLOADED_MESSAGE = "Overloaded. https://docs.claude.com/en/api/errors"  # the 2026 API's words for a 529
# Where Messages' default words differ from the other protocols': by status, and by fail kind.
HTTP_MESSAGES = {**COMMON_HTTP_MESSAGES, 529: OVERLOADED_MESSAGE}
OWN_FAIL_MESSAGES = {"overloaded": OVERLOADED_MESSAGE}
SIGNATURE_BYTES = 96
REDACTED_DATA_BYTES = 192
DIRECT_CALLER = {"type": "direct"}  # who called a tool: the model itself
CODE_EXECUTION_CALLER = "code_execution_20250825"  # or the code of a code execution, named by its server_tool_use id
PING_FRAME = event_frame("ping", {"type": "ping"})
MESSAGE_STOP_FRAME = event_frame("message_stop", {"type": "message_stop"})


# ---------------------------------------------------------------- the request


def checked_field(body: dict, key: str, kinds: tuple, what: str, required: bool = False) -> Any:
    """body[key] if it has one of `kinds`; BadRequest in Anthropic's wording otherwise."""
    if body.get(key) is None:
        if required:
            raise BadRequest(f"{key}: Field required", param=key)
        return None
    value = body[key]
    wrong_boolean = isinstance(value, bool) and bool not in kinds
    if wrong_boolean or not isinstance(value, kinds):
        raise BadRequest(f"{key}: Input should be {what}", param=key)
    return value


# A `system` message holds instructions from its place in the conversation on (anthropic 2.17's MessageParam).
ROLES = ("user", "assistant", "system")


def message_error(where: str, message: Any) -> BadRequest:
    """What is wrong with a message that message_facts refused."""
    if not isinstance(message, dict):
        return BadRequest(f"{where}: Input should be a valid dictionary", param=where)
    if message.get("role") not in ROLES:
        return BadRequest(f"{where}.role: Input should be 'user', 'assistant' or 'system'", param=f"{where}.role")
    if "content" not in message:
        return BadRequest(f"{where}.content: Field required", param=f"{where}.content")
    return BadRequest(
        f"{where}.content: Input should be a valid string or a list of content blocks", param=f"{where}.content"
    )


def system_text(system: Any) -> str:
    """The text of `system`: a string, or a list of text blocks."""
    if system is None or isinstance(system, str):
        return system or ""
    if isinstance(system, list) and all(
        isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str) for b in system
    ):
        return "".join(block["text"] for block in system)
    raise BadRequest("system: Input should be a valid string or a list of text blocks", param="system")


# The fields parse reads, as typed_fields takes them. A missing `max_tokens` is one of the
# conversation checks (see parse).
FIELDS = (
    ("model", (str,), "a valid string", True),
    ("max_tokens", (int,), "a valid integer", False),
    ("messages", (list,), "a valid list", True),
    ("stream", (bool,), "a valid boolean", False),
    ("thinking", (dict,), "a valid dictionary", False),
    ("tools", (list,), "a valid list", False),
    ("tool_choice", (dict,), "a valid dictionary", False),
)
# The fields parse reads only when a request sends them.
# Those of them that ask for something of the answer (see asked_options).
ASKING_FIELDS = frozenset(("context_management", "cache_control", "output_config", "output_format"))
UNUSUAL_FIELDS = frozenset(("system", "tools", "tool_choice", "thread", *ASKING_FIELDS))


def parse(body: dict) -> ParsedRequest:
    # Most requests send a token limit and none of the UNUSUAL_FIELDS, each of its type: they are
    # parsed inline, one question without message_facts (15k instructions against 25k); any
    # other goes the whole way.
    model, max_tokens, messages, stream, thinking = (
        body.get("model"),
        body.get("max_tokens"),
        body.get("messages"),
        body.get("stream"),
        body.get("thinking"),
    )
    if not (
        UNUSUAL_FIELDS.isdisjoint(body)
        and type(model) is str
        and type(max_tokens) is int
        and max_tokens > 0
        and type(messages) is list
        and messages
        and type(stream) in OPTIONAL_BOOL
        and type(thinking) in OPTIONAL_OBJECT
    ):
        return unusual_request(body)
    prompt = lone_question(messages)
    if prompt is not None:
        chars, history = len(prompt), None
    else:
        chars, prompt, history = message_facts(messages)
    play = new_tuple(
        PlayRequest, (estimate_tokens(chars) + 3 * len(messages), max_tokens, thinking_shown(thinking), True)
    )
    if history is None:
        return new_tuple(ParsedRequest, (model, stream is True, prompt, play, NO_OPTIONS, "", FIRST_TURN))
    conversation = conversation_of(history, None, "", max_tokens)
    return asked_request(model, stream is True, prompt, play, asked_options(body, None, messages), conversation)


def unusual_request(body: dict) -> ParsedRequest:
    """The parsed request of one that sends any of the UNUSUAL_FIELDS, or no token limit, or fields of another type."""
    thread = thread_asked(body)
    parsed = unthreaded_request(body, continues=thread is not None and thread.previous is not None)
    return parsed if thread is None else in_thread(parsed, thread)


def unthreaded_request(body: dict, continues: bool = False) -> ParsedRequest:
    """The parsed request of one that sends any of the UNUSUAL_FIELDS but `thread`; one that
    `continues` a Thread may send no message (the turn after a `pause_turn`)."""
    model, max_tokens, messages, stream, thinking, tools, tool_choice = typed_fields(body, FIELDS, checked_field)
    if max_tokens is not None and max_tokens < 1:
        raise BadRequest("max_tokens: Input should be greater than or equal to 1", param="max_tokens")
    if not messages and not continues:
        raise BadRequest("messages: at least one message is required", param="messages")
    chars, prompt, history = message_facts(messages)
    system = system_text(body.get("system"))
    tool_calls = tool_choice is None or tool_choice.get("type") != "none"
    play = PlayRequest(
        estimate_tokens(len(system) + chars) + 3 * len(messages), max_tokens, thinking_shown(thinking), tool_calls
    )
    asks = tool_choice is not None or not ASKING_FIELDS.isdisjoint(body)
    if history is None and max_tokens is not None and not (system or tools or asks):
        return ParsedRequest(model, bool(stream), prompt, play)  # by position, as in chat.parse
    conversation = conversation_of(history, tools, system, max_tokens)
    options = asked_options(body, tool_choice, messages if history is not None else ())
    return asked_request(model, bool(stream), prompt, play, options, conversation)


# ---------------------------------------------------------------- Threads (beta)

THREAD = "messages_thread"  # the option of a request in a Thread: its ThreadAsk
THREADS_BETA = "message-threads-2026-08-12"
# The request fields and settings a Thread cannot carry, as the real API names them, each with
# whether a request asks for it.
THREAD_UNSUPPORTED = (
    ("cache_control", lambda body: body.get("cache_control") is not None),
    ("context_management", lambda body: body.get("context_management") is not None),
    ("fallbacks", lambda body: body.get("fallbacks") is not None),
    ("thinking", lambda body: type(body.get("thinking")) is dict and body["thinking"].get("type") != "disabled"),
)
CREATE_ONLY_FIELDS = ("system", "tools")  # a Thread's own: a turn that continues it sends neither


class ThreadAsk(NamedTuple):
    """A request's `thread`: the response it continues (None: it creates a Thread), and the body
    whose messages, system and tools the Thread holds once the answer ends (for a continue, the
    whole conversation, see threads.Threads.continued)."""

    previous: str | None
    body: dict


def thread_asked(body: dict) -> ThreadAsk | None:
    """The request's `thread`, checked as the real API checks it (see PROTOCOLS.md, Threads)."""
    thread = body.get("thread")
    if thread is None:
        return None
    kind = thread.get("type") if type(thread) is dict else None
    if kind not in ("create", "continue"):
        raise BadRequest("thread: Input should be an object with `type` 'create' or 'continue'", param="thread")
    previous = thread.get("previous_message_id")
    if kind == "continue" and (type(previous) is not str or not previous):
        raise BadRequest("thread.previous_message_id: Field required", param="thread.previous_message_id")
    unknown = sorted(set(thread) - ({"type", "previous_message_id"} if kind == "continue" else {"type"}))
    if unknown:
        raise BadRequest(f"thread.{unknown[0]}: Extra inputs are not permitted", param=f"thread.{unknown[0]}")
    unsupported = [name for name, asks in THREAD_UNSUPPORTED if asks(body)]
    if unsupported:
        raise BadRequest(
            f"thread: a Thread cannot carry {', '.join(map(repr, unsupported))}: send the whole conversation without `thread`.",
            param="thread",
            details={"error_code": "thread_unsupported_request", "unsupported": unsupported},
        )
    if kind == "continue":
        for field in CREATE_ONLY_FIELDS:
            if body.get(field) is not None:
                raise BadRequest(
                    f"{field}: a turn that continues a Thread cannot send `{field}`: the Thread keeps the one it was created with.",
                    param=field,
                )
    return ThreadAsk(previous if kind == "continue" else None, body)


def in_thread(parsed: ParsedRequest, thread: ThreadAsk) -> ParsedRequest:
    """`parsed` as a turn of a Thread: its answer is kept for the next turn to continue. The
    ThreadAsk goes beside its options, not into its variant: it changes no byte of the answer."""
    conversation = parsed.conversation._replace(keep=True, continues=thread.previous)
    options = {**parsed.options, THREAD: thread}
    return parsed._replace(options=options, conversation=conversation)


def thread_error(message: str, error_code: str, status: int = 400) -> BadRequest:
    return BadRequest(message, param="thread.previous_message_id", status=status, details={"error_code": error_code})


def reply_of(answer: bytes, whole: bool) -> dict:
    """The assistant message an answer gave (its body, or its stream's bytes), as a later turn sends it back."""
    if whole:
        message = json.loads(answer)
        return {"role": "assistant", "content": message["content"]}
    blocks: list[dict] = []
    inputs: dict[int, list[str]] = {}
    for line in answer.split(b"\n"):
        if line.startswith(b"data: "):
            try:
                added_to(blocks, inputs, json.loads(line[6:]))
            except UNREAD_EVENT:  # a scenario's raw frame: no event of the reply
                pass
    return {"role": "assistant", "content": blocks}


UNREAD_EVENT = (ValueError, LookupError, TypeError, AttributeError)  # what a frame not of the protocol's shape raises


def added_to(blocks: list[dict], inputs: dict[int, list[str]], event: dict) -> None:
    """An answer's content blocks with one more stream event read into them."""
    kind = event.get("type")
    if kind == "content_block_start":
        blocks.append(dict(event["content_block"]))
    elif kind == "content_block_delta":
        block, delta = blocks[event["index"]], event["delta"]
        delta_type = delta.get("type")
        if delta_type == "input_json_delta":
            inputs.setdefault(event["index"], []).append(delta["partial_json"])
        elif delta_type == "citations_delta":
            block.setdefault("citations", []).append(delta["citation"])
        elif delta_type in ADDED_FIELDS:
            field = ADDED_FIELDS[delta_type]
            block[field] = (block.get(field) or "") + delta[field]
        elif delta_type in SET_FIELDS:
            field = SET_FIELDS[delta_type]
            block[field] = delta[field]
    elif kind == "content_block_stop" and event["index"] in inputs:
        blocks[event["index"]]["input"] = json.loads("".join(inputs.pop(event["index"])) or "{}")


ADDED_FIELDS = {"text_delta": "text", "thinking_delta": "thinking"}  # a delta of these adds to the block's field
SET_FIELDS = {"signature_delta": "signature", "compaction_delta": "content"}  # and of these sets it whole


def answer_id(answer: bytes, whole: bool) -> str:
    """The id of the message an answer gave: its body's, or its stream's message_start's."""
    if whole:
        return json.loads(answer)["id"]
    start = answer.index(b"data: ") + len(b"data: ")
    return json.loads(answer[start : answer.index(b"\n", start)])["message"]["id"]


def asked_request(
    model: str, stream: bool, prompt: str, play: PlayRequest, options: dict, conversation: Conversation
) -> ParsedRequest:
    if options:  # its own variant: the kept renderings of requests that ask for none of them are not its
        return ParsedRequest(model, stream, prompt, play, options, repr(sorted(options.items())), conversation)
    return ParsedRequest(model, stream, prompt, play, NO_OPTIONS, "", conversation)


def asked_options(body: dict, tool_choice: dict | None, messages: list | tuple) -> dict:
    """The options of a request that asks for what changes its answer beside the play: a tool
    call (`required_tool`, see required_call), context management's report
    (`context_management`), 1-hour cache writes (`cache_1h`: a `cache_control` with `ttl: "1h"`
    at the top, on a system block, a tool or a block of `messages`)."""
    options: dict[str, Any] = {}
    required = None if tool_choice is None else required_call(tool_choice)
    if required is not None:
        options["required_tool"] = required
    if body.get("context_management") is not None:
        options["context_management"] = True
    output_config = body.get("output_config")
    output_format = output_config.get("format") if type(output_config) is dict else None
    options.update(json_output_asked(output_format, "output_config.format"))
    options.update(json_output_asked(body.get("output_format"), "output_format"))
    system, tools = body.get("system"), body.get("tools")
    blocks = [
        body,
        *(system if type(system) is list else ()),
        *(tools or ()),
        *(block for message in messages if type(message["content"]) is list for block in message["content"]),
    ]
    if any(one_hour(block) for block in blocks):
        options["cache_1h"] = True
    return options


def one_hour(block: Any) -> bool:
    cache_control = block.get("cache_control") if type(block) is dict else None
    return type(cache_control) is dict and cache_control.get("ttl") == "1h"


def message_facts(messages: list[dict]) -> tuple[int, str, MessagesHistory | None]:
    """How many characters of text the messages hold, for the input token estimate; the last
    user-authored text, for `match`; and, once a message other than a user's plain string
    comes, the MessagesHistory of the rest. Each message must have a role and content of the
    right types. One plain loop: this runs on every request."""
    chars = 0
    prompt = ""
    history = None
    for number, message in enumerate(messages):
        if (
            type(message) is not dict
            or message.get("role") not in ROLES
            or type(message.get("content")) not in (str, list)
        ):
            raise message_error(f"messages.{number}", message)
        content = message["content"]
        if history is None:
            if type(content) is str and message["role"] == "user":
                chars += len(content)
                prompt = content
                continue
            history = MessagesHistory(prompt)
        chars += history.add(number, message["role"], content)
    return chars, prompt if history is None else history.prompt, history


def conversation_of(
    history: MessagesHistory | None, tools: list | None, system: str, max_tokens: int | None
) -> Conversation:
    gathered = history or History()
    if max_tokens is None:  # a field the real API requires, refused before what the messages hold
        gathered.problem = BadRequest("max_tokens: Field required", param="max_tokens")
    return gathered.conversation(tool_names(tools), "\n".join(filter(None, (system, *gathered.system))))


class MessagesHistory(History):
    """The conversation in Anthropic's messages: an assistant message is a turn; the user
    message after one with `tool_use` blocks answers each with a `tool_result`, as the real
    API checks (see PROTOCOLS.md); a system message's text follows the request's `system`."""

    def __init__(self, prompt: str) -> None:
        super().__init__()
        self.prompt = prompt
        self.asked_at = -1  # the last assistant message
        self.uses: dict[str, str | None] = {}  # its tool_use blocks: id -> tool name

    def add(self, number: int, role: str, content: str | list) -> int:
        """Take in one message; returns the characters of text it holds."""
        blocks = content if type(content) is list else [{"type": "text", "text": content}]
        texts, uses, results = [], {}, []
        for index, block in enumerate(blocks):
            kind = block.get("type") if type(block) is dict else None
            if kind == "text" and type(block.get("text")) is str:
                texts.append(block["text"])
            elif kind == "tool_use" and type(block.get("id")) is str:
                uses[block["id"]] = block.get("name") if type(block.get("name")) is str else None
            elif kind == "tool_result":
                results.append((index, block.get("tool_use_id"), content_text(block.get("content"))))
        if role == "assistant":
            self.assistant(number, uses)
        elif role == "system":
            self.answered(number, ())
            self.system.append("".join(texts))
        else:
            self.user(number, texts, results)
        return sum(map(len, texts)) + sum(len(text) for _, _, text in results)

    def assistant(self, number: int, uses: dict) -> None:
        self.answered(number, ())
        self.turns += 1
        self.asked_at, self.uses, self.results = number, uses, []

    def user(self, number: int, texts: list[str], results: list[tuple]) -> None:
        if texts or not results:  # a message of tool results alone is not the user's text
            self.prompt = "".join(texts)
        uses = self.uses if self.asked_at == number - 1 else {}
        for index, call_id, _ in results:
            if type(call_id) is not str:  # the request's shape is checked before its turns, and such an id may not hash
                self.refuse(
                    f"messages.{number}.content.{index}.tool_use_id: Input should be a valid string",
                    f"messages.{number}.content.{index}.tool_use_id",
                )
        self.answered(number, [call_id for _, call_id, _ in results])
        for index, call_id, _ in results:
            if type(call_id) is str and call_id not in uses:
                self.refuse(
                    f"messages.{number}.content.{index}: unexpected `tool_use_id` found in `tool_result` blocks: {call_id}. "
                    "Each `tool_result` block must have a corresponding `tool_use` block in the previous message.",
                    f"messages.{number}.content.{index}",
                )
        self.results = [
            ToolResult(str(call_id), uses.get(call_id) if type(call_id) is str else None, text)
            for _, call_id, text in results
        ]
        self.uses = {}

    def answered(self, number: int, call_ids) -> None:
        """The message at `number` must answer every tool_use of the assistant message just before it."""
        if self.asked_at != number - 1 or not self.uses:
            return
        missing = [call_id for call_id in self.uses if call_id not in call_ids]
        if missing:
            self.refuse(
                f"messages.{self.asked_at}: `tool_use` ids were found without `tool_result` blocks immediately after: {', '.join(missing)}. "
                "Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
                f"messages.{self.asked_at}",
            )


def thinking_shown(thinking: dict | None) -> str:
    """What the request's `thinking` shows of the reasoning (player.REASONING_SHOWS): thinking
    blocks when it enables thinking (any type but `disabled`), without their text when its
    `display` is `omitted`."""
    if thinking is None or thinking.get("type") == "disabled":
        return "unasked"
    return "omitted" if thinking.get("display") == "omitted" else "shown"


# ---------------------------------------------------------------- errors


def error_body(
    status: int,
    message: str,
    request_id: str | None = None,
    param: str | None = None,
    code: str | None = None,
    error_type: str | None = None,
) -> dict:
    """Anthropic's error body; `param` and `code` have no place in it."""
    return anthropic_error_body(status, message, request_id, error_type)


REQUEST_ID_HEADER = ANTHROPIC_REQUEST_ID_HEADER
fresh_request_id = anthropic_request_id
RETRY = (("x-should-retry", "true"),)
NO_RETRY = (("x-should-retry", "false"),)


def error_headers(status: int) -> tuple[tuple[str, str], ...]:
    """`x-should-retry`, as Anthropic sends it on every error: true for 429 and 5xx (529 too), false otherwise."""
    return RETRY if status == 429 or status >= 500 else NO_RETRY


def failure_type(failure: p.Failure) -> str:
    return failure.error_type or FAIL_TYPES[failure.kind]


def failure_message(failure: p.Failure) -> str:
    """The failure's message: the scenario's, or the kind's default in Messages' own words."""
    return failure.message if failure.stated else OWN_FAIL_MESSAGES.get(failure.kind, failure.message)


def failure_response(failure: p.Failure, request_id: str | None = None) -> tuple[int, dict]:
    """Status and body of a non-streamed `fail` (overloaded is Anthropic's 529)."""
    status = FAIL_STATUSES[failure.kind]
    return status, anthropic_error_body(status, failure_message(failure), request_id, failure_type(failure))


# ---------------------------------------------------------------- shared by stream and whole


def message_id(meta: Meta) -> str:
    return meta.new_id("msg_01", 22)


def tool_use_id(meta: Meta, call_id: str | None) -> str:
    return call_id or meta.new_id("toolu_01", 22)


def signature(meta: Meta, given: str | None = None) -> str:
    """A thinking block's signature: the scenario's own, or opaque base64, as the real one is,
    drawn from the meta's rng."""
    return given or meta.random_base64(SIGNATURE_BYTES)


def redacted_data(meta: Meta, data: str | None) -> str:
    """A redacted_thinking block's `data`: the scenario's, or opaque base64 as the real one is."""
    return data or meta.random_base64(REDACTED_DATA_BYTES)


def tool_use_block(
    meta: Meta, call_id: str | None, name: str | None, tool_input: dict, caller: str | None = None
) -> dict:
    return {
        "type": "tool_use",
        "id": tool_use_id(meta, call_id),
        "name": name,
        "input": tool_input,
        "caller": DIRECT_CALLER if caller is None else {"type": CODE_EXECUTION_CALLER, "tool_id": caller},
    }


def start_usage(start: p.Start, one_hour: bool = False) -> dict:
    """The usage of `message_start`: the input's, and the one output token counted so far."""
    return {
        **input_usage(start.input_tokens, start.cached_tokens, start.cache_write_tokens, one_hour),
        "output_tokens": 1,
        **SERVING,
    }


def final_usage(usage: p.TokenUsage, one_hour: bool = False) -> dict:
    """The usage of the whole message."""
    return {
        **input_usage(usage.input_tokens, usage.cached_tokens, usage.cache_write_tokens, one_hour),
        **output_usage(usage),
        **SERVING,
    }


def input_usage(input_tokens: int, cached_tokens: int, cache_write_tokens: int, one_hour: bool = False) -> dict:
    """The input's usage; its cache writes counted as 1-hour ones when `one_hour` (see asked_options), else 5-minute ones."""
    if one_hour:
        creation = {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": cache_write_tokens}
    else:
        creation = {"ephemeral_5m_input_tokens": cache_write_tokens, "ephemeral_1h_input_tokens": 0}
    return {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": cache_write_tokens,
        "cache_read_input_tokens": cached_tokens,
        "cache_creation": creation,
    }


def output_usage(usage: p.TokenUsage) -> dict:
    return {"output_tokens": usage.output_tokens, "output_tokens_details": {"thinking_tokens": usage.reasoning_tokens}}


SERVING = {"service_tier": "standard", "inference_geo": "global"}
NO_EDITS: dict[str, list] = {
    "applied_edits": []
}  # context management's report: fakehop's answers never clear the context


def stop_details(finish: p.Finish) -> dict | None:
    """`stop_details`: for a refusal, Anthropic's RefusalStopDetails (category and explanation
    null unless the scenario gives them); null for every other stop."""
    details = finish.stop_details
    if details is None:
        return None
    return {"type": "refusal", "category": details.category, "explanation": details.explanation}


def message_object(meta: Meta, msg_id: str, content: list, finish: p.Finish | None, usage: dict) -> dict:
    """The message; `finish` None: one that has not stopped yet, as message_start shows it."""
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "content": content,
        "model": meta.model,
        "stop_reason": None if finish is None else STOP_REASONS[finish.reason],
        "stop_sequence": None if finish is None else finish.stop_sequence,
        "stop_details": None if finish is None else stop_details(finish),
        "usage": usage,
    }


CALL_KINDS = ("tool_call", "custom_tool_call")
CUSTOM_INPUT_OPENING = '{"input":"'
ENCRYPTED_INDEX_BYTES = 48


class CustomInputTemplate(Template):
    """The frame of a custom tool call's `input_json_delta`s: each fills in its text as a piece of
    the JSON string of `{"input": …}`, the first after the object's opening; `close()` is the
    delta that ends it."""

    def __init__(self, frame: bytes):
        super().__init__(frame)
        self.opening = CUSTOM_INPUT_OPENING

    def fill(self, text: str) -> bytes:
        json_text, self.opening = self.opening + encode_basestring(text)[1:-1], ""
        return super().fill(json_text)

    def close(self) -> bytes:
        return super().fill(self.opening + '"}')


def text_block(start: p.BlockStart | None = None) -> dict:
    """A text block as it starts: with `citations: []` when the step that opens it cites."""
    return (
        {"type": "text", "text": "", "citations": []}
        if start is not None and start.cited
        else {"type": "text", "text": ""}
    )


def web_search_citation(meta: Meta, citation: Citation) -> dict:
    """A citation as a `web_search_result_location`; its `encrypted_index` opaque, as the real one is."""
    return {
        "type": "web_search_result_location",
        "cited_text": citation.cited_text,
        "url": citation.url,
        "title": citation.title,
        "encrypted_index": meta.random_base64(ENCRYPTED_INDEX_BYTES),
    }


# ---------------------------------------------------------------- the stream


class StreamEncoder(StreamEncoderBase):
    """Turns happenings into Anthropic Messages SSE bytes, one answer's worth."""

    def __init__(self, meta: Meta, request: ParsedRequest):
        self.meta = meta
        self.options = request.options
        self.message_id = message_id(meta)
        self.block_kind: str | None = None
        self.block_index = 0
        self.block_signature: str | None = None
        self.delta_template: Template | None = None
        self.pinged = False
        self.index_shift = 0  # blocks the player counted that Messages leaves out (hosted tools it has not)

    def start(self, start: p.Start) -> bytes:
        message = message_object(self.meta, self.message_id, [], None, start_usage(start, "cache_1h" in self.options))
        return event_frame("message_start", {"type": "message_start", "message": message})

    def block_start(self, start: p.BlockStart) -> bytes:
        self.block_kind, self.block_index, self.block_signature = (
            start.kind,
            start.index - self.index_shift,
            start.signature,
        )
        if start.kind == "reasoning":
            block, delta = (
                {"type": "thinking", "thinking": "", "signature": ""},
                {"type": "thinking_delta", "thinking": Template.SLOT},
            )
        elif start.kind == "tool_call":
            block = tool_use_block(self.meta, start.call_id, start.name, {}, start.caller)
            delta = {"type": "input_json_delta", "partial_json": Template.SLOT}
        elif start.kind == "custom_tool_call":
            return self.custom_call_start(start)
        elif start.kind == "redacted_thinking":
            block, delta = (
                {"type": "redacted_thinking", "data": redacted_data(self.meta, start.data)},
                None,
            )  # a block with no deltas
        else:
            block, delta = text_block(start), {"type": "text_delta", "text": Template.SLOT}
        self.delta_template = None if delta is None else Template(self.block_event("content_block_delta", delta=delta))
        return self.started(block)

    def started(self, block: dict) -> bytes:
        """The block's content_block_start, and after the first block's the ping."""
        frame = self.block_event("content_block_start", content_block=block)
        return frame if self.pinged else self.pinged_once(frame)

    def pinged_once(self, frame: bytes) -> bytes:
        """`frame`, the first block's start, followed by the one ping."""
        if self.pinged:
            return frame
        self.pinged = True
        return frame + PING_FRAME

    def block_event(self, kind: str, **fields: Any) -> bytes:
        return event_frame(kind, {"type": kind, "index": self.block_index, **fields})

    def delta(self, delta: p.Delta) -> bytes:
        return self.delta_template.fill(delta.text)  # type: ignore[union-attr]  # only blocks with deltas get one

    def block_end(self, end: p.BlockEnd) -> bytes:
        if end.cut and self.block_kind in CALL_KINDS:
            return b""  # the real API leaves a tool_use block the token limit cut open
        if self.block_kind == "custom_tool_call":
            return cast(CustomInputTemplate, self.delta_template).close() + self.block_event("content_block_stop")
        stop = self.block_event("content_block_stop")
        if self.block_kind != "reasoning":
            return stop
        return (
            self.block_event(
                "content_block_delta",
                delta={"type": "signature_delta", "signature": signature(self.meta, self.block_signature)},
            )
            + stop
        )

    def custom_call_start(self, start: p.BlockStart) -> bytes:
        """A custom tool's call: Messages has no custom tools, so a `tool_use` block whose input
        is `{"input": "<the free text>"}`, its JSON streamed as the text comes."""
        block = tool_use_block(self.meta, start.call_id, start.name, {})
        delta = {"type": "input_json_delta", "partial_json": Template.SLOT}
        self.delta_template = CustomInputTemplate(self.block_event("content_block_delta", delta=delta))
        return self.started(block)

    def cite(self, cite: p.Cite) -> bytes:
        citation = web_search_citation(self.meta, cite.citation)
        return self.block_event("content_block_delta", delta={"type": "citations_delta", "citation": citation})

    def failure(self, failure: p.Failure) -> bytes:
        return event_frame(
            "error", {"type": "error", "error": {"type": failure_type(failure), "message": failure_message(failure)}}
        )

    def finish(self, finish: p.Finish) -> bytes:
        usage = finish.usage
        delta: dict[str, Any] = {
            "type": "message_delta",
            "delta": {
                "stop_reason": STOP_REASONS[finish.reason],
                "stop_sequence": finish.stop_sequence,
                "stop_details": stop_details(finish),
            },
            "usage": {
                "input_tokens": usage.input_tokens,
                "cache_creation_input_tokens": usage.cache_write_tokens,
                "cache_read_input_tokens": usage.cached_tokens,
                **output_usage(usage),
            },
        }
        if finish.hosted is not None:
            with_hosted_usage(self.meta, delta["delta"], delta["usage"], finish)
        if "context_management" in self.options:
            delta["context_management"] = NO_EDITS
        return event_frame("message_delta", delta) + MESSAGE_STOP_FRAME

    # -------------------------------------------- hosted tools and compaction

    def hosted_call(self, call: p.HostedCall) -> bytes:
        """A hosted tool's call block, its input in `input_json_delta`s, then its result block."""
        tool = call.tool
        if tool.name not in HOSTED_TOOLS:
            self.index_shift += 1 if tool.result is None else 2
            return b""
        index = call.index - self.index_shift
        use = hosted_use_block(self.meta, tool, {})
        frames = [
            self.pinged_once(indexed_event("content_block_start", index, content_block=use)),
            *(
                indexed_event("content_block_delta", index, delta={"type": "input_json_delta", "partial_json": piece})
                for piece in tool.input_deltas
            ),
            indexed_event("content_block_stop", index),
        ]
        if tool.result is not None:
            result = hosted_result_block(self.meta, tool, use["id"])
            frames += [
                indexed_event("content_block_start", index + 1, content_block=result),
                indexed_event("content_block_stop", index + 1),
            ]
        return b"".join(frames)

    def compacted(self, compacted: p.Compacted) -> bytes:
        """A `compaction` block that starts with `content: null`, filled by one `compaction_delta`
        (a compaction_delta's content is the whole summary: the beta helper sets it, not adds to it)."""
        index = compacted.index - self.index_shift
        delta = {"type": "compaction_delta", "content": compacted.text}
        return b"".join(
            [
                self.pinged_once(
                    indexed_event("content_block_start", index, content_block={"type": "compaction", "content": None})
                ),
                indexed_event("content_block_delta", index, delta=delta),
                indexed_event("content_block_stop", index),
            ]
        )


# ---------------------------------------------------------------- the whole message


def tool_input(arguments: str) -> Any:
    """A tool call's arguments as an object; {} when the token limit cut the JSON short."""
    try:
        return json.loads(arguments) if arguments else {}
    except ValueError:
        return {}


def content_block(meta: Meta, block: p.Block) -> dict:
    if block.kind == "custom_tool_call":
        return tool_use_block(meta, block.call_id, block.name, {"input": block.text})
    if block.citations:
        return {
            **text_block(),
            "text": block.text,
            "citations": [web_search_citation(meta, c) for c in block.citations],
        }
    if block.kind == "reasoning":
        return {"type": "thinking", "thinking": block.text, "signature": signature(meta, block.signature)}
    if block.kind == "tool_call":
        return tool_use_block(meta, block.call_id, block.name, tool_input(block.text), block.caller)
    if block.kind == "redacted_thinking":
        return {"type": "redacted_thinking", "data": redacted_data(meta, block.data)}
    return {"type": "text", "text": block.text}


def complete(meta: Meta, request: ParsedRequest, outcome: p.Outcome) -> dict:
    """The non-streaming message object for a stream that finished.

    Ids and signatures are drawn from the rng in the stream's order, so one seed gives the
    same ones streamed or not.
    """
    finish = cast(p.Finish, outcome.ending)
    msg_id = message_id(meta)
    options = request.options
    if finish.hosted is not None:
        message = hosted_message(meta, msg_id, outcome, finish, "cache_1h" in options)
    else:
        content = [content_block(meta, block) for block in outcome.blocks]
        message = message_object(meta, msg_id, content, finish, final_usage(finish.usage, "cache_1h" in options))
    if "context_management" in options:
        message["context_management"] = NO_EDITS
    return message


# ---------------------------------------------------------------- hosted tools and compaction

HOSTED_TOOLS = ("web_search", "web_fetch", "code_execution", "mcp")  # the server tools Messages has
RESULT_TYPES = {
    "web_search": "web_search_tool_result",
    "web_fetch": "web_fetch_tool_result",
    "code_execution": "code_execution_tool_result",
}
ENCRYPTED_RESULT_BYTES = 96
CONTAINER_LIFETIME = 3600  # seconds from the answer a code execution container lasts, as `expires_at` says


def indexed_event(kind: str, index: int, **fields: Any) -> bytes:
    return event_frame(kind, {"type": kind, "index": index, **fields})


def hosted_use_block(meta: Meta, tool: sc.ServerTool, tool_input: dict) -> dict:
    """The call: an MCP connector's `mcp_tool_use`, or a `server_tool_use`."""
    if tool.name == "mcp":
        return {
            "type": "mcp_tool_use",
            "id": tool.call_id or meta.new_id("mcptoolu_01", 22),
            "name": tool.tool,
            "server_name": tool.server,
            "input": tool_input,
        }
    return {
        "type": "server_tool_use",
        "id": tool.call_id or meta.new_id("srvtoolu_01", 22),
        "name": tool.name,
        "input": tool_input,
    }


def hosted_result_block(meta: Meta, tool: sc.ServerTool, use_id: str) -> dict:
    result = json.loads(cast(str, tool.result))
    if tool.name == "mcp":
        content: Any = [{"type": "text", "text": result}]
        return {"type": "mcp_tool_result", "tool_use_id": use_id, "is_error": False, "content": content}
    if tool.name == "web_search":
        content = [
            {
                "type": "web_search_result",
                "url": page["url"],
                "title": page.get("title", page["url"]),
                "encrypted_content": meta.random_base64(ENCRYPTED_RESULT_BYTES),
                "page_age": page.get("page_age"),
            }
            for page in result
        ]
    elif tool.name == "web_fetch":
        content = {
            "type": "web_fetch_result",
            "url": result.get("url", ""),
            "retrieved_at": iso_time(meta.created),
            "content": {
                "type": "document",
                "source": {"type": "text", "media_type": "text/plain", "data": result.get("content", "")},
                "title": result.get("title"),
            },
        }
    else:
        content = {
            "type": "code_execution_result",
            "stdout": result.get("stdout", ""),
            "stderr": result.get("stderr", ""),
            "return_code": result.get("return_code", 0),
            "content": [],
        }
    return {"type": RESULT_TYPES[tool.name], "tool_use_id": use_id, "content": content}


def iso_time(seconds: int) -> str:
    """A time in UTC, as Anthropic writes one. Any year will do: a kept rendering's marker
    stands for the answer's time while it is made (and, as this does not fill in, it is not kept)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def hosted_blocks(meta: Meta, block: p.Block) -> list[dict]:
    """The blocks of a hosted call or a compaction, as the whole message holds them."""
    whole = block.whole
    if type(whole) is p.Compacted:
        return [{"type": "compaction", "content": whole.text}]
    tool = cast(p.HostedCall, whole).tool
    if tool.name not in HOSTED_TOOLS:
        return []
    use = hosted_use_block(meta, tool, cast(dict, tool_input(tool.input)))
    return [use] if tool.result is None else [use, hosted_result_block(meta, tool, use["id"])]


def hosted_message(meta: Meta, msg_id: str, outcome: p.Outcome, finish: p.Finish, one_hour: bool) -> dict:
    """The message of an answer with hosted calls or compactions."""
    content: list[dict] = []
    for block in outcome.blocks:
        content += [content_block(meta, block)] if block.whole is None else hosted_blocks(meta, block)
    message = message_object(meta, msg_id, content, finish, final_usage(finish.usage, one_hour))
    container: dict = {}
    with_hosted_usage(meta, container, message["usage"], finish)
    message.update(container)
    return message


def with_hosted_usage(meta: Meta, delta: dict, usage: dict, finish: p.Finish) -> None:
    """What hosted tools add to the end of a message: the usage's `server_tool_use` counts
    (after a search or a fetch), its `iterations` (after a compaction: each compaction's, then
    the message's own), and the code execution `container`."""
    hosted = cast(p.HostedUsage, finish.hosted)
    if hosted.web_search_requests or hosted.web_fetch_requests:
        usage["server_tool_use"] = {
            "web_search_requests": hosted.web_search_requests,
            "web_fetch_requests": hosted.web_fetch_requests,
        }
    if hosted.compaction_tokens:
        tokens = finish.usage
        usage["iterations"] = [
            iteration("compaction", tokens.input_tokens, output) for output in hosted.compaction_tokens
        ] + [iteration("message", tokens.input_tokens, tokens.output_tokens)]
    if hosted.ran_code:
        delta["container"] = {
            "id": meta.new_id("container_011C", 20),
            "expires_at": iso_time(meta.created + CONTAINER_LIFETIME),
        }


def iteration(kind: str, input_tokens: int, output_tokens: int) -> dict:
    return {
        "type": kind,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
