"""Everything a buggy client can send, against a real server started as `fakehop serve` starts it.

Each bad request gets the right status and its protocol's own error shape (OpenAI's
`{"error": {...}}` on /v1/chat/completions and /v1/responses, Anthropic's
`{"type": "error", "error": {...}}` on /v1/messages): never a stack trace, never a dropped
connection. The server runs with --api-key, so bad input is also checked behind auth.
FAKEHOP_FUZZ_EXAMPLES sets the number of random request bodies (150 by default; `make soak` sends more).
"""

from __future__ import annotations

import asyncio
import functools
import gzip
import http.client
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict

from fakehop.protocols import PROTOCOLS
from fakehop.scenario.library import Library
from fakehop.server.app import start
from fakehop.server.gateway import Gateway
from fakehop.server.intake import (
    LARGE_BODY_BYTES,
    MAX_BACKSLASHES,
    MAX_BODY_BYTES,
    MAX_HEADER_BYTES,
    MAX_JSON_DEPTH,
    MAX_JSON_VALUES,
    MAX_MODEL_CHARS,
)
from fakehop.testing.thread_server import ThreadServer

from .conftest import FAST

KEY = "sekret"
AUTH_HEADER = {
    "chat": "Authorization",
    "responses": "Authorization",
    "messages": "x-api-key",
}  # as the SDKs send the key


def auth(protocol: str, key: str = KEY) -> dict[str, str]:
    name = AUTH_HEADER[protocol]
    return {name: f"Bearer {key}" if name == "Authorization" else key}


JSON = {"Content-Type": "application/json"}
FORM = {"Content-Type": "application/x-www-form-urlencoded"}  # what `curl -d` sends
GZIP = {"Content-Encoding": "gzip"}
GOOD = {name: json.dumps(module.EXAMPLE_REQUEST).encode() for name, module in PROTOCOLS.items()}
LIST_FIELD = {"chat": "messages", "responses": "input", "messages": "messages"}
LIMIT_FIELD = {"chat": "max_tokens", "responses": "max_output_tokens", "messages": "max_tokens"}
REQUIRED_FIELD = {"chat": "messages", "responses": "input", "messages": "max_tokens"}


def with_field(protocol: str, key: str, value) -> bytes:
    return json.dumps({**PROTOCOLS[protocol].EXAMPLE_REQUEST, key: value}).encode()


def without_field(protocol: str, key: str) -> bytes:
    return json.dumps({k: v for k, v in PROTOCOLS[protocol].EXAMPLE_REQUEST.items() if k != key}).encode()


def nested(depth: int) -> bytes:
    return b'{"model": "m", "metadata": ' + b"[" * depth + b"]" * depth + b"}"


def large(body: bytes) -> bytes:
    """`body`, a JSON object, with a field of LARGE_BODY_BYTES before its own: read in the thread for large bodies."""
    return b'{"padding": "' + b"p" * LARGE_BODY_BYTES + b'", ' + body[1:]


@functools.cache
def gzip_bomb() -> bytes:
    """65 KB, inflating to 64 MiB."""
    return gzip.compress(b'{"model": "m", "x": "' + b"a" * (2 * MAX_BODY_BYTES) + b'"}')


def of_values(count: int) -> bytes:
    return b'{"model": "m", "metadata": [' + b",".join([b"1"] * count) + b"]}"


@dataclass(frozen=True)
class Bad:
    """One bad request and what it must get: `status`, and `says` somewhere in the error message.
    A body of megabytes is given as the function that makes it, called by the test that sends it,
    so that collecting the matrix in every xdist worker neither builds nor holds them all."""

    name: str
    protocol: str
    body: bytes | Callable[[], bytes] = b""
    status: int = 400
    says: str = ""
    headers: dict = field(default_factory=dict)
    method: str = "POST"
    path: str | None = None  # default: the protocol's own

    @property
    def id(self) -> str:
        return f"{self.protocol}-{self.name}"

    @property
    def content(self) -> bytes:
        return self.body() if callable(self.body) else self.body


