"""What one client's requests may make the server hold: bounded in bytes, whatever they send."""

from __future__ import annotations

import asyncio
import json
import re
import sys

import aiohttp
import pytest

from fakehop.server import prerender
from fakehop.server.app import start
from fakehop.server.control import MAX_QUEUE, PAGE_BYTES, PAGE_RECORDS
from fakehop.server.gateway import Gateway
from fakehop.server.intake import HeldBodies
from fakehop.state.journal import CUT_HEADERS, KEPT_BODY_BYTES, KEPT_HEADER_BYTES, Journal, Record
from fakehop.state.sessions import MAX_QUEUED_IN_ALL

from .conftest import FAST

CHAT = "/v1/chat/completions"
JSON = {"Content-Type": "application/json"}
YAML = {"Content-Type": "application/yaml"}
LONG_ANSWER = (
    "steps:\n  - text: {faker: paragraphs, nb: 1000, seed: 1}\n"  # some 95 KB streamed: more frames than a record keeps
)


def chat_body(content: str) -> bytes:
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": content}]}).encode()


async def post(
    session: aiohttp.ClientSession, url: str, body: bytes, path: str = CHAT, headers: dict | None = None
) -> int:
    async with session.post(url + path, data=body, headers={**JSON, **(headers or {})}) as response:
        await response.read()
        return response.status


@pytest.fixture
async def started(library):
    """started(journal) -> the URL and gateway of a server started as `fakehop serve` starts it
    (headers of up to 64 KiB a line), its journal `journal`."""
    runners = []

    async def start_with(journal: Journal) -> tuple[str, Gateway]:
        gateway = Gateway(library, time_scale=FAST, journal=journal)
        runner, url = await start(gateway)
        runners.append(runner)
        return url, gateway

    yield start_with
    for runner in runners:
        await runner.cleanup()


def held_bytes(value) -> int:
    """What a parsed JSON value takes in memory, every object in it counted."""
    size = sys.getsizeof(value)
    if isinstance(value, dict):
        return size + sum(held_bytes(key) + held_bytes(item) for key, item in value.items())
    if isinstance(value, list):
        return size + sum(held_bytes(item) for item in value)
    return size


def held_by(record: Record) -> int:
    """What a journal record holds: its path, its headers' names and values, its body as parsed, its kept frames."""
    headers = sum(len(name) + len(value) for name, value in record.headers.items())
    return len(record.path) + headers + held_bytes(record.body) + sum(len(frame) for _, frame in record.frames)


def big_headers(count: int) -> dict[str, str]:
    return {f"X-Big-{number}": chr(ord("a") + number % 26) * 60_000 for number in range(count)}


async def test_the_journal_is_bounded_in_bytes_and_cuts_a_long_body(serve, make_gateway):
    # A cut body is held as text of two bytes a character (its note's "…" is not Latin-1):
    # three of them, with their headers, fit in 6.5 MiB.
    gateway = make_gateway(journal=Journal(capacity=1000, max_bytes=6 * KEPT_BODY_BYTES + KEPT_BODY_BYTES // 2))
    url = await serve(gateway)
    async with aiohttp.ClientSession() as session:
        for number in range(6):
            assert await post(session, url, chat_body(f"{number}" + "x" * (2 * KEPT_BODY_BYTES))) == 200
        async with session.get(url + "/_fakehop/requests") as response:
            records = (await response.json())["requests"]
    assert [r["seq"] for r in records] == [4, 5, 6]  # the oldest went to keep 6.5 MiB
    assert gateway.journal.bytes == sum(held_by(record) for record in gateway.journal.records)
    body = records[-1]["body"]
    assert isinstance(body, str) and body.startswith('{"model": "m", "messages": [{"role": "user", "content": "5xxx')
    assert body.endswith(
        f"… [cut by fakehop: the body had {len(chat_body('5' + 'x' * 2 * KEPT_BODY_BYTES)):,} bytes; "
        f"the journal keeps the first {KEPT_BODY_BYTES:,}]"
    )
    assert records[-1]["body_bytes"] > 2 * KEPT_BODY_BYTES


async def test_headers_count_towards_the_journal_bytes_and_are_kept_cut(started):
    """Headers are up to 128 lines of 64 KiB a request: the journal keeps the first 64 KiB of
    them, with a note saying so, and counts them."""
    url, gateway = await started(Journal(max_bytes=1024 * 1024))
    async with aiohttp.ClientSession() as session:
        for _ in range(20):
            assert await post(session, url, chat_body("hi"), headers=big_headers(12)) == 200
        async with session.get(url + "/_fakehop/requests") as response:
            last = (await response.json())["requests"][-1]
    assert sum(held_by(record) for record in gateway.journal.records) <= 1024 * 1024
    assert last["headers"]["X-Big-0"] == "a" * 60_000
    note = re.fullmatch(
        r"cut by fakehop: the request had (\d+) headers of ([\d,]+) bytes; the journal keeps the first ([\d,]+)",
        last["headers"][CUT_HEADERS],
    )
    assert (
        note
        and int(note[1]) > 12
        and int(note[2].replace(",", "")) > 12 * 60_000
        and note[3] == f"{KEPT_HEADER_BYTES:,}"
    )
    kept = sum(len(name) + len(value) for name, value in last["headers"].items() if name != CUT_HEADERS)
    assert kept <= KEPT_HEADER_BYTES


async def test_kept_frames_count_towards_the_journal_bytes(base_url_with_small_journal):
    url, gateway = base_url_with_small_journal
    async with aiohttp.ClientSession() as session:
        async with session.post(
            url + "/_fakehop/scenarios", params={"name": "long"}, data=LONG_ANSWER, headers=YAML
        ) as response:
            assert response.status == 201
        stream = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}).encode()
        for _ in range(20):
            assert await post(session, url, stream, headers={"X-Fakehop-Scenario": "long"}) == 200
    records = gateway.journal.records
    assert all(record.frames_cut for record in records)
    assert sum(held_by(record) for record in records) <= gateway.journal.max_bytes


