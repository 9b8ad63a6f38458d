"""GET /_fakehop/metrics, read with prometheus_client's own text parser, against the journal
of a mixed run of the official SDKs and raw requests."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter

import aiohttp
import openai
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from fakehop.server import metrics
from fakehop.state import journal as jr

CHAT = "/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "Hi"}]
STREAM = {"model": "gpt-5.6-sol", "messages": MESSAGES, "stream": True}


async def scrape(base_url: str, **headers) -> dict[str, list]:
    """Each family's samples, by the family's name."""
    async with aiohttp.ClientSession() as client:
        async with client.get(base_url + "/_fakehop/metrics", headers=headers) as response:
            assert response.status == 200, await response.text()
            assert response.headers["Content-Type"].startswith("text/plain; version=")
            text = await response.text()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def by_labels(samples: list, name: str, *labels: str) -> dict:
    return {tuple(sample.labels[label] for label in labels): sample.value for sample in samples if sample.name == name}


async def raw(base_url: str, scenario: str, body=STREAM, path=CHAT) -> bytes:
    """The body as it came, as far as it came (a scenario may cut it off)."""
    pieces = []
    async with aiohttp.ClientSession() as client:
        async with client.post(base_url + path, json=body, headers={"X-Fakehop-Scenario": scenario}) as response:
            with contextlib.suppress(aiohttp.ClientPayloadError):
                async for piece in response.content.iter_any():
                    pieces.append(piece)
    return b"".join(pieces)


async def hang_up_on(base_url: str, scenario: str) -> None:
    """Read a stream's first bytes, then go away."""
    async with aiohttp.ClientSession() as client:
        async with client.post(base_url + CHAT, json=STREAM, headers={"X-Fakehop-Scenario": scenario}) as response:
            await response.content.readany()


async def mixed_run(base_url: str, openai_client, anthropic_client) -> bytes:
    """Answers of every kind and protocol; returns the bytes of the chat streams read raw."""
    text = ""
    async for chunk in await openai_client.chat.completions.create(model="gpt-5.6-sol", messages=MESSAGES, stream=True):
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
    assert text == "Hello! How can I help you today?"
    with pytest.raises(openai.RateLimitError):
        await openai_client.chat.completions.create(
            model="gpt-5.6-sol", messages=MESSAGES, extra_headers={"X-Fakehop-Scenario": "rate-limited"}
        )
    with pytest.raises(openai.APIError, match="Rate limit"):
        async for _ in await openai_client.chat.completions.create(
            model="gpt-5.6-sol", messages=MESSAGES, stream=True, extra_headers={"X-Fakehop-Scenario": "fail-rate-limit"}
        ):
            pass
    async with openai_client.responses.stream(model="gpt-5.6-sol", input="Hi") as stream:
        await stream.get_final_response()
    async with anthropic_client.messages.stream(
        model="claude-sonnet-5",
        max_tokens=100,
        messages=MESSAGES,
        extra_headers={"X-Fakehop-Scenario": "keepalive-demo"},
    ) as stream:
        await stream.get_final_message()
    await openai_client.chat.completions.create(model="gpt-5.6-sol", messages=MESSAGES)  # not streamed
    sent = await raw(base_url, "weather-tool") + await raw(base_url, "disconnect")
    await raw(base_url, "hello", {"model": 5})  # rejected
    await raw(base_url, "hello", STREAM, "/v1/chat/complete")  # no such path
    await hang_up_on(base_url, "hang")
    return sent


async def settled(journal: jr.Journal) -> None:
    for _ in range(100):
        if all(record.end != jr.IN_PROGRESS for record in journal.records):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("a request did not end")


