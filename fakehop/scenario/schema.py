"""A JSON Schema of the scenario format, for editors' YAML language servers (`fakehop schema`).

The loader in reader.py is the authority (it also checks what a schema cannot, such as
`use` references and regular expressions); this schema describes the same keys so that
editors can complete and check them while you type.
"""

from __future__ import annotations

from .model import FINISH_REASONS, MODERATION_CATEGORIES, SERVER_TOOL_NAMES
from .reader import (
    DURATION_PATTERN,
    FAIL_KINDS,
    MAX_DURATION,
    MAX_RATE_LIMIT_COUNT,
    MAX_TIMING_SEED,
    MAX_USAGE_COUNT,
    PROTOCOL_NAMES,
    QUOTE_SOURCES,
    RATE_LIMIT_COUNTS,
    REFUSAL_CATEGORIES,
    USAGE_KEYS,
)
from .textgen import ARGUMENTS, PROVIDERS

SCHEMA_ID = "https://fakehop.dev/schema/scenario-v1.json"


def _duration(description: str) -> dict:
    return {
        "description": description + " Seconds as a number, or a string with a unit: 250ms, 2s, 1.5m, 1h.",
        "anyOf": [
            {"type": "number", "minimum": 0, "maximum": MAX_DURATION},
            {"type": "string", "pattern": DURATION_PATTERN},
        ],
    }


def _text_source(what: str, quoting: bool = True) -> dict:
    """The forms a text takes; `quoting`: also the forms that quote the request, which reasoning may not."""
    faker = {
        "type": "object",
        "description": "Filler text made by Faker, the same for the same seed.",
        "properties": {
            "faker": {"enum": list(PROVIDERS)},
            "seed": {"type": "integer"},
            **{
                name: (
                    {"type": "boolean"}
                    if name.startswith("variable_")
                    else {"type": "integer", "minimum": 1, "maximum": 10000}
                )
                for name in ARGUMENTS
            },
        },
        "required": ["faker"],
        "additionalProperties": False,
    }
    quote = {
        "type": "object",
        "description": "Text that quotes the request: from the last user text (prompt) or a tool result it ends with (tool_result, of `tool` or the last).",
        "properties": {"from": {"enum": list(QUOTE_SOURCES)}, "tool": {"type": "string", "minLength": 1}},
        "required": ["from"],
        "additionalProperties": False,
    }
    template = {
        "type": "object",
        "description": "Text with {prompt}, {tool_result} and {tool_result:NAME} filled in from the request; {{ and }} for braces.",
        "properties": {"template": {"type": "string"}},
        "required": ["template"],
        "additionalProperties": False,
    }
    return {"description": what, "anyOf": [{"type": "string"}, faker, PIECES] + ([quote, template] if quoting else [])}


HEADER_NAME = {"pattern": "^[!#$%&'*+\\-.^_`|~0-9A-Za-z]+$", "description": "An HTTP header name (an RFC 9110 token)."}

TURN = [  # a turn number, or ">=N": from 1
    {"type": "integer", "minimum": 1},
    {"type": "string", "pattern": r"^\s*>=\s*0*[1-9]\d*\s*$"},
]

PIECES = {
    "type": "array",
    "minItems": 1,
    "items": {"type": "string"},
    "description": 'Explicit deltas, streamed as they are: ["Hel", "lo"]. Takes no chunk.',
}


def _reasoning() -> dict:
    what = (
        "Reasoning, shown as the request asks: summary parts on Responses (with reasoning.summary), "
        "a thinking block on Messages (with thinking), silence on Chat."
    )
    parts = {
        "type": "object",
        "description": "Several summary parts, each a text.",
        "properties": {
            "parts": {"type": "array", "minItems": 1, "items": _text_source("One summary part.", quoting=False)}
        },
        "required": ["parts"],
        "additionalProperties": False,
    }
    source = _text_source(what)
    return {"description": what, "anyOf": source["anyOf"] + [parts]}


_CHUNKING = {
    "chunk": {
        "description": "Split into deltas: word (one per word, with the whitespace before it), char, or N characters a delta. Default: one delta.",
        "anyOf": [{"enum": ["word", "char"]}, {"type": "integer", "minimum": 1}],
    },
    "interval": _duration("Pause between this step's deltas (default: the scenario's chunk_interval)."),
}


_ERROR_DETAILS = {
    "type": {"type": "string", "description": "The error's type, in place of the default (OpenAI and Anthropic)."},
    "code": {"type": "string", "description": "The error's code, in place of the default (OpenAI protocols)."},
    "param": {"type": "string", "description": "The error's param (OpenAI protocols; default null)."},
}