@pytest.fixture
async def base_url_with_small_journal(serve, make_gateway):
    gateway = make_gateway(journal=Journal(max_bytes=256 * 1024))
    return await serve(gateway), gateway


async def test_a_body_of_many_small_values_counts_as_it_is_held(serve, make_gateway):
    """A parsed body takes more memory than its bytes: a list of ints some five times as much."""
    gateway = make_gateway(journal=Journal(max_bytes=8 * 1024 * 1024))
    url = await serve(gateway)
    body = json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "x": list(range(10**6, 10**6 + 30_000))}
    ).encode()
    async with aiohttp.ClientSession() as session:
        for _ in range(16):
            assert await post(session, url, body) == 200
    assert sum(held_by(record) for record in gateway.journal.records) <= 8 * 1024 * 1024


async def test_a_page_counts_the_headers_of_its_records(started):
    url, _ = await started(Journal())
    async with aiohttp.ClientSession() as session:
        for _ in range(150):
            assert await post(session, url, chat_body("hi"), headers=big_headers(2)) == 200
        async with session.get(url + "/_fakehop/requests", params={"limit": "1000"}) as response:
            text = await response.read()
    page = json.loads(text)
    assert page["more"] and len(page["requests"]) < 150
    assert len(text) <= PAGE_BYTES + 64 * 1024


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
            await post(session, base_url, chat_body("x" * (KEPT_BODY_BYTES - 4096)))
        async with session.get(base_url + "/_fakehop/requests") as response:
            page = await response.json()
    assert len(page["requests"]) == 8 and page["more"]  # 8 MiB of headers and bodies


async def test_a_kept_rendering_counts_the_request_fields_it_is_kept_for(base_url):
    """Responses' echoed fields key the kept renderings: they count towards its bytes, and
    fields too long to keep a rendering for are not kept at all."""
    prerender._kept._kept.clear()
    prerender._kept.size = 0
    async with aiohttp.ClientSession() as session:
        for number in range(10):
            body = json.dumps(
                {"model": "m", "input": "hi", "stream": True, "instructions": f"{number}" + "i" * 5_000_000}
            ).encode()
            assert await post(session, base_url, body, "/v1/responses") == 200
            medium = json.dumps(
                {"model": "m", "input": "hi", "stream": True, "instructions": f"{number}" + "i" * 1_000_000}
            ).encode()
            assert await post(session, base_url, medium, "/v1/responses") == 200
    held = sum(len(key[2]) for (_, key) in prerender._kept._kept)
    assert held <= prerender.KEPT_BYTES and prerender._kept.size <= prerender.KEPT_BYTES
    assert all(len(key[2]) < prerender.LARGEST_RENDERING for (_, key) in prerender._kept._kept)


