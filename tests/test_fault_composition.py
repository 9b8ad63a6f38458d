"""Faults together: a request takes the oldest fitting fault of the kinds that end or replace
an answer and every fitting latency; their scope (times, protocol, scenario, a seeded
probability), their sessions and a reset, through the official SDKs on real sockets."""

from __future__ import annotations

import time

import aiohttp
import anthropic
import openai
import pytest

from fakehop.testing import Fakehop, RemoteServer

from .test_fault_kinds import HELLO, SCALE, WORDS, ask, raised

CHAT = "/v1/chat/completions"
STREAMED = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "stream": True}


@pytest.fixture
def fast(fakehop: Fakehop) -> Fakehop:
    fakehop.time_scale = SCALE
    return fakehop


def test_latency_and_truncate_together_slow_the_deltas_then_cut_them(fast):
    fast.fault("latency", first=40)
    fast.fault("truncate", after=3)
    began = time.monotonic()
    error, deltas = raised(fast, "responses", True)
    assert 0.35 < time.monotonic() - began < 5
    assert isinstance(error, openai.APIConnectionError) and deltas == WORDS[:3]
    record = fast.requests[-1]
    assert (record.faults, record.end) == (["truncate", "latency"], "disconnected")
    assert fast.faults == []


def test_the_oldest_ending_fault_is_taken_with_every_latency(fast):
    fast.fault("latency", first=20)
    fast.fault("truncate", after=1)
    fast.fault("interrupt", after=1)
    fast.fault("latency", between=1, times=2)
    error, deltas = raised(fast, "chat", True)
    assert isinstance(error, openai.APIConnectionError) and deltas == WORDS[:1]
    assert fast.requests[-1].faults == ["truncate", "latency", "latency"]
    assert [(fault.kind, fault.left) for fault in fast.faults] == [("interrupt", 1), ("latency", 1)]
    error, deltas = raised(fast, "chat", True)
    assert isinstance(error, openai.APIError) and "interrupted" in str(error)
    assert fast.requests[-1].faults == ["interrupt", "latency"]
    assert ask(fast, "chat", True, []) == HELLO and fast.requests[-1].faults == []


def test_a_latency_delays_an_http_error(fast):
    fast.fault("rate_limit")
    fast.fault("latency", first=50)
    began = time.monotonic()
    error, _ = raised(fast, "messages", False)
    assert isinstance(error, anthropic.RateLimitError)
    assert 0.45 < time.monotonic() - began < 5
    assert fast.requests[-1].faults == ["rate_limit", "latency"]


def test_times_zero_breaks_every_answer_until_removed(fast):
    fault = fast.fault("truncate", after=2, times=0)
    assert fault.left is None
    for protocol in ("chat", "responses", "messages"):
        error, deltas = raised(fast, protocol, True)
        assert deltas == WORDS[:2]
    assert [(f.id, f.left) for f in fast.faults] == [(fault.id, None)]
    fast.clear_faults()
    assert ask(fast, "chat", True, []) == HELLO


def test_a_protocol_scope_breaks_only_that_protocol(fast):
    fast.fault("interrupt", after=1, protocol="messages", times=0)
    assert ask(fast, "chat", True, []) == HELLO
    assert ask(fast, "responses", True, []) == HELLO
    error, deltas = raised(fast, "messages", True)
    assert isinstance(error, anthropic.APIStatusError) and deltas == WORDS[:1]
    assert [r.faults for r in fast.requests] == [[], [], ["interrupt"]]


def test_a_scenario_glob_breaks_only_the_scenarios_it_names(fast):
    fast.queue("slow-typing", "long-text")
    fast.fault("hang", scenario="long-*", times=0)
    assert ask(fast, "chat", True, []) == "The quick brown fox jumps over the lazy dog."
    error, deltas = raised(fast, "chat", True, timeout=1)
    assert isinstance(error, openai.APITimeoutError) and deltas == []
    assert ask(fast, "chat", True, []) == HELLO
    assert [(r.scenario, r.faults) for r in fast.requests] == [
        ("slow-typing", []),
        ("long-text", ["hang"]),
        ("hello", []),
    ]


async def test_a_seeded_probability_repeats_exactly_on_another_server(make_gateway, serve):
    async def ends() -> list[str]:
        gateway = make_gateway()
        url = await serve(gateway)
        fault = {"kind": "truncate", "after": 1, "probability": 0.5, "seed": 11, "times": 0}
        async with aiohttp.ClientSession() as http:
            async with http.post(url + "/_fakehop/faults", json=fault) as response:
                assert response.status == 201
            for _ in range(20):
                try:
                    async with http.post(url + CHAT, json=STREAMED) as response:
                        await response.read()
                except aiohttp.ClientPayloadError:
                    pass
        return [record.end for record in gateway.journal.since(0) if record.path == CHAT]

    first, second = await ends(), await ends()
    assert first == second
    assert set(first) == {"completed", "disconnected"}


def test_a_fault_of_one_session_never_touches_another(fast):
    other = Fakehop(RemoteServer(fast.url), "kinds-elsewhere")
    try:
        other.time_scale = SCALE
        other.fault("stall", times=0)
        assert ask(fast, "chat", True, []) == HELLO
        assert fast.requests[-1].faults == []
        error, _ = raised(other, "chat", False)
        assert isinstance(error, openai.InternalServerError)
        assert [r.faults for r in other.requests] == [["stall"]]
    finally:
        other.close()


def test_a_reset_removes_the_faults(fast):
    fast.fault("latency", first=1000, times=0)
    fast.fault("hang", times=0)
    fast.reset(time_scale=SCALE)
    assert fast.faults == []
    assert ask(fast, "messages", True, [], timeout=5) == HELLO


def test_a_header_s_break_comes_first_and_the_session_s_latency_is_laid_over_it(fast):
    fast.fault("rate_limit")
    fast.fault("latency", first=30)
    client = fast.openai_client(max_retries=0, default_headers={"X-Fakehop-Fault": "truncate; after=2"})
    began = time.monotonic()
    got = []
    with pytest.raises(openai.APIConnectionError):
        for chunk in client.chat.completions.create(**STREAMED):
            got.extend([chunk.choices[0].delta.content] if chunk.choices and chunk.choices[0].delta.content else [])
    assert got == WORDS[:2] and time.monotonic() - began > 0.25
    assert fast.requests[-1].faults == ["truncate", "latency"]
    assert [(fault.kind, fault.left) for fault in fast.faults] == [("rate_limit", 1)]  # not taken