def tool_result_turns(protocol: str, call_id: Any) -> bytes:
    """A conversation whose tool result names its call by `call_id`, a value of any JSON type."""
    if protocol == "chat":
        call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        messages = [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call_id, "content": "done"},
        ]
        return json.dumps({"model": "m", "messages": messages}).encode()
    if protocol == "messages":
        messages = [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "f", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": "done"}]},
        ]
        return json.dumps({"model": "m", "max_tokens": 10, "messages": messages}).encode()
    items = [
        {"role": "user", "content": "Hi"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": call_id, "output": "done"},
    ]
    return json.dumps({"model": "m", "input": items}).encode()


TOOL_RESULT_WITH_ID = {protocol: functools.partial(tool_result_turns, protocol) for protocol in PROTOCOLS}


def matrix() -> list[Bad]:
    cases = []
    for p in PROTOCOLS:
        cases += [
            Bad("malformed-json", p, b'{"model": "m", "messages": [', says="could not parse the JSON body"),
            Bad("json-array", p, b"[1, 2, 3]", says="must be a JSON object"),
            Bad("json-string", p, b'"hello"', says="must be a JSON object"),
            Bad("json-null", p, b"null", says="must be a JSON object"),
            Bad("empty-body", p, b"", says="body is empty"),
            Bad("whitespace-body", p, b" \r\n\t ", says="body is empty"),
            Bad(f"{LIST_FIELD[p]}-not-a-list", p, with_field(p, LIST_FIELD[p], 42), says=LIST_FIELD[p]),
            Bad("stream-not-boolean", p, with_field(p, "stream", "yes"), says="stream"),
            Bad(f"{LIMIT_FIELD[p]}-not-a-number", p, with_field(p, LIMIT_FIELD[p], "ten"), says=LIMIT_FIELD[p]),
            Bad(f"{LIMIT_FIELD[p]}-zero", p, with_field(p, LIMIT_FIELD[p], 0), says=LIMIT_FIELD[p]),
            Bad("model-not-a-string", p, with_field(p, "model", ["gpt"]), says="model"),
            Bad("missing-model", p, without_field(p, "model"), says="model"),
            Bad(f"missing-{REQUIRED_FIELD[p]}", p, without_field(p, REQUIRED_FIELD[p]), says=REQUIRED_FIELD[p]),
            Bad(
                "form-encoded-form",
                p,
                b"model=m&stream=true",
                headers=FORM,
                says="this one came as application/x-www-form-urlencoded",
            ),
            Bad(
                "over-the-size-limit",
                p,
                lambda: b"{" + b" " * MAX_BODY_BYTES + b"}",
                status=413,
                says="larger than the limit",
            ),
            Bad("get-instead-of-post", p, method="GET", status=405, says="not allowed"),
            Bad(
                "unknown-scenario",
                p,
                GOOD[p],
                headers={"X-Fakehop-Scenario": "no-such-thing"},
                says="Unknown scenario 'no-such-thing'",
            ),
            Bad(
                "scenario-with-a-path",
                p,
                GOOD[p],
                headers={"X-Fakehop-Scenario": "../../../etc/passwd"},
                says="Unknown scenario '../../../etc/passwd'",
            ),
            Bad("seed-not-a-number", p, GOOD[p], headers={"X-Fakehop-Seed": "one"}, says="X-Fakehop-Seed"),
            Bad(
                "misspelled-fakehop-header",
                p,
                GOOD[p],
                headers={"X-Fakehop-Senario": "hello"},
                says="Unknown header X-Fakehop-Senario: fakehop reads only X-Fakehop-Fault, X-Fakehop-Scenario, X-Fakehop-Seed and X-Fakehop-Session",
            ),
            Bad(
                "unknown-fakehop-header",
                p,
                GOOD[p],
                headers={"x-fakehop-time-scale": "0.1"},
                says="Unknown header x-fakehop-time-scale",
            ),
            Bad("wrong-key", p, GOOD[p], headers=auth(p, "wrong"), status=401, says="Invalid API key"),
            Bad("empty-key", p, GOOD[p], headers={AUTH_HEADER[p]: ""}, status=401, says="Invalid API key"),
            Bad("invalid-utf8", p, b'{"model": "\xff\xfe", "stream": true}', says="not valid UTF-8"),
            Bad("latin1-text", p, '{"model": "café"}'.encode("latin-1"), says="not valid UTF-8"),
            Bad("unpaired-surrogate", p, with_field(p, "model", "\ud800"), says="unpaired UTF-16 surrogate"),
            Bad("nested-100000-deep", p, nested(100_000), says=f"nested more than {MAX_JSON_DEPTH} levels"),
            Bad(
                "nested-just-over-the-limit",
                p,
                nested(MAX_JSON_DEPTH),
                says=f"nested more than {MAX_JSON_DEPTH} levels",
            ),
            Bad("gzip-that-is-not-gzip", p, GOOD[p], headers=GZIP, says="not valid gzip data"),
            Bad("gzip-cut-short", p, gzip.compress(GOOD[p])[:-12], headers=GZIP, says="not valid gzip data"),
            Bad(
                "deflate-that-is-not-deflate",
                p,
                b"\x78\x9cnot deflate",
                headers={"Content-Encoding": "deflate"},
                says="not valid deflate data",
            ),
            Bad(
                "brotli-body",
                p,
                b"\x1b\x03\x00",
                headers={"Content-Encoding": "br"},
                status=415,
                says="Content-Encoding 'br' is not supported",
            ),
            Bad(
                "zstd-body",
                p,
                b"\x28\xb5\x2f\xfd",
                headers={"Content-Encoding": "zstd"},
                status=415,
                says="Content-Encoding 'zstd' is not supported",
            ),
            Bad("gzip-bomb", p, gzip_bomb, headers=GZIP, status=413, says="larger than the limit"),
            Bad("nan", p, GOOD[p][:-1] + b', "temperature": NaN}', says="NaN, which JSON does not allow"),
            Bad(
                "infinity",
                p,
                GOOD[p][:-1] + b', "temperature": -Infinity}',
                says="-Infinity, which JSON does not allow",
            ),
            Bad(
                "model-over-256-characters",
                p,
                with_field(p, "model", "m" * (MAX_MODEL_CHARS + 1)),
                says="maximum length 256",
            ),
            Bad("two-mib-model", p, functools.partial(with_field, p, "model", "m" * 2**21), says="maximum length 256"),
            Bad(
                "foreign-host",
                p,
                GOOD[p],
                headers={"Host": "attacker.example:8080"},
                status=403,
                says="does not answer requests for host 'attacker.example:8080'",
            ),
            Bad(
                "too-many-values",
                p,
                functools.partial(of_values, MAX_JSON_VALUES + 1),
                status=413,
                says=f"it holds more than {MAX_JSON_VALUES:,} values",
            ),
            Bad(
                "too-many-backslashes",
                p,
                functools.partial(with_field, p, "metadata", {"a": "\n" * (MAX_BACKSLASHES + 1)}),
                status=413,
                says=f"it holds more than {MAX_BACKSLASHES:,} backslashes",
            ),
            Bad(
                "unpaired-surrogate-after-an-escaped-backslash",
                p,
                GOOD[p][:-1] + b', "metadata": {"a": "\\\\ud800\\udc00"}}',
                says="unpaired UTF-16 surrogate",
            ),
            Bad(
                "large-malformed-json", p, large(b'{"model": "m", "messages": ['), says="could not parse the JSON body"
            ),
            Bad("large-invalid-utf8", p, large(b'{"model": "\xff\xfe", "stream": true}'), says="not valid UTF-8"),
            Bad(
                "large-unpaired-surrogate", p, large(with_field(p, "model", "\ud800")), says="unpaired UTF-16 surrogate"
            ),
            Bad(
                "large-nested-just-over-the-limit",
                p,
                large(nested(MAX_JSON_DEPTH)),
                says=f"nested more than {MAX_JSON_DEPTH} levels",
            ),
            Bad("large-nan", p, large(GOOD[p][:-1] + b', "temperature": NaN}'), says="NaN, which JSON does not allow"),
            Bad(
                "large-too-many-values",
                p,
                lambda: large(of_values(MAX_JSON_VALUES + 1)),
                status=413,
                says=f"it holds more than {MAX_JSON_VALUES:,} values",
            ),
            Bad(f"large-{LIST_FIELD[p]}-not-a-list", p, large(with_field(p, LIST_FIELD[p], 42)), says=LIST_FIELD[p]),
        ]
    cases += [
        Bad(f"tool-result-id-{kind}", protocol, TOOL_RESULT_WITH_ID[protocol](call_id), says=says)
        for kind, call_id in (("a-list", ["c1"]), ("an-object", {"id": "c1"}), ("a-number", 5))
        for protocol, says in (
            ("chat", "tool_call_id"),
            ("messages", "tool_use_id"),
            ("responses", "No tool call found"),
        )
    ]
    cases += [
        Bad(
            "unknown-path",
            "chat",
            GOOD["chat"],
            path="/v1/chat/complete",
            status=404,
            says="Unknown path /v1/chat/complete",
        ),
        Bad(
            "unknown-path",
            "messages",
            GOOD["messages"],
            path="/v1/message",
            status=404,
            says="Unknown path /v1/message",
            headers={"anthropic-version": "2023-06-01"},
        ),
        Bad(
            "max-tokens-beside-max-completion-tokens-not-a-number",
            "chat",
            json.dumps({**PROTOCOLS["chat"].EXAMPLE_REQUEST, "max_completion_tokens": 5, "max_tokens": "ten"}).encode(),
            says="'max_tokens'",
        ),
        Bad("max-tool-calls-zero", "responses", with_field("responses", "max_tool_calls", 0), says="'max_tool_calls'"),
        Bad(
            "tools-not-a-list",
            "messages",
            with_field("messages", "tools", {"name": "x"}),
            says="tools: Input should be a valid list",
        ),
        Bad(
            "bearer-key-of-another-server",
            "messages",
            GOOD["messages"],
            headers={"x-api-key": "", "Authorization": "Bearer wrong"},
            status=401,
        ),
    ]
    return cases


@pytest.fixture
async def real_url(library):
    """A server started by `start()`, as `fakehop serve` and the pytest plugin start it, with --api-key."""
    runner, url = await start(Gateway(library, time_scale=FAST, api_key=KEY))
    yield url
    await runner.cleanup()


async def send(url: str, method: str, path: str, body: bytes, headers: dict) -> tuple[int, CIMultiDict, str]:
    async with aiohttp.ClientSession() as session:
        async with session.request(method, url + path, data=body, headers=headers) as response:
            return response.status, response.headers.copy(), await response.text()


def check_error_shape(protocol: str, status: int, headers: dict, text: str) -> str:
    """The message of an error answer, after checking it is in `protocol`'s own shape."""
    assert headers["Content-Type"].startswith("application/json")
    assert headers[PROTOCOLS[protocol].REQUEST_ID_HEADER].startswith("req_")
    body = json.loads(text)
    if protocol == "messages":
        assert headers["x-should-retry"] == "false"
        assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
        assert body["error"]["type"] == {
            401: "authentication_error",
            403: "permission_error",
            404: "not_found_error",
            413: "request_too_large",
        }.get(status, "invalid_request_error")
    else:
        assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
        assert body["error"]["type"] == "invalid_request_error"
    return body["error"]["message"]


@pytest.mark.parametrize("bad", matrix(), ids=lambda bad: bad.id)
async def test_bad_request_gets_a_clear_error_in_its_protocols_shape(real_url, bad, caplog):
    headers = {**auth(bad.protocol), **JSON, **bad.headers}
    path = bad.path or PROTOCOLS[bad.protocol].PATH
    status, response_headers, text = await send(real_url, bad.method, path, bad.content, headers)
    assert status == bad.status, text
    assert bad.says in check_error_shape(bad.protocol, status, response_headers, text)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_matrix_is_large():
    assert len(matrix()) >= 25


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
async def test_a_json_body_sent_as_a_form_is_read_as_json(real_url, protocol):
    """`curl -d` labels its body application/x-www-form-urlencoded; fakehop reads every body as JSON."""
    status, _, text = await send(real_url, "POST", PROTOCOLS[protocol].PATH, GOOD[protocol], {**auth(protocol), **FORM})
    assert status == 200, text


@pytest.mark.parametrize(
    "body",
    [
        large(
            GOOD["chat"][:-1]
            + b', "metadata": {"smile": "\\ud83d\\ude00", "deep": '
            + b"[" * (MAX_JSON_DEPTH - 2)
            + b"]" * (MAX_JSON_DEPTH - 2)
            + b"}}"
        ),
        GOOD["chat"][:-1]
        + b', "metadata": {"smile": "\\ud83d\\ude00", "deep": '
        + b"[" * (MAX_JSON_DEPTH - 2)
        + b"]" * (MAX_JSON_DEPTH - 2)
        + b"}}",
        of_values(MAX_JSON_VALUES - 100)[:-1] + b', "messages": [{"role": "user", "content": "hi"}]}',
        json.dumps({**PROTOCOLS["chat"].EXAMPLE_REQUEST, "metadata": {"a": "\n" * MAX_BACKSLASHES}}).encode(),
    ],
    ids=["large", "small", "most-values", "most-backslashes"],
)
async def test_a_body_at_the_limits_is_read(real_url, body):
    """Nesting to the limit, a surrogate pair, as many values as a body may hold: answered, on either side of LARGE_BODY_BYTES."""
    status, _, text = await send(real_url, "POST", PROTOCOLS["chat"].PATH, body, {**auth("chat"), **JSON})
    assert status == 200, text


async def test_a_body_just_under_the_limit_is_read(real_url):
    padding = " " * (MAX_BODY_BYTES - len(GOOD["chat"]) - 1)
    status, _, _ = await send(
        real_url, "POST", PROTOCOLS["chat"].PATH, GOOD["chat"][:-1] + padding.encode() + b"}", {**auth("chat"), **JSON}
    )
    assert status == 200


def in_chunks(body: bytes, size: int = 64 * 1024):
    """`body` as an async generator: aiohttp sends it chunked, with no Content-Length."""

    async def chunks():
        for start in range(0, len(body), size):
            yield body[start : start + size]

    return chunks()


@pytest.mark.parametrize("body", [GOOD["chat"], large(GOOD["chat"])], ids=["small", "large"])
async def test_a_chunked_body_is_read(real_url, body):
    async with aiohttp.ClientSession() as session:
        async with session.post(
            real_url + PROTOCOLS["chat"].PATH, data=in_chunks(body), headers={**auth("chat"), **JSON}
        ) as response:
            assert response.status == 200, await response.text()
            assert "chunked" in response.request_info.headers.get("Transfer-Encoding", "")


@pytest.mark.parametrize("path,limit", [(PROTOCOLS["chat"].PATH, MAX_BODY_BYTES), ("/_fakehop/queue", 2 * 1024 * 1024)])
async def test_a_chunked_body_over_the_limit_is_a_413(real_url, path, limit):
    body = b"{" + b" " * limit + b"}"
    async with aiohttp.ClientSession() as session:
        async with session.post(
            real_url + path, data=in_chunks(body, 1024 * 1024), headers={**auth("chat"), **JSON}
        ) as response:
            assert response.status == 413
            assert "larger than the limit" in await response.text()


@pytest.mark.parametrize(
    "path,body,says",
    [
        ("/_fakehop/queue", b'{"scenario": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested more than"),
        ("/_fakehop/default", b'{"scenario": ' + b'{"a": ' * 500 + b"1" + b"}" * 500 + b"}", "nested more than"),
        ("/_fakehop/queue", b'{"scenario": {"steps": [{"text": "\\ud800"}]}}', "unpaired UTF-16 surrogate"),
        (
            "/_fakehop/scenarios?name=deep",
            b'{"steps": [{"tool_call": {"name": "f", "arguments": ' + b'{"a": ' * 900 + b"1" + b"}" * 900 + b"}}]}",
            "nested more than",
        ),
    ],
    ids=["queue-100000-deep", "default-500-deep", "queue-unpaired-surrogate", "scenario-900-deep"],
)
async def test_control_api_refuses_json_fakehop_could_not_carry_on_with(real_url, caplog, path, body, says):
    method = "PUT" if path.endswith("default") else "POST"
    status, _, text = await send(real_url, method, path, body, JSON)
    assert status == 400 and says in json.loads(text)["error"]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


# ---------------------------------------------------------------- headers aiohttp answers itself


async def test_headers_as_big_as_real_clients_send_are_accepted(real_url):
    """Big tokens and cookies (some identity providers issue 10+ KiB ones) are over aiohttp's 8190-byte default."""
    big = {"Cookie": "c" * 40_000, "X-Client-Token": "t" * (MAX_HEADER_BYTES - 100)}
    status, _, text = await send(
        real_url, "POST", PROTOCOLS["chat"].PATH, GOOD["chat"], {**auth("chat"), **JSON, **big}
    )
    assert status == 200, text


@pytest.mark.parametrize(
    "name,request_head",
    [
        (
            "header-over-the-limit",
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Big: " + "a" * (MAX_HEADER_BYTES + 1) + "\r\n",
        ),
        (
            "request-line-over-the-limit",
            "POST /v1/chat/completions?" + "a" * (MAX_HEADER_BYTES + 1) + " HTTP/1.1\r\nHost: x\r\n",
        ),
        (
            "too-many-headers",
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + "".join(f"X-H{i}: v\r\n" for i in range(200)),
        ),
        ("header-line-without-a-colon", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nnot a header\r\n"),
    ],
)
async def test_requests_aiohttp_cannot_parse_get_a_400_and_a_warning(real_url, caplog, name, request_head):
    """aiohttp answers these itself, in plain text, before fakehop sees them: a clean 400 that
    closes the connection, and one WARNING line in the log instead of an ERROR traceback."""
    answer = await raw_exchange(real_url, (request_head + "Content-Length: 2\r\n\r\n{}").encode())
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line.split()[1] == b"400"
    assert b"Content-Type: text/plain" in rest
    problems = [r for r in caplog.records if r.name == "aiohttp.server"]
    assert [r.levelname for r in problems] == ["WARNING"]
    assert problems[0].getMessage().startswith("refused a request from 127.0.0.1 that is not valid HTTP (400 ")
    assert problems[0].exc_info is None


async def raw_exchange(url: str, data: bytes) -> bytes:
    address = urlsplit(url)
    reader, writer = await asyncio.open_connection(address.hostname, address.port)
    writer.write(data)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return answer


# ---------------------------------------------------------------- any JSON object at all

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 2**70)
    | st.floats()
    | st.text(max_size=6)
    | st.sampled_from(["user", "assistant", "system", "message", "text", "input_text", "function_call"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["role", "content", "type", "text", "name"]) | st.text(max_size=4), inner, max_size=4
        )
    ),
    max_leaves=16,
)
FIELDS = st.sampled_from(
    [
        "model",
        "messages",
        "input",
        "stream",
        "max_tokens",
        "max_output_tokens",
        "max_completion_tokens",
        "stream_options",
        "system",
        "thinking",
        "tools",
        "tool_choice",
        "instructions",
        "metadata",
        "temperature",
    ]
)


