"""The official SDKs at their default settings keep HopBase's rules: every bundled scenario, in
every protocol, streamed and not, all at once against one real server, gets no finding. (The
SDKs honour Retry-After, back off, give up after 3 attempts, never retry a 400 and never
resume a stream; their read timeout of 600 s is within no_read_timeout's patience.)"""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict

import anthropic
import openai
import pytest

from fakehop.state import journal as jr
from fakehop.verdicts import RETRY_COUNT_HEADER

from . import clients
from .test_verdicts import scenario, verdict

HANGING = ("hang",)  # the SDKs wait on these for their read timeout of 600 s: judged while they wait
# The bundled scenarios whose attempts the SDKs retry: an HTTP error before any stream, or a
# whole answer that fails or is cut (the test below checks that each was retried).
RETRIED = (
    "server-error",
    "rate-limited",
    "flaky-then-ok",
    "fail-rate-limit",
    "fail-server-error",
    "fail-overloaded",
    "interrupted",
    "disconnect",
    "stall",
)
AT_ONCE = 3  # identical calls sent together
CALLER = "X-Test-Caller"  # which call sent an attempt: the verdict never reads it
# Calls under way at once: more connections than the listen backlog of the test server (128)
# would have the kernel drop some, and a first attempt then never reaches the server.
CONNECTIONS = 120
# How far apart copies sent together may arrive: the server shares its loop with all these
# clients, and on a loaded machine takes one copy up that much after the one before ended.
SPREAD = 2.0


async def openai_chat(client: openai.AsyncOpenAI, headers: dict, prompt: str, stream: bool) -> None:
    answer = await client.chat.completions.create(
        model="gpt-5.6-sol", messages=[{"role": "user", "content": prompt}], stream=stream, extra_headers=headers
    )
    if isinstance(answer, openai.AsyncStream):
        async for _ in answer:
            pass


async def openai_responses(client: openai.AsyncOpenAI, headers: dict, prompt: str, stream: bool) -> None:
    answer = await client.responses.create(model="gpt-5.6-sol", input=prompt, stream=stream, extra_headers=headers)
    if isinstance(answer, openai.AsyncStream):
        async for _ in answer:
            pass


async def anthropic_messages(client: anthropic.AsyncAnthropic, headers: dict, prompt: str, stream: bool) -> None:
    answer = await client.messages.create(
        model="claude-sonnet-5",
        max_tokens=200,
        messages=[{"role": "user", "content": prompt}],
        stream=stream,
        extra_headers=headers,
    )
    if isinstance(answer, anthropic.AsyncStream):
        async for _ in answer:
            pass


def callers(openai_client: openai.AsyncOpenAI, anthropic_client: anthropic.AsyncAnthropic):
    """(protocol, how to call it, with which client) for each protocol."""
    return (
        ("chat", openai_chat, openai_client),
        ("responses", openai_responses, openai_client),
        ("messages", anthropic_messages, anthropic_client),
    )


@pytest.mark.long
async def test_the_sdks_at_their_defaults_get_no_finding_on_any_bundled_scenario(base_url, gateway, library):
    async with (
        clients.openai_async(base_url=base_url + "/v1", api_key="sk-test") as openai_client,
        clients.anthropic_async(base_url=base_url, api_key="sk-test") as anthropic_client,
    ):
        calls = {}
        for name in library.names():
            for stream in (True, False):
                for protocol, call, client in callers(openai_client, anthropic_client):
                    prompt = f"{name} {protocol} {'stream' if stream else 'whole'}"  # a request of its own for each
                    calls[prompt] = asyncio.ensure_future(call(client, scenario(name), prompt, stream))
        waiting = [task for prompt, task in calls.items() if prompt.split()[0] in HANGING]
        finished = [task for task in calls.values() if task not in waiting]
        await asyncio.wait(finished)
        try:
            assert all(not task.done() for task in waiting)
            answer = await verdict(base_url)
        finally:
            for task in waiting:
                task.cancel()
            await asyncio.wait(waiting)
    ends = {record.end for record in gateway.journal.records}
    assert {jr.COMPLETED, jr.FAILED, jr.HTTP_ERROR, jr.DISCONNECTED} <= ends  # every kind of ending was judged
    assert answer["findings"] == [], answer["findings"]
    assert answer["requests"] == len(calls) and all(retried["attempts"] <= 3 for retried in answer["retried"])
    assert (
        sum(retried["attempts"] == 3 for retried in answer["retried"]) >= 3 * 2 * 3
    )  # rate-limited, server-error, flaky-then-ok


async def all_at_once(room: asyncio.Semaphore, copies: list) -> None:
    """The copies of a call, sent together once there is room; what they raise is theirs."""
    async with room:
        await asyncio.gather(*copies, return_exceptions=True)


def sent_as(record: jr.Record) -> str:
    """What the call that sent `record` sent (scenario, protocol, streamed), whichever copy it was."""
    return record.headers[CALLER].rsplit(" ", 1)[0]


@pytest.mark.long
async def test_identical_calls_at_once_are_each_a_request_of_their_own(base_url, gateway, library):
    """Several callers sending the same request at once, on every bundled scenario: their
    retry counts keep each call's attempts in one chain, apart from the others', and copies
    that failed one after another are not taken for one another's retries."""
    async with (
        clients.openai_async(base_url=base_url + "/v1", api_key="sk-test") as openai_client,
        clients.anthropic_async(base_url=base_url, api_key="sk-test") as anthropic_client,
    ):
        room, together = asyncio.Semaphore(CONNECTIONS // AT_ONCE), []
        for name in (name for name in library.names() if name not in HANGING):
            for stream in (True, False):
                for protocol, call, client in callers(openai_client, anthropic_client):
                    prompt, sent = f"{name} {protocol}", f"{name} {protocol} {stream}"
                    copies = [
                        call(client, {**scenario(name), CALLER: f"{sent} {copy}"}, prompt, stream)
                        for copy in range(AT_ONCE)
                    ]
                    together.append(all_at_once(room, copies))
        await asyncio.gather(*together)
    answer = await verdict(base_url, together_within=SPREAD)
    assert answer["findings"] == [], answer["findings"]
    assert answer["requests"] == len(together) * AT_ONCE
    records = {record.seq: record for record in gateway.journal.records}
    chains = defaultdict(list)  # what was sent: the lengths of its chains of attempts, as the verdict has them
    for retried in answer["retried"]:
        attempts = [records[seq] for seq in retried["seqs"]]
        assert len({sent_as(attempt) for attempt in attempts}) == 1, retried
        assert [attempt.headers[RETRY_COUNT_HEADER] for attempt in attempts] == [
            str(count) for count in range(len(attempts))
        ], retried
        chains[sent_as(attempts[0])].append(len(attempts))
    calls = defaultdict(list)  # the same, as the callers made them
    for caller, attempts in Counter(record.headers[CALLER] for record in records.values()).items():
        if attempts > 1:
            calls[caller.rsplit(" ", 1)[0]].append(attempts)
    assert {sent: sorted(lengths) for sent, lengths in chains.items()} == {
        sent: sorted(lengths) for sent, lengths in calls.items()
    }
    assert {sent.split()[0] for sent in chains} >= set(RETRIED)