async def test_the_counters_match_the_journal_after_a_mixed_run(base_url, gateway, openai_client, anthropic_client):
    sent_raw = await mixed_run(base_url, openai_client, anthropic_client)
    await settled(gateway.journal)
    records = list(gateway.journal.records)
    families = await scrape(base_url)

    requests = by_labels(families["fakehop_requests"], "fakehop_requests_total", "protocol", "scenario", "end")
    assert requests == Counter((r.protocol or "none", r.scenario or "none", r.end) for r in records)
    assert {key[2] for key in requests} == {
        "completed",
        "http_error",
        "failed",
        "disconnected",
        "rejected",
        "client_disconnected",
    }
    assert by_labels(families["fakehop_responses"], "fakehop_responses_total", "status") == Counter(
        ("none" if r.status is None else str(r.status),) for r in records
    )
    assert by_labels(families["fakehop_requests_in_progress"], "fakehop_requests_in_progress") == {(): 0}
    assert by_labels(families["fakehop_open_streams"], "fakehop_open_streams", "protocol") == {}

    for family, field in (
        ("fakehop_stream_bytes", "sent_bytes"),
        ("fakehop_stream_events", "events"),
        ("fakehop_keepalives", "keepalives"),
    ):
        expected = Counter()
        for record in records:
            expected[(record.protocol or "none",)] += getattr(record, field)
        assert by_labels(families[family], family + "_total", "protocol") == expected, family
    assert (
        by_labels(families["fakehop_keepalives"], "fakehop_keepalives_total", "protocol")[("messages",)] == 3
    )  # keepalive-demo
    chat_raw = [r for r in records if r.protocol == "chat" and r.scenario in ("weather-tool", "disconnect")]
    assert sum(r.sent_bytes for r in chat_raw) == len(sent_raw)

    streams = [r for r in records if r.stream and r.status == 200]
    histogram = families["fakehop_stream_duration_seconds"]
    counts = by_labels(histogram, "fakehop_stream_duration_seconds_count", "protocol")
    assert counts == {(protocol,): 0 for protocol in ("none", "chat", "responses", "messages")} | Counter(
        (r.protocol,) for r in streams
    )
    for (protocol,), total in by_labels(histogram, "fakehop_stream_duration_seconds_sum", "protocol").items():
        assert total == pytest.approx(sum(r.duration for r in streams if r.protocol == protocol))
    buckets = [
        (float(s.labels["le"]), s.value)
        for s in histogram
        if s.name.endswith("_bucket") and s.labels["protocol"] == "messages"
    ]
    assert [count for _, count in buckets] == sorted(count for _, count in buckets) and buckets[-1] == (
        float("inf"),
        counts[("messages",)],
    )
    keepalive_demo = next(r for r in streams if r.scenario == "keepalive-demo")
    assert next(count for bound, count in buckets if bound >= keepalive_demo.duration) >= 1


async def test_a_stream_under_way_is_in_progress_and_reset_takes_no_count_back(base_url, gateway):
    async with aiohttp.ClientSession() as client:
        async with client.post(base_url + CHAT, json=STREAM, headers={"X-Fakehop-Scenario": "hang"}) as response:
            await response.content.readany()
            families = await scrape(base_url)
            assert by_labels(families["fakehop_requests_in_progress"], "fakehop_requests_in_progress") == {(): 1}
    await settled(gateway.journal)
    async with aiohttp.ClientSession() as client:
        async with client.post(base_url + "/_fakehop/reset") as reset:
            assert reset.status == 200
    families = await scrape(base_url)
    assert by_labels(families["fakehop_requests_in_progress"], "fakehop_requests_in_progress") == {(): 0}
    assert by_labels(families["fakehop_requests"], "fakehop_requests_total", "protocol", "scenario", "end") == {
        ("chat", "hang", "client_disconnected"): 1
    }


async def gauges(base_url: str) -> tuple[float, dict]:
    families = await scrape(base_url)
    return (
        by_labels(families["fakehop_requests_in_progress"], "fakehop_requests_in_progress")[()],
        by_labels(families["fakehop_open_streams"], "fakehop_open_streams", "protocol"),
    )


async def test_open_streams_count_the_streams_going_out_and_in_progress_every_answer_under_way(base_url, gateway):
    unstreamed = asyncio.create_task(raw(base_url, "hang", {**STREAM, "stream": False}))  # under way, no stream
    async with aiohttp.ClientSession() as client:
        async with client.post(base_url + CHAT, json=STREAM, headers={"X-Fakehop-Scenario": "hang"}) as response:
            await response.content.readany()
            for _ in range(100):
                if len(gateway.journal.records) == 2:
                    break
                await asyncio.sleep(0.02)
            assert await gauges(base_url) == (2, {("chat",): 1})
            async with client.post(
                base_url + "/_fakehop/reset"
            ) as reset:  # the journal forgets them; the gauges do not
                assert reset.status == 200
            assert await gauges(base_url) == (2, {("chat",): 1})
        unstreamed.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await unstreamed
        for _ in range(100):
            if await gauges(base_url) == (0, {}):
                break
            await asyncio.sleep(0.05)
    assert await gauges(base_url) == (0, {})
    families = await scrape(base_url)
    assert by_labels(families["fakehop_requests"], "fakehop_requests_total", "scenario", "end") == {
        ("hang", "client_disconnected"): 2
    }


async def test_the_metrics_need_the_admin_token(serve, make_gateway):
    url = await serve(make_gateway(admin_token="t0ken"))
    async with aiohttp.ClientSession() as client:
        async with client.get(url + "/_fakehop/metrics") as response:
            assert response.status == 401
    assert "fakehop_requests" in await scrape(url, Authorization="Bearer t0ken")


async def test_past_the_series_bound_new_scenarios_count_as_other(monkeypatch):
    monkeypatch.setattr(metrics, "MAX_SERIES", 3)
    journal = jr.Journal()
    counts = metrics.Counts()
    journal.opened_listeners.append(counts.add)
    for name in ("a", "b", "c", "d", "e", "a"):
        record = journal.open("req", "POST", CHAT, {})
        record.protocol, record.scenario = "chat", name
        record.close(jr.COMPLETED, 200)
    assert counts.request_totals(1) == {("a",): 2, ("b",): 1, ("c",): 1, (metrics.OTHER,): 2}
    assert counts.in_progress() == 0


