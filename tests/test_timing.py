"""Pauses land when the scenario says, on a real socket, under a time scale.

Tolerances: the server and this client share the CPU. With the load average at 1.5 on a
2-core machine, deltas arrived at most 2.4 ms after their schedule (10 runs of 10 deltas).
The checks allow LATE seconds late, for a CI machine under much heavier load (150 ms was
once exceeded with five test suites running at once on two cores), and never
early (EARLY covers clock granularity); there is no drift allowance: the last event of a
stream is held to the same bound as the first. Offsets count from when the request was sent,
which the server's schedule cannot precede, so a first frame that reached a loaded client
late does not make the frames after it look early.
"""

from __future__ import annotations

import pytest

from fakehop.scenario.reader import parse_text

from .timing import timed_frames

LATE = 0.25
EARLY = 0.005
SCALE = 0.2  # scenario seconds to real seconds; spacing of 0.2 s and more, against LATE
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def add(gateway, yaml_text: str, name: str = "timed") -> None:
    gateway.global_session.add(parse_text(yaml_text, "<test>", name))


def assert_on_time(arrived: float, expected: float) -> None:
    assert expected - EARLY <= arrived <= expected + LATE, f"arrived at {arrived:.3f}s, scheduled for {expected:.3f}s"


@pytest.fixture
def timed_gateway(make_gateway):
    return make_gateway(time_scale=SCALE)


async def test_deltas_arrive_on_schedule_without_drift(serve, timed_gateway):
    add(timed_gateway, "steps: [{text: 'a b c d e f g h i j', chunk: word, interval: 1s}]")
    url = await serve(timed_gateway) + "/v1/chat/completions"
    frames = await timed_frames(url, BODY, {"X-Fakehop-Scenario": "timed"})
    content = [(at, frame) for at, frame in frames if '"content":"' in frame and '"content":""' not in frame]
    assert len(content) == 10
    for number, (at, _) in enumerate(content):
        assert_on_time(at, number * SCALE)


async def test_delay_and_keepalive_spacing(serve, timed_gateway):
    add(timed_gateway, "keepalive: 2s\nsteps: [{text: a}, {delay: 9s}, {text: b}]")
    url = await serve(timed_gateway) + "/v1/chat/completions"
    frames = await timed_frames(url, BODY, {"X-Fakehop-Scenario": "timed"})
    keepalives = [at for at, frame in frames if frame == ": hopbase-keepalive"]
    assert len(keepalives) == 4
    for number, at in enumerate(keepalives, 1):
        assert_on_time(at, number * 2 * SCALE)
    second = next(at for at, frame in frames if '"content":"b"' in frame)
    assert_on_time(second, 9 * SCALE)


async def test_stall_keeps_alive_then_fails_after_stall_timeout(serve, timed_gateway):
    add(timed_gateway, "keepalive: 1s\nstall_timeout: 6s\nsteps: [{text: a}, stall]")
    url = await serve(timed_gateway) + "/v1/chat/completions"
    frames = await timed_frames(url, BODY, {"X-Fakehop-Scenario": "timed"})
    keepalives = [at for at, frame in frames if frame == ": hopbase-keepalive"]
    assert len(keepalives) == 5
    error_at, error = frames[-1]
    assert error.startswith('data: {"error":') and "no output for 6s" in error
    assert_on_time(error_at, 6 * SCALE)


async def test_unstreamed_answer_waits_for_the_whole_script(serve, timed_gateway):
    import time

    import aiohttp

    add(timed_gateway, "steps: [{text: a}, {delay: 4s}, {text: b}]")
    url = await serve(timed_gateway) + "/v1/chat/completions"
    async with aiohttp.ClientSession() as session:
        started = time.monotonic()
        async with session.post(
            url, json={**BODY, "stream": False}, headers={"X-Fakehop-Scenario": "timed"}
        ) as response:
            answer = await response.json()
        assert_on_time(time.monotonic() - started, 4 * SCALE)
    assert answer["choices"][0]["message"]["content"] == "ab"