def _step_with(action: str, value: dict, chunked: bool = False, **more: dict) -> dict:
    properties = {action: value, **(_CHUNKING if chunked else {}), **more}
    step = {"type": "object", "properties": properties, "required": [action], "additionalProperties": False}
    if chunked:  # pieces are split already
        step["if"] = _pieces_given(action)
        step["then"] = {"not": {"required": ["chunk"]}}
    return step


def _pieces_given(action: str) -> dict:
    """Holds when the step's text, or its tool call's arguments, is a list of pieces."""
    if action in PIECE_FIELDS:
        field = PIECE_FIELDS[action]
        return {"properties": {action: {"properties": {field: {"type": "array"}}, "required": [field]}}}
    return {"properties": {action: {"type": "array"}}}


PIECE_FIELDS = {"tool_call": "arguments", "custom_tool_call": "input"}  # where a call step's pieces go


def _custom_tool_call() -> dict:
    return {
        "type": "object",
        "description": "A custom (free-text) tool's call: a custom_tool_call item on Responses, a custom tool call on Chat, a tool_use whose input is {input: TEXT} on Messages.",
        "properties": {
            "name": {"type": "string", "minLength": 1},
            "input": {
                "description": "The free-text input (not JSON); or its pieces, streamed as they are.",
                "anyOf": [{"type": "string"}, PIECES],
            },
            "id": {"type": "string", "description": "Call id; generated when left out."},
        },
        "required": ["name"],
        "additionalProperties": False,
    }


CITATIONS = {
    "type": "array",
    "minItems": 1,
    "description": "Web pages the text cites: url_citation annotations on Responses and Chat, web_search_result_location citations on Messages.",
    "items": {
        "type": "object",
        "properties": {
            "url": {"type": "string", "minLength": 1},
            "title": {"type": "string"},
            "cited_text": {
                "type": "string",
                "description": "Messages' cited_text; default: the text from start to end.",
            },
            "start": {"type": "integer", "minimum": 0, "description": "Character offset in the step's text."},
            "end": {
                "type": "integer",
                "minimum": 1,
                "description": "Character offset in the step's text, after start.",
            },
        },
        "required": ["url", "start", "end"],
        "additionalProperties": False,
    },
}


def _steps() -> dict:
    tool_call = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1},
            "arguments": {
                "description": "A mapping or a JSON string; or the JSON text's pieces, streamed as they are (not checked as JSON).",
                "anyOf": [{"type": "object"}, {"type": "string"}, PIECES],
            },
            "id": {"type": "string", "description": "Call id; generated when left out."},
            "caller": {
                "enum": ["code_execution"],
                "description": "A call the code of the latest earlier code_execution server_tool step makes "
                "(programmatic tool calling): Messages names that server_tool_use as the tool_use's caller, "
                "Responses makes the code a program item the function_call names; Chat Completions leaves it out.",
            },
        },
        "required": ["name"],
        "additionalProperties": False,
    }
    fail = {
        "anyOf": [
            {"enum": list(FAIL_KINDS)},
            {
                "type": "object",
                "properties": {
                    "kind": {"enum": list(FAIL_KINDS)},
                    "message": {"type": "string"},
                    "error_event": {
                        "type": "boolean",
                        "description": "Responses: an `error` event before `response.failed` (default true).",
                    },
                    **_ERROR_DETAILS,
                },
                "required": ["kind"],
                "additionalProperties": False,
            },
        ]
    }
    step = {
        "anyOf": [
            {
                "enum": ["keepalive", "stall", "hang", "disconnect", "redacted_thinking"],
                "description": "A step written alone.",
            },
            _step_with(
                "text",
                _text_source("Text output."),
                chunked=True,
                phase={"enum": ["commentary", "final_answer"], "description": "Responses: the message item's phase."},
                citations=CITATIONS,
            ),
            _step_with(
                "refusal",
                _text_source(
                    "A refusal: Chat's delta.refusal, a refusal content part on Responses, "
                    "text and stop_reason refusal on Messages."
                ),
                chunked=True,
            ),
            _step_with(
                "reasoning",
                _reasoning(),
                chunked=True,
                signature={
                    "type": "string",
                    "description": "The thinking block's signature on Messages (the block's first step gives it); default: drawn at random.",
                },
            ),
            _step_with(
                "redacted_thinking",
                {
                    "description": "Reasoning never shown: Messages' redacted_thinking block with this opaque data (made up when left out).",
                    "type": ["string", "null"],
                    "minLength": 1,
                },
            ),
            _step_with("tool_call", tool_call, chunked=True),
            _step_with("custom_tool_call", _custom_tool_call(), chunked=True),
            _step_with("delay", _duration("Silence; keepalives still flow.")),
            _step_with("keepalive", {"type": "null"}),
            _step_with(
                "stall",
                {
                    "description": "Nothing, or continue to resume after stall_timeout.",
                    "enum": [None, True, "continue"],
                },
            ),
            _step_with("hang", {"type": "null"}),
            _step_with("disconnect", {"type": "null"}),
            _step_with("fail", fail),
            _step_with("raw", {"type": "string", "description": "Bytes written as they are."}),
            *_hosted_steps(),
        ]
    }
    return {"type": "array", "minItems": 1, "items": step}


