"""OpenAI Responses read back: output items by `output_index` and their deltas, the terminal
`response.completed` / `response.incomplete` / `response.failed` (or an `error` event), or a
whole `response` object."""

from __future__ import annotations

from ..protocols.common import OPENAI_FAIL
from ..protocols.responses import INCOMPLETE_REASONS
from .facts import FINISHED, Block, Reader, clean, detail

CODES = {kind: code for kind, (code, _) in OPENAI_FAIL.items()}
ITEM_KINDS = {"message": "text", "reasoning": "reasoning", "function_call": "tool_call"}
DELTA_KINDS = {
    "response.output_text.delta": "text",
    "response.reasoning_summary_text.delta": "reasoning",
    "response.reasoning_text.delta": "reasoning",
    "response.function_call_arguments.delta": "tool_call",
}


def item_text(item: dict) -> str:
    """All the text an output item holds: a message's output_text parts, a reasoning item's
    summary (or its raw reasoning text), a function call's arguments."""
    if item.get("type") == "function_call":
        return clean(item.get("arguments"))
    parts = item.get("summary") or item.get("content") or []
    return "".join(clean(part.get("text")) for part in parts if isinstance(part, dict) and part.get("type") != "refusal")


class ResponsesReader(Reader):
    NAME = "responses"
    FINISHES = {**Reader.FINISHES, **{reason: finish for finish, reason in INCOMPLETE_REASONS.items()}}
    EVENTS = {
        "response.created": "lifecycle",
        "response.in_progress": "lifecycle",
        "response.queued": "lifecycle",
        "response.output_item.added": "item_added",
        "response.output_item.done": "item_done",
        **{name: "delta" for name in DELTA_KINDS},
        "response.completed": "terminal",
        "response.incomplete": "terminal",
        "response.failed": "terminal",
        "error": "error",
    }
    SKIPPED = frozenset({
        "response.content_part.added", "response.content_part.done", "response.output_text.done",
        "response.reasoning_summary_part.added", "response.reasoning_summary_part.done",
        "response.reasoning_summary_text.done", "response.reasoning_text.done",
        "response.function_call_arguments.done", "response.refusal.done",
    })

    def lifecycle(self, at: float | None, event: dict) -> None:
        response = event.get("response")
        if isinstance(response, dict):
            self.model(response.get("model"))

    def item_added(self, at: float | None, event: dict) -> Block | None:
        item = event.get("item") if isinstance(event.get("item"), dict) else {}
        kind = ITEM_KINDS.get(item.get("type"))
        if kind is None:
            self.captured.left_out[f"{item.get('type') or 'untyped'} output items"] += 1
            return None
        facts = {"name": clean(item.get("name")) or None, "call_id": clean(item.get("call_id")) or None} if kind == "tool_call" else {}
        return self.piece(event.get("output_index"), kind, "", at, **facts)

    def delta(self, at: float | None, event: dict) -> None:
        if event.get("summary_index"):
            self.captured.note("A reasoning summary of several parts is kept as one.")
        if event["type"] == "response.reasoning_text.delta":
            self.captured.note("Raw reasoning text is replayed as a reasoning summary.")
        self.piece(event.get("output_index"), DELTA_KINDS[event["type"]], event.get("delta"), at)

    def item_done(self, at: float | None, event: dict) -> None:
        """An item whose deltas never came (a hand-made stream, or a whole answer's) gets its text here."""
        item = event.get("item") if isinstance(event.get("item"), dict) else {}
        block = self.open.get(event.get("output_index")) or self.item_added(at, event)
        if block is None:
            return
        if not block.pieces:
            self.piece(event.get("output_index"), block.kind, item_text(item), at)
        if item.get("encrypted_content"):
            self.captured.left_out["encrypted reasoning content"] += 1

    def terminal(self, at: float | None, event: dict) -> None:
        response = event.get("response") if isinstance(event.get("response"), dict) else {}
        self.response(at, response)

    def response(self, at: float | None, response: dict) -> None:
        """A terminal event's response, or a whole answer: its items if none streamed, usage, how it ended."""
        self.model(response.get("model"))
        if not self.open:
            for index, item in enumerate(response.get("output") or []):
                if isinstance(item, dict):
                    self.item_done(at, {"output_index": index, "item": item})
        usage = response.get("usage")
        if isinstance(usage, dict):
            self.usage(usage.get("input_tokens"), usage.get("output_tokens"))
            self.details(cached_tokens=detail(usage, "input_tokens_details", "cached_tokens"),
                         reasoning_tokens=detail(usage, "output_tokens_details", "reasoning_tokens"))
        status = response.get("status")
        if status == "failed":
            if self.captured.failure is None:  # no `error` event came first
                error = response.get("error") if isinstance(response.get("error"), dict) else {}
                self.fail(at, CODES, error.get("code"), error.get("message"), error_event=False)
            return
        if status == "incomplete":
            details = response.get("incomplete_details") if isinstance(response.get("incomplete_details"), dict) else {}
            self.finish(details.get("reason"))
        self.end(FINISHED, at)

    def error(self, at: float | None, event: dict) -> None:
        """An `error` event: nested (`{"error": {…}}`, as the real API sends it) or flat."""
        error = event.get("error") if isinstance(event.get("error"), dict) else event
        self.fail(at, CODES, error.get("code"), error.get("message"))

    def whole(self, body: dict, at: float | None) -> None:
        self.response(at, body)

