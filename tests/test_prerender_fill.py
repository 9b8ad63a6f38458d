"""Kept renderings filled in: writes of several runs, long bytes between holes, and the fresh
ids drawn ahead for answers and requests, each as encoding afresh would write them."""

from __future__ import annotations

import json
import os
import random
import re
import tracemalloc
from pathlib import Path

import aiohttp
import pytest

from fakehop.play import player
from fakehop.protocols import PROTOCOLS
from fakehop.protocols.common import ASKS_DRAWN_AHEAD, DRAWN_AHEAD, Meta, anthropic_request_id, openai_request_id
from fakehop.scenario.library import Library
from fakehop.server import prerender as pr
from fakehop.server.render import render

BENCH = Library.load([Path(__file__).resolve().parent.parent / "bench" / "scenarios"])
MODELS = ("gpt-5.6-sol", 'a "model" \\ é%s%d')
# An id as the encoders write them: its prefix, then letters and digits.
# Each protocol's answer ids: the prefix they are made with, and the part drawn for each answer. A
# Responses item's id (msg_ and 24 characters) may begin with 01 by chance, as an Anthropic id does by its make.
ANSWER_IDS = {
    "chat": re.compile(rb'"(chatcmpl-)([A-Za-z0-9]+)"'),
    "responses": re.compile(rb'"(resp_|msg_)([A-Za-z0-9]+)"'),
    "messages": re.compile(rb'"(msg_01)([A-Za-z0-9]+)"'),
}
CREATED = re.compile(rb'"(created|created_at|completed_at)":\d+')
OPENAI_REQUEST_ID = re.compile(r"req_[0-9a-f]{24}")
ANTHROPIC_REQUEST_ID = re.compile(r"req_011C[1-9A-HJ-NP-Za-km-z]{20}")


def bench_script(name: str):
    script = BENCH[name].entries[0].script
    assert script is not None
    return script


def fresh_bytes(protocol, meta: Meta, parsed, script) -> list[bytes]:
    events = player.timeline(script, parsed.play, 1.0)
    return [data for _, data, _, _ in pr.encoded_writes(protocol, meta, parsed, events)]


def filled_bytes(protocol_name: str, name: str, body: dict, model: str, seed: int) -> tuple[list[bytes], list[bytes]]:
    """The writes of `name` filled in from its kept rendering, and encoded afresh, under equal seeded Metas."""
    protocol = PROTOCOLS[protocol_name]
    parsed = protocol.parse({**protocol.EXAMPLE_REQUEST, **body})
    script = bench_script(name)
    filling, afresh = (Meta(model, 1_764_000_000 + seed, random.Random(seed)) for _ in range(2))
    rendering = pr.render(protocol, script, parsed, filling, 1.0)
    assert rendering is not None
    filled = rendering.filled_holes(filling)
    return [write.fill(filled) for write in rendering.writes], fresh_bytes(protocol, afresh, parsed, script)


@pytest.mark.parametrize("name", ["bench-short", "bench-long"])
@pytest.mark.parametrize("model", MODELS)
def test_a_write_of_several_runs_fills_in_to_the_fresh_bytes(name, model):
    protocol = PROTOCOLS["responses"]
    parsed = protocol.parse(protocol.EXAMPLE_REQUEST)
    rendering = pr.render(protocol, bench_script(name), parsed, Meta(model, 1), 1.0)
    assert rendering is not None and max(len(write.runs) for write in rendering.writes) >= 3
    for seed in range(3):
        filled, afresh = filled_bytes("responses", name, {}, model, seed)
        assert filled == afresh


def test_long_bytes_between_holes_fill_in_to_the_fresh_bytes():
    """Instructions of several KB, with percent signs, sit between a response's holes."""
    instructions = "Answer %d%% of it; %s stays. " * 200
    protocol = PROTOCOLS["responses"]
    parsed = protocol.parse({**protocol.EXAMPLE_REQUEST, "instructions": instructions})
    rendering = pr.render(protocol, bench_script("bench-short"), parsed, Meta(MODELS[0], 1), 1.0)
    assert rendering is not None
    assert max(len(literal) for holes in rendering.holes for literal in holes.between) > len(instructions)
    for seed, model in enumerate(MODELS):
        filled, afresh = filled_bytes("responses", "bench-short", {"instructions": instructions}, model, seed)
        assert filled == afresh


def shape(data: bytes, protocol_name: str) -> bytes:
    """`data`, of `protocol_name`'s answer, with each id's drawn part and each time as x's of their length."""
    data = ANSWER_IDS[protocol_name].sub(lambda match: b'"' + match[1] + b"x" * len(match[2]) + b'"', data)
    return CREATED.sub(lambda match: b'"' + match[1] + b'":x', data)


def frames(data: bytes) -> list[bytes]:
    return data.split(b"\n\n")


