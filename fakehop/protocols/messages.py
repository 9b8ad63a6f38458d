"""Anthropic Messages: `POST /v1/messages`.

Stream: `event: <type>` + `data: <json>` frames, no terminator. `message_start` (empty
`content`, output_tokens 1), then per block `content_block_start` / `content_block_delta`s /
`content_block_stop` with a `ping` after the first block's start, then `message_delta`
(stop_reason, cumulative usage) and `message_stop`. Reasoning is a `thinking` block that
ends with one `signature_delta`; tool calls are `tool_use` blocks fed by `input_json_delta`s.
A `fail` is one `event: error`, after which the stream simply ends.
"""

from __future__ import annotations

import json
from typing import Any

from .. import player as p
from .common import (
    EXAMPLE_TOOL_CALLS,
    StreamEncoderBase,
    FAIL_STATUS,
    BadRequest,
    Conversation,
    History,
    Meta,
    ParsedRequest,
    Template,
    ToolResult,
    anthropic_error_body,
    content_text,
    event_frame,
    example_call_id,
    tool_names,
    typed_fields,
)
from ..player import PlayRequest, estimate_tokens

NAME = "messages"
PATH = "/v1/messages"
EXAMPLE_REQUEST = {
    "model": "claude-sonnet-5",
    "max_tokens": 1024,
    "messages": [{"role": "user", "content": "Hello"}],
    "stream": True,
}


def example_request(turn: int = 1) -> dict:
    """EXAMPLE_REQUEST as an agent sends it at `turn`: after the question, each earlier turn is
    an assistant message with a `tool_use` block for each of the EXAMPLE_TOOL_CALLS and a user
    message with a `tool_result` block for each result."""
    messages = list(EXAMPLE_REQUEST["messages"])
    for earlier in range(1, turn):
        ids = [example_call_id("toolu_01", earlier, number) for number in range(len(EXAMPLE_TOOL_CALLS))]
        uses = [{"type": "tool_use", "id": call_id, "name": name, "input": json.loads(arguments)}
                for call_id, (name, arguments, _) in zip(ids, EXAMPLE_TOOL_CALLS)]
        results = [{"type": "tool_result", "tool_use_id": call_id, "content": result} for call_id, (_, _, result) in zip(ids, EXAMPLE_TOOL_CALLS)]
        messages += [{"role": "assistant", "content": uses}, {"role": "user", "content": results}]
    return {**EXAMPLE_REQUEST, "messages": messages}


STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "content_filter": "refusal"}
FAIL_TYPES = {
    "rate_limit": "rate_limit_error",
    "server_error": "api_error",
    "invalid_prompt": "invalid_request_error",
    "overloaded": "overloaded_error",
    "interrupted": "api_error",
}
FAIL_STATUSES = {**FAIL_STATUS, "overloaded": 529}
SIGNATURE_BYTES = 96
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
    return BadRequest(f"{where}.content: Input should be a valid string or a list of content blocks", param=f"{where}.content")


def system_text(system: Any) -> str:
    """The text of `system`: a string, or a list of text blocks."""
    if system is None or isinstance(system, str):
        return system or ""
    if isinstance(system, list) and all(isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str) for b in system):
        return "".join(block["text"] for block in system)
    raise BadRequest("system: Input should be a valid string or a list of text blocks", param="system")


# The fields parse reads, as typed_fields takes them; `thinking` and `tool_choice` are only
# checked. A missing `max_tokens` is one of the conversation checks (see parse).
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
    model, max_tokens, messages, stream, _, tools, _ = typed_fields(body, FIELDS, checked_field)
    if max_tokens is not None and max_tokens < 1:
        raise BadRequest("max_tokens: Input should be greater than or equal to 1", param="max_tokens")
    if not messages:
        raise BadRequest("messages: at least one message is required", param="messages")
    chars, prompt, history = message_facts(messages)
    system = system_text(body.get("system"))
    play = PlayRequest(estimate_tokens(len(system) + chars) + 3 * len(messages), max_tokens)
    if history is None and max_tokens is not None and not (system or tools):
        return ParsedRequest(model, bool(stream), prompt, play)  # by position, as in chat.parse
    return ParsedRequest(model, bool(stream), prompt, play, {}, "", conversation_of(history, tools, system, max_tokens))


def message_facts(messages: list[dict]) -> tuple[int, str, MessagesHistory | None]:
    """How many characters of text the messages hold, for the input token estimate; the last
    user-authored text, for `match`; and, once a message other than a user's plain string
    comes, the MessagesHistory of the rest. Each message must have a role and content of the
    right types. One plain loop: this runs on every request."""
    chars = 0
    prompt = ""
    history = None
    for number, message in enumerate(messages):
        if type(message) is not dict or message.get("role") not in ROLES or type(message.get("content")) not in (str, list):
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


