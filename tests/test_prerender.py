"""Kept renderings: an answer filled in from a kept rendering is byte for byte the one encoded afresh."""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
from pathlib import Path

import aiohttp
import pytest

from fakehop.play import player
from fakehop.protocols import PROTOCOLS
from fakehop.protocols.common import Meta
from fakehop.scenario.library import Library
from fakehop.scenario.reader import parse_text
from fakehop.server import prerender as pr
from fakehop.server.render import render, seeded_meta

LIBRARY = Library.load()
ROOT = Path(__file__).resolve().parent.parent
REQUESTS = {
    "chat": [
        {},
        {"stream_options": {"include_usage": False}},
        {"max_completion_tokens": 3},
        {"n": 2, "logprobs": True, "top_logprobs": 2},
        {"tool_choice": "none"},
    ],
    "responses": [
        {},
        {"instructions": "Be brief.", "temperature": 0.2, "tools": [{"type": "function", "name": "f"}]},
        {"max_output_tokens": 3},
        {
            "reasoning": {"summary": "auto"},
            "include": ["reasoning.encrypted_content", "message.output_text.logprobs"],
            "top_logprobs": 1,
        },
    ],
    "messages": [
        {},
        {"system": "Be brief."},
        {"max_tokens": 3},
        {"thinking": {"type": "enabled", "budget_tokens": 1024, "display": "omitted"}},
        {"thinking": {"type": "disabled"}, "tool_choice": {"type": "none"}},
    ],
}
# Every step kind the fidelity of today's streams added, in one script.
FIDELITY = """
finish: stop_sequence
stop_sequence: "###"
usage: {cached_tokens: 3, cache_write_tokens: 2, reasoning_tokens: 4}
steps:
  - reasoning: {parts: ["**One**\\n\\nFirst.", "**Two**\\n\\nSecond."]}
    chunk: word
  - redacted_thinking
  - text: "Let me see."
    phase: commentary
    chunk: word
  - tool_call: {name: f, arguments: {a: 1}}
  - text: "Here."
    phase: final_answer
  - refusal: "But no more."
    chunk: word
"""


def scripts(library: Library):
    for name in library.names():
        for number, entry in enumerate(library[name].entries):
            if entry.script is not None:
                yield f"{name}[{number}]", entry.script


def fresh_bytes(protocol, meta: Meta, parsed, script, scale=1.0) -> list[bytes]:
    events = player.timeline(script, parsed.play, scale)
    return [data for _, data, _, _ in pr.encoded_writes(protocol, meta, parsed, events)]


def metas(seed: int, model: str = "gpt-5.6-sol") -> tuple[Meta, Meta]:
    """Two Metas that give the same values: one to fill a rendering, one to encode afresh."""
    return Meta(model, 1_764_000_000 + seed, random.Random(seed)), Meta(
        model, 1_764_000_000 + seed, random.Random(seed)
    )


@pytest.mark.parametrize("protocol_name", sorted(PROTOCOLS))
def test_every_bundled_script_fills_in_to_the_fresh_bytes(protocol_name):
    protocol = PROTOCOLS[protocol_name]
    checked = 0
    for label, script in scripts(LIBRARY):
        for number, extra in enumerate(REQUESTS[protocol_name]):
            parsed = protocol.parse({**protocol.EXAMPLE_REQUEST, **extra})
            for seed, model in [(number, "gpt-5.6-sol"), (number + 100, 'a "model" é\\')]:
                filling, afresh = metas(seed, model)
                rendering = pr.render(protocol, script, parsed, filling, 1.0)
                if rendering is None:
                    continue
                filled = rendering.filled_holes(filling)
                assert [write.fill(filled) for write in rendering.writes] == fresh_bytes(
                    protocol, afresh, parsed, script
                ), label
            checked += rendering is not None
    assert checked >= 3 * len(list(scripts(LIBRARY))) - 3, "most bundled scripts should be kept"


def script(text: str):
    return parse_text(textwrap.dedent(text), "t.yaml", "t").entries[0].script


@pytest.mark.parametrize("protocol_name", sorted(PROTOCOLS))
def test_the_new_steps_fill_in_to_the_fresh_bytes_for_every_kind_of_request(protocol_name):
    protocol = PROTOCOLS[protocol_name]
    fidelity = script(FIDELITY)
    for number, extra in enumerate(REQUESTS[protocol_name]):
        parsed = protocol.parse({**protocol.EXAMPLE_REQUEST, **extra})
        filling, afresh = metas(number)
        rendering = pr.render(protocol, fidelity, parsed, filling, 1.0)
        assert [write.fill(rendering.filled_holes(filling)) for write in rendering.writes] == fresh_bytes(
            protocol, afresh, parsed, fidelity
        ), extra


