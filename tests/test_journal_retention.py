"""What a journal record keeps alive once its request is answered: a small body as read and a
stream's one write without a container, so that the records kept add few objects for the
garbage collector to count; and every reader still sees the body and frames as before."""

from __future__ import annotations

import json

import aiohttp
import pytest

from fakehop.state import journal as jr

from .redis_server import redis_server  # noqa: F401 - the fixture, by its name
from .test_journal_frames import CHAT, one_record, post

HAS_GC = 1 << 14  # Py_TPFLAGS_HAVE_GC: objects of the type are counted by the garbage collector


def collected_fields(record: jr.Record) -> list[str]:
    """The names of the record's own attributes that hold objects the garbage collector counts."""
    return sorted(name for name, value in vars(record).items() if type(value).__flags__ & HAS_GC)


async def post_raw(base_url: str, raw: bytes) -> int:
    async with aiohttp.ClientSession() as session:
        async with session.post(
            base_url + CHAT, data=raw, headers={"Content-Type": "application/json", "X-Fakehop-Scenario": "hello"}
        ) as response:
            await response.read()
            return response.status


async def test_an_answered_stream_of_one_write_keeps_only_its_headers_as_a_container(base_url, gateway):
    await post(base_url, "hello")
    [record] = gateway.journal.records
    assert record.end == jr.COMPLETED and len(record.frames) == 1
    assert collected_fields(record) == ["headers"]


async def test_a_stream_of_many_writes_keeps_them_in_order(base_url, gateway):
    sent = await post(base_url, "keepalive-demo")
    [record] = gateway.journal.records
    assert len(record.frames) > 2
    assert b"".join(frame for _, frame in record.frames) == sent
    assert record.snapshot().frames == record.frames
    shown = record.as_json(frames=True)
    read_back = jr.Record.from_json(shown)
    assert read_back.frames == shown["frames"]  # as given, each [seconds, text]
    assert [text for _, text in read_back.frames] == [frame.decode() for _, frame in record.frames]


def chat_body(*fields: bytes) -> bytes:
    return b", ".join(
        [b'{"model": "m"', b'"messages": [{"role": "user", "content": "hi"}]', *fields, b'"stream": true}']
    )


BODIES = {
    "usual": chat_body(),
    "integer past 64 bits": chat_body(b'"max_tokens": 98765432109876543210'),
    "long digit run in a string": chat_body(b'"user": "12345678901234567890123"'),
    "escapes": chat_body(b'"user": "\\ud83d\\ude00 \\u00e9\\n\\""'),
    "numbers": chat_body(b'"temperature": 0.1, "top_p": 1e-7, "seed": -0'),
    "whitespace and duplicate keys": b" \r\n" + chat_body(b'"model": "second"') + b"\t ",
}


@pytest.mark.parametrize("raw", BODIES.values(), ids=BODIES)
async def test_a_small_body_reads_back_as_parsed(base_url, gateway, raw):
    assert await post_raw(base_url, raw) == 200
    [record] = gateway.journal.records
    expected = json.loads(raw)
    assert collected_fields(record) == ["headers"]  # the body is kept as read
    for body in (record.body, record.snapshot().body, record.as_json()["body"]):
        assert body == expected and list(body) == list(expected)
        assert [type(value) for value in body.values()] == [type(value) for value in expected.values()]
    status, answer = await one_record(base_url, 1)
    assert status == 200 and answer["request"]["body"] == expected
    assert record.body_bytes == len(raw) and gateway.journal.bytes == record.held_bytes


async def test_a_body_set_on_a_record_replaces_the_one_kept_as_read(base_url, gateway):
    assert await post_raw(base_url, BODIES["usual"]) == 200
    [record] = gateway.journal.records
    record.body = {"replaced": True}
    assert record.body == {"replaced": True} and record.as_json()["body"] == {"replaced": True}


async def test_a_shared_answer_keeps_its_small_body_parsed_for_the_shared_journal(redis_server, make_gateway, serve):
    from fakehop.state.redisstate import RedisState

    state = RedisState(redis_server.url)
    try:
        gateway = make_gateway(state=state)
        url = await serve(gateway)
        assert await post_raw(url, BODIES["integer past 64 bits"]) == 200
        [record] = gateway.journal.records
        assert record._raw is None  # filed in Redis as it ends: not parsed a second time
        assert record.body == json.loads(BODIES["integer past 64 bits"])
        status, answer = await one_record(url, record.seq)
        assert status == 200 and answer["request"]["body"] == record.body
    finally:
        await state.close()