def _hosted_steps() -> list[dict]:
    """The server_tool and compaction steps."""
    server_tool = {
        "type": "object",
        "description": "A tool the provider runs itself: its call and result as the protocol writes them "
        "(Responses: a *_call item; Messages: server_tool_use or mcp_tool_use and its result block; Chat: left out). "
        "Without result, a call the turn pauses on (finish pause_turn).",
        "properties": {
            "name": {"enum": list(SERVER_TOOL_NAMES)},
            "input": {"anyOf": [{"type": "object"}, {"type": "string"}], "description": "A mapping or a JSON object."},
            "result": {
                "description": "web_search: [{url, title, page_age}]; web_fetch: text or {content, title, url}; "
                "file_search: [{file_id, filename, score, text}]; code_execution: stdout or {stdout, stderr, "
                "return_code}; image_generation: base64; mcp: text.",
            },
            "id": {"type": "string", "description": "Call id; generated when left out."},
            "server": {"type": "string", "description": "mcp: the MCP server's name."},
            "tool": {"type": "string", "description": "mcp: the tool called on it."},
        },
        "required": ["name"],
        "additionalProperties": False,
    }
    compaction = {
        "type": "string",
        "description": "The summary a context compaction left: Messages' compaction block, Responses' compaction item.",
    }
    return [_step_with("server_tool", server_tool, chunk=_CHUNKING["chunk"]), _step_with("compaction", compaction)]


def _http_error() -> dict:
    return {
        "type": "object",
        "properties": {
            "status": {"type": "integer", "minimum": 400, "maximum": 599},
            "message": {"type": "string"},
            "retry_after": {
                "description": "Retry-After header, as written.",
                "anyOf": [{"type": "number", "minimum": 0}, {"type": "string"}],
            },
            "headers": {
                "type": "object",
                "propertyNames": HEADER_NAME,
                "additionalProperties": {"type": ["string", "number"]},
            },
            **_ERROR_DETAILS,
        },
        "required": ["status"],
        "additionalProperties": False,
    }


def _settings() -> dict:
    return {
        "model": {"type": "string", "description": "Model written into events; default: the request's own."},
        "keepalive": _duration("': hopbase-keepalive' after this much silence; 0 = never (default 10s)."),
        "stall_timeout": _duration("How long a stall lasts before the gateway gives up (default 120s)."),
        "chunk_interval": _duration("Default pause between the deltas a step is split into (default 0)."),
        "usage": {
            "type": "object",
            "description": "Token counts; input, output and reasoning are estimated unless set, the others are 0.",
            "properties": {key: {"type": "integer", "minimum": 0, "maximum": MAX_USAGE_COUNT} for key in USAGE_KEYS},
            "additionalProperties": False,
        },
        "finish": {
            "enum": list(FINISH_REASONS),
            "description": "Default: tool_calls if the answer calls a tool, pause_turn if it ends on a server_tool "
            "without a result, else stop.",
        },
        "stop_sequence": {
            "type": "string",
            "description": "With finish: stop_sequence, the sequence Messages reports.",
        },
        "rate_limit": {
            "type": "object",
            "description": "Rate-limit headers on successful answers, counting down per answer; what is left out has a default.",
            "properties": {
                **{
                    key: {"type": "integer", "minimum": 1, "maximum": MAX_RATE_LIMIT_COUNT} for key in RATE_LIMIT_COUNTS
                },
                "window": _duration("How long until the counts are back to the limits (default 1m)."),
                "enforce": {
                    "type": "boolean",
                    "description": "Once the window's requests or tokens are used up, answer 429 until it opens again.",
                },
            },
            "additionalProperties": False,
        },
        "timing": timing_schema(),
        "force_reasoning": {
            "type": "boolean",
            "description": "Show reasoning to requests that did not ask for it (Messages thinking, Responses summaries).",
        },
        "stop_details": {
            "type": "object",
            "description": "What Messages' stop_details says of a refusal (a refusal step, or finish: content_filter).",
            "properties": {
                "category": {"enum": [*REFUSAL_CATEGORIES, None]},
                "explanation": {"type": ["string", "null"]},
            },
            "additionalProperties": False,
        },
        "moderation": {
            "type": "object",
            "description": "The categories Responses' moderation results flag, for a request that asks for moderation.",
            "properties": {
                key: {"type": "array", "items": {"enum": list(MODERATION_CATEGORIES)}} for key in ("input", "output")
            },
            "additionalProperties": False,
        },
    }