@pytest.fixture(scope="module")
def thread_url():
    with ThreadServer(Gateway(Library.load(), time_scale=FAST)) as server:
        yield server.url


@settings(
    max_examples=int(os.environ.get("FAKEHOP_FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    protocol=st.sampled_from(sorted(PROTOCOLS)),
    changes=st.dictionaries(FIELDS, JSON_VALUES, max_size=4),
    scenario=st.sampled_from(
        ["hello", "weather-tool", "think-then-tool", "fail-rate-limit", "max-tokens", "rate-limited"]
    ),
)
@example(protocol="messages", changes={"tools": [{"type": []}]}, scenario="hello")  # a tool whose type names no key
@example(protocol="chat", changes={"input": None, "tools": [{"type": {}}]}, scenario="hello")
@example(
    protocol="chat",
    changes={
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "tool_calls": [{"id": "c", "type": ["function"]}]},
            {"role": "tool", "tool_call_id": "c", "content": "x"},
        ]
    },
    scenario="hello",
)
def test_any_json_object_gets_an_answer_or_a_4xx_in_shape(thread_url, protocol, changes, scenario):
    body = json.dumps({**PROTOCOLS[protocol].EXAMPLE_REQUEST, **changes}).encode()
    address = urlsplit(thread_url)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=10)
    try:
        connection.request("POST", PROTOCOLS[protocol].PATH, body, {**JSON, "X-Fakehop-Scenario": scenario})
        response = connection.getresponse()
        text = response.read().decode()
    finally:
        connection.close()
    if response.status == 400:
        check_error_shape(protocol, 400, response.headers, text)
    else:
        assert response.status in (200, 429), text
