"""Rate-limit headers on successful answers, from a scenario's `rate_limit:` block or the
defaults, counting down per answer within a window; on the wire and through the official SDKs."""

from __future__ import annotations

import asyncio
import calendar
import re
import time

import aiohttp
import pytest

from fakehop.play import ratelimit
from fakehop.scenario import reader as sc

from .inline_scenarios import add, problems_of

MESSAGES = [{"role": "user", "content": "Hi"}]
LIMITED = "rate_limit: {requests: 3, tokens: 1000, input_tokens: 800, output_tokens: 200, window: 1.5s}\nusage: {input_tokens: 10}\nsteps: [{text: Hi}]"
OPENAI_NAMES = [
    "x-ratelimit-limit-requests",
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-requests",
    "x-ratelimit-reset-tokens",
]
ANTHROPIC_NAMES = [
    f"anthropic-ratelimit-{kind}-{part}"
    for kind in ("requests", "input-tokens", "output-tokens", "tokens")
    for part in ("limit", "remaining", "reset")
]
BODIES = {
    "/v1/chat/completions": {"model": "m", "messages": MESSAGES, "max_completion_tokens": 20},
    "/v1/responses": {"model": "m", "input": "Hi", "max_output_tokens": 20},
    "/v1/messages": {"model": "c", "max_tokens": 20, "messages": MESSAGES},
}


async def headers_of(base_url: str, path: str, headers: dict, stream: bool = False) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as session:
        async with session.post(base_url + path, json={**BODIES[path], "stream": stream}, headers=headers) as answer:
            await answer.read()
            return answer.status, {name: value for name, value in answer.headers.items() if "ratelimit" in name}


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses"])
async def test_openai_protocols_count_down_requests_and_tokens(base_url, gateway, path):
    headers = add(gateway, "limited", LIMITED)
    answers = [await headers_of(base_url, path, headers, stream=number % 2 == 0) for number in range(4)]
    assert [status for status, _ in answers] == [200] * 4
    assert list(answers[0][1]) == OPENAI_NAMES
    assert [h["x-ratelimit-remaining-requests"] for _, h in answers] == ["2", "1", "0", "0"]  # never below 0
    assert [h["x-ratelimit-remaining-tokens"] for _, h in answers] == [
        "970",
        "940",
        "910",
        "880",
    ]  # 10 in + 20 out each
    assert {(h["x-ratelimit-limit-requests"], h["x-ratelimit-limit-tokens"]) for _, h in answers} == {("3", "1000")}
    resets = [h["x-ratelimit-reset-requests"] for _, h in answers]
    assert all(re.fullmatch(r"\d+ms|1(\.\d+)?s", reset) for reset in resets), resets


async def test_messages_counts_down_every_kind(base_url, gateway):
    headers = add(gateway, "limited", LIMITED)
    first = (await headers_of(base_url, "/v1/messages", headers, stream=True))[1]
    second = (await headers_of(base_url, "/v1/messages", headers))[1]
    assert list(first) == ANTHROPIC_NAMES
    assert [
        first[f"anthropic-ratelimit-{kind}-limit"] for kind in ("requests", "input-tokens", "output-tokens", "tokens")
    ] == ["3", "800", "200", "1000"]
    assert [
        second[f"anthropic-ratelimit-{kind}-remaining"]
        for kind in ("requests", "input-tokens", "output-tokens", "tokens")
    ] == ["1", "780", "160", "940"]
    reset = calendar.timegm(time.strptime(first["anthropic-ratelimit-requests-reset"], "%Y-%m-%dT%H:%M:%SZ"))
    assert time.time() - 1 <= reset <= time.time() + 3
    assert len({second[name] for name in ANTHROPIC_NAMES if name.endswith("-reset")}) == 1


async def test_the_window_starts_over(base_url, gateway):
    headers = add(gateway, "limited", LIMITED)
    before = [
        (await headers_of(base_url, "/v1/chat/completions", headers))[1]["x-ratelimit-remaining-requests"]
        for _ in range(2)
    ]
    await asyncio.sleep(1.6)
    after = (await headers_of(base_url, "/v1/chat/completions", headers))[1]["x-ratelimit-remaining-requests"]
    assert (before, after) == (["2", "1"], "2")


