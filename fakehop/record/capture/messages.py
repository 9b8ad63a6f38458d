"""Anthropic Messages read back: `message_start`, content blocks by `index` and their deltas,
`message_delta` (stop reason, stop sequence, cumulative usage), `message_stop`, `event:
error`; or a whole message. A `refusal` stop is the last text block's: that block is written
as a refusal, which replays as text with that stop."""

from __future__ import annotations

import json
from typing import Any

from ...protocols.common import ANTHROPIC_ERROR_TYPES
from ...protocols.messages import FAIL_TYPES, STOP_REASONS
from .facts import FINISHED, CapturedBlock, Reader, clean, detail, kind_for_status, kind_of, object_in, paused

# Tables looked up by whatever JSON value a payload's field holds.
BLOCK_KINDS: dict[Any, str] = {
    "text": "text",
    "thinking": "reasoning",
    "redacted_thinking": "redacted_thinking",
    "tool_use": "tool_call",
    "server_tool_use": "server_tool",
    "mcp_tool_use": "server_tool",
    "compaction": "compaction",
}
DELTA_FIELDS = {
    "text_delta": "text",
    "thinking_delta": "thinking",
    "input_json_delta": "partial_json",
    "compaction_delta": "content",
}
# What each block holds when it starts (or, in a whole message, all along).
START_FIELDS = {"text": "text", "thinking": "thinking", "compaction": "content"}
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
        if block.get("type") in HOSTED_RESULTS:
            self.hosted_result(block)
            return
        if kind is not None:
            self.answer_the_last_call()
        if kind is None or (kind == "server_tool" and not self.hosted_use(block)):
            self.captured.left_out[f"{block.get('type') or 'untyped'} blocks"] += 1
            return
        if kind == "server_tool":
            given = block.get("input")
            text = json.dumps(given, ensure_ascii=False, separators=(",", ":")) if given else ""
            found = self.piece(index, kind, text, at, hosted=self.hosted_use(block))
        elif kind == "tool_call":
            given = block.get("input")
            text = (
                json.dumps(given, ensure_ascii=False, separators=(",", ":")) if given else ""
            )  # a streamed one starts at {}
            found = self.piece(
                index,
                kind,
                text,
                at,
                name=clean(block.get("name")) or None,
                call_id=clean(block.get("id")) or None,
                caller=self.caller(block.get("caller")),
            )
        elif kind == "redacted_thinking":
            found = self.piece(index, kind, "", at, data=clean(block.get("data")) or None)
        else:
            found = self.piece(index, kind, block.get(START_FIELDS[block["type"]]), at)
            for citation in block.get("citations") or []:
                self.citation(found, citation if isinstance(citation, dict) else {}, streamed=False)
        found.signature = clean(block.get("signature")) or found.signature

    def caller(self, caller: Any) -> str | None:
        """A tool_use's caller: "code_execution" when it names the latest code execution before it
        (the caller a scenario can say); None when the model called it, or named another answer's."""
        if not isinstance(caller, dict) or caller.get("type") == "direct":
            return None
        runs = [
            found.hosted
            for found in self.captured.blocks()
            if found.hosted and found.hosted["name"] == "code_execution"
        ]
        if (
            runs
            and str(caller.get("type", "")).startswith("code_execution")
            and runs[-1].get("id") == caller.get("tool_id")
        ):
            return "code_execution"
        self.captured.left_out["tool_use callers other than the latest code execution (replayed as direct)"] += 1
        return None

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
        if reason == "pause_turn" and not paused(self.captured.blocks()):
            self.captured.left_out["pause_turn stops after anything but a server tool call (replayed as end_turn)"] += 1
            return
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

    # -------------------------------------------- hosted tools and compaction

    def hosted_use(self, block: dict) -> dict | None:
        """A server_tool step's name (an MCP call's server and tool too) and id, from its call
        block; None for a server tool fakehop has no step for."""
        call_id = clean(block.get("id")) or None
        if block.get("type") == "mcp_tool_use":
            return {
                "name": "mcp",
                "server": clean(block.get("server_name")),
                "tool": clean(block.get("name")),
                "id": call_id,
            }
        name = block.get("name")
        return {"name": name, "id": call_id} if name in HOSTED_RESULTS.values() else None

    def hosted_result(self, block: dict) -> None:
        """A result block: the result of the call it names, in the step's form."""
        call = next(
            (
                found
                for found in self.captured.blocks()
                if found.hosted is not None and found.hosted.get("id") == block.get("tool_use_id")
            ),
            None,
        )
        result = hosted_result(HOSTED_RESULTS[block["type"]], block.get("content"))
        if result is None:
            self.captured.left_out[f"{block['type']} blocks of an error (replayed as an empty result)"] += 1
        if call is not None:
            call.hosted["result"] = EMPTY_RESULTS[call.hosted["name"]] if result is None else result  # type: ignore[index]

    def answer_the_last_call(self) -> None:
        """A server tool call that more output follows was answered, though its result did not come:
        only a call the turn pauses on goes without one."""
        blocks = self.captured.blocks()
        if paused(blocks):
            self.captured.left_out["server tool calls without a result block (replayed with an empty one)"] += 1
            blocks[-1].hosted["result"] = EMPTY_RESULTS[blocks[-1].hosted["name"]]  # type: ignore[index]


# Each result block's type, and the server tool it gives the result of.
HOSTED_RESULTS = {
    "web_search_tool_result": "web_search",
    "web_fetch_tool_result": "web_fetch",
    "code_execution_tool_result": "code_execution",
    "mcp_tool_result": "mcp",
}


EMPTY_RESULTS: dict[str, Any] = {"web_search": [], "web_fetch": {}, "code_execution": {}, "mcp": ""}


def hosted_result(name: str, content: Any) -> Any:
    """A result block's content as a server_tool step's `result` gives it; None for one it cannot (an error)."""
    if name == "web_search" and isinstance(content, list):
        pages = [page for page in content if isinstance(page, dict) and isinstance(page.get("url"), str)]
        return [
            {key: clean(page[key]) for key in ("url", "title", "page_age") if isinstance(page.get(key), str)}
            for page in pages
        ]
    if name == "web_fetch" and isinstance(content, dict) and content.get("type") == "web_fetch_result":
        document = object_in(content, "content")
        fetched = {
            "content": object_in(document, "source").get("data"),
            "title": document.get("title"),
            "url": content.get("url"),
        }
        return {key: clean(value) for key, value in fetched.items() if isinstance(value, str)}
    if name == "code_execution" and isinstance(content, dict) and content.get("type") == "code_execution_result":
        ran = {key: clean(content.get(key)) for key in ("stdout", "stderr")}
        return {**ran, "return_code": content["return_code"]} if isinstance(content.get("return_code"), int) else ran
    if name == "mcp":
        if isinstance(content, str):
            return clean(content)
        if isinstance(content, list):
            return "".join(clean(part.get("text")) for part in content if isinstance(part, dict))
    return None