def timing_schema() -> dict:
    """`timing:`, as a scenario and a `fakehop serve --timing` file hold it."""
    return {
        "type": "object",
        "description": "How long the model takes: explicit delay, interval and chunk_interval still win.",
        "properties": {
            "first_token": {
                "type": "object",
                "description": "Time to the first delta, drawn from a log-normal with this p50 and p99.",
                "properties": {
                    "p50": _duration("The median time to the first delta; more than 0."),
                    "p99": _duration("The 99th percentile; at least the p50."),
                },
                "required": ["p50", "p99"],
                "additionalProperties": False,
            },
            "tokens_per_second": {
                "type": "object",
                "description": "Pace of the later deltas: each pauses for its tokens at this rate.",
                "properties": {
                    "mean": {"type": "number", "exclusiveMinimum": 0, "maximum": 1_000_000},
                    "jitter": {
                        "type": "number",
                        "minimum": 0,
                        "maximum": 1,
                        "description": "Relative spread of each pause: drawn evenly within 1 ± jitter of it (default 0).",
                    },
                },
                "required": ["mean"],
                "additionalProperties": False,
            },
            "seed": {
                "type": "integer",
                "minimum": 0,
                "maximum": MAX_TIMING_SEED,
                "description": "Every answer takes the same pauses; without it each answer draws its own.",
            },
        },
        "anyOf": [{"required": ["first_token"]}, {"required": ["tokens_per_second"]}],
        "additionalProperties": False,
    }


def scenario_schema() -> dict:
    settings = _settings()
    body = {"steps": _steps(), "http_error": _http_error()}
    entry = {
        "type": "object",
        "properties": {
            **body,
            "use": {
                "type": "string",
                "minLength": 1,
                "description": "Play another scenario by name; alone in its entry.",
            },
            **settings,
        },
        "oneOf": [{"required": ["steps"]}, {"required": ["http_error"]}, {"required": ["use"], "maxProperties": 1}],
        "additionalProperties": False,
    }
    match = {
        "type": "object",
        "description": "Picks this scenario for requests that name none; every rule given must fit.",
        "properties": {
            "protocol": {"enum": list(PROTOCOL_NAMES)},
            "model": {"type": "string", "description": "Glob on the request's model."},
            "prompt": {
                "type": "string",
                "description": "Substring of the last user-authored text; /regex/ for a regular expression.",
            },
            "turn": {
                "description": 'The request\'s turn (1 + the assistant turns it sends): a number, a list of them, or ">=N".',
                "anyOf": [*TURN, {"type": "array", "minItems": 1, "items": {"anyOf": TURN}}],
            },
            "tool_result": {
                "description": "true: the request ends with tool results; false: it does not; a name: it ends with a result of that tool.",
                "anyOf": [{"type": "boolean"}, {"type": "string", "minLength": 1}],
            },
            "tools": {"type": "string", "description": "The request offers a tool of this name."},
            "system": {
                "type": "string",
                "description": "Substring of the system prompt or instructions; /regex/ for a regular expression.",
            },
            "header": {
                "type": "object",
                "description": "Request headers whose value fits each glob.",
                "propertyNames": HEADER_NAME,
                "additionalProperties": {"type": ["string", "number"]},
            },
        },
        "additionalProperties": False,
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "fakehop scenario (v1)",
        "type": "object",
        "properties": {
            "name": {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"},
            "description": {"type": "string"},
            "match": match,
            **body,
            "sequence": {
                "type": "array",
                "minItems": 1,
                "items": entry,
                "description": "Request N plays entry N; the last repeats.",
            },
            "conversation": {
                "type": "array",
                "minItems": 1,
                "items": entry,
                "description": "Turn N of the request's conversation plays entry N; the last repeats.",
            },
            **settings,
        },
        "oneOf": [
            {"required": ["steps"]},
            {"required": ["http_error"]},
            {"required": ["sequence"]},
            {"required": ["conversation"]},
        ],
        "additionalProperties": False,
    }