async def test_defaults_look_real_and_errors_carry_none(base_url, gateway):
    headers = add(gateway, "defaults", "rate_limit: {}\nsteps: [{text: Hi}]")
    _, default = await headers_of(base_url, "/v1/chat/completions", headers)
    assert (default["x-ratelimit-limit-requests"], default["x-ratelimit-remaining-requests"]) == ("5000", "4999")
    assert default["x-ratelimit-limit-tokens"] == "2400000"
    assert re.fullmatch(r"(59|60)(\.\d+)?s|1m0s", default["x-ratelimit-reset-requests"])
    for scenario, own in (("rate-limited", {"x-ratelimit-remaining-requests": "0"}), ("fail-rate-limit", {})):
        status, error = await headers_of(base_url, "/v1/chat/completions", {"X-Fakehop-Scenario": scenario})
        assert (status, error) == (429, own)  # an error has only the rate-limit headers its scenario gives
    gateway.global_session.reset()
    headers = add(gateway, "defaults", "rate_limit: {}\nsteps: [{text: Hi}]")
    _, again = await headers_of(base_url, "/v1/messages", headers)
    assert again["anthropic-ratelimit-requests-remaining"] == "4999"  # reset starts every window over


async def test_scenarios_without_a_block_carry_no_rate_limit_headers(base_url):
    for path in BODIES:
        assert await headers_of(base_url, path, {"X-Fakehop-Scenario": "hello"}) == (200, {})


async def test_a_sequence_shares_its_window(base_url, gateway):
    headers = add(
        gateway, "flaky", "rate_limit: {requests: 10}\nsequence: [{steps: [{text: a}]}, {steps: [{text: b}]}]"
    )
    remaining = [
        (await headers_of(base_url, "/v1/chat/completions", headers))[1]["x-ratelimit-remaining-requests"]
        for _ in range(3)
    ]
    assert remaining == ["9", "8", "7"]


async def test_sdks_read_the_headers(gateway, openai_client, anthropic_client):
    headers = add(gateway, "limited", LIMITED)
    raw = await openai_client.chat.completions.with_raw_response.create(
        model="m", messages=MESSAGES, extra_headers=headers
    )
    assert raw.headers["x-ratelimit-remaining-requests"] == "2" and raw.parse().choices[0].message.content == "Hi"
    async with openai_client.responses.with_streaming_response.create(
        model="m", input="Hi", stream=True, extra_headers=headers
    ) as response:
        assert response.headers["x-ratelimit-remaining-requests"] == "1"
    raw = await anthropic_client.messages.with_raw_response.create(
        model="c", max_tokens=20, messages=MESSAGES, extra_headers=headers
    )
    assert raw.headers["anthropic-ratelimit-requests-remaining"] == "0"


@pytest.mark.parametrize(
    "seconds, text",
    [(0.0174, "17ms"), (0.9994, "999ms"), (1.0, "1s"), (59.5, "59.5s"), (360.0, "6m0s"), (179.56, "2m59.56s")],
)
def test_resets_are_written_as_openai_writes_them(seconds, text):
    assert ratelimit.duration(seconds) == text


def test_rate_limit_blocks_are_checked_at_load():
    assert "did you mean 'requests'" in problems_of("rate_limit: {request: 5}\nsteps: [{text: a}]")
    assert "must be longer than 0s" in problems_of("rate_limit: {window: 0}\nsteps: [{text: a}]")
    assert "expected a mapping" in problems_of("rate_limit: 5\nsteps: [{text: a}]")
    limit = (
        sc.parse_text("rate_limit: {requests: 60, window: 1m}\nsteps: [{text: a}]", "t.yaml", "t")
        .entries[0]
        .script.rate_limit
    )
    assert limit == sc.RateLimit(requests=60, window=60.0)


async def test_each_session_counts_its_own(base_url, gateway):
    for session in ("one", "two"):
        gateway.session(session).add(sc.parse_text(LIMITED, "test", "limited"))
    remaining = [
        (
            await headers_of(
                base_url, "/v1/chat/completions", {"X-Fakehop-Scenario": "limited", "X-Fakehop-Session": session}
            )
        )[1]["x-ratelimit-remaining-requests"]
        for session in ("one", "one", "two")
    ]
    assert remaining == ["2", "1", "2"]
    gateway.session("one").reset()
    gateway.session("one").add(sc.parse_text(LIMITED, "test", "limited"))
    again = await headers_of(
        base_url, "/v1/chat/completions", {"X-Fakehop-Scenario": "limited", "X-Fakehop-Session": "one"}
    )
    assert again[1]["x-ratelimit-remaining-requests"] == "2"
