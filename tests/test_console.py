"""The console's server side: its page served without the token, and the push of the journal
(GET /_fakehop/events) that feeds its log, through real sockets; the batching and bounds of
the push on a real journal."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp

from fakehop.server import console
from fakehop.server.console import Push
from fakehop.state import journal as jr

from .test_journal_frames import add

CHAT = "/v1/chat/completions"
STREAM = {"model": "gpt-5.6-sol", "messages": [{"role": "user", "content": "Hi"}], "stream": True}
TICKING = {
    "name": "ticking",
    "steps": [{"text": "abcdefghij", "chunk": "char", "interval": "10s"}],
}  # 0.1 s a char at FAST


class Pushes:
    """The console's push as a client reads it: one (event, data) at a time, rows as mappings."""

    def __init__(self, response: aiohttp.ClientResponse):
        self.response = response
        self.buffer = b""
        self.columns: list[str] = []

    async def next(self, timeout: float = 5.0) -> tuple[str, dict]:
        while True:
            while b"\n\n" not in self.buffer:
                self.buffer += await asyncio.wait_for(self.response.content.readany(), timeout)
            frame, self.buffer = self.buffer.split(b"\n\n", 1)
            if not frame.startswith(b":"):
                name, data = frame.decode().split("\n")
                event, payload = name.removeprefix("event: "), json.loads(data.removeprefix("data: "))
                if event == "hello":
                    self.columns = payload["columns"]
                elif event == "rows":
                    payload["rows"] = [dict(zip(self.columns, values)) for values in payload["rows"]]
                return event, payload

    async def rows(self, timeout: float = 5.0) -> dict:
        event, payload = await self.next(timeout)
        assert event == "rows"
        return payload

    async def until(self, done, timeout: float = 5.0) -> list[dict]:
        """Every row pushed until one makes `done(row)` true, that one last."""
        seen: list[dict] = []
        deadline = time.monotonic() + timeout
        while True:
            for row in (await self.rows(max(0.01, deadline - time.monotonic())))["rows"]:
                seen.append(row)
                if done(row):
                    return seen


async def open_console(client: aiohttp.ClientSession, base_url: str, **headers) -> Pushes:
    response = await client.get(base_url + "/_fakehop/events", headers=headers)
    assert response.status == 200, await response.text()
    assert response.headers["Content-Type"].startswith("text/event-stream")
    pushes = Pushes(response)
    event, hello = await pushes.next()
    assert event == "hello" and "GET /events" in hello["calls"]
    return pushes


async def post(client: aiohttp.ClientSession, base_url: str, scenario: str, body=STREAM) -> bytes:
    async with client.post(base_url + CHAT, json=body, headers={"X-Fakehop-Scenario": scenario}) as response:
        return await response.read()


# ---------------------------------------------------------------- the page


async def test_the_page_and_its_files_load_without_the_token_and_the_push_needs_it(serve, make_gateway):
    url = await serve(make_gateway(admin_token="t0ken"))
    async with aiohttp.ClientSession() as client:
        async with client.get(url + "/_fakehop/ui") as page:
            html = await page.text()
            assert page.status == 200 and page.content_type == "text/html"
            assert (
                page.headers["X-Frame-Options"] == "DENY"
                and "frame-ancestors 'none'" in page.headers["Content-Security-Policy"]
            )
        assert 'src="ui/console.js"' in html and 'href="ui/console.css"' in html
        for name, kind in (("console.js", "text/javascript"), ("console.css", "text/css")):
            async with client.get(f"{url}/_fakehop/ui/{name}") as asset:
                assert (asset.status, asset.content_type) == (200, kind)
        async with client.get(url + "/_fakehop/ui/secrets.txt") as missing:
            assert missing.status == 404 and "no file 'secrets.txt'" in (await missing.json())["error"]
        async with client.get(url + "/_fakehop/events") as refused:
            assert refused.status == 401
        pushes = await open_console(client, url, Authorization="bearer t0ken")
        assert (await pushes.rows())["reset"] is True
        pushes.response.close()


async def test_the_page_learns_without_the_token_whether_it_needs_one_and_whether_its_own_is_it(serve, make_gateway):
    guarded = await serve(make_gateway(admin_token="t0ken"))
    unguarded = await serve(make_gateway())
    async with aiohttp.ClientSession() as client:
        for url, authorization, state in (
            (guarded, None, {"admin_token": True, "accepted": False}),
            (guarded, "Bearer n0t-it", {"admin_token": True, "accepted": False}),
            (guarded, "Bearer t0ken", {"admin_token": True, "accepted": True}),
            (unguarded, None, {"admin_token": False, "accepted": True}),
        ):
            headers = {"Authorization": authorization} if authorization else {}
            async with client.get(url + "/_fakehop/ui/token", headers=headers) as answer:
                assert (answer.status, await answer.json(), answer.headers["Cache-Control"]) == (200, state, "no-store")
        async with client.get(guarded + "/_fakehop/ui/token", headers={"Host": "rebound.example"}) as refused:
            assert refused.status == 403
        async with client.get(
            guarded + "/_fakehop/ui/token", headers={"Origin": "https://elsewhere.example"}
        ) as refused:
            assert refused.status == 403


