"""The usual request's intake and parse, taken on their shortest path: a body taken whole from
the connection's payload, whatever its size against the payload's water marks, on a connection
kept alive or pipelined, or come in pieces; and the usual fields read inline, refused as before."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from fakehop.protocols import chat, messages
from fakehop.protocols.common import FIRST_TURN, BadRequest
from fakehop.server.app import create_app

CHAT = "/v1/chat/completions"
KIB = 1024


def chat_body(padding: int) -> bytes:
    """A chat request not streamed, its question `padding` characters long."""
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * padding}]}).encode()


@pytest.fixture
async def server(aiohttp_server, gateway):
    return await aiohttp_server(create_app(gateway))


async def test_bodies_around_the_payload_water_marks_are_answered_on_one_kept_connection(server, gateway):
    """Small bodies and large ones (in several pieces, read as they come) one after another on
    one connection: each is answered with its own."""
    paddings = [10, 60 * KIB, 100 * KIB, 200 * KIB, 10, 200 * KIB, 10]
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as session:
        for padding in paddings:
            async with session.post(server.make_url(CHAT), data=chat_body(padding)) as response:
                assert response.status == 200, await response.text()
                await response.read()
    records = list(gateway.journal.records)[-len(paddings) :]
    assert [record.body_bytes for record in records] == [len(chat_body(padding)) for padding in paddings]
    assert [len(record.body["messages"][0]["content"]) for record in records] == paddings
    assert gateway.bodies.held == 0


async def response_from(reader: asyncio.StreamReader) -> tuple[int, dict]:
    """The status and JSON body of one response with a Content-Length."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    length = next(int(line.split(":", 1)[1]) for line in head if line.lower().startswith("content-length:"))
    return int(head[0].split()[1]), json.loads(await reader.readexactly(length))


