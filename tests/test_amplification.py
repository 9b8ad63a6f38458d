"""What one client's requests may make the server hold: bounded in bytes, whatever they send."""

from __future__ import annotations

import json

import aiohttp

from fakehop import prerender
from fakehop.control import MAX_QUEUE, PAGE_RECORDS
from fakehop.journal import KEPT_BODY_BYTES, Journal

CHAT = "/v1/chat/completions"
JSON = {"Content-Type": "application/json"}


def chat_body(content: str) -> bytes:
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": content}]}).encode()


async def post(session: aiohttp.ClientSession, url: str, body: bytes, path: str = CHAT) -> int:
    async with session.post(url + path, data=body, headers=JSON) as response:
        await response.read()
        return response.status


async def test_the_journal_is_bounded_in_bytes_and_cuts_a_long_body(serve, make_gateway):
    gateway = make_gateway(journal=Journal(capacity=1000, max_bytes=3 * KEPT_BODY_BYTES))
    url = await serve(gateway)
    async with aiohttp.ClientSession() as session:
        for number in range(6):
            assert await post(session, url, chat_body(f"{number}" + "x" * (2 * KEPT_BODY_BYTES))) == 200
        async with session.get(url + "/_fakehop/requests") as response:
            records = (await response.json())["requests"]
    assert [r["seq"] for r in records] == [4, 5, 6]  # the oldest went to keep 3 MiB
    assert gateway.journal.bytes == 3 * KEPT_BODY_BYTES
    body = records[-1]["body"]
    assert isinstance(body, str) and body.startswith('{"model": "m", "messages": [{"role": "user", "content": "5xxx')
    assert body.endswith(f"… [cut by fakehop: the body had {len(chat_body('5' + 'x' * 2 * KEPT_BODY_BYTES)):,} bytes; "
                         f"the journal keeps the first {KEPT_BODY_BYTES:,}]")
    assert records[-1]["body_bytes"] > 2 * KEPT_BODY_BYTES


async def test_requests_come_a_page_at_a_time(base_url):
    async with aiohttp.ClientSession() as session:
        for _ in range(PAGE_RECORDS + 5):
            await post(session, base_url, chat_body("hi"))
        async with session.get(base_url + "/_fakehop/requests") as response:
            first = await response.json()
        async with session.get(base_url + "/_fakehop/requests", params={"since": first["next_since"]}) as response:
            second = await response.json()
    assert (len(first["requests"]), first["more"]) == (PAGE_RECORDS, True)
    assert (len(second["requests"]), second["more"]) == (5, False)


async def test_a_page_stops_at_its_bytes(base_url):
    async with aiohttp.ClientSession() as session:
        for _ in range(12):
            await post(session, base_url, chat_body("x" * KEPT_BODY_BYTES))
        async with session.get(base_url + "/_fakehop/requests") as response:
            page = await response.json()
    assert len(page["requests"]) == 8 and page["more"]  # 8 MiB of bodies


async def test_a_kept_rendering_counts_the_request_fields_it_is_kept_for(base_url):
    """Responses' echoed fields key the kept renderings: they count towards its bytes, and
    fields too long to keep a rendering for are not kept at all."""
    prerender._kept._kept.clear()
    prerender._kept.size = 0
    async with aiohttp.ClientSession() as session:
        for number in range(10):
            body = json.dumps({"model": "m", "input": "hi", "stream": True, "instructions": f"{number}" + "i" * 5_000_000}).encode()
            assert await post(session, base_url, body, "/v1/responses") == 200
            medium = json.dumps({"model": "m", "input": "hi", "stream": True, "instructions": f"{number}" + "i" * 1_000_000}).encode()
            assert await post(session, base_url, medium, "/v1/responses") == 200
    held = sum(len(key[2]) for (_, key) in prerender._kept._kept)
    assert held <= prerender.KEPT_BYTES and prerender._kept.size <= prerender.KEPT_BYTES
    assert all(len(key[2]) < prerender.LARGEST_RENDERING for (_, key) in prerender._kept._kept)


async def test_queue_answers_its_length_and_has_a_cap(base_url):
    async with aiohttp.ClientSession() as session:
        for _ in range(MAX_QUEUE // 10_000):
            async with session.post(base_url + "/_fakehop/queue", json={"scenario": "hello", "times": 10_000}) as response:
                answer = await response.json()
        assert answer == {"queued": "hello", "times": 10_000, "requests": 10_000, "length": MAX_QUEUE}
        async with session.post(base_url + "/_fakehop/queue", json={"scenario": "hello"}) as response:
            assert response.status == 400
            assert "the queue holds at most 100,000 entries" in (await response.json())["error"]


async def test_a_queued_sequence_counts_each_of_its_entries_against_the_cap(base_url):
    async with aiohttp.ClientSession() as session:
        for _ in range(MAX_QUEUE // 10_000 - 1):
            async with session.post(base_url + "/_fakehop/queue", json={"scenario": "hello", "times": 10_000}) as response:
                assert response.status == 200
        async with session.post(base_url + "/_fakehop/queue", json={"scenario": "flaky-then-ok", "times": 4_000}) as response:
            assert response.status == 400
            assert "flaky-then-ok 4,000 times is 12,000 more, which would not fit" in (await response.json())["error"]
        async with session.post(base_url + "/_fakehop/queue", json={"scenario": "flaky-then-ok", "times": 3_000}) as response:
            assert await response.json() == {"queued": "flaky-then-ok", "times": 3_000, "requests": 9_000, "length": MAX_QUEUE - 1_000}
