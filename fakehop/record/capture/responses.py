"""OpenAI Responses read back: output items by `output_index` and their deltas, the terminal
`response.completed` / `response.incomplete` / `response.failed` (or an `error` event), or a
whole `response` object.

A message item's content parts are blocks of their own (`output_text` a text block, `refusal`
a refusal), keyed by output and content index; a reasoning item's summary parts are the parts
of one reasoning block. A reasoning item that shows no summary at all (none was asked for, or
the reasoning is hidden) is written as redacted thinking: the step that is a reasoning item
with no summary, an item of its own wherever it stands.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from ...protocols.responses import COMPACTION_PREFIX, INCOMPLETE_REASONS
from ...scenario.reader import PHASES
from .facts import FINISHED, CapturedBlock, OpenAIReader, clean, detail, json_object, object_in, paused

# Tables looked up by whatever JSON value a payload's field holds.
ITEM_KINDS: dict[Any, str] = {
    "reasoning": "reasoning",
    "function_call": "tool_call",
    "custom_tool_call": "custom_tool_call",
}  # and message items, whose parts are blocks
PART_KINDS: dict[Any, str] = {"output_text": "text", "refusal": "refusal"}
PART_TEXT: dict[Any, str] = {"output_text": "text", "refusal": "refusal"}  # where each content part holds its text
DELTA_KINDS = {
    "response.output_text.delta": "text",
    "response.refusal.delta": "refusal",
    "response.reasoning_summary_text.delta": "reasoning",
    "response.reasoning_text.delta": "reasoning",
    "response.function_call_arguments.delta": "tool_call",
    "response.custom_tool_call_input.delta": "custom_tool_call",
}
CALL_TEXT = {"tool_call": "arguments", "custom_tool_call": "input"}  # where a call item holds its text
# Where each usage count of the scenario format is in Responses' usage: (details object, count).
USAGE_DETAILS = {
    "cached_tokens": ("input_tokens_details", "cached_tokens"),
    "cache_write_tokens": ("input_tokens_details", "cache_write_tokens"),
    "reasoning_tokens": ("output_tokens_details", "reasoning_tokens"),
}


# Items of hosted calls and compactions, as block kinds.
HOSTED_ITEMS = {
    "web_search_call": "server_tool",
    "file_search_call": "server_tool",
    "code_interpreter_call": "server_tool",
    "image_generation_call": "server_tool",
    "mcp_call": "server_tool",
    "compaction": "compaction",
}
# Their events between the item's `added` and `done`, which the done item says again whole.
HOSTED_EVENTS = tuple(
    f"response.{word}.{stage}"
    for word, stages in {
        "web_search_call": ("in_progress", "searching", "completed", "failed"),
        "file_search_call": ("in_progress", "searching", "completed", "failed"),
        "code_interpreter_call": ("in_progress", "interpreting", "completed"),
        "code_interpreter_call_code": ("delta", "done"),
        "image_generation_call": ("in_progress", "generating", "completed", "partial_image"),
        "mcp_call": ("in_progress", "completed", "failed"),
        "mcp_call_arguments": ("delta", "done"),
        "compaction": ("compacting",),
        "mcp_list_tools": ("in_progress", "completed", "failed"),
    }.items()
    for stage in stages
)


def summary_texts(item: dict) -> list[str]:
    """A reasoning item's summary parts (or its raw reasoning text's parts)."""
    parts = item.get("summary") or item.get("content") or []
    return [clean(part.get("text")) for part in parts if isinstance(part, dict)]


class ResponsesReader(OpenAIReader):
    NAME = "responses"
    # Each incomplete reason reads as the first finish that gives it (max_output_tokens as length).
    FINISHES = {
        **OpenAIReader.FINISHES,
        **dict(reversed([(reason, finish) for finish, reason in INCOMPLETE_REASONS.items()])),
    }
    EVENTS = {
        "response.created": "lifecycle",
        "response.in_progress": "lifecycle",
        "response.queued": "lifecycle",
        "response.output_item.added": "item_added",
        "response.content_part.added": "part_added",
        "response.output_item.done": "item_done",
        "response.output_text.annotation.added": "annotation",
        **dict.fromkeys(DELTA_KINDS, "delta"),
        "response.completed": "terminal",
        "response.incomplete": "terminal",
        "response.failed": "terminal",
        "error": "error",
    }
    SKIPPED = frozenset(
        {
            "response.content_part.done",
            "response.output_text.done",
            "response.reasoning_summary_part.added",
            "response.reasoning_summary_part.done",
            "response.reasoning_summary_text.done",
            "response.reasoning_text.done",
            "response.function_call_arguments.done",
            "response.custom_tool_call_input.done",
            "response.refusal.done",
            *HOSTED_EVENTS,
        }
    )

    def __init__(self, streamed: bool = True):
        super().__init__(streamed)
        self.phases: dict[Any, str | None] = {}  # the phase of each message item seen, by output index

    def lifecycle(self, at: float | None, event: dict) -> None:
        response = event.get("response")
        if isinstance(response, dict):
            self.about(response)

    def about(self, response: dict) -> None:
        """What every response object says: its model and id."""
        self.model(response.get("model"))
        if isinstance(response.get("id"), str):
            self.captured.answer_id = response["id"]

    def item_added(self, at: float | None, event: dict) -> CapturedBlock | None:
        """A reasoning or function call item opens its block; a message item's blocks open with its content parts."""
        item = object_in(event, "item")
        index, kind = event.get("output_index"), ITEM_KINDS.get(item.get("type"))
        if item.get("type") == "program_output":
            self.program_output(item)
            return None
        self.answer_the_last_program()
        if item.get("type") == "program":
            return self.program(index, item, at)
        if item.get("type") == "message":
            self.message_phase(index, item)
            return None
        if item.get("type") in HOSTED_ITEMS:
            return self.piece(index, HOSTED_ITEMS[item["type"]], "", at)
        if item.get("type") == "mcp_list_tools":
            return None  # a replay lists the tools of each MCP server it calls
        if kind is None:
            self.captured.left_out[f"{item.get('type') or 'untyped'} output items"] += 1
            return None
        facts = (
            {"name": clean(item.get("name")) or None, "call_id": clean(item.get("call_id")) or None}
            if kind in CALL_TEXT
            else {}
        )
        if kind == "tool_call":
            facts["caller"] = self.caller(item.get("caller"))
        return self.piece(index, kind, "", at, **facts)

    def message_phase(self, index: Any, item: dict) -> None:
        """Note a message item's phase (None for none, or one fakehop has no step for), once."""
        phase = item.get("phase")
        if index in self.phases:
            return
        self.phases[index] = phase if phase in PHASES else None
        if phase is not None and phase not in PHASES:
            self.captured.left_out[f"message phase {phase!r}"] += 1

    def part_added(self, at: float | None, event: dict) -> None:
        part = object_in(event, "part")
        self.part(at, event.get("output_index"), event.get("content_index"), part, "")

    def part(self, at: float | None, index: Any, content_index: Any, part: dict, text: Any) -> None:
        """A message's content part, opened as a text or refusal block with `text`."""
        kind = PART_KINDS.get(part.get("type"))
        if kind is None:
            self.captured.left_out[f"{part.get('type') or 'untyped'} content parts"] += 1
            return
        block = self.piece(
            (index, content_index), kind, text, at, phase=self.phases.get(index) if kind == "text" else None
        )
        for annotation in part.get("annotations") or []:
            if isinstance(annotation, dict):
                self.annotated(block, annotation)

    def annotation(self, at: float | None, event: dict) -> None:
        """An `annotation.added` event: a url_citation of the text part it names."""
        self.annotated(
            self.open.get((event.get("output_index"), event.get("content_index"))), object_in(event, "annotation")
        )

    def annotated(self, block: CapturedBlock | None, annotation: dict) -> None:
        if annotation.get("type") != "url_citation":
            self.captured.left_out[f"{annotation.get('type') or 'untyped'} annotations"] += 1
            return
        self.cite(block, annotation, annotation.get("start_index"), annotation.get("end_index"))

    def delta(self, at: float | None, event: dict) -> None:
        if event["type"] == "response.reasoning_text.delta":
            self.captured.note("Raw reasoning text is replayed as a reasoning summary.")
        kind, index = DELTA_KINDS[event["type"]], event.get("output_index")
        if kind in PART_KINDS.values():
            self.piece(
                (index, event.get("content_index")),
                kind,
                event.get("delta"),
                at,
                phase=self.phases.get(index) if kind == "text" else None,
            )
        else:
            self.piece(index, kind, event.get("delta"), at, part=event.get("summary_index", event.get("content_index")))

    def item_done(self, at: float | None, event: dict) -> None:
        """An item whose deltas never came (a hand-made stream, or a whole answer's) gets its text here."""
        item = object_in(event, "item")
        index = event.get("output_index")
        if item.get("type") == "message":
            self.message_done(at, index, item)
            return
        block = self.open.get(index) or self.item_added(at, event)
        if block is None or item.get("type") == "program":
            return
        if item.get("type") in HOSTED_ITEMS:
            self.hosted_done(index, block, item, at)
        elif block.kind == "reasoning":
            self.reasoning_done(at, index, block, item)
        elif not block.pieces:
            self.piece(index, block.kind, clean(item.get(CALL_TEXT[block.kind])), at)

    def message_done(self, at: float | None, index: Any, item: dict) -> None:
        self.message_phase(index, item)
        for content_index, part in enumerate(item.get("content") or []):
            if isinstance(part, dict) and (index, content_index) not in self.open:
                self.part(at, index, content_index, part, part.get(PART_TEXT.get(part.get("type"), "text")))

    def reasoning_done(self, at: float | None, index: Any, block: CapturedBlock, item: dict) -> None:
        if not block.pieces:
            for number, text in enumerate(summary_texts(item)):
                self.piece(index, "reasoning", text, at, part=number)
        if not block.pieces:
            block.kind = "redacted_thinking"
        if item.get("encrypted_content"):
            self.captured.left_out["encrypted reasoning content"] += 1

    def terminal(self, at: float | None, event: dict) -> None:
        response = object_in(event, "response")
        self.response(at, response)

    def response(self, at: float | None, response: dict) -> None:
        """A terminal event's response, or a whole answer: its items if none streamed, usage, how it ended."""
        self.about(response)
        if not self.open:
            for index, item in enumerate(response.get("output") or []):
                if isinstance(item, dict):
                    self.item_done(at, {"output_index": index, "item": item})
        usage = response.get("usage")
        if isinstance(usage, dict):
            self.usage(usage.get("input_tokens"), usage.get("output_tokens"))
            self.details(**{name: detail(usage, part, count) for name, (part, count) in USAGE_DETAILS.items()})
        status = response.get("status")
        if status == "failed":
            if self.captured.failure is None:  # no `error` event came first
                self.fail(at, object_in(response, "error"), error_event=False)
            return
        if status == "incomplete":
            details = object_in(response, "incomplete_details")
            self.finish(details.get("reason"))
        self.end(FINISHED, at)

    def error(self, at: float | None, event: dict) -> None:
        """An `error` event: nested (`{"error": {…}}`, as the real API sends it) or flat, whose
        `type` is the event's own."""
        error = event.get("error")
        if not isinstance(error, dict):
            error = {key: event.get(key) for key in ("code", "message", "param") if key in event}
        self.fail(at, error)

    def whole(self, body: dict, at: float | None) -> None:
        self.response(at, body)

    # -------------------------------------------- hosted tools and compaction

    def hosted_done(self, index: Any, block: CapturedBlock, item: dict, at: float | None) -> None:
        """A hosted call's or a compaction's item, whole: its step, from what `output_item.done` shows."""
        if block.pieces or block.hosted is not None:
            return
        if item["type"] == "compaction":
            self.piece(index, "compaction", self.compaction_text(item), at)
            return
        step = hosted_step(item)
        if step is None:
            self.captured.left_out[f"{item['type']} output items"] += 1
            self.captured.parts = [part for part in self.captured.parts if part is not block]
            del self.open[index]
            return
        tool_input = step.pop("input")
        block.hosted = step
        self.piece(index, "server_tool", json.dumps(tool_input, ensure_ascii=False, separators=(",", ":")), at)

    # -------------------------------------------- programmatic tool calling

    def program(self, index: Any, item: dict, at: float | None) -> CapturedBlock:
        """A `program` item: a code execution whose code calls the client's tools, its code the
        step's input and its `call_id` the step's id, which the calls it makes name."""
        code = json.dumps({"code": clean(item.get("code"))}, ensure_ascii=False, separators=(",", ":"))
        call_id = clean(item.get("call_id")) or None
        return self.open.get(index) or self.piece(
            index, "server_tool", code, at, hosted={"name": "code_execution", "id": call_id}
        )

    def program_output(self, item: dict) -> None:
        """A `program_output` item: the stdout of the program whose `call_id` it names, as its step's result."""
        program = next(
            (
                found.hosted
                for found in reversed(self.captured.blocks())
                if found.hosted and found.hosted.get("id") == item.get("call_id")
            ),
            None,
        )
        if program is None:
            self.captured.left_out["program_output items of no program"] += 1
            return
        program["result"] = {"stdout": clean(item.get("result"))}

    def answer_the_last_program(self) -> None:
        """A program that more output follows ran, though its output did not come: only a call
        the turn pauses on goes without a result."""
        blocks = self.captured.blocks()
        program = blocks[-1].hosted if paused(blocks) else None
        if program is not None and program.get("id") is not None:
            self.captured.left_out["program items without their program_output (replayed with an empty one)"] += 1
            program["result"] = {}

    def caller(self, caller: Any) -> str | None:
        """A function call's caller: "code_execution" when it names the latest program before it
        (the caller a scenario can say); None when the model called it, or named another answer's."""
        if not isinstance(caller, dict):
            return None
        programs = [found.hosted for found in self.captured.blocks() if found.hosted and found.hosted.get("id")]
        if caller.get("type") == "program" and programs and programs[-1].get("id") == caller.get("caller_id"):
            return "code_execution"
        self.captured.left_out["function_call callers other than the latest program (replayed as direct)"] += 1
        return None

    def compaction_text(self, item: dict) -> str:
        """The summary a compaction item holds, as fakehop writes it; one it cannot read replays as empty."""
        encrypted = clean(item.get("encrypted_content"))
        try:
            return base64.b64decode(encrypted.removeprefix(COMPACTION_PREFIX), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            self.captured.left_out["encrypted compaction content (replayed as an empty summary)"] += 1
            return ""


def hosted_step(item: dict) -> dict | None:
    """The server_tool step a hosted call's done item gives again (its `input` too); None for one
    it cannot (a web search that finds in a page)."""
    kind = item["type"]
    if kind == "web_search_call":
        action = object_in(item, "action")
        if action.get("type") == "open_page":
            return {
                "name": "web_fetch",
                "input": {"url": clean(action.get("url"))},
                "result": {"url": clean(action.get("url"))},
            }
        if action.get("type") != "search":
            return None
        sources = [source for source in action.get("sources") or [] if isinstance(source, dict)]
        pages = [{"url": clean(source.get("url"))} for source in sources if isinstance(source.get("url"), str)]
        return {"name": "web_search", "input": {"query": clean(action.get("query"))}, "result": pages}
    if kind == "file_search_call":
        hits = [
            {key: hit[key] for key in ("file_id", "filename", "score", "text") if hit.get(key) is not None}
            for hit in item.get("results") or []
            if isinstance(hit, dict)
        ]
        queries = [clean(query) for query in item.get("queries") or [] if isinstance(query, str)]
        return {"name": "file_search", "input": {"queries": queries}, "result": hits}
    if kind == "code_interpreter_call":
        logs = "".join(clean(output.get("logs")) for output in item.get("outputs") or [] if isinstance(output, dict))
        return {"name": "code_execution", "input": {"code": clean(item.get("code"))}, "result": {"stdout": logs}}
    if kind == "image_generation_call":
        return {"name": "image_generation", "input": {}, "result": clean(item.get("result"))}
    arguments = json_object(clean(item.get("arguments"))) or {}
    return {
        "name": "mcp",
        "server": clean(item.get("server_label")),
        "tool": clean(item.get("name")),
        "input": arguments,
        "result": clean(item.get("output")),
    }
