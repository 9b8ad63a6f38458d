"""Anthropic Messages read back: `message_start`, content blocks by `index` and their deltas,
`message_delta` (stop reason, cumulative usage), `message_stop`, `event: error`; or a whole
message."""

from __future__ import annotations

import json
from typing import Any

from ..protocols.messages import FAIL_TYPES, STOP_REASONS
from .facts import FINISHED, Reader, clean

BLOCK_KINDS = {"text": "text", "thinking": "reasoning", "tool_use": "tool_call"}
DELTA_FIELDS = {"text_delta": "text", "thinking_delta": "thinking", "input_json_delta": "partial_json"}
# What each block holds when it starts (or, in a whole message, all along).
START_FIELDS = {"text": "text", "thinking": "thinking"}


class MessagesReader(Reader):
    NAME = "messages"
    FINISHES = {reason: finish for finish, reason in STOP_REASONS.items()}
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
        message = event.get("message") if isinstance(event.get("message"), dict) else {}
        self.model(message.get("model"))
        usage = message.get("usage")
        if isinstance(usage, dict):  # its output_tokens is a placeholder; message_delta's counts
            self.usage(usage.get("input_tokens"), None)

    def message_usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            self.usage(usage.get("input_tokens"), usage.get("output_tokens"))
            self.details(cache_creation_input_tokens=usage.get("cache_creation_input_tokens"),
                         cache_read_input_tokens=usage.get("cache_read_input_tokens"))

    def block_start(self, at: float | None, event: dict) -> None:
        block = event.get("content_block") if isinstance(event.get("content_block"), dict) else {}
        self.block(at, event.get("index"), block)

    def block(self, at: float | None, index: Any, block: dict) -> None:
        """A block as it starts, or as a whole message holds it."""
        kind = BLOCK_KINDS.get(block.get("type"))
        if kind is None:
            self.captured.left_out[f"{block.get('type') or 'untyped'} blocks"] += 1
            return
        if kind == "tool_call":
            given = block.get("input")
            text = json.dumps(given, ensure_ascii=False, separators=(",", ":")) if given else ""  # a streamed one starts at {}
            found = self.piece(index, kind, text, at, name=clean(block.get("name")) or None, call_id=clean(block.get("id")) or None)
        else:
            found = self.piece(index, kind, block.get(START_FIELDS[block["type"]]), at)
        found.signature = clean(block.get("signature")) or found.signature

    def block_delta(self, at: float | None, event: dict) -> None:
        delta = event.get("delta") if isinstance(event.get("delta"), dict) else {}
        kind = delta.get("type")
        block = self.open.get(event.get("index"))
        if kind == "signature_delta" and block is not None:
            block.signature = clean(delta.get("signature")) or None
        elif kind in DELTA_FIELDS and block is not None:
            self.piece(event.get("index"), block.kind, delta.get(DELTA_FIELDS[kind]), at)
        else:
            self.captured.left_out[f"{kind or 'untyped'} deltas"] += 1

    def message_delta(self, at: float | None, event: dict) -> None:
        delta = event.get("delta") if isinstance(event.get("delta"), dict) else {}
        self.finish(delta.get("stop_reason"))
        self.message_usage(event.get("usage"))

    def message_stop(self, at: float | None, event: dict) -> None:
        self.end(FINISHED, at)

    def error(self, at: float | None, event: dict) -> None:
        error = event.get("error") if isinstance(event.get("error"), dict) else {}
        self.fail(at, FAIL_TYPES, error.get("type"), error.get("message"))

    def whole(self, body: dict, at: float | None) -> None:
        self.model(body.get("model"))
        for index, block in enumerate(body.get("content") or []):
            if isinstance(block, dict):
                self.block(at, index, block)
        self.finish(body.get("stop_reason"))
        self.message_usage(body.get("usage"))
        self.end(FINISHED, at)