async def test_the_root_leads_to_the_page_and_a_foreign_host_gets_neither(base_url):
    async with aiohttp.ClientSession() as client:
        async with client.get(base_url + "/", allow_redirects=False) as root:
            assert (root.status, root.headers["Location"]) == (302, "/_fakehop/ui")
        async with client.get(base_url + "/") as followed:
            assert followed.status == 200 and "<title>fakehop console</title>" in await followed.text()
        for path in ("/", "/_fakehop/ui", "/_fakehop/ui/console.js"):
            async with client.get(
                base_url + path, headers={"Host": "rebound.example"}, allow_redirects=False
            ) as refused:
                assert refused.status == 403, path
        async with client.post(base_url + "/", json=STREAM) as posted:  # no protocol there: its own error shape
            assert posted.status == 405 and "error" in await posted.json()


# ---------------------------------------------------------------- the push over a socket


async def test_the_push_starts_with_the_newest_records_then_each_request_as_it_starts_and_ends(base_url, gateway):
    add(gateway, TICKING)
    async with aiohttp.ClientSession() as client:
        await post(client, base_url, "hello")
        await post(client, base_url, "rate-limited")
        pushes = await open_console(client, base_url)
        snapshot = await pushes.rows()
        assert snapshot["reset"] and [(r["seq"], r["scenario"], r["status"], r["end"]) for r in snapshot["rows"]] == [
            (1, "hello", 200, "completed"),
            (2, "rate-limited", 429, "http_error"),
        ]
        assert snapshot["rows"][1]["retry_after"] == "2" and snapshot["rows"][0]["model"] == "gpt-5.6-sol"
        streaming = asyncio.create_task(post(client, base_url, "ticking"))
        rows = await pushes.until(lambda row: row["seq"] == 3 and row["end"] != "in_progress")
        await streaming
    assert {row["seq"] for row in rows} == {3}
    in_progress = [row["events"] for row in rows if row["end"] == "in_progress"]
    assert len(set(in_progress)) >= 2 and in_progress == sorted(in_progress)  # its events counted while it streams
    last = rows[-1]
    record = gateway.journal.records[-1]
    assert (last["end"], last["events"], last["status"]) == ("completed", record.events, 200)
    assert (last["duration_us"], last["started_ms"]) == (int(record.duration * 1e6), int(record.started_at * 1000))


async def test_the_push_costs_nothing_until_a_console_opens_and_after_it_closed(base_url, gateway):
    journal = gateway.journal
    listening = lambda: (len(journal.opened_listeners), len(journal.listeners))  # noqa: E731
    before = listening()
    assert before == (1, 0)  # the metrics' count alone
    async with aiohttp.ClientSession() as client:
        pushes = await open_console(client, base_url)
        await pushes.rows()
        assert listening() == (2, 1)
        pushes.response.close()
        deadline = time.monotonic() + 5
        while listening() != before and time.monotonic() < deadline:
            await post(client, base_url, "hello")  # the next push's write finds the console gone
            await asyncio.sleep(0.05)
    assert listening() == before


async def test_an_emptied_journal_empties_the_log(base_url):
    async with aiohttp.ClientSession() as client:
        await post(client, base_url, "hello")
        pushes = await open_console(client, base_url)
        assert len((await pushes.rows())["rows"]) == 1
        async with client.delete(base_url + "/_fakehop/requests") as emptied:
            assert emptied.status == 200
        assert await pushes.rows() == {"rows": [], "reset": True, "skipped": 0}
        pushes.response.close()


async def test_a_row_carries_its_session_and_a_global_reset_empties_the_log(base_url):
    async with aiohttp.ClientSession() as client:
        pushes = await open_console(client, base_url)
        await pushes.rows()
        async with client.post(
            base_url + CHAT, json=STREAM, headers={"X-Fakehop-Session": "checkout-tests"}
        ) as response:
            await response.read()
        await post(client, base_url, "hello")
        rows = await pushes.until(lambda row: row["seq"] == 2 and row["end"] == "completed")
        assert {row["seq"]: row["session"] for row in rows} == {1: "checkout-tests", 2: None}
        async with client.post(base_url + "/_fakehop/reset?session=checkout-tests") as dropped:
            assert dropped.status == 200
        async with client.post(base_url + "/_fakehop/reset") as reset:
            assert reset.status == 200
        assert await pushes.rows() == {"rows": [], "reset": True, "skipped": 0}
        await post(client, base_url, "hello")
        [row] = await pushes.until(lambda row: row["end"] == "completed")
        pushes.response.close()
    assert row["seq"] == 3


