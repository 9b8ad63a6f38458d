"""OpenAI Chat Completions: `POST /v1/chat/completions`.

Stream: `data: <chat.completion.chunk>` frames with no `event:` line, ended by
`data: [DONE]`; the role goes out once, with the first output; tool calls carry their id
and name once, then argument fragments (a custom tool's, its input's, under `custom`);
the text's citations are the message's `annotations`, in one chunk before the finish;
usage comes in a last chunk with empty `choices` only when the request set
`stream_options.include_usage`. Every chunk ends with an
`obfuscation` unless `stream_options.include_obfuscation` is false, and `system_fingerprint`
is null for the gpt-5 family's answers. Reasoning has no place in this protocol: the player
shows none to it, and its time passes as silence, with keepalives.
"""

from __future__ import annotations

from typing import Any, cast

from ..play import player as p
from ..play.player import PlayRequest, estimate_tokens
from ..scenario.model import FINISH_REASONS, Citation
from .common import (
    EXAMPLE_TOOL_CALLS,
    FIRST_TURN,
    OPENAI_REQUEST_ID_HEADER,
    OPTIONAL_BOOL,
    OPTIONAL_OBJECT,
    BadRequest,
    Conversation,
    History,
    Meta,
    ObfuscatedTemplate,
    Obfuscation,
    ParsedRequest,
    StreamEncoderBase,
    Template,
    ToolResult,
    at_least_one,
    content_text,
    data_frame,
    dumps,
    example_call_id,
    json_output_asked,
    lone_question,
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

NAME = "chat"
PATH = "/v1/chat/completions"
DONE_FRAME = b"data: [DONE]\n\n"
EXAMPLE_REQUEST: dict[str, Any] = {
    "model": "gpt-5.6-sol",
    "messages": [{"role": "user", "content": "Hello"}],
    "stream": True,
    "stream_options": {"include_usage": True},
}
ID_LENGTH = 29  # characters after `chatcmpl-`, as the real ids have
OBFUSCATION_OFFSET = 10  # a chunk's text and its obfuscation come to 10 characters, or 26, 42, …, as in the real chunks


def example_request(turn: int = 1) -> dict:
    """EXAMPLE_REQUEST as an agent sends it at `turn`: after the question, each earlier turn is
    an assistant message calling the EXAMPLE_TOOL_CALLS and a `tool` message for each result."""
    messages = list(EXAMPLE_REQUEST["messages"])
    for earlier in range(1, turn):
        ids = [example_call_id("call_", earlier, number) for number in range(len(EXAMPLE_TOOL_CALLS))]
        calls = [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            for call_id, (name, arguments, _) in zip(ids, EXAMPLE_TOOL_CALLS)
        ]
        messages.append({"role": "assistant", "content": None, "tool_calls": calls})
        messages += [
            {"role": "tool", "tool_call_id": call_id, "content": result}
            for call_id, (_, _, result) in zip(ids, EXAMPLE_TOOL_CALLS)
        ]
    return {**EXAMPLE_REQUEST, "messages": messages}


def choices_json(delta: dict, finish_reason: str | None = None, index: int = 0, logprobs: dict | None = None) -> str:
    """The `choices` of a chunk with its one choice."""
    return dumps([{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}])


ROLE_DELTA = {"role": "assistant", "content": "", "refusal": None}  # what opens an answer of text
REFUSAL_ROLE_DELTA = {"role": "assistant", "content": None, "refusal": ""}  # and of a refusal
DELTA_KEYS = {"text": "content", "refusal": "refusal"}  # where each kind's deltas go
# The choices of one-choice answers, which every answer writes alike, encoded once.
ROLE_CHOICES = choices_json(ROLE_DELTA)
REFUSAL_ROLE_CHOICES = choices_json(REFUSAL_ROLE_DELTA)
TEXT_CHOICES = {kind: choices_json({key: Template.SLOT}) for kind, key in DELTA_KEYS.items()}
# A stop sequence, and a refusal, end a chat answer as any stop does.
# Messages' finishes Chat has no word for: a paused turn has stopped; a full context window is a length stop.
HOSTED_FINISHES = {"pause_turn": "stop", "model_context_window_exceeded": "length"}
FINISH_REASON_NAMES = {
    **{reason: reason for reason in FINISH_REASONS},
    "stop_sequence": "stop",
    "refusal": "stop",
    **HOSTED_FINISHES,
}
FINISH_CHOICES = {reason: choices_json({}, name) for reason, name in FINISH_REASON_NAMES.items()}
CALL_KINDS = ("tool_call", "custom_tool_call")
CALL_FIELDS = {"function": ("function", "arguments"), "custom": ("custom", "input")}  # key: (type, field of its text)
MAX_CHOICES = 128
MAX_TOP_LOGPROBS = 20


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
    # Most requests send none of the UNUSUAL_FIELDS: their fields are tested inline, as
    # typed_fields tests them, and one question needs no message_facts (15k instructions against 26k).
    if not UNUSUAL_FIELDS.isdisjoint(body):
        return unusual_request(body)
    model = body.get("model")
    messages = body.get("messages")
    stream = body.get("stream")
    stream_options = body.get("stream_options")
    if not (
        type(model) is str
        and type(messages) is list
        and type(stream) in OPTIONAL_BOOL
        and type(stream_options) in OPTIONAL_OBJECT
    ):
        model, messages, stream, stream_options, *_ = typed_fields(body, FIELDS)  # raises BadRequest naming one
    if not messages:
        raise empty_messages()
    options, variant = USUAL_OPTIONS[stream_flags(stream_options)]
    prompt = lone_question(messages)
    if prompt is not None:
        chars, conversation = len(prompt), FIRST_TURN
    else:
        chars, prompt, history = message_facts(messages)
        conversation = FIRST_TURN if history is None else history.conversation(())
    play = new_tuple(PlayRequest, (estimate_tokens(chars) + 3 * len(messages), None, "never", True))
    return new_tuple(ParsedRequest, (model, stream is True, prompt, play, options, variant, conversation))


def unusual_request(body: dict) -> ParsedRequest:
    """The parsed request of one that sends any of the UNUSUAL_FIELDS."""
    model, messages, stream, stream_options, max_completion_tokens, max_tokens = typed_fields(body, FIELDS)
    tools = body.get("tools")
    if tools is not None:
        require_type(body, "tools", (list,), "an array")
    if not messages:
        raise empty_messages()
    include_usage, obfuscation = stream_flags(stream_options)
    limit = at_least_one("max_completion_tokens", max_completion_tokens) or at_least_one("max_tokens", max_tokens)
    chars, prompt, history = message_facts(messages)
    conversation = FIRST_TURN if history is None and not tools else conversation_of(history, tools)
    play = PlayRequest(estimate_tokens(chars) + 3 * len(messages), limit, "never")
    if ANSWER_FIELDS.isdisjoint(body):
        options, variant = USUAL_OPTIONS[include_usage, obfuscation]
        return ParsedRequest(model, bool(stream), prompt, play, options, variant, conversation)
    streamed = {"include_usage": include_usage, "obfuscation": obfuscation}
    return with_answer_fields(body, model, bool(stream), prompt, play, streamed, conversation)


def empty_messages() -> BadRequest:
    return BadRequest(
        "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.",
        param="messages",
    )


def stream_flags(stream_options: dict | None) -> tuple[bool, bool]:
    """The request's `stream_options.include_usage` and `include_obfuscation`; BadRequest when one is not a boolean."""
    if not stream_options:
        return False, True
    include_usage = stream_options.get("include_usage", False)
    obfuscation = stream_options.get("include_obfuscation", True)
    if type(include_usage) is not bool:
        raise not_boolean("include_usage")
    if type(obfuscation) is not bool:
        raise not_boolean("include_obfuscation")
    return include_usage, obfuscation


def not_boolean(key: str) -> BadRequest:
    return BadRequest(f"Invalid type for 'stream_options.{key}': expected a boolean.", param=f"stream_options.{key}")


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
            raise BadRequest(
                f"Invalid value for 'messages[{number}]': expected an object with a 'role'.",
                param=f"messages[{number}]",
            )
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
        calls = (
            {call["id"]: call_name(call) for call in tool_calls if type(call) is dict and type(call.get("id")) is str}
            if type(tool_calls) is list
            else {}
        )
        if calls:
            self.asked_at, self.calls, self.unanswered = number, calls, set(calls)

    def tool_message(self, number: int, message: dict, text: str) -> None:
        call_id: Any = message.get("tool_call_id")  # as the client sent it
        if self.asked_at is None:
            self.refuse(
                "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.",
                f"messages.[{number}].role",
            )
        elif type(call_id) is not str:
            self.refuse(
                f"Missing required parameter: 'messages[{number}].tool_call_id'.", f"messages[{number}].tool_call_id"
            )
        elif call_id not in self.calls:
            self.refuse(
                f"Invalid parameter: 'tool_call_id' of '{call_id}' not found in 'tool_calls' of previous message.",
                f"messages.[{number}].tool_call_id",
            )
        if type(call_id) is str:  # anything else was refused above, and may not even hash
            self.unanswered.discard(call_id)
            self.results.append(ToolResult(call_id, self.calls.get(call_id), text))
        else:
            self.results.append(ToolResult(str(call_id), None, text))

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
            self.refuse(
                "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. "
                f"The following tool_call_ids did not have response messages: {missing}",
                f"messages.[{self.asked_at}].role",
            )


def call_name(call: dict) -> str | None:
    """The tool a `tool_calls` entry calls: its function's name (or a custom tool's)."""
    kind = call.get("type") or "function"
    named = call.get(kind) if type(kind) is str else None
    return named.get("name") if type(named) is dict and type(named.get("name")) is str else None


# The fields of the few requests that ask for more than one choice, logprobs, a tool_choice or a service tier,
# as typed_fields takes them (read apart from FIELDS: a field there costs every request).
OPTION_FIELDS = (
    ("n", (int,), "an integer", False),
    ("logprobs", (bool,), "a boolean", False),
    ("top_logprobs", (int,), "an integer", False),
    ("tool_choice", (str, dict), "a string or an object", False),
    ("service_tier", (str,), "a string", False),
    ("response_format", (dict,), "an object", False),
)
ANSWER_FIELDS = frozenset(key for key, *_ in OPTION_FIELDS)
# The fields parse reads only when a request sends them.
UNUSUAL_FIELDS = frozenset(("max_completion_tokens", "max_tokens", "tools", *ANSWER_FIELDS))


def with_answer_fields(
    body: dict, model: str, stream: bool, prompt: str, play: PlayRequest, streamed: dict, conversation
) -> ParsedRequest:
    """The parsed request of one that sends `n`, `logprobs`, `tool_choice` or `response_format`:
    its options say how many choices and top_logprobs (None: no logprobs) and whether it asks
    for JSON output, and `tool_choice: "none"` leaves the scenario's tool calls out."""
    n, logprobs, top_logprobs, tool_choice, tier, response_format = typed_fields(body, OPTION_FIELDS)
    choices = 1 if n is None else in_range("n", n, MAX_CHOICES)
    top = in_range("top_logprobs", top_logprobs or 0, MAX_TOP_LOGPROBS, low=0) if logprobs else None
    options = {**streamed, "choices": choices, "top_logprobs": top}
    required = required_call(tool_choice)
    if required is not None:
        options["required_tool"] = required
    if tier is not None:
        options["service_tier"] = served_tier(tier)
    options.update(json_output_asked(response_format, "response_format"))
    play = play._replace(tool_calls=tool_choice != "none")
    return ParsedRequest(model, stream, prompt, play, options, repr(sorted(options.items())), conversation)


def in_range(key: str, value: int, high: int, low: int = 1) -> int:
    """`value` of the field `key`, when from `low` to `high`; BadRequest otherwise."""
    if value < low:
        raise BadRequest(
            f"Invalid '{key}': integer below minimum value. Expected a value >= {low}, but got {value} instead.",
            param=key,
        )
    if value > high:
        raise BadRequest(
            f"Invalid '{key}': integer above maximum value. Expected a value <= {high}, but got {value} instead.",
            param=key,
        )
    return value


# The options of a parsed request (read, never changed): the usage chunk, obfuscation, how many
# choices, and the number of top_logprobs asked for (None: no logprobs); with their variant, for
# the usual requests, by (include_usage, include_obfuscation).
USUAL_OPTIONS = {
    (usage, obfuscation): (
        {"include_usage": usage, "obfuscation": obfuscation, "choices": 1, "top_logprobs": None},
        ("include_usage" if usage else "") + ("" if obfuscation else " no_obfuscation"),
    )
    for usage in (True, False)
    for obfuscation in (True, False)
}


def usage_object(usage: p.TokenUsage, choices: int = 1) -> dict:
    """The usage of an answer of `choices` choices, each the scenario's output: the output counts are for all of them."""
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens * choices,
        "total_tokens": usage.input_tokens + usage.output_tokens * choices,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens, "audio_tokens": usage.input_audio_tokens},
        "completion_tokens_details": {
            "reasoning_tokens": usage.reasoning_tokens * choices,
            "audio_tokens": usage.output_audio_tokens * choices,
            "accepted_prediction_tokens": usage.accepted_prediction_tokens * choices,
            "rejected_prediction_tokens": usage.rejected_prediction_tokens * choices,
        },
    }


