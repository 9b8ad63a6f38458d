"""The official SDKs at their default settings keep HopBase's rules: every bundled scenario, in
every protocol, streamed and not, all at once against one real server, gets no finding. (The
SDKs honour Retry-After, back off, give up after 3 attempts, never retry a 400 and never
resume a stream; their read timeout of 600 s is within no_read_timeout's patience.)"""

from __future__ import annotations

import asyncio

import anthropic
import openai

from fakehop import journal as jr

from .test_verdicts import verdict

HANGING = ("hang",)  # the SDKs wait on these for their read timeout of 600 s: judged while they wait


async def openai_chat(client: openai.AsyncOpenAI, name: str, prompt: str, stream: bool) -> None:
    messages = [{"role": "user", "content": prompt}]
    answer = await client.chat.completions.create(model="gpt-5.6-sol", messages=messages, stream=stream, extra_headers={"X-Fakehop-Scenario": name})
    if stream:
        async for _ in answer:
            pass


async def openai_responses(client: openai.AsyncOpenAI, name: str, prompt: str, stream: bool) -> None:
    answer = await client.responses.create(model="gpt-5.6-sol", input=prompt, stream=stream, extra_headers={"X-Fakehop-Scenario": name})
    if stream:
        async for _ in answer:
            pass


async def anthropic_messages(client: anthropic.AsyncAnthropic, name: str, prompt: str, stream: bool) -> None:
    messages = [{"role": "user", "content": prompt}]
    answer = await client.messages.create(model="claude-sonnet-5", max_tokens=200, messages=messages, stream=stream,
                                          extra_headers={"X-Fakehop-Scenario": name})
    if stream:
        async for _ in answer:
            pass


async def test_the_sdks_at_their_defaults_get_no_finding_on_any_bundled_scenario(base_url, gateway, library):
    async with openai.AsyncOpenAI(base_url=base_url + "/v1", api_key="sk-test") as openai_client, \
            anthropic.AsyncAnthropic(base_url=base_url, api_key="sk-test") as anthropic_client:
        calls = {}
        for name in library.names():
            for stream in (True, False):
                for protocol, call, client in (("chat", openai_chat, openai_client), ("responses", openai_responses, openai_client),
                                               ("messages", anthropic_messages, anthropic_client)):
                    prompt = f"{name} {protocol} {'stream' if stream else 'whole'}"  # a request of its own for each
                    calls[prompt] = asyncio.ensure_future(call(client, name, prompt, stream))
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
    assert sum(retried["attempts"] == 3 for retried in answer["retried"]) >= 3 * 2 * 3  # rate-limited, server-error, flaky-then-ok
