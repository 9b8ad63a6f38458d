"""Anthropic Messages read back: `message_start`, content blocks by `index` and their deltas,
`message_delta` (stop reason, stop sequence, cumulative usage), `message_stop`, `event:
error`; or a whole message. A `refusal` stop is the last text block's: that block is written
as a refusal, which replays as text with that stop."""

from __future__ import annotations

import json
from typing import Any

from ...protocols.common import ANTHROPIC_ERROR_TYPES
from ...protocols.messages import FAIL_TYPES, STOP_REASONS
from .facts import FINISHED, CapturedBlock, Reader, clean, detail, kind_for_status, kind_of, object_in

# Tables looked up by whatever JSON value a payload's field holds.
BLOCK_KINDS: dict[Any, str] = {
    "text": "text",
    "thinking": "reasoning",
    "redacted_thinking": "redacted_thinking",
    "tool_use": "tool_call",
}
DELTA_FIELDS = {"text_delta": "text", "thinking_delta": "thinking", "input_json_delta": "partial_json"}
# What each block holds when it starts (or, in a whole message, all along).
START_FIELDS = {"text": "text", "thinking": "thinking"}
ERROR_STATUSES: dict[Any, int] = {error_type: status for status, error_type in ANTHROPIC_ERROR_TYPES.items()}
# The stop reasons a scenario's finish gives again; a refusal is a refusal block's (see finish).
FINISHES = {reason: finish for finish, reason in STOP_REASONS.items() if finish != "refusal"}


class MessagesReader(Reader):
    NAME = "messages"
    FINISHES = FINISHES
    EVENTS = {
        "message_start": "message_start",
        "content_block_start": "block_start",
        "content_block_delta": "block_delta",
        "message_delta": "message_delta",
        "message_stop": "message_stop",
        "error": "error",
    }
    SKIPPED = frozenset({"ping", "content_block_stop"})

    def message_start(self, at: float | None, event: dict) -> None:
        message = object_in(event, "message")
        self.model(message.get("model"))
        self.message_usage(
            message.get("usage"), output=False
        )  # its output_tokens is a placeholder; message_delta's counts

    def message_usage(self, usage: Any, output: bool = True) -> None:
        if isinstance(usage, dict):
            self.usage(usage.get("input_tokens"), usage.get("output_tokens") if output else None)
            self.details(
                cache_write_tokens=usage.get("cache_creation_input_tokens"),
                cached_tokens=usage.get("cache_read_input_tokens"),
                reasoning_tokens=detail(usage, "output_tokens_details", "thinking_tokens"),
            )

    def block_start(self, at: float | None, event: dict) -> None:
        block = object_in(event, "content_block")
        self.block(at, event.get("index"), block)

    def block(self, at: float | None, index: Any, block: dict) -> None:
        """A block as it starts, or as a whole message holds it."""
        kind = BLOCK_KINDS.get(block.get("type"))
        if kind is None:
            self.captured.left_out[f"{block.get('type') or 'untyped'} blocks"] += 1
            return
        if kind == "tool_call":
            given = block.get("input")
            text = (
                json.dumps(given, ensure_ascii=False, separators=(",", ":")) if given else ""
            )  # a streamed one starts at {}
            found = self.piece(
                index, kind, text, at, name=clean(block.get("name")) or None, call_id=clean(block.get("id")) or None
            )
        elif kind == "redacted_thinking":
            found = self.piece(index, kind, "", at, data=clean(block.get("data")) or None)
        else:
            found = self.piece(index, kind, block.get(START_FIELDS[block["type"]]), at)
            for citation in block.get("citations") or []:
                self.citation(found, citation if isinstance(citation, dict) else {}, streamed=False)
        found.signature = clean(block.get("signature")) or found.signature

    def citation(self, block: CapturedBlock | None, citation: dict, streamed: bool = True) -> None:
        """A web search citation: Messages gives no offsets, so a streamed one cites the last
        place its cited text is in the text that had come when it came, else all of that text;
        one at a block's start, or in a whole message, cites where its cited text is, or the
        whole block (see CapturedCitation). Its encrypted_index is not kept: a replay makes up
        its own."""
        if citation.get("type") != "web_search_result_location":
            self.captured.left_out[f"{citation.get('type') or 'untyped'} citations"] += 1
            return
        self.captured.left_out["encrypted citation indexes"] += 1
        so_far = block.text() if block is not None and streamed else ""
        cited = clean(citation.get("cited_text"))
        if not so_far:
            self.cite(block, citation)
            return
        found = so_far.rfind(cited) if cited else -1
        if found < 0:
            self.cite(block, citation, 0, len(so_far))
        else:
            self.cite(block, citation, found, found + len(cited))

    def block_delta(self, at: float | None, event: dict) -> None:
        delta = object_in(event, "delta")
        kind = delta.get("type")
        block = self.open.get(event.get("index"))
        if kind == "signature_delta" and block is not None:
            block.signature = clean(delta.get("signature")) or None
        elif kind == "citations_delta":
            self.citation(block, object_in(delta, "citation"))
        elif kind in DELTA_FIELDS and block is not None:
            self.piece(event.get("index"), block.kind, delta.get(DELTA_FIELDS[kind]), at)
        else:
            self.captured.left_out[f"{kind or 'untyped'} deltas"] += 1

    def message_delta(self, at: float | None, event: dict) -> None:
        delta = object_in(event, "delta")
        self.stop(delta)
        self.message_usage(event.get("usage"))

    def stop(self, given: dict) -> None:
        """A message_delta's stop reason and sequence, or a whole message's."""
        if isinstance(given.get("stop_sequence"), str):
            self.captured.stop_sequence = clean(given["stop_sequence"])
        reason = given.get("stop_reason")
        if reason != "refusal":
            self.finish(reason)
            return
        texts = [block for block in self.captured.blocks() if block.kind == "text"]
        if texts:
            texts[-1].kind = "refusal"
        if not texts or any(block.kind == "tool_call" for block in self.captured.blocks()):
            self.captured.finish = "content_filter"  # what a refusal stop is on Messages when no refusal block says it

    def message_stop(self, at: float | None, event: dict) -> None:
        self.end(FINISHED, at)

    def error(self, at: float | None, event: dict) -> None:
        self.fail(at, object_in(event, "error"))

    def fail_kind(self, error: dict, message: str) -> str:
        """By the error's type: a fail kind's own, else the kind of the status it comes with."""
        error_type = error.get("type")
        by_type = [kind for kind, written in FAIL_TYPES.items() if written == error_type]
        return kind_of(by_type, message) if by_type else kind_for_status(ERROR_STATUSES.get(error_type))

    def fail_defaults(self, kind: str) -> dict[str, str | None]:
        return {"type": FAIL_TYPES[kind]}

    def whole(self, body: dict, at: float | None) -> None:
        self.model(body.get("model"))
        for index, block in enumerate(body.get("content") or []):
            if isinstance(block, dict):
                self.block(at, index, block)
        self.stop(body)
        self.message_usage(body.get("usage"))
        self.end(FINISHED, at)
