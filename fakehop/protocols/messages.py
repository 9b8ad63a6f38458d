"""Anthropic Messages: `POST /v1/messages`.

Stream: `event: <type>` + `data: <json>` frames, no terminator. `message_start` (empty
`content`, output_tokens 1), then per block `content_block_start` / `content_block_delta`s /
`content_block_stop` with a `ping` after the first block's start, then `message_delta`
(stop_reason, cumulative usage) and `message_stop`. Reasoning is a `thinking` block that
ends with one `signature_delta` (the player shows it only to requests that enable `thinking`,
and without its text to `display: omitted`); a redacted_thinking step is a
`redacted_thinking` block with its `data` and no deltas; tool calls are `tool_use` blocks fed
by `input_json_delta`s. A refusal's `stop_details` is Anthropic's RefusalStopDetails. A `fail`
is one `event: error`, after which the stream simply ends.
"""

from __future__ import annotations

import json
from typing import Any, cast

from ..play import player as p
from ..play.player import PlayRequest, estimate_tokens
from .common import (
    ANTHROPIC_REQUEST_ID_HEADER,
    EXAMPLE_TOOL_CALLS,
    FAIL_STATUS,
    BadRequest,
    Conversation,
    History,
    Meta,
    ParsedRequest,
    StreamEncoderBase,
    Template,
    ToolResult,
    anthropic_error_body,
    content_text,
    event_frame,
    example_call_id,
    required_call,
    tool_names,
    typed_fields,
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
}
FAIL_TYPES = {
    "rate_limit": "rate_limit_error",
    "server_error": "api_error",
    "invalid_prompt": "invalid_request_error",
    "overloaded": "overloaded_error",
    "interrupted": "api_error",
}
FAIL_STATUSES = {**FAIL_STATUS, "overloaded": 529}
SIGNATURE_BYTES = 96
REDACTED_DATA_BYTES = 192
DIRECT_CALLER = {"type": "direct"}  # who called a tool: the model itself
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


ROLES = ("user", "assistant")


def message_error(where: str, message: Any) -> BadRequest:
    """What is wrong with a message that message_facts refused."""
    if not isinstance(message, dict):
        return BadRequest(f"{where}: Input should be a valid dictionary", param=where)
    if message.get("role") not in ROLES:
        return BadRequest(f"{where}.role: Input should be 'user' or 'assistant'", param=f"{where}.role")
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


def parse(body: dict) -> ParsedRequest:
    model, max_tokens, messages, stream, thinking, tools, tool_choice = typed_fields(body, FIELDS, checked_field)
    if max_tokens is not None and max_tokens < 1:
        raise BadRequest("max_tokens: Input should be greater than or equal to 1", param="max_tokens")
    if not messages:
        raise BadRequest("messages: at least one message is required", param="messages")
    chars, prompt, history = message_facts(messages)
    system = system_text(body.get("system"))
    tool_calls = tool_choice is None or tool_choice.get("type") != "none"
    play = PlayRequest(
        estimate_tokens(len(system) + chars) + 3 * len(messages), max_tokens, thinking_shown(thinking), tool_calls
    )
    asks = tool_choice is not None or "context_management" in body or "cache_control" in body
    if history is None and max_tokens is not None and not (system or tools or asks):
        return ParsedRequest(model, bool(stream), prompt, play)  # by position, as in chat.parse
    conversation = conversation_of(history, tools, system, max_tokens)
    options = asked_options(body, tool_choice, messages if history is not None else ())
    if options:  # its own variant: the kept renderings of requests that ask for none of them are not its
        return ParsedRequest(model, bool(stream), prompt, play, options, repr(sorted(options.items())), conversation)
    return ParsedRequest(model, bool(stream), prompt, play, {}, "", conversation)


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
    return gathered.conversation(tool_names(tools), system)


class MessagesHistory(History):
    """The conversation in Anthropic's messages: an assistant message is a turn; the user
    message after one with `tool_use` blocks answers each with a `tool_result`, as the real
    API checks (see PROTOCOLS.md)."""

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
RETRY = (("x-should-retry", "true"),)
NO_RETRY = (("x-should-retry", "false"),)


