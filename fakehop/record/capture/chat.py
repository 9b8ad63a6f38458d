"""Chat Completions read back: `chat.completion.chunk` frames, `data: {"error": …}` and
`[DONE]`, or a whole `chat.completion`. Only the first choice is kept."""

from __future__ import annotations

from typing import Any

from .facts import FINISHED, OpenAIReader, clean, detail, number, object_in

# Where each usage count of the scenario format is in Chat's usage: (details object, count).
USAGE_DETAILS = {
    "cached_tokens": ("prompt_tokens_details", "cached_tokens"),
    "input_audio_tokens": ("prompt_tokens_details", "audio_tokens"),
    "reasoning_tokens": ("completion_tokens_details", "reasoning_tokens"),
    "output_audio_tokens": ("completion_tokens_details", "audio_tokens"),
    "accepted_prediction_tokens": ("completion_tokens_details", "accepted_prediction_tokens"),
    "rejected_prediction_tokens": ("completion_tokens_details", "rejected_prediction_tokens"),
}


class ChatReader(OpenAIReader):
    NAME = "chat"
    TERMINATOR = "[DONE]"
    FINISHES = {**OpenAIReader.FINISHES, "function_call": "tool_calls"}

    def __init__(self, streamed: bool = True):
        super().__init__(streamed)
        self.tool_calls = 0  # opened so far: text after a tool call is a block of its own
        self.last_tool = 0  # the index of the call the last fragment went to

    def event(self, frame, payload: dict) -> None:
        if payload.get("error"):  # what the SDKs raise on, whatever else the frame holds
            self.error(frame.at, payload["error"])
        elif payload.get("object") == "chat.completion.chunk":
            self.chunk(frame.at, payload)
        else:
            self.captured.left_out[f"{payload.get('object') or 'untyped'} events"] += 1

    def error(self, at: float | None, error: Any) -> None:
        self.fail(at, error if isinstance(error, dict) else {"message": str(error)})

    def chunk(self, at: float | None, chunk: dict) -> None:
        self.model(chunk.get("model"))
        self.chat_usage(chunk.get("usage"))
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            if choice.get("index", 0) != 0:
                self.captured.left_out["deltas of choices after the first"] += 1
                continue
            delta = choice.get("delta")
            self.output(at, delta if isinstance(delta, dict) else {})
            self.finish(choice.get("finish_reason"))

    def chat_usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            self.usage(usage.get("prompt_tokens"), usage.get("completion_tokens"))
            self.details(**{name: detail(usage, part, count) for name, (part, count) in USAGE_DETAILS.items()})

    def output(self, at: float | None, message: dict) -> None:
        """A delta's content, refusal and tool calls, or a whole message's (whose calls are whole)."""
        for kind, key in (("text", "content"), ("refusal", "refusal")):
            if message.get(key):
                self.piece((kind, self.tool_calls), kind, message[key], at)
        for call in message.get("tool_calls") or []:
            if isinstance(call, dict):
                self.tool_call(at, call)
        annotations = message.get("annotations")
        if annotations:
            self.annotations(annotations)

    def annotations(self, annotations: Any) -> None:
        """The message's url_citation annotations, each of the text block its offsets fall in
        (text after a tool call is a block of its own), with offsets in that block."""
        blocks = [block for block in self.captured.blocks() if block.kind == "text"]
        for annotation in annotations if isinstance(annotations, list) else [annotations]:
            found = object_in(annotation, "url_citation") if isinstance(annotation, dict) else {}
            if not isinstance(annotation, dict) or annotation.get("type") != "url_citation":
                self.captured.left_out["annotations other than url_citation"] += 1
                continue
            start, end = number(found.get("start_index")), number(found.get("end_index"))
            before = 0
            for block in blocks:
                length = len(block.text())
                if start is not None and end is not None and before <= start and end <= before + length:
                    self.cite(block, found, start - before, end - before)
                    break
                before += length
            else:
                self.cite(None, found)

    def tool_call(self, at: float | None, call: dict) -> None:
        """A call's fragment goes to the call its `index` names, though calls interleave; one
        without an index (some gateways leave it out) to a new call if it has an id, else to
        the last one."""
        custom = call.get("type") == "custom" or "custom" in call
        function = object_in(call, "custom" if custom else "function")
        index = call.get("index")
        if not isinstance(index, int):
            index = self.tool_calls if call.get("id") or not self.tool_calls else self.last_tool
        key = ("tool_call", index)
        if key not in self.open:
            self.tool_calls += 1
        self.last_tool = index
        kind, field = ("custom_tool_call", "input") if custom else ("tool_call", "arguments")
        block = self.piece(key, kind, function.get(field), at)
        block.name = block.name or clean(function.get("name")) or None
        block.call_id = block.call_id or clean(call.get("id")) or None

    def whole(self, body: dict, at: float | None) -> None:
        self.model(body.get("model"))
        self.chat_usage(body.get("usage"))
        choices = [choice for choice in body.get("choices") or [] if isinstance(choice, dict)]
        if choices:
            message = choices[0].get("message")
            self.output(at, message if isinstance(message, dict) else {})
            self.finish(choices[0].get("finish_reason"))
        if len(choices) > 1:
            self.captured.left_out["choices after the first"] += len(choices) - 1
        self.end(FINISHED, at)
