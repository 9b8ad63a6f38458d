"""A request body is parsed by orjson where orjson reads it as Python's json does, and by json
otherwise: integers past 64 bits (orjson makes them floats), numbers past the largest float, unpaired surrogates, NaN, a
byte order mark, bytes that are not UTF-8, data after the value, nesting past orjson's limit.
Whichever parses it, fakehop answers and journals the body as it always has, for a small body and
for a large one, parsed in the bodies' thread."""

from __future__ import annotations

import aiohttp
import pytest

from fakehop.server.app import create_app
from fakehop.server.intake import LARGE_BODY_BYTES, MAX_JSON_DEPTH, MAX_JSON_VALUES

CHAT = "/v1/chat/completions"
HI = b'"messages": [{"role": "user", "content": "hi"}]'
PADDING = {"small": 0, "large": LARGE_BODY_BYTES}  # a large body is parsed in the bodies' thread
NOT_PARSED = "We could not parse the JSON body of your request. The body must be a JSON object."
NOT_USED = "We could not use the JSON body of your request: "
TOO_DEEP = f"{NOT_USED}it is nested more than {MAX_JSON_DEPTH} levels deep."


def chat_body(size: str, *fields: bytes) -> bytes:
    """A chat request of the model "m" saying "hi", with `fields` after those, padded to `size`."""
    padding = [b'"padding": "' + b"x" * PADDING[size] + b'"'] if PADDING[size] else []
    return b"{" + b", ".join([*padding, b'"model": "m"', HI, *fields]) + b"}"


def nested(depth: int) -> bytes:
    return b'"metadata": ' + b"[" * depth + b"]" * depth


@pytest.fixture
async def url(aiohttp_server, gateway) -> str:
    server = await aiohttp_server(create_app(gateway))
    return str(server.make_url("")).rstrip("/")


async def sent(url: str, raw: bytes) -> tuple[int, dict, dict | None]:
    """The status and JSON answer to the chat request `raw`, and the body the journal kept of it."""
    async with aiohttp.ClientSession() as session:
        async with session.post(url + CHAT, data=raw, headers={"Content-Type": "application/json"}) as response:
            status, answer = response.status, await response.json()
        async with session.get(url + "/_fakehop/requests") as response:
            [record] = (await response.json())["requests"]
    return status, answer, record["body"]


def refused(message: str, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": None}}


@pytest.mark.parametrize("size", PADDING)
async def test_an_integer_past_64_bits_is_kept_exact(url, size):
    status, answer, kept = await sent(url, chat_body(size, b'"max_tokens": 98765432109876543210'))
    assert status == 200, answer
    assert type(kept["max_tokens"]) is int and kept["max_tokens"] == 98765432109876543210


@pytest.mark.parametrize("size", PADDING)
async def test_a_negative_integer_past_64_bits_is_refused_with_its_digits(url, size):
    status, answer, kept = await sent(url, chat_body(size, b'"max_tokens": -9223372036854775809'))
    assert (status, answer) == (
        400,
        refused(
            "Invalid 'max_tokens': integer below minimum value. Expected a value >= 1, "
            "but got -9223372036854775809 instead.",
            param="max_tokens",
        ),
    )
    assert kept["max_tokens"] == -9223372036854775809


@pytest.mark.parametrize(
    ("field", "message"),
    [
        (
            b'"user": "\\ud800"',
            f"{NOT_USED}it holds a \\u escape of an unpaired UTF-16 surrogate, which is not text.",
        ),
        (
            b'"user": "\\udc00\\ud800"',
            f"{NOT_USED}it holds a \\u escape of an unpaired UTF-16 surrogate, which is not text.",
        ),
        (b'"temperature": NaN', f"{NOT_USED}it holds NaN, which JSON does not allow."),
        (b'"temperature": -Infinity', f"{NOT_USED}it holds -Infinity, which JSON does not allow."),
        (b'"temperature": 1e400', f"{NOT_USED}it holds the number 1e400, too large to be read as a number."),
        (b'"temperature": -1e400', f"{NOT_USED}it holds the number -1e400, too large to be read as a number."),
        (nested(MAX_JSON_DEPTH + 1), TOO_DEEP),
        (nested(1100), TOO_DEEP),  # deeper than orjson reads
        (nested(200)[:-200], NOT_PARSED),
    ],
    ids=[
        "unpaired surrogate",
        "surrogates in the wrong order",
        "NaN",
        "-Infinity",
        "1e400",
        "-1e400",
        "too deep",
        "deeper",
        "unclosed",
    ],
)
@pytest.mark.parametrize("size", PADDING)
async def test_json_that_fakehop_cannot_use_is_refused_saying_why(url, size, field, message):
    assert await sent(url, chat_body(size, field)) == (400, refused(message), None)


@pytest.mark.parametrize("size", PADDING)
async def test_a_byte_order_mark_is_not_json(url, size):
    assert await sent(url, b"\xef\xbb\xbf" + chat_body(size)) == (400, refused(NOT_PARSED), None)


@pytest.mark.parametrize("after", [b" {}", b"x", b"\x0c", b"\x00"])
@pytest.mark.parametrize("size", PADDING)
async def test_data_after_the_object_is_not_json(url, size, after):
    assert await sent(url, chat_body(size) + after) == (400, refused(NOT_PARSED), None)


@pytest.mark.parametrize("size", PADDING)
async def test_bytes_that_are_not_utf8_are_refused_where_they_are(url, size):
    raw = chat_body(size, b'"user": "h\xffi"')
    at = raw.index(b"\xff")
    message = f"The request body is not valid UTF-8 (byte {at}); send a JSON object in UTF-8."
    assert await sent(url, raw) == (400, refused(message), None)


async def test_bytes_that_are_not_utf8_are_refused_before_values_are_counted(url):
    raw = chat_body("small", b'"metadata": [' + b"0, " * MAX_JSON_VALUES + b'0], "user": "\xff"')
    at = raw.index(b"\xff")
    message = f"The request body is not valid UTF-8 (byte {at}); send a JSON object in UTF-8."
    assert await sent(url, raw) == (400, refused(message), None)


async def test_an_empty_body_is_refused_as_empty(url):
    assert await sent(url, b"") == (400, refused("The request body is empty; send a JSON object."), None)


@pytest.mark.parametrize("size", PADDING)
async def test_whitespace_around_the_object_is_read_past(url, size):
    status, answer, kept = await sent(url, b" \r\n\t" + chat_body(size) + b"\n\t ")
    assert status == 200, answer
    assert (kept["model"], kept["messages"]) == ("m", [{"role": "user", "content": "hi"}])


@pytest.mark.parametrize("size", PADDING)
async def test_the_last_of_duplicate_keys_wins_where_the_first_stood(url, size):
    raw = chat_body(size, b'"model": "second", "messages": [{"role": "user", "content": "again"}]')
    status, answer, kept = await sent(url, raw)
    assert status == 200, answer
    assert answer["model"] == "second"
    assert [key for key in kept if key != "padding"] == ["model", "messages"]
    assert kept["messages"] == [{"role": "user", "content": "again"}]


async def test_a_usual_request_is_answered_to_the_sdk(openai_client, gateway):
    completion = await openai_client.chat.completions.create(
        model="gpt-5.6-sol", messages=[{"role": "user", "content": "Hello"}], temperature=0.5, max_tokens=100
    )
    assert completion.choices[0].message.content
    [record] = gateway.journal.records
    assert record.status == 200
    assert record.body == {
        "messages": [{"role": "user", "content": "Hello"}],
        "model": "gpt-5.6-sol",
        "max_tokens": 100,
        "temperature": 0.5,
    }