@pytest.mark.parametrize("protocol_name", sorted(PROTOCOLS))
def test_percent_signs_and_look_alike_numbers_stay_as_written(protocol_name):
    protocol = PROTOCOLS[protocol_name]
    tricky = script(f"steps: [{{text: '100% %(m)b %s {pr._CREATED_MARK - 1}', chunk: word}}]")
    parsed = protocol.parse(protocol.EXAMPLE_REQUEST)
    filling, afresh = metas(7)
    rendering = pr.render(protocol, tricky, parsed, filling, 1.0)
    assert [write.fill(rendering.filled_holes(filling)) for write in rendering.writes] == fresh_bytes(
        protocol, afresh, parsed, tricky
    )


@pytest.mark.parametrize("text", ['"\\0fakehop:m\\0"', f"'{pr._CREATED_MARK}'"])
def test_a_script_holding_a_marker_is_encoded_afresh(text):
    marked = script(f"steps: [{{text: {text}}}]")
    protocol = PROTOCOLS["chat"]
    assert pr.render(protocol, marked, protocol.parse(protocol.EXAMPLE_REQUEST), metas(0)[0], 1.0) is None


def test_a_stream_too_long_to_keep_is_encoded_afresh():
    long = script(f"steps: [{{text: '{'x' * (player.KEPT_HAPPENINGS + 1)}', chunk: char}}]")
    protocol = PROTOCOLS["messages"]
    assert pr.kept(protocol, long, protocol.parse(protocol.EXAMPLE_REQUEST), metas(0)[0], 1.0) is None


def test_writes_keep_their_offsets_and_endings():
    paced = script("keepalive: 1s\nsteps: [{text: 'a b', chunk: word, interval: 2500ms}, {fail: rate_limit}]")
    protocol = PROTOCOLS["chat"]
    rendering = pr.kept(protocol, paced, protocol.parse(protocol.EXAMPLE_REQUEST), metas(0)[0], 0.5)
    assert [write.offset for write in rendering.writes] == [0.0, 0.5, 1.0, 1.25]
    assert [type(write.last) for write in rendering.writes] == [
        player.Delta,
        player.Keepalive,
        player.Keepalive,
        player.Failure,
    ]
    assert pr.kept(protocol, paced, protocol.parse(protocol.EXAMPLE_REQUEST), metas(1)[0], 0.5) is rendering


def test_kept_renderings_stay_few():
    protocol = PROTOCOLS["chat"]
    for number in range(pr.KEPT_RENDERINGS * 2):
        pr.kept(
            protocol,
            script(f"steps: [{{text: 'n{number}'}}]"),
            protocol.parse(protocol.EXAMPLE_REQUEST),
            metas(0)[0],
            1.0,
        )
    assert len(pr._kept) <= pr.KEPT_RENDERINGS


# The id of the first answer of each scenario in the test below (seed 0), stored, for the request that continues it.
FIRST_RESPONSE_ID = seeded_meta("gpt-5.6-sol", 0).new_id("resp_")
VARIED_BODIES = {
    "chat": [
        {},
        {"stream_options": {"include_usage": False}},
        {"max_completion_tokens": 3},
        {"max_tokens": 5},
        {"model": 'other "model"'},
        {
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "A longer question, asked again."},
            ]
        },
    ],
    "responses": [
        {},
        {"instructions": "Be brief."},
        {"temperature": 0.5},
        {"tools": [{"type": "function", "name": "f", "parameters": {}}]},
        {"reasoning": {"effort": "low"}},
        {"text": {"verbosity": "low"}},
        {"metadata": {"run": "7"}},
        {"max_output_tokens": 3},
        {"max_tool_calls": 2},
        {"store": False},
        {"tool_choice": "required"},
        {"user": "u-1"},
        {"top_p": 0.9},
        {"truncation": "auto"},
        {"parallel_tool_calls": False},
        {"previous_response_id": FIRST_RESPONSE_ID},
        {"top_logprobs": 2},
        {"prompt_cache_key": "k"},
        {"safety_identifier": "s"},
        {"model": "gpt-other"},
    ],
    "messages": [
        {},
        {"system": "Be brief."},
        {"max_tokens": 3},
        {"model": "claude-other"},
        {"messages": [{"role": "user", "content": "A longer question, asked again."}]},
    ],
}


