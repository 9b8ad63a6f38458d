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
    FIRST_TURN,
    StreamEncoderBase,
    EXAMPLE_TOOL_CALLS,
    BadRequest,
    Conversation,
    History,
    Meta,
    ParsedRequest,
    Template,
    ToolResult,
    at_least_one,
    content_text,
    data_frame,
    dumps,
    example_call_id,
    openai_error_body,
    openai_fail_error,
    openai_failure_response,
    require_type,
    tool_names,
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


def example_request(turn: int = 1) -> dict:
    """EXAMPLE_REQUEST as an agent sends it at `turn`: after the question, each earlier turn is
    an assistant message calling the EXAMPLE_TOOL_CALLS and a `tool` message for each result."""
    messages = list(EXAMPLE_REQUEST["messages"])
    for earlier in range(1, turn):
        ids = [example_call_id("call_", earlier, number) for number in range(len(EXAMPLE_TOOL_CALLS))]
        calls = [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
                 for call_id, (name, arguments, _) in zip(ids, EXAMPLE_TOOL_CALLS)]
        messages.append({"role": "assistant", "content": None, "tool_calls": calls})
        messages += [{"role": "tool", "tool_call_id": call_id, "content": result} for call_id, (_, _, result) in zip(ids, EXAMPLE_TOOL_CALLS)]
    return {**EXAMPLE_REQUEST, "messages": messages}


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
    tools = body.get("tools")  # read apart from FIELDS: most requests send none, and a field there costs every request
    if tools is not None:
        require_type(body, "tools", (list,), "an array")
    if not messages:
        raise BadRequest("Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.", param="messages")
    include_usage = stream_options.get("include_usage", False) if stream_options else False
    if type(include_usage) is not bool:
        raise BadRequest("Invalid type for 'stream_options.include_usage': expected a boolean.", param="stream_options.include_usage")
    limit = at_least_one("max_completion_tokens", max_completion_tokens) or at_least_one("max_tokens", max_tokens)
    chars, prompt, history = message_facts(messages)
    play = PlayRequest(estimate_tokens(chars) + 3 * len(messages), limit)
    conversation = FIRST_TURN if history is None and not tools else conversation_of(history, tools)
    if include_usage:
        return ParsedRequest(model, bool(stream), prompt, play, INCLUDE_USAGE, "include_usage", conversation)  # by position: keywords cost more
    return ParsedRequest(model, bool(stream), prompt, play, NO_USAGE, "", conversation)


def message_facts(messages: list) -> tuple[int, str, ChatHistory | None]:
    """How many characters of text the messages hold, for the input token estimate; the text
    of the last user message, for `match` ("" without one); and, once a message of another
    role comes, the ChatHistory of the rest. Each message must be an object with a role. One
    plain loop: this runs on every request."""
    chars = 0
    prompt = ""
    history = None
    for number, message in enumerate(messages):
        role = message.get("role") if type(message) is dict else None
        if type(role) is not str:
            raise BadRequest(f"Invalid value for 'messages[{number}]': expected an object with a 'role'.", param=f"messages[{number}]")
        content = message.get("content")
        text = content if type(content) is str else content_text(content)
        chars += len(text)
        if role == "user":
            prompt = text
            if history is not None:
                history.other(number)
        else:
            if history is None:
                history = ChatHistory()
            history.add(number, role, message, text)
    if history is not None:
        history.end(len(messages))
    return chars, prompt, history


def conversation_of(history: ChatHistory | None, tools: list | None) -> Conversation:
    names = tool_names(tools)
    return Conversation(tools=names) if history is None else history.conversation(names)


class ChatHistory(History):
    """The conversation in Chat Completions' messages: an assistant message is a turn; `tool`
    messages answer the `tool_calls` of the assistant message before them, as the real API
    checks (see PROTOCOLS.md)."""

    def __init__(self) -> None:
        super().__init__()
        self.asked_at: int | None = None  # the assistant message whose tool calls the next messages answer
        self.calls: dict[str, str | None] = {}  # its calls: id -> tool name
        self.unanswered: set[str] = set()

    def add(self, number: int, role: str, message: dict, text: str) -> None:
        if role == "tool":
            self.tool_message(number, message, text)
            return
        self.other(number)
        if role == "assistant":
            self.turns += 1
            self.ask(number, message.get("tool_calls"))
        elif role in ("system", "developer"):
            self.system.append(text)

    def ask(self, number: int, tool_calls: Any) -> None:
        calls = {call["id"]: call_name(call) for call in tool_calls if type(call) is dict and type(call.get("id")) is str} if type(tool_calls) is list else {}
        if calls:
            self.asked_at, self.calls, self.unanswered = number, calls, set(calls)

    def tool_message(self, number: int, message: dict, text: str) -> None:
        call_id = message.get("tool_call_id")
        if self.asked_at is None:
            self.refuse("Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.", f"messages.[{number}].role")
        elif type(call_id) is not str:
            self.refuse(f"Missing required parameter: 'messages[{number}].tool_call_id'.", f"messages[{number}].tool_call_id")
        elif call_id not in self.calls:
            self.refuse(f"Invalid parameter: 'tool_call_id' of '{call_id}' not found in 'tool_calls' of previous message.", f"messages.[{number}].tool_call_id")
        self.unanswered.discard(call_id)
        self.results.append(ToolResult(str(call_id), self.calls.get(call_id), text))

    def other(self, number: int) -> None:
        """A message that is not a tool result: the results before it are not the last, and
        the tool calls they answer had to be answered by now."""
        self.results = []
        if self.asked_at is not None:
            self.check_answered()
            self.asked_at = None

    def end(self, count: int) -> None:
        """After the last message: tool calls answered in part are refused too; an assistant
        message with tool calls may end the request unanswered."""
        if self.asked_at is not None and self.asked_at < count - 1:
            self.check_answered()

    def check_answered(self) -> None:
        if self.unanswered:
            missing = ", ".join(call_id for call_id in self.calls if call_id in self.unanswered)
            self.refuse("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. "
                        f"The following tool_call_ids did not have response messages: {missing}", f"messages.[{self.asked_at}].role")


def call_name(call: dict) -> str | None:
    """The tool a `tool_calls` entry calls: its function's name (or a custom tool's)."""
    named = call.get(call.get("type") or "function")
    return named.get("name") if type(named) is dict and type(named.get("name")) is str else None


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