def request_bytes(body: bytes, scenario: str = "hello") -> bytes:
    head = (
        f"POST {CHAT} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"X-Fakehop-Scenario: {scenario}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


@pytest.mark.parametrize("read_bufsize", [None, 16 * KIB])  # aiohttp's own, and one below the bodies' sizes
async def test_pipelined_requests_are_each_answered_with_their_own_body(aiohttp_server, gateway, read_bufsize):
    """Behind a request whose answer takes a while (a stall, 1.2 s at this time scale), the
    others have come in whole by the time they are answered, some past the payload's water marks."""
    buffer = {} if read_bufsize is None else {"read_bufsize": read_bufsize}
    server = await aiohttp_server(create_app(gateway), **buffer)
    bodies = [chat_body(padding) for padding in (5, 7, 20 * KIB, 40 * KIB, 200 * KIB, 9)]
    reader, writer = await asyncio.open_connection(server.host, server.port)
    try:
        writer.write(request_bytes(bodies[0], "stall") + b"".join(request_bytes(body) for body in bodies[1:]))
        await writer.drain()
        answers = [await asyncio.wait_for(response_from(reader), 10) for _ in bodies]
    finally:
        writer.close()
    assert [status for status, _ in answers] == [500] + [200] * 5, answers
    assert all(answer["object"] == "chat.completion" for _, answer in answers[1:])
    assert [record.body_bytes for record in list(gateway.journal.records)[-6:]] == [len(body) for body in bodies]
    assert gateway.bodies.held == 0


async def test_a_body_come_in_pieces_while_another_is_answered_is_read_whole(server, gateway):
    """Sent behind a request whose answer takes a while (a stall, 1.2 s at this time scale), a
    body has come in whole, in several pieces, by the time its own answer starts."""
    body = chat_body(3000)
    sent = request_bytes(body)
    reader, writer = await asyncio.open_connection(server.host, server.port)
    try:
        writer.write(request_bytes(chat_body(5), "stall"))
        for start in range(0, len(sent), 1000):
            await asyncio.sleep(0.05)
            writer.write(sent[start : start + 1000])
            await writer.drain()
        answers = [await asyncio.wait_for(response_from(reader), 10) for _ in range(2)]
    finally:
        writer.close()
    assert answers[0][0] == 500 and answers[1][0] == 200, answers
    assert answers[1][1]["choices"][0]["message"]["content"] == "Hello! How can I help you today?"
    record = gateway.journal.records[-1]
    assert record.body_bytes == len(body) and record.body == json.loads(body)
    assert gateway.bodies.held == 0


async def test_an_empty_body_is_refused_as_empty(server):
    async with aiohttp.ClientSession() as session:
        async with session.post(
            server.make_url(CHAT), data=b"", headers={"Content-Type": "application/json"}
        ) as response:
            assert response.status == 400
            assert (await response.json())["error"]["message"] == "The request body is empty; send a JSON object."


QUESTION = [{"role": "user", "content": "Hello"}]


@pytest.mark.parametrize(
    ("stream_options", "refused"),
    [
        ({"include_usage": 1}, "include_usage"),
        ({"include_usage": True, "include_obfuscation": 1}, "include_obfuscation"),
        ({"include_usage": "true"}, "include_usage"),
    ],
)
def test_chat_stream_options_of_another_type_are_refused(stream_options, refused):
    with pytest.raises(BadRequest) as raised:
        chat.parse({"model": "m", "messages": QUESTION, "stream": True, "stream_options": stream_options})
    assert raised.value.message == f"Invalid type for 'stream_options.{refused}': expected a boolean."
    assert raised.value.param == f"stream_options.{refused}"


@pytest.mark.parametrize(
    ("stream_options", "options"),
    [
        (None, {"include_usage": False, "obfuscation": True}),
        ({}, {"include_usage": False, "obfuscation": True}),
        ({"include_usage": True}, {"include_usage": True, "obfuscation": True}),
        ({"include_usage": False}, {"include_usage": False, "obfuscation": True}),
        ({"include_usage": True, "include_obfuscation": False}, {"include_usage": True, "obfuscation": False}),
    ],
)
def test_chat_stream_options_are_read_whichever_way_they_come(stream_options, options):
    parsed = chat.parse({"model": "m", "messages": QUESTION, "stream": True, "stream_options": stream_options})
    assert {key: parsed.options[key] for key in options} == options
    assert parsed.prompt == "Hello" and parsed.conversation is FIRST_TURN
    assert parsed.play == (5, None, "never", True)


@pytest.mark.parametrize("protocol", [chat, messages])
@pytest.mark.parametrize(
    ("asked", "input_tokens"),
    [
        ([{"role": "user", "content": [{"type": "text", "text": "Hello"}]}], 2 + 3),  # 5 characters, 1 message
        ([{"role": "user", "content": "Hi"}, {"role": "user", "content": "Hello"}], 2 + 6),  # 7, 2
    ],
)
def test_a_question_not_alone_or_not_a_string_is_read_as_before(protocol, asked, input_tokens):
    body = {"model": "m", "max_tokens": 10, "messages": asked}
    if protocol is chat:
        del body["max_tokens"]
    parsed = protocol.parse(body)
    assert parsed.prompt == "Hello" and parsed.conversation.turn == 1
    assert parsed.play.input_tokens == input_tokens


@pytest.mark.parametrize("bad", [[1], [{"content": "Hello"}], [{"role": "user"}], [{"role": "user", "content": 5}]])
def test_a_lone_message_of_another_shape_is_refused_as_before(bad):
    with pytest.raises(BadRequest) as raised:
        messages.parse({"model": "m", "max_tokens": 10, "messages": bad})
    assert raised.value.param.startswith("messages.0")


@pytest.mark.parametrize(
    ("thinking", "reasoning"),
    [
        (None, "unasked"),
        ({"type": "adaptive"}, "shown"),
        ({"type": "adaptive", "display": "omitted"}, "omitted"),
        ({"type": "enabled", "budget_tokens": 2000}, "shown"),
        ({"type": "disabled"}, "unasked"),
    ],
)
def test_messages_thinking_says_what_is_shown(thinking, reasoning):
    parsed = messages.parse({"model": "m", "max_tokens": 10, "messages": QUESTION, "thinking": thinking})
    assert parsed.play == (5, 10, reasoning, True)