def error_headers(status: int) -> tuple[tuple[str, str], ...]:
    """`x-should-retry`, as Anthropic sends it on every error: true for 429 and 5xx (529 too), false otherwise."""
    return RETRY if status == 429 or status >= 500 else NO_RETRY


def failure_type(failure: p.Failure) -> str:
    return failure.error_type or FAIL_TYPES[failure.kind]


def failure_response(failure: p.Failure, request_id: str | None = None) -> tuple[int, dict]:
    """Status and body of a non-streamed `fail` (overloaded is Anthropic's 529)."""
    status = FAIL_STATUSES[failure.kind]
    return status, anthropic_error_body(status, failure.message, request_id, failure_type(failure))


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


def tool_use_block(meta: Meta, call_id: str | None, name: str | None, tool_input: dict) -> dict:
    return {
        "type": "tool_use",
        "id": tool_use_id(meta, call_id),
        "name": name,
        "input": tool_input,
        "caller": DIRECT_CALLER,
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

    def start(self, start: p.Start) -> bytes:
        message = message_object(self.meta, self.message_id, [], None, start_usage(start, "cache_1h" in self.options))
        return event_frame("message_start", {"type": "message_start", "message": message})

    def block_start(self, start: p.BlockStart) -> bytes:
        self.block_kind, self.block_index, self.block_signature = start.kind, start.index, start.signature
        if start.kind == "reasoning":
            block, delta = (
                {"type": "thinking", "thinking": "", "signature": ""},
                {"type": "thinking_delta", "thinking": Template.SLOT},
            )
        elif start.kind == "tool_call":
            block = tool_use_block(self.meta, start.call_id, start.name, {})
            delta = {"type": "input_json_delta", "partial_json": Template.SLOT}
        elif start.kind == "redacted_thinking":
            block, delta = (
                {"type": "redacted_thinking", "data": redacted_data(self.meta, start.data)},
                None,
            )  # a block with no deltas
        else:
            block, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": Template.SLOT}
        self.delta_template = None if delta is None else Template(self.block_event("content_block_delta", delta=delta))
        frame = self.block_event("content_block_start", content_block=block)
        if self.pinged:
            return frame
        self.pinged = True
        return frame + PING_FRAME

    def block_event(self, kind: str, **fields: Any) -> bytes:
        return event_frame(kind, {"type": kind, "index": self.block_index, **fields})

    def delta(self, delta: p.Delta) -> bytes:
        return self.delta_template.fill(delta.text)  # type: ignore[union-attr]  # only blocks with deltas get one

    def block_end(self, end: p.BlockEnd) -> bytes:
        if end.cut and self.block_kind == "tool_call":
            return b""  # the real API leaves a tool_use block the token limit cut open
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

    def failure(self, failure: p.Failure) -> bytes:
        return event_frame(
            "error", {"type": "error", "error": {"type": failure_type(failure), "message": failure.message}}
        )

    def finish(self, finish: p.Finish) -> bytes:
        usage = finish.usage
        delta = {
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
        if "context_management" in self.options:
            delta["context_management"] = NO_EDITS
        return event_frame("message_delta", delta) + MESSAGE_STOP_FRAME


# ---------------------------------------------------------------- the whole message


def tool_input(arguments: str) -> Any:
    """A tool call's arguments as an object; {} when the token limit cut the JSON short."""
    try:
        return json.loads(arguments) if arguments else {}
    except ValueError:
        return {}


def content_block(meta: Meta, block: p.Block) -> dict:
    if block.kind == "reasoning":
        return {"type": "thinking", "thinking": block.text, "signature": signature(meta, block.signature)}
    if block.kind == "tool_call":
        return tool_use_block(meta, block.call_id, block.name, tool_input(block.text))
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
    content = [content_block(meta, block) for block in outcome.blocks]
    options = request.options
    message = message_object(meta, msg_id, content, finish, final_usage(finish.usage, "cache_1h" in options))
    if "context_management" in options:
        message["context_management"] = NO_EDITS
    return message
