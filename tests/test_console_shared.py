"""The console's push with --state: a console on any server shows every server's requests, its
first snapshot and its rows read from Redis, through two real `fakehop serve --state` processes."""

from __future__ import annotations

import asyncio
import json
from urllib.parse import urlsplit

import aiohttp

from fakehop.server.console import FLUSH_INTERVAL
from fakehop.testing.remote import ControlClient

from .redis_server import fakehop_servers, redis_server  # noqa: F401 - the fixture, by its name
from .test_console import CHAT, STREAM, open_console, post

SLOW = "name: slow\nsteps:\n  - text: Hi\n  - delay: 50s\n  - text: there\n"  # 0.5 s at the servers' time scale


def seq_taken(url: str) -> int:
    """The newest seq any server took, from Redis."""
    import redis

    with redis.Redis.from_url(url) as connection:
        return int(connection.get("fakehop:seq") or 0)


async def filed(url: str, count: int) -> None:
    """Wait until the shared journal holds `count` records ended (a record's end is filed just
    after its answer's last bytes went out)."""
    while True:
        records = ControlClient(url).call("GET", "/requests")["requests"]
        if sum(record["end"] != "in_progress" for record in records) >= count:
            return
        await asyncio.sleep(0.02)


def ended(seq: int):
    return lambda row: row["seq"] == seq and row["end"] == "completed"


async def test_a_console_on_one_server_shows_the_requests_of_both(redis_server, tmp_path):
    with fakehop_servers(tmp_path, 2, "--state", redis_server.url) as (watched, other):
        ControlClient(other).call("POST", "/scenarios", text=SLOW)
        async with aiohttp.ClientSession() as client:
            await post(client, other, "hello")
            await filed(other, 1)
            pushes = await open_console(client, watched)
            first = await pushes.rows()
            assert first["reset"] and [(row["seq"], row["end"]) for row in first["rows"]] == [(1, "completed")]

            await post(client, other, "hello")
            await post(client, watched, "hello")
            rows = await pushes.until(ended(3))
            assert {row["seq"] for row in rows if row["end"] == "completed"} == {2, 3}

            await post(client, other, "slow")
            rows = await pushes.until(ended(4))
            assert [row["end"] for row in rows if row["seq"] == 4] == ["in_progress", "completed"]

            ControlClient(other).call("POST", "/reset")
            assert await pushes.rows() == {"rows": [], "reset": True, "skipped": 0}
            await post(client, other, "hello")
            row = (await pushes.until(ended(5)))[-1]
            assert row["scenario"] == "hello"
            pushes.response.close()


async def test_a_console_opened_later_elsewhere_gets_the_same_snapshot(redis_server, tmp_path):
    with fakehop_servers(tmp_path, 2, "--state", redis_server.url) as urls:
        async with aiohttp.ClientSession() as client:
            for url in (*urls, *urls):
                await post(client, url, "hello")
            await filed(urls[0], 4)
            snapshots = []
            for url in urls:
                pushes = await open_console(client, url)
                snapshots.append([(row["seq"], row["end"]) for row in (await pushes.rows())["rows"]])
                pushes.response.close()
    assert snapshots[0] == snapshots[1] == [(seq, "completed") for seq in range(1, 5)]


async def test_a_record_filed_after_a_newer_one_is_still_shown(redis_server, tmp_path):
    """A seq is taken as a request arrives and its record filed once its body is read: a body
    that comes late files an older seq after newer ones, which the console shows all the same."""
    with fakehop_servers(tmp_path, 2, "--state", redis_server.url) as (watched, other):
        body = json.dumps(STREAM).encode()
        parts = urlsplit(other)
        async with aiohttp.ClientSession() as client:
            pushes = await open_console(client, watched)
            assert (await pushes.rows())["rows"] == []
            reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
            writer.write(
                f"POST {CHAT} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nX-Fakehop-Scenario: hello\r\n\r\n".encode()
                + body[:10]
            )
            await writer.drain()
            while seq_taken(redis_server.url) < 1:
                await asyncio.sleep(0.02)
            await post(client, watched, "hello")
            assert [row["seq"] for row in await pushes.until(ended(2))][-1] == 2
            await asyncio.sleep(3 * FLUSH_INTERVAL)  # pushes read past seq 1 while it is not filed
            writer.write(body[10:])
            await writer.drain()
            assert b" 200 " in await reader.readline()
            writer.close()
            row = (await pushes.until(ended(1)))[-1]
            pushes.response.close()
    assert row["scenario"] == "hello"


def push_reads(url: str) -> int:
    """How many times any server read the journal's news for a console's push, from Redis' own counts."""
    import redis

    with redis.Redis.from_url(url) as connection:
        return int(connection.info("commandstats").get("cmdstat_zcount", {}).get("calls", 0))


async def test_a_server_with_no_console_open_reads_nothing_for_one(redis_server, tmp_path):
    with fakehop_servers(tmp_path, 2, "--state", redis_server.url) as urls:
        async with aiohttp.ClientSession() as client:
            for url in urls:
                await post(client, url, "hello")
            await asyncio.sleep(5 * FLUSH_INTERVAL)
            assert push_reads(redis_server.url) == 0
            pushes = await open_console(client, urls[0])
            await pushes.rows()
            await post(client, urls[1], "hello")
            await pushes.until(ended(3))
            assert push_reads(redis_server.url) > 0
            pushes.response.close()
            await asyncio.sleep(5 * FLUSH_INTERVAL)  # the server sees the console go
            after_close = push_reads(redis_server.url)
            await asyncio.sleep(5 * FLUSH_INTERVAL)
            assert push_reads(redis_server.url) == after_close


async def test_a_journal_numbered_afresh_starts_the_log_afresh(redis_server, tmp_path):
    """As after a Redis restarted empty that a request reached before the console's next read:
    seq 1 held again, below the seqs the console shows."""
    import redis

    with fakehop_servers(tmp_path, 2, "--state", redis_server.url) as (watched, other):
        async with aiohttp.ClientSession() as client:
            for _ in range(3):
                await post(client, other, "hello")
            pushes = await open_console(client, watched)
            assert [row["seq"] for row in (await pushes.rows())["rows"]] == [1, 2, 3]
            with redis.Redis.from_url(redis_server.url) as connection:
                [first] = connection.zrange("fakehop:journal:~", 0, 0)
                with connection.pipeline(transaction=True) as pipe:
                    pipe.flushdb().set("fakehop:seq", 1).zadd("fakehop:journal:~", {first: 1}).execute()
            pushed = await pushes.rows()
            pushes.response.close()
    assert pushed["reset"] and [row["seq"] for row in pushed["rows"]] == [1]