async def test_queue_answers_its_length_and_has_a_cap(base_url):
    async with aiohttp.ClientSession() as session:
        for _ in range(MAX_QUEUE // 10_000):
            async with session.post(
                base_url + "/_fakehop/queue", json={"scenario": "hello", "times": 10_000}
            ) as response:
                answer = await response.json()
        assert answer == {"queued": "hello", "times": 10_000, "requests": 10_000, "length": MAX_QUEUE}
        async with session.post(base_url + "/_fakehop/queue", json={"scenario": "hello"}) as response:
            assert response.status == 400
            assert "the queue holds at most 100,000 entries" in (await response.json())["error"]


async def test_a_queued_sequence_counts_each_of_its_entries_against_the_cap(base_url):
    async with aiohttp.ClientSession() as session:
        for _ in range(MAX_QUEUE // 10_000 - 1):
            async with session.post(
                base_url + "/_fakehop/queue", json={"scenario": "hello", "times": 10_000}
            ) as response:
                assert response.status == 200
        async with session.post(
            base_url + "/_fakehop/queue", json={"scenario": "flaky-then-ok", "times": 4_000}
        ) as response:
            assert response.status == 400
            assert "flaky-then-ok 4,000 times is 12,000 more, which would not fit" in (await response.json())["error"]
        async with session.post(
            base_url + "/_fakehop/queue", json={"scenario": "flaky-then-ok", "times": 3_000}
        ) as response:
            assert await response.json() == {
                "queued": "flaky-then-ok",
                "times": 3_000,
                "requests": 9_000,
                "length": MAX_QUEUE - 1_000,
            }


async def test_the_queues_of_all_sessions_have_a_cap_together(base_url):
    async with aiohttp.ClientSession() as session:
        for number in range(MAX_QUEUED_IN_ALL // MAX_QUEUE):
            for _ in range(MAX_QUEUE // 10_000):
                async with session.post(
                    base_url + "/_fakehop/queue",
                    json={"scenario": "hello", "times": 10_000},
                    headers={"X-Fakehop-Session": f"s{number}"},
                ) as response:
                    assert response.status == 200
        async with session.post(
            base_url + "/_fakehop/queue", json={"scenario": "hello"}, headers={"X-Fakehop-Session": "one-more"}
        ) as response:
            assert response.status == 400
            assert (await response.json())["error"].startswith(
                f"the sessions' queues hold at most {MAX_QUEUED_IN_ALL:,} entries together, and hold {MAX_QUEUED_IN_ALL:,}; hello 1 times is 1 more"
            )
        async with session.delete(base_url + "/_fakehop/queue", headers={"X-Fakehop-Session": "s0"}) as response:
            assert response.status == 200
        async with session.post(
            base_url + "/_fakehop/queue", json={"scenario": "hello"}, headers={"X-Fakehop-Session": "one-more"}
        ) as response:
            assert response.status == 200


async def add(session: aiohttp.ClientSession, url: str, name: str, in_session: str) -> tuple[int, dict]:
    async with session.post(
        url + "/_fakehop/scenarios",
        params={"name": name},
        data="steps: [{text: hi}]",
        headers={**YAML, "X-Fakehop-Session": in_session},
    ) as response:
        return response.status, await response.json()


async def test_the_scenarios_added_to_all_sessions_have_a_cap_together(serve, make_gateway):
    url = await serve(make_gateway(max_added=3))
    async with aiohttp.ClientSession() as session:
        assert [
            (await add(session, url, name, in_session))[0]
            for name, in_session in (("a", "one"), ("b", "one"), ("c", "two"))
        ] == [201] * 3
        status, answer = await add(session, url, "d", "two")
        assert status == 400 and answer["error"].startswith(
            "the sessions hold at most 3 added scenarios together, and hold 3;"
        )
        assert (await add(session, url, "c", "two"))[0] == 200  # replaced: no more than before
        async with session.post(
            url + "/_fakehop/queue",
            json={"scenario": {"steps": [{"text": "inline"}]}},
            headers={"X-Fakehop-Session": "two"},
        ) as response:
            assert response.status == 400 and "at most 3 added scenarios" in (await response.json())["error"]
        async with session.post(url + "/_fakehop/reset", headers={"X-Fakehop-Session": "one"}) as response:
            assert response.status == 200
        assert (await add(session, url, "d", "two"))[0] == 201


async def test_bodies_held_at_once_have_a_cap_beyond_which_a_429_says_when_to_retry(serve, make_gateway):
    """Each answer holds its body until it ends: with three of 1 MB under way (stalling, at this
    time scale for over a second), a fourth does not fit in 3 MiB."""
    url = await serve(make_gateway(bodies=HeldBodies(3 * 1024 * 1024)))
    body = json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "x" * 1_000_000}], "stream": True}
    ).encode()
    stalling = {"X-Fakehop-Scenario": "stall"}
    async with aiohttp.ClientSession() as session:
        under_way = [asyncio.ensure_future(post(session, url, body, headers=stalling)) for _ in range(3)]
        await asyncio.sleep(0.3)
        for path in (CHAT, "/v1/responses", "/v1/messages"):
            async with session.post(url + path, data=body, headers={**JSON, **stalling}) as response:
                assert response.status == 429 and response.headers["Retry-After"] == "1"
                error = await response.json()
            message = error["error"]["message"]
            assert message.startswith(
                "fakehop holds at most 3,145,728 bytes of request bodies at once, and the answers under way hold 3,"
            )
            assert error["error"]["type"] == ("rate_limit_error" if path == "/v1/messages" else "requests")
        assert await asyncio.gather(*under_way) == [200] * 3
        assert await post(session, url, body, headers=stalling) == 200