def content_logprobs(tokens: list[str], top: int | None) -> dict | None:
    """A choice's `logprobs` for these content deltas, one entry each; None when none were asked for."""
    return (
        None
        if top is None
        else {"content": [token_logprob(token, top, with_bytes=True) for token in tokens], "refusal": None}
    )


error_body = openai_error_body
failure_response = openai_failure_response
error_headers = no_error_headers
REQUEST_ID_HEADER = OPENAI_REQUEST_ID_HEADER
fresh_request_id = openai_request_id
HTTP_MESSAGES = COMMON_HTTP_MESSAGES


class StreamEncoder(StreamEncoderBase):
    """Turns happenings into Chat Completions SSE bytes, one answer's worth: with `n`, each
    happening once for every choice, by index."""

    def __init__(self, meta: Meta, request: ParsedRequest):
        self.meta = meta
        self.include_usage = request.options["include_usage"]
        self.choices = range(request.options["choices"])
        self.top_logprobs = request.options["top_logprobs"]
        self.service_tier = request.options.get("service_tier", "default")
        self.obfuscation = Obfuscation(OBFUSCATION_OFFSET) if request.options["obfuscation"] else None
        self.chunk_id = meta.new_id("chatcmpl-", ID_LENGTH)
        self.role_sent = False
        self.block_kind = ""  # the open block's
        self.tool_index = -1
        self.call_key = "function"  # of the open tool call's deltas: "function", or "custom" for a custom tool's
        self.annotations: list[dict] | None = None  # the text's url_citation annotations, once it has any
        # The chunks of one answer (all but the usage one) differ only in their choices (and obfuscation).
        self.chunk_template = self.template(data_frame(self.chunk(Template.SLOT, Obfuscation.MARK)))
        self.text_templates = {
            kind: self.template(self.chunk_template.unfilled(choices)) for kind, choices in TEXT_CHOICES.items()
        }
        self.plain = len(self.choices) == 1 and self.top_logprobs is None  # most answers: the templates above serve

    def template(self, frame: bytes) -> Template:
        return Template(frame) if self.obfuscation is None else ObfuscatedTemplate(frame, self.obfuscation)

    def chunk(self, choices: list | str, obfuscation: str, **extra: Any) -> dict:
        """A chunk; its `obfuscation` only when the request did not turn it off. `choices` is a
        template's slot for the chunk template."""
        chunk = {
            "id": self.chunk_id,
            "object": "chat.completion.chunk",
            "created": self.meta.created,
            "model": self.meta.model,
            "service_tier": self.service_tier,
            "system_fingerprint": self.meta.system_fingerprint,
            "choices": choices,
        }
        if self.include_usage:
            chunk["usage"] = None
        chunk.update(extra)
        if self.obfuscation is not None:
            chunk["obfuscation"] = obfuscation
        return chunk

    def chunk_frames(
        self, delta: dict, finish_reason: str | None = None, logprobs: dict | None = None, length: int = 0
    ) -> bytes:
        """One chunk for each choice (`length`: the characters of output in `delta`)."""
        return b"".join(
            [
                self.chunk_template.fill_json(choices_json(delta, finish_reason, index, logprobs), length)
                for index in self.choices
            ]
        )

    def role_frame(self, delta: dict = ROLE_DELTA) -> bytes:
        """The chunk that opens a text answer: the role, with empty content (or for a refusal, empty refusal)."""
        self.role_sent = True
        if self.plain:
            return self.chunk_template.fill_json(REFUSAL_ROLE_CHOICES if delta is REFUSAL_ROLE_DELTA else ROLE_CHOICES)
        return self.chunk_frames(delta)

    def block_start(self, start: p.BlockStart) -> bytes:
        """A tool call's first chunk; for text or a refusal, the role chunk if none went out yet."""
        self.block_kind = start.kind
        if start.kind == "custom_tool_call":
            return self.call_start(start, "custom")
        if start.kind != "tool_call":
            return (
                b""
                if self.role_sent
                else self.role_frame(REFUSAL_ROLE_DELTA if start.kind == "refusal" else ROLE_DELTA)
            )
        return self.call_start(start, "function")

    def call_start(self, start: p.BlockStart, key: str) -> bytes:
        """A tool call's first chunk: a function's, or (`key` custom) a custom tool's, which
        streams as a function's does, under `custom` and its `input`."""
        self.block_kind, self.call_key = "tool_call", key
        self.tool_index += 1
        with_role, self.role_sent = not self.role_sent, True
        return b"".join(
            [
                self.chunk_template.fill_json(choices_json(self.tool_call_delta(start, with_role), index=index))
                for index in self.choices
            ]
        )

    def tool_call_delta(self, start: p.BlockStart, with_role: bool) -> dict:
        """A tool call's first delta, for one choice (each generates its own call id)."""
        call_type, field = CALL_FIELDS[self.call_key]
        call = {
            "index": self.tool_index,
            "id": start.call_id or self.meta.new_id("call_"),
            "type": call_type,
            self.call_key: {"name": start.name, field: ""},
        }
        return {"role": "assistant", "content": None, "tool_calls": [call]} if with_role else {"tool_calls": [call]}

    def delta(self, delta: p.Delta) -> bytes:
        if self.block_kind == "tool_call":
            key = self.call_key
            return self.chunk_frames(
                {"tool_calls": [{"index": self.tool_index, key: {CALL_FIELDS[key][1]: delta.text}}]},
                length=len(delta.text),
            )
        if self.plain:
            return self.text_templates[self.block_kind].fill(delta.text)
        logprobs = content_logprobs([delta.text], self.top_logprobs) if self.block_kind == "text" else None
        return self.chunk_frames({DELTA_KEYS[self.block_kind]: delta.text}, logprobs=logprobs, length=len(delta.text))

    def cite(self, cite: p.Cite) -> bytes:
        """Kept for the one chunk of the message's annotations, before the last: the SDKs' stream
        helpers take one list of annotations, not pieces of it."""
        self.annotations = [*(self.annotations or ()), chat_annotation(cite.citation, cite.text_before)]
        return b""

    def failure(self, failure: p.Failure) -> bytes:
        return data_frame({"error": openai_fail_error(failure)})

    def finish(self, finish: p.Finish) -> bytes:
        frames = []
        if not self.role_sent:
            frames.append(self.role_frame())
        if self.annotations:
            frames.append(self.chunk_frames({"annotations": self.annotations}))
        if self.plain:
            frames.append(self.chunk_template.fill_json(FINISH_CHOICES[finish.reason]))
        else:
            frames.append(self.chunk_frames({}, FINISH_REASON_NAMES[finish.reason]))
        if self.include_usage:
            padding = self.obfuscation.padding(0).decode() if self.obfuscation is not None else ""
            frames.append(data_frame(self.chunk([], padding, usage=usage_object(finish.usage, len(self.choices)))))
        frames.append(DONE_FRAME)
        return b"".join(frames)


