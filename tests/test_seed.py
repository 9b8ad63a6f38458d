"""`X-Fakehop-Seed: N` makes a live answer's ids and timestamps those of `fakehop play --seed N`,
so the bytes off the wire can be compared with the golden files."""

from __future__ import annotations

import json

import aiohttp
import pytest

from fakehop.play import player
from fakehop.protocols import PROTOCOLS
from fakehop.server.render import render, seeded_request_id

from .golden_files import Case


async def live_bytes(url: str, protocol: str, scenario: str, stream: bool, seed: str | None) -> tuple[bytes, str]:
    headers = {"X-Fakehop-Scenario": scenario, **({"X-Fakehop-Seed": seed} if seed is not None else {})}
    async with aiohttp.ClientSession() as session:
        async with session.post(
            url + PROTOCOLS[protocol].PATH,
            json=dict(PROTOCOLS[protocol].EXAMPLE_REQUEST, stream=stream),
            headers=headers,
        ) as response:
            return await response.read(), response.headers[PROTOCOLS[protocol].REQUEST_ID_HEADER]


async def played_bytes(library, protocol: str, scenario: str, stream: bool, seed: int) -> bytes:
    out = bytearray()
    body = dict(PROTOCOLS[protocol].EXAMPLE_REQUEST, stream=stream)
    await render(library, scenario, protocol, body, seed=seed, clock=player.InstantClock(), write=out.extend)
    return bytes(out)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
async def test_seed_zero_gives_the_golden_bytes(base_url, protocol, stream):
    for scenario in ("think-then-tool", "fail-overloaded", "rate-limited"):
        received, request_id = await live_bytes(base_url, protocol, scenario, stream, "0")
        assert received == Case(protocol, scenario, stream, 0).path.read_bytes()
        assert request_id == seeded_request_id(0)


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
async def test_any_seed_gives_what_play_prints_with_it(base_url, library, protocol):
    for seed in (42, -7, 10**18):
        received, request_id = await live_bytes(base_url, protocol, "weather-tool", True, f" {seed} ")
        assert received == await played_bytes(library, protocol, "weather-tool", True, seed)
        assert request_id == seeded_request_id(seed)


async def test_without_a_seed_ids_and_times_differ_between_answers(base_url):
    first, first_id = await live_bytes(base_url, "chat", "hello", False, None)
    second, second_id = await live_bytes(base_url, "chat", "hello", False, None)
    assert json.loads(first)["id"] != json.loads(second)["id"]
    assert first_id != second_id
    assert json.loads(first)["created"] != 1_700_000_000


async def test_the_sdk_sees_the_seeded_ids(openai_client):
    completion = await openai_client.chat.completions.create(
        model="gpt-5.6-sol",
        messages=[{"role": "user", "content": "Hello"}],
        extra_headers={"X-Fakehop-Seed": "0", "X-Fakehop-Scenario": "hello"},
    )
    golden = json.loads(Case("chat", "hello", False, 0).path.read_bytes())
    assert completion.id == golden["id"] and completion.created == golden["created"]
    assert completion._request_id == seeded_request_id(0)