@pytest.mark.parametrize("protocol_name", sorted(PROTOCOLS))
async def test_unseeded_answers_have_the_shape_of_a_seeded_one_and_ids_of_their_own(serve, gateway, protocol_name):
    """More answers than are drawn at once, each frame as a seeded re-encode's but for its ids and times."""
    url = await serve(gateway)
    protocol = PROTOCOLS[protocol_name]
    body = {**protocol.EXAMPLE_REQUEST, "stream": True}
    expected = bytearray()
    await render(
        gateway.library,
        "hello",
        protocol_name,
        body,
        seed=1,
        time_scale=gateway.time_scale,
        clock=player.InstantClock(),
        write=expected.extend,
    )
    expected_frames = [shape(frame, protocol_name) for frame in frames(bytes(expected))]
    answer_ids = []
    async with aiohttp.ClientSession() as session:
        for _ in range(ASKS_DRAWN_AHEAD * 2 + 5):
            async with session.post(url + protocol.PATH, json=body, headers={"X-Fakehop-Scenario": "hello"}) as answer:
                live = await answer.read()
            assert [shape(frame, protocol_name) for frame in frames(live)] == expected_frames
            ids = {match[0] for match in ANSWER_IDS[protocol_name].finditer(live)}
            assert len(ids) == (2 if protocol_name == "responses" else 1)  # the same in every frame of an answer
            answer_ids += ids
    assert len(set(answer_ids)) == len(answer_ids)


@pytest.mark.parametrize(("protocol_name", "form"), [("chat", OPENAI_REQUEST_ID), ("messages", ANTHROPIC_REQUEST_ID)])
async def test_fresh_request_ids_are_distinct_and_of_their_form(serve, gateway, protocol_name, form):
    url = await serve(gateway)
    protocol = PROTOCOLS[protocol_name]
    request_ids = []
    async with aiohttp.ClientSession() as session:
        for _ in range(DRAWN_AHEAD + 44):  # past the first batch drawn
            async with session.post(url + protocol.PATH, json=protocol.EXAMPLE_REQUEST) as answer:
                await answer.read()
                request_ids.append(answer.headers[protocol.REQUEST_ID_HEADER])
    assert all(form.fullmatch(request_id) for request_id in request_ids), request_ids[:3]
    assert len(set(request_ids)) == len(request_ids)


def test_fresh_request_ids_use_every_character_of_their_alphabet():
    """Drawn ahead, each id still takes its characters from all of its alphabet, at every place."""
    for fresh, alphabet, start in [
        (PROTOCOLS["chat"].fresh_request_id, "0123456789abcdef", 4),
        (PROTOCOLS["messages"].fresh_request_id, "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz", 8),
    ]:
        request_ids = [fresh() for _ in range(DRAWN_AHEAD * 8)]
        for place in (start, len(request_ids[0]) - 1):
            assert {request_id[place] for request_id in request_ids} == set(alphabet)


@pytest.mark.parametrize("protocol_name", ["chat", "responses", "messages"])
def test_the_ids_a_rendering_draws_ahead_take_no_more_memory_than_it_counts(protocol_name):
    protocol = PROTOCOLS[protocol_name]
    parsed = protocol.parse(protocol.EXAMPLE_REQUEST)
    rendering = pr.render(protocol, bench_script("bench-short"), parsed, Meta("m", 1), 1.0)
    assert rendering is not None and rendering.asks.fresh_ids is not None
    unseeded = Meta("m", 1)
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        rendering.asks.answers(unseeded)  # draws ASKS_DRAWN_AHEAD answers' ids, and hands out the first
        grown = sum(stat.size_diff for stat in tracemalloc.take_snapshot().compare_to(before, "filename"))
    finally:
        tracemalloc.stop()
    assert 0 < grown <= rendering.asks.held_ahead
    assert pr.kept_bytes(parsed, rendering) == len(parsed.variant) + rendering.size() + rendering.asks.held_ahead


def ids_drawn(protocol, script, parsed) -> list[str]:
    """A request id of each kind and the ids of one answer from the kept rendering, all fresh."""
    meta = Meta("m", 1)
    rendering = pr.kept(protocol, script, parsed, meta, 1.0)
    assert rendering is not None
    answer_ids = [answer.decode() for answer in rendering.asks.answers(meta)]
    return [openai_request_id(), anthropic_request_id(), *answer_ids]


def test_a_forked_process_draws_ids_of_its_own_not_those_drawn_ahead_before_the_fork():
    protocol = PROTOCOLS["responses"]
    parsed, script = protocol.parse(protocol.EXAMPLE_REQUEST), bench_script("bench-short")
    ids_drawn(protocol, script, parsed)  # ids drawn ahead, before the fork
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the forked process
        os.write(write, json.dumps(ids_drawn(protocol, script, parsed)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        in_child = json.loads(pipe.read())
    os.waitpid(child, 0)
    in_parent = ids_drawn(protocol, script, parsed)
    assert len(in_child) == len(in_parent) >= 4
    assert not set(in_child) & set(in_parent)