async def test_a_row_holds_a_cut_model_and_error_and_says_where_an_unrouted_request_went(base_url):
    huge_model = {**STREAM, "model": "m" * 10_000}
    async with aiohttp.ClientSession() as client:
        pushes = await open_console(client, base_url)
        await pushes.rows()
        await post(client, base_url, "hello", huge_model)
        [rejected] = await pushes.until(lambda row: row["end"] == "rejected")
        async with client.get(base_url + "/v1/chat/complete") as response:
            assert response.status == 404
        [unrouted] = await pushes.until(lambda row: row["end"] == "rejected")
        pushes.response.close()
    assert rejected["model"] == "m" * console.MAX_TEXT_IN_ROW and len(rejected["error"]) <= console.MAX_TEXT_IN_ROW
    assert (rejected["protocol"], rejected["unrouted"]) == ("chat", None)
    assert (unrouted["protocol"], unrouted["unrouted"], unrouted["status"]) == (None, "GET /v1/chat/complete", 404)


# ---------------------------------------------------------------- batching and bounds, on a real journal


def opened(journal: jr.Journal, count: int) -> list[jr.Record]:
    return [journal.open(f"req_{n}", "POST", CHAT, {}) for n in range(count)]


def closed(journal: jr.Journal, records: list[jr.Record]) -> None:
    for record in records:
        record.close(jr.COMPLETED, 200)
        journal.closed(record)


def pushed(data: bytes) -> dict:
    """A push's rows, as mappings."""
    name, payload = data.decode().rstrip("\n").split("\n")
    assert name == "event: rows"
    rows = json.loads(payload.removeprefix("data: "))
    return {**rows, "rows": [dict(zip(console.COLUMNS, values)) for values in rows["rows"]]}


async def test_requests_between_two_pushes_are_one_push_with_one_row_each():
    journal = jr.Journal()
    push = Push(journal)
    with push.watching():
        records = opened(journal, 10)
        closed(journal, records[:6])
        batch = pushed(push.next_push())
        assert [row["seq"] for row in batch["rows"]] == list(range(1, 11)) and batch["skipped"] == 0
        assert [row["end"] for row in batch["rows"]] == ["completed"] * 6 + ["in_progress"] * 4
        assert push.next_push() is None  # nothing changed since
        closed(journal, records[6:])
        assert [row["seq"] for row in pushed(push.next_push())["rows"]] == [7, 8, 9, 10]


async def test_a_push_holds_at_most_max_rows_the_newest_and_counts_the_rest():
    journal = jr.Journal()
    push = Push(journal)
    with push.watching():
        closed(journal, opened(journal, console.MAX_ROWS + 50))
        batch = pushed(push.next_push())
    assert len(batch["rows"]) == console.MAX_ROWS and batch["skipped"] == 50
    assert batch["rows"][-1]["seq"] == console.MAX_ROWS + 50


async def test_a_row_shown_in_progress_is_updated_even_in_a_full_push():
    journal = jr.Journal()
    push = Push(journal)
    with push.watching():
        [first] = opened(journal, 1)
        assert pushed(push.next_push())["rows"][0]["end"] == "in_progress"
        later = opened(journal, console.MAX_ROWS + 10)
        closed(journal, [first])
        batch = pushed(push.next_push())
    [updated, *fresh] = batch["rows"]
    assert (updated["seq"], updated["end"]) == (1, "completed")
    assert [row["seq"] for row in fresh] == [record.seq for record in later[10:]] and batch["skipped"] == 10


async def test_notes_past_the_bound_make_a_snapshot_instead():
    journal = jr.Journal(capacity=5000)
    push = Push(journal)
    with push.watching():
        closed(journal, opened(journal, console.MAX_CHANGED))
        batch = pushed(push.next_push())
    assert batch["reset"] and len(batch["rows"]) == console.SNAPSHOT_ROWS
    assert batch["rows"][-1]["seq"] == console.MAX_CHANGED


async def test_a_second_console_opening_takes_nothing_from_the_first():
    journal = jr.Journal()
    push = Push(journal)
    with push.watching():
        [first] = opened(journal, 1)
        pushed(push.next_push())
        closed(journal, [first, *opened(journal, 2)])
        with push.watching():
            assert [row["seq"] for row in pushed(push.snapshot())["rows"]] == [
                1,
                2,
                3,
            ]  # what the second one is sent first
            batch = pushed(push.next_push())
    assert [(row["seq"], row["end"]) for row in batch["rows"]] == [(1, "completed"), (2, "completed"), (3, "completed")]


async def test_a_console_that_does_not_read_gets_a_snapshot_when_it_does():
    journal = jr.Journal()
    push = Push(journal)
    with push.watching() as watcher:
        for _ in range(console.MAX_BACKLOG + 1):
            closed(journal, opened(journal, 1))
            watcher.offer(push.next_push())
        caught_up = pushed(await watcher.next_write())
    assert caught_up["reset"] and len(caught_up["rows"]) == console.MAX_BACKLOG + 1
