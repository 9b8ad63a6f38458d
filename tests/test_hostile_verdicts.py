"""Verdicts over journals a hostile or merely busy client fills: their time grows with the
journal, not with its square, and no header a client sends turns GET /_fakehop/verdict into a 500."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time

import aiohttp
import pytest

from fakehop.state.journal import Journal
from fakehop.verdicts import RETRY_COUNT_HEADER, judge, take

CHAT = "/v1/chat/completions"
PROMPT = {"model": "gpt-5.6-sol", "messages": [{"role": "user", "content": "Hello"}]}


async def post_many(base_url: str, count: int, body: dict, headers: dict[str, str]) -> None:
    """`count` posts of the same body, 50 at a time; each answer read to its end."""
    async with aiohttp.ClientSession() as session:
        at_once = asyncio.Semaphore(50)

        async def post() -> None:
            async with at_once, session.post(base_url + CHAT, json=body, headers=headers) as response:
                await response.read()

        await asyncio.gather(*(post() for _ in range(count)))


async def get_verdict(base_url: str) -> tuple[int, dict | str]:
    async with aiohttp.ClientSession() as session:
        async with session.get(base_url + "/_fakehop/verdict") as response:
            return response.status, await response.json() if response.status == 200 else await response.text()


def cpu_seconds(taken, repeats: int) -> float:
    """The least CPU time of `repeats` verdicts over `taken`: the least is the one a busy machine disturbed least."""
    spent = []
    for _ in range(repeats):
        began = time.process_time()
        judge(taken)
        spent.append(time.process_time() - began)
    return min(spent)


@pytest.mark.long
async def test_ten_thousand_identical_retries_are_judged_in_a_few_seconds(serve, make_gateway, caplog):
    caplog.set_level(logging.ERROR)
    base_url = await serve(make_gateway(journal=Journal(10_000, 10**9)))
    await post_many(base_url, 10_000, PROMPT, {RETRY_COUNT_HEADER: "1"})
    began = time.monotonic()
    status, answer = await get_verdict(base_url)
    assert time.monotonic() - began < 4.0  # 12.6 s when each attempt was matched against every call before it
    assert status == 200 and answer["requests"] == 10_000, answer
    assert not caplog.records


@pytest.mark.long
async def test_the_verdicts_time_grows_with_the_journal_not_its_square(serve, make_gateway):
    """Identical streams, all interrupted, each a retry by its header: every attempt is matched
    to the calls before it, and every cut stream to the requests after it."""
    gateway = make_gateway(journal=Journal(4000, 10**9))
    base_url = await serve(gateway)
    retries = {RETRY_COUNT_HEADER: "1", "X-Fakehop-Scenario": "interrupted"}
    await post_many(base_url, 4000, {**PROMPT, "stream": True}, retries)
    taken = take(gateway.global_session)
    assert len(taken.records) == 4000 and {record.end for record in taken.records} == {"failed"}
    quarter = dataclasses.replace(taken, records=taken.records[:1000])
    assert cpu_seconds(taken, 3) < 8 * cpu_seconds(quarter, 5)  # 4 times the records: 16 times the time when quadratic


@pytest.mark.parametrize(
    "count", ["\u00b2", "\u0663", "9" * 5000, "+1"], ids=["superscript", "arabic-indic", "5000-digits", "signed"]
)
async def test_a_retry_count_that_is_no_number_the_sdks_send_is_no_retry_count(base_url, caplog, count):
    caplog.set_level(logging.ERROR)
    headers = {RETRY_COUNT_HEADER: count, "X-Fakehop-Scenario": "server-error"}
    async with aiohttp.ClientSession() as session:
        for _ in range(2):
            async with session.post(base_url + CHAT, json=PROMPT, headers=headers) as response:
                assert response.status == 500
    status, answer = await get_verdict(base_url)
    assert status == 200, answer
    # as with no count: the second attempt is the first's retry, sent at once
    assert [request["attempts"] for request in answer["retried"]] == [2], answer
    assert [finding["rule"] for finding in answer["findings"]] == ["no_backoff"], answer
    assert not caplog.records