@pytest.mark.parametrize("protocol_name", sorted(PROTOCOLS))
async def test_requests_that_differ_get_their_own_bytes_live(serve, gateway, protocol_name):
    """One after another on one server, so a kept rendering made for one request would show up in the next's bytes."""
    url = await serve(gateway)
    protocol = PROTOCOLS[protocol_name]
    async with aiohttp.ClientSession() as session:
        for scenario in ("hello", "think-then-tool", "two-tools", "keepalive-demo"):
            for seed, extra in enumerate(VARIED_BODIES[protocol_name]):
                body = {**protocol.EXAMPLE_REQUEST, **extra}
                headers = {"X-Fakehop-Scenario": scenario, "X-Fakehop-Seed": str(seed)}
                async with session.post(url + protocol.PATH, json=body, headers=headers) as response:
                    live = await response.read()
                expected = bytearray()
                await render(
                    gateway.library,
                    scenario,
                    protocol_name,
                    body,
                    seed=seed,
                    time_scale=gateway.time_scale,
                    clock=player.InstantClock(),
                    write=expected.extend,
                )
                assert live == bytes(expected), (scenario, extra)


CYCLES_CHECK = """
import gc
from fakehop.protocols import PROTOCOLS
from fakehop.protocols.common import Meta
from tests.test_prerender import LIBRARY, fresh_bytes, scripts

gc.collect()
gc.set_debug(gc.DEBUG_SAVEALL)
for protocol in PROTOCOLS.values():
    parsed = protocol.parse(protocol.EXAMPLE_REQUEST)
    for _, kept_script in scripts(LIBRARY):
        fresh_bytes(protocol, Meta("m", 1), parsed, kept_script)
gc.collect()
print([type(garbage).__name__ for garbage in gc.garbage])
"""


def test_encoding_afresh_leaves_no_reference_cycles():
    """Streams too long to keep are encoded as they play; cycles would pile up for the collector.
    In a process of its own: the servers other tests run in threads here leave garbage of theirs."""
    done = subprocess.run(
        [sys.executable, "-c", CYCLES_CHECK], capture_output=True, text=True, cwd=ROOT, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("protocol_name", sorted(PROTOCOLS))
async def test_the_journal_counts_events_but_not_keepalives_kept_or_not(serve, gateway, protocol_name):
    url = await serve(gateway)
    protocol = PROTOCOLS[protocol_name]
    long_keepalives = (
        "keepalive: 1s\nsteps: [{delay: 2500ms}, {text: '" + "x" * (player.KEPT_HAPPENINGS + 1) + "', chunk: char}]"
    )
    gateway.global_session.add(parse_text(long_keepalives, "t.yaml", "too-long-to-keep"))
    async with aiohttp.ClientSession() as session:
        for scenario in ("keepalive-demo", "too-long-to-keep"):
            async with session.post(
                url + protocol.PATH, json=protocol.EXAMPLE_REQUEST, headers={"X-Fakehop-Scenario": scenario}
            ) as response:
                received = await response.read()
            keepalives = received.count(b": hopbase-keepalive\n\n")
            assert keepalives >= 2, scenario
            assert gateway.journal.records[-1].events == received.count(b"\n\n") - keepalives, scenario


def with_tool_results(protocol_name: str, text: str) -> dict:
    """The protocol's example request at turn 2, each of its tool results reading `text`."""
    body = PROTOCOLS[protocol_name].example_request(2)
    for message in body.get("messages", body.get("input")):
        if message.get("role") == "tool" or message.get("type") == "function_call_output":
            message["content" if protocol_name == "chat" else "output"] = text
        for block in message["content"] if isinstance(message.get("content"), list) else []:
            block["content"] = text
    return body


@pytest.mark.parametrize("protocol_name", sorted(PROTOCOLS))
async def test_answers_that_quote_the_request_are_each_its_own_and_never_kept(serve, gateway, protocol_name):
    url = await serve(gateway)
    protocol = PROTOCOLS[protocol_name]
    answers = []
    async with aiohttp.ClientSession() as session:
        for seed, result in enumerate(["Sunny", 'Hail "and" thunder', "Sunny"]):
            for stream in (True, False):
                body = dict(with_tool_results(protocol_name, result), stream=stream)
                headers = {"X-Fakehop-Scenario": "agent-weather", "X-Fakehop-Seed": str(seed % 2)}
                async with session.post(url + protocol.PATH, json=body, headers=headers) as response:
                    live = await response.read()
                expected = bytearray()
                await render(
                    gateway.library,
                    "agent-weather",
                    protocol_name,
                    body,
                    seed=seed % 2,
                    time_scale=gateway.time_scale,
                    clock=player.InstantClock(),
                    write=expected.extend,
                )
                assert live == bytes(expected), (result, stream)
                answers.append(live)
    assert b"Hail" in answers[2] and b"Hail" not in answers[0]
    assert answers[4:] == answers[:2]  # the same request, the same bytes
    assert [record.scenario for record in gateway.journal.records] == ["agent-weather[2]"] * 6
    assert not any(kept_script.request_text for kept_script, _ in pr._kept._kept.values())
    assert not any(kept_script.request_text for kept_script, _ in player._kept_timelines._kept.values())
