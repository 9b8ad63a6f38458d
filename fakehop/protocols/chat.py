"""OpenAI Chat Completions: `POST /v1/chat/completions`.

Stream: `data: <chat.completion.chunk>` frames with no `event:` line, ended by
`data: [DONE]`; the role goes out once, with the first output; tool calls carry their id
and name once, then argument fragments; usage comes in a last chunk with empty `choices`
only when the request set `stream_options.include_usage`. Reasoning has no place in this
protocol and is left out.
"""

from __future__ import annotations

from typing import Any

from .. import player as p
from .common import (
    StreamEncoderBase,
    BadRequest,
    Meta,
    ParsedRequest,
    Template,
    at_least_one,
    data_frame,
    dumps,
    openai_error_body,
    openai_fail_error,
    openai_failure_response,
    message_facts,
    typed_fields,
)
from ..player import PlayRequest, estimate_tokens
from ..scenario import FINISH_REASONS

NAME = "chat"
PATH = "/v1/chat/completions"
DONE_FRAME = b"data: [DONE]\n\n"
EXAMPLE_REQUEST = {
    "model": "gpt-5.6-sol",
    "messages": [{"role": "user", "content": "Hello"}],
    "stream": True,
    "stream_options": {"include_usage": True},
}
SYSTEM_FINGERPRINT = "fp_fakehop"


def choices_json(delta: dict, finish_reason: str | None = None) -> str:
    """The `choices` of a chunk with its one choice."""
    return dumps([{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}])


# The choices that every answer writes alike, encoded once.
ROLE_CHOICES = choices_json({"role": "assistant", "content": "", "refusal": None})
TEXT_CHOICES = choices_json({"content": Template.SLOT})
FINISH_CHOICES = {reason: choices_json({}, reason) for reason in FINISH_REASONS}


# The fields parse reads, as typed_fields takes them.
FIELDS = (
    ("model", (str,), "a string", True),
    ("messages", (list,), "an array", True),
    ("stream", (bool,), "a boolean", False),
    ("stream_options", (dict,), "an object", False),
    ("max_completion_tokens", (int,), "an integer", False),
    ("max_tokens", (int,), "an integer", False),
)


def parse(body: dict) -> ParsedRequest:
    model, messages, stream, stream_options, max_completion_tokens, max_tokens = typed_fields(body, FIELDS)
    if not messages:
        raise BadRequest("Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.", param="messages")
    for number, message in enumerate(messages):
        if type(message) is not dict or type(message.get("role")) is not str:
            raise BadRequest(f"Invalid value for 'messages[{number}]': expected an object with a 'role'.", param=f"messages[{number}]")
    include_usage = stream_options.get("include_usage", False) if stream_options else False
    if type(include_usage) is not bool:
        raise BadRequest("Invalid type for 'stream_options.include_usage': expected a boolean.", param="stream_options.include_usage")
    limit = at_least_one("max_completion_tokens", max_completion_tokens) or at_least_one("max_tokens", max_tokens)
    chars, prompt = message_facts(messages)
    play = PlayRequest(estimate_tokens(chars) + 3 * len(messages), limit)
    if include_usage:
        return ParsedRequest(model, bool(stream), prompt, play, INCLUDE_USAGE, "include_usage")  # by position: keywords cost more
    return ParsedRequest(model, bool(stream), prompt, play, NO_USAGE, "")


INCLUDE_USAGE = {"include_usage": True}  # the options of a parsed request: read, never changed
NO_USAGE = {"include_usage": False}


def usage_object(usage: p.TokenUsage) -> dict:
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


error_body = openai_error_body
failure_response = openai_failure_response


class StreamEncoder(StreamEncoderBase):
    """Turns happenings into Chat Completions SSE bytes, one answer's worth."""

    def __init__(self, meta: Meta, request: ParsedRequest):
        self.meta = meta
        self.include_usage = request.options.get("include_usage", False)
        self.chunk_id = meta.new_id("chatcmpl-")
        self.role_sent = False
        self.block_kind: str | None = None
        self.tool_index = -1
        # The chunks of one answer (all but the usage one) differ only in their choices.
        self.chunk_template = Template(data_frame(self.chunk(Template.SLOT)))
        self.text_template = Template(self.chunk_template.fill_json(TEXT_CHOICES))

    def chunk(self, choices: list, **extra: Any) -> dict:
        chunk = {
            "id": self.chunk_id,
            "object": "chat.completion.chunk",
            "created": self.meta.created,
            "model": self.meta.model,
            "service_tier": "default",
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": choices,
        }
        if self.include_usage:
            chunk["usage"] = None
        chunk.update(extra)
        return chunk

    def chunk_frame(self, delta: dict, finish_reason: str | None = None) -> bytes:
        return self.chunk_template.fill_json(choices_json(delta, finish_reason))

    def role_frame(self) -> bytes:
        """The chunk that opens a text answer: the role, with empty content."""
        self.role_sent = True
        return self.chunk_template.fill_json(ROLE_CHOICES)

    def role(self, delta: dict) -> dict:
        """`delta` with the role in front, the first time only."""
        if self.role_sent:
            return delta
        self.role_sent = True
        return {"role": "assistant", **delta}

    def block_start(self, start: p.BlockStart) -> bytes:
        self.block_kind = start.kind
        if start.kind == "text":
            return b"" if self.role_sent else self.role_frame()
        if start.kind == "tool_call":
            self.tool_index += 1
            call = {
                "index": self.tool_index,
                "id": start.call_id or self.meta.new_id("call_"),
                "type": "function",
                "function": {"name": start.name, "arguments": ""},
            }
            delta = {"tool_calls": [call]} if self.role_sent else self.role({"content": None, "tool_calls": [call]})
            return self.chunk_frame(delta)
        return b""

    def delta(self, delta: p.Delta) -> bytes:
        if self.block_kind == "text":
            return self.text_template.fill(delta.text)
        if self.block_kind == "tool_call":
            return self.chunk_frame({"tool_calls": [{"index": self.tool_index, "function": {"arguments": delta.text}}]})
        return b""

    def failure(self, failure: p.Failure) -> bytes:
        return data_frame({"error": openai_fail_error(failure.kind, failure.message)})

    def finish(self, finish: p.Finish) -> bytes:
        frames = []
        if not self.role_sent:
            frames.append(self.role_frame())
        frames.append(self.chunk_template.fill_json(FINISH_CHOICES[finish.reason]))
        if self.include_usage:
            frames.append(data_frame(self.chunk([], usage=usage_object(finish.usage))))
        frames.append(DONE_FRAME)
        return b"".join(frames)


def complete(meta: Meta, request: ParsedRequest, outcome: p.Outcome) -> dict:
    """The non-streaming `chat.completion` object for a stream that finished."""
    finish: p.Finish = outcome.ending
    text = "".join(b.text for b in outcome.blocks if b.kind == "text")
    calls = [
        {"id": b.call_id or meta.new_id("call_"), "type": "function", "function": {"name": b.name, "arguments": b.text}}
        for b in outcome.blocks
        if b.kind == "tool_call"
    ]
    message: dict[str, Any] = {
        "role": "assistant",
        "content": text if text or not calls else None,
        "refusal": None,
        "annotations": [],
    }
    if calls:
        message["tool_calls"] = calls
    return {
        "id": meta.new_id("chatcmpl-"),
        "object": "chat.completion",
        "created": meta.created,
        "model": meta.model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish.reason}],
        "usage": usage_object(finish.usage),
        "service_tier": "default",
        "system_fingerprint": SYSTEM_FINGERPRINT,
    }
