"""What the journal keeps of each stream beside its request: the frames written with their
times, the Retry-After an http_error sent, and whether a write is still waiting for the client."""

from __future__ import annotations

import asyncio
import socket

import aiohttp

from fakehop.state import journal as jr

from .conftest import FAST

CHAT = "/v1/chat/completions"
BODY = {"model": "gpt-5.6-sol", "messages": [{"role": "user", "content": "Hi"}], "stream": True}


async def post(base_url: str, scenario: str, body=BODY) -> bytes:
    async with aiohttp.ClientSession() as session:
        async with session.post(base_url + CHAT, json=body, headers={"X-Fakehop-Scenario": scenario}) as response:
            return await response.read()


async def one_record(base_url: str, seq: int) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{base_url}/_fakehop/requests/{seq}") as response:
            return response.status, await response.json()


async def test_a_streams_frames_are_the_bytes_it_sent_with_their_times(base_url, gateway):
    sent = await post(base_url, "keepalive-demo")
    status, answer = await one_record(base_url, 1)
    record = answer["request"]
    assert status == 200 and not record["frames_cut"] and record["write_began"] is None
    assert "".join(text for _, text in record["frames"]).encode() == sent
    times = [at for at, _ in record["frames"]]
    assert times == sorted(times)
    keepalives = [at for at, text in record["frames"] if text.startswith(":")]
    silence = 3.5 * FAST  # keepalive-demo: 3.5 s of silence, a keepalive every second
    assert len(keepalives) == 3 and keepalives[-1] < silence + 0.5
    assert times[-1] >= silence * 0.9


async def test_the_list_of_requests_leaves_frames_out(base_url):
    await post(base_url, "hello")
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{base_url}/_fakehop/requests") as response:
            [record] = (await response.json())["requests"]
    assert "frames" not in record and record["frame_bytes"] > 0


LONG = {"name": "very-long", "steps": [{"text": {"faker": "paragraphs", "nb": 40, "seed": 1}, "chunk": "word"}]}
HUGE = {
    "name": "huge",
    "steps": [{"text": {"faker": "paragraphs", "nb": 3000, "seed": 1}, "chunk": 4}],
}  # some 30 MB of chunks


def add(gateway, mapping: dict) -> None:
    from fakehop.scenario.reader import parse_document
    from fakehop.scenario.yamlsource import with_lines

    gateway.global_session.add(parse_document(with_lines(mapping), "test", None))


async def test_frames_past_the_limit_are_counted_not_kept(base_url, gateway):
    add(gateway, LONG)
    sent = await post(base_url, "very-long")
    record = gateway.journal.records[0]
    assert len(sent) > jr.KEPT_FRAME_BYTES
    assert record.frames_cut and record.frame_bytes == jr.KEPT_FRAME_BYTES
    assert b"".join(frame for _, frame in record.frames) == sent[: record.frame_bytes]
    assert record.events == sent.count(b"data: ")  # every event counted, kept or not


async def test_an_http_error_keeps_its_retry_after_and_no_frames(base_url, gateway):
    await post(base_url, "rate-limited")
    record = gateway.journal.records[0]
    assert (record.status, record.retry_after, record.frames) == (429, "2", [])


async def test_an_unknown_seq_is_a_json_404(base_url):
    status, answer = await one_record(base_url, 99)
    assert status == 404 and "no request #99" in answer["error"]
    status, answer = await one_record(base_url, 0)
    assert status == 400


async def test_a_write_to_a_client_that_stopped_reading_is_seen_waiting(base_url, gateway):
    """A long answer to a client that reads nothing: the socket's buffers fill and a write waits."""
    add(gateway, HUGE)
    host, port = base_url.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    sock.setblocking(False)
    reader, writer = await asyncio.open_connection(sock=sock)
    body = b'{"model": "m", "messages": [{"role": "user", "content": "Hi"}], "stream": true}'
    writer.write(
        b"POST " + CHAT.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Fakehop-Scenario: huge\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    )
    await writer.drain()
    writer.transport.pause_reading()  # stop reading: what the server sends piles up
    try:
        for _ in range(400):
            await asyncio.sleep(0.01)
            if (
                gateway.journal.records
                and gateway.journal.records[0].write_began is not None
                and gateway.journal.records[0].events > 0
            ):
                break
        record = gateway.journal.records[0]
        assert record.end == jr.IN_PROGRESS and record.write_began is not None
    finally:
        writer.close()


async def test_a_stream_counts_every_byte_it_sent_and_its_keepalives(base_url, gateway):
    add(gateway, LONG)
    sent = await post(base_url, "very-long")
    keepalive_demo = await post(base_url, "keepalive-demo")
    long_record, keepalive_record = gateway.journal.records
    assert long_record.frames_cut and long_record.sent_bytes == len(sent) > long_record.frame_bytes
    assert (keepalive_record.sent_bytes, keepalive_record.keepalives) == (len(keepalive_demo), 3)
    assert keepalive_record.keepalives == sum(frame.startswith(b":") for _, frame in keepalive_record.frames)
    assert long_record.keepalives == 0


async def test_an_unstreamed_answer_sends_no_stream_bytes(base_url, gateway):
    await post(base_url, "keepalive-demo", {**BODY, "stream": False})
    [record] = gateway.journal.records
    assert (record.sent_bytes, record.keepalives, record.events) == (0, 0, 0)