def streaming(journal: jr.Journal, protocol: str) -> jr.Record:
    """A record as a stream's is while its SSE goes out."""
    record = journal.open("req", "POST", CHAT, {})
    record.protocol, record.stream, record.status = protocol, True, 200
    return record


async def test_records_under_way_are_counted_once_they_close_however_many_batches_later():
    journal = jr.Journal(capacity=10)  # it drops most of them while they are under way
    counts = metrics.Counts()
    journal.opened_listeners.append(counts.add)
    under_way = [streaming(journal, "chat"), streaming(journal, "messages"), journal.open("req", "POST", CHAT, {})]
    for _ in range(3 * metrics.FOLD_BATCH):
        journal.open("req", "GET", "/v1/models", {}).close(jr.COMPLETED, 200)
    journal.clear()  # as a reset does
    assert counts.in_progress() == 3 and counts.open_streams() == {("chat",): 1, ("messages",): 1}
    assert counts.request_totals(2) == {("completed",): 3 * metrics.FOLD_BATCH}
    under_way[0].sent_bytes = 120
    under_way[0].close(jr.COMPLETED)
    under_way[2].close(jr.HTTP_ERROR, 429)
    assert counts.in_progress() == 1 and counts.open_streams() == {("messages",): 1}
    assert counts.request_totals(2) == {("completed",): 3 * metrics.FOLD_BATCH + 1, ("http_error",): 1}
    assert counts.stream_totals()[("chat",)].bytes == 120


def test_a_journal_over_its_bytes_at_every_opening_is_folded_a_batch_at_a_time():
    """A journal full of long answers goes over its bytes at every request: the records it lets
    go are let go by the counts too, counted, OVERFLOW_BATCH openings at a time rather than at
    every opening (a fold costs more than the rest of a request's answer)."""
    journal = jr.Journal(max_bytes=4 * jr.BODY_ALLOWANCE)  # room for a few records only
    counts = metrics.Counts()
    journal.opened_listeners.append(counts.add)
    journal.overflow_listeners.append(counts.overflowed)
    kept_by_the_counts = []
    for _ in range(10 * metrics.OVERFLOW_BATCH):
        journal.open("req", "POST", CHAT, {}).close(jr.COMPLETED, 200)
        kept_by_the_counts.append(len(counts.open))
    assert len(journal.records) < 5
    assert max(kept_by_the_counts) == metrics.OVERFLOW_BATCH
    assert counts.request_totals(2) == {("completed",): 10 * metrics.OVERFLOW_BATCH}


def test_a_journal_keeping_fewer_records_than_a_batch_is_folded_as_often_as_it_keeps_them():
    """The counts hold no more of the records a small journal lets go than the journal keeps
    (see count_for); a journal of more is folded FOLD_BATCH openings at a time."""
    for capacity, batch in ((10, 10), (2 * metrics.FOLD_BATCH, metrics.FOLD_BATCH)):
        journal = jr.Journal(capacity=capacity)
        app = web.Application()
        metrics.count_for(app, journal)
        counts = app[metrics.COUNTS_KEY]
        held = []
        for _ in range(3 * batch):
            journal.open("req", "POST", CHAT, {}).close(jr.COMPLETED, 200)
            held.append(len(counts.open))
        assert max(held) == batch, capacity
        assert counts.request_totals(2) == {("completed",): 3 * batch}


@pytest.mark.parametrize("batch", [1, 4, 300], ids=["one-at-a-time", "a-few", "many"])
def test_each_stream_s_duration_is_counted_in_the_bucket_whose_bound_it_reaches(batch):
    """A duration on a bucket's bound counts in that bucket, one past it in the next, one past
    every bound in +Inf's, folded alone or among others."""
    durations = [0.005, 0.0051, 0.3, 0.25, 120.0, 400.0]
    journal = jr.Journal(capacity=len(durations) * batch)
    counts = metrics.Counts()
    journal.opened_listeners.append(counts.add)
    for duration in durations * batch:
        record = streaming(journal, "chat")
        record.close(jr.COMPLETED)
        record.duration = duration
        if batch == 1:
            counts.fold()
    stream = counts.stream_totals()[("chat",)]
    bounds = metrics.DURATION_BUCKETS
    expected = [
        batch * sum(1 for d in durations if (i == 0 or d > bounds[i - 1]) and d <= bounds[i])
        for i in range(len(bounds))
    ]
    assert stream.durations == [*expected, batch * sum(1 for d in durations if d > bounds[-1])]
    assert stream.durations[0] == batch and stream.durations[-1] == batch  # 0.005 on the first bound; 400 past all
    assert stream.duration_sum == pytest.approx(batch * sum(durations))