def complete(meta: Meta, request: ParsedRequest, outcome: p.Outcome) -> dict:
    """The non-streaming `chat.completion` object for a stream that finished: with `n`, the same answer in every choice."""
    finish = cast(p.Finish, outcome.ending)
    options = request.options
    choices = [choice(meta, outcome, index, options["top_logprobs"]) for index in range(options["choices"])]
    return {
        "id": meta.new_id("chatcmpl-", ID_LENGTH),
        "object": "chat.completion",
        "created": meta.created,
        "model": meta.model,
        "choices": choices,
        "usage": usage_object(finish.usage, options["choices"]),
        "service_tier": options.get("service_tier", "default"),
        "system_fingerprint": meta.system_fingerprint,
    }


def choice(meta: Meta, outcome: p.Outcome, index: int, top_logprobs: int | None) -> dict:
    text = "".join(b.text for b in outcome.blocks if b.kind == "text")
    refusal = "".join(b.text for b in outcome.blocks if b.kind == "refusal")
    calls = [call_object(meta, b) for b in outcome.blocks if b.kind in CALL_KINDS]
    message: dict[str, Any] = {
        "role": "assistant",
        "content": text if text or not (calls or refusal) else None,
        "refusal": refusal or None,
        "annotations": message_annotations(outcome.blocks),
    }
    if calls:
        message["tool_calls"] = calls
    tokens = [piece for b in outcome.blocks if b.kind == "text" for piece in b.pieces]
    return {
        "index": index,
        "message": message,
        "logprobs": content_logprobs(tokens, top_logprobs),
        "finish_reason": FINISH_REASON_NAMES[cast(p.Finish, outcome.ending).reason],
    }


def call_object(meta: Meta, block: p.Block) -> dict:
    """A `tool_calls` entry: a function's call, or a custom tool's (`custom`, with its free-text `input`)."""
    key = "custom" if block.kind == "custom_tool_call" else "function"
    call_type, field = CALL_FIELDS[key]
    return {
        "id": block.call_id or meta.new_id("call_"),
        "type": call_type,
        key: {"name": block.name, field: block.text},
    }


def chat_annotation(citation: Citation, text_before: int) -> dict:
    """A citation as the message's `url_citation` annotation, its offsets in the whole content."""
    return {
        "type": "url_citation",
        "url_citation": {
            "start_index": citation.start + text_before,
            "end_index": citation.end + text_before,
            "url": citation.url,
            "title": citation.title or "",
        },
    }


def message_annotations(blocks: list[p.Block]) -> list[dict]:
    """The annotations of the message whose content is these text blocks, one after another."""
    annotations, text_before = [], 0
    for block in blocks:
        if block.kind == "text":
            annotations += [chat_annotation(citation, text_before) for citation in block.citations]
            text_before += len(block.text)
    return annotations