def conversation_of(history: MessagesHistory | None, tools: list | None, system: str, max_tokens: int | None) -> Conversation:
    history = history or History()
    if max_tokens is None:  # a field the real API requires, refused before what the messages hold
        history.problem = BadRequest("max_tokens: Field required", param="max_tokens")
    return history.conversation(tool_names(tools), system)


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
        self.answered(number, [call_id for _, call_id, _ in results])
        for index, call_id, _ in results:
            if call_id not in uses:
                self.refuse(f"messages.{number}.content.{index}: unexpected `tool_use_id` found in `tool_result` blocks: {call_id}. "
                            "Each `tool_result` block must have a corresponding `tool_use` block in the previous message.", f"messages.{number}.content.{index}")
        self.results = [ToolResult(str(call_id), uses.get(call_id), text) for _, call_id, text in results]
        self.uses = {}

    def answered(self, number: int, call_ids) -> None:
        """The message at `number` must answer every tool_use of the assistant message just before it."""
        if self.asked_at != number - 1 or not self.uses:
            return
        missing = [call_id for call_id in self.uses if call_id not in call_ids]
        if missing:
            self.refuse(f"messages.{self.asked_at}: `tool_use` ids were found without `tool_result` blocks immediately after: {', '.join(missing)}. "
                        "Each `tool_use` block must have a corresponding `tool_result` block in the next message.", f"messages.{self.asked_at}")


# ---------------------------------------------------------------- errors


def error_body(status: int, message: str, request_id: str | None = None, param: str | None = None, code: str | None = None) -> dict:
    """Anthropic's error body; `param` and `code` have no place in it."""
    return anthropic_error_body(status, message, request_id)


def failure_response(kind: str, message: str, request_id: str | None = None) -> tuple[int, dict]:
    """Status and body of a non-streamed `fail` (overloaded is Anthropic's 529)."""
    status = FAIL_STATUSES[kind]
    return status, anthropic_error_body(status, message, request_id, FAIL_TYPES[kind])


# ---------------------------------------------------------------- shared by stream and whole


def message_id(meta: Meta) -> str:
    return meta.new_id("msg_01", 22)


def tool_use_id(meta: Meta, call_id: str | None) -> str:
    return call_id or meta.new_id("toolu_01", 22)


def signature(meta: Meta, given: str | None = None) -> str:
    """A thinking block's signature: the scenario's own, or opaque base64, as the real one is,
    drawn from the meta's rng."""
    return given or meta.random_base64(SIGNATURE_BYTES)


def usage_object(input_tokens: int, output_tokens: int) -> dict:
    return {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }


def message_object(meta: Meta, msg_id: str, content: list, stop_reason: str | None, usage: dict) -> dict:
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "content": content,
        "model": meta.model,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage,
    }


# ---------------------------------------------------------------- the stream


class StreamEncoder(StreamEncoderBase):
    """Turns happenings into Anthropic Messages SSE bytes, one answer's worth."""

    def __init__(self, meta: Meta, request: ParsedRequest):
        self.meta = meta
        self.message_id = message_id(meta)
        self.block_kind: str | None = None
        self.block_index = 0
        self.block_signature: str | None = None
        self.delta_template: Template | None = None
        self.pinged = False

    def start(self, start: p.Start) -> bytes:
        message = message_object(self.meta, self.message_id, [], None, usage_object(start.input_tokens, 1))
        return event_frame("message_start", {"type": "message_start", "message": message})

    def block_start(self, start: p.BlockStart) -> bytes:
        self.block_kind, self.block_index, self.block_signature = start.kind, start.index, start.signature
        if start.kind == "reasoning":
            block, delta = {"type": "thinking", "thinking": "", "signature": ""}, {"type": "thinking_delta", "thinking": Template.SLOT}
        elif start.kind == "tool_call":
            block = {"type": "tool_use", "id": tool_use_id(self.meta, start.call_id), "name": start.name, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": Template.SLOT}
        else:
            block, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": Template.SLOT}
        self.delta_template = Template(self.block_event("content_block_delta", delta=delta))
        frame = self.block_event("content_block_start", content_block=block)
        if self.pinged:
            return frame
        self.pinged = True
        return frame + PING_FRAME

    def block_event(self, kind: str, **fields: Any) -> bytes:
        return event_frame(kind, {"type": kind, "index": self.block_index, **fields})

    def delta(self, delta: p.Delta) -> bytes:
        return self.delta_template.fill(delta.text)

    def block_end(self, end: p.BlockEnd) -> bytes:
        stop = self.block_event("content_block_stop")
        if self.block_kind != "reasoning":
            return stop
        return self.block_event("content_block_delta", delta={"type": "signature_delta", "signature": signature(self.meta, self.block_signature)}) + stop

    def failure(self, failure: p.Failure) -> bytes:
        return event_frame("error", {"type": "error", "error": {"type": FAIL_TYPES[failure.kind], "message": failure.message}})

    def finish(self, finish: p.Finish) -> bytes:
        usage = finish.usage
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": STOP_REASONS[finish.reason], "stop_sequence": None},
            "usage": {
                "input_tokens": usage.input_tokens,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
                "output_tokens": usage.output_tokens,
            },
        }
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
        return {"type": "tool_use", "id": tool_use_id(meta, block.call_id), "name": block.name, "input": tool_input(block.text)}
    return {"type": "text", "text": block.text}


def complete(meta: Meta, request: ParsedRequest, outcome: p.Outcome) -> dict:
    """The non-streaming message object for a stream that finished.

    Ids and signatures are drawn from the rng in the stream's order, so one seed gives the
    same ones streamed or not.
    """
    finish: p.Finish = outcome.ending
    msg_id = message_id(meta)
    content = [content_block(meta, block) for block in outcome.blocks]
    usage = usage_object(finish.usage.input_tokens, finish.usage.output_tokens)
    return message_object(meta, msg_id, content, STOP_REASONS[finish.reason], usage)
