"""Scenario files built to exhaust the loader: alias bombs, self-containing aliases, text
that multiplies past any file limit. Each is refused with a clear problem, in bounded time
and memory, through the loader and through the control API."""

from __future__ import annotations

import time
import tracemalloc

import aiohttp
import pytest

from fakehop.scenario.model import MATCH_PREFIX_CHARS
from fakehop.scenario.reader import MAX_TEXT_CHARS, ScenarioError, parse_text
from fakehop.scenario.yamlsource import MAX_EXPANDED_SIZE

MEMORY_BOUND = 64 * 2**20
TIME_BOUND = 10.0  # seconds of the parsing thread's CPU time; each of these takes well under one


def billion_laughs(use: str, levels: int = 9) -> str:
    """Anchors under `x` that stand for 9**levels strings, then `use` with BOMB replaced by the top alias."""
    anchors = ['  l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    anchors += [f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "x:\n" + "\n".join(anchors) + "\n" + use.replace("BOMB", f"*l{levels - 1}")


def problems_within_bounds(text: str, trace_memory: bool = True) -> list[str]:
    """The problems parse_text finds in `text`, asserting it found them quickly (and in little memory)."""
    if trace_memory:
        tracemalloc.start()
    started = (
        time.thread_time()
    )  # the work done, which other processes on a loaded machine do not stretch as they do the wall clock
    try:
        parse_text(text, "bomb.yaml", "bomb")
    except ScenarioError as exc:
        found = [str(problem) for problem in exc.problems]
    else:
        found = []
    finally:
        seconds = time.thread_time() - started
        if trace_memory:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
    assert seconds < TIME_BOUND
    if trace_memory:
        assert peak < MEMORY_BOUND
    return found


@pytest.mark.parametrize(
    "use",
    [
        "steps: [{tool_call: {name: f, arguments: {rows: BOMB}}}]",  # arguments become JSON: every node expanded
        "steps: [{text: hi}]\nmetadata: BOMB",
        "steps: BOMB",
        "usage: BOMB\nsteps: [{text: hi}]",
        "sequence: [{steps: [{text: hi}], usage: BOMB}]",
    ],
)
def test_billion_laughs_is_refused_in_bounded_time_and_memory(use):
    found = problems_within_bounds(billion_laughs(use))
    assert found == [
        f"bomb.yaml:8: aliases expand this document to more than {MAX_EXPANDED_SIZE:,} nodes and characters"
    ]


def test_one_long_string_aliased_many_times_is_refused():
    long = "a" * 200_000
    steps = "\n".join("  - text: *t" for _ in range(40))
    found = problems_within_bounds(f"x: &t {long}\nsteps:\n  - text: *t\n{steps}\n")
    assert "aliases expand this document" in found[0]


def test_an_alias_that_contains_itself_is_refused():
    assert problems_within_bounds("x: &a [1, *a]\nsteps: [{text: hi}]") == [
        "bomb.yaml:1: an alias refers to a node that contains it"
    ]
    assert problems_within_bounds("steps: &s [{text: hi}, {text: *s}]")[0].endswith(
        "an alias refers to a node that contains it"
    )


def test_aliases_used_sensibly_still_work():
    scenario = parse_text(
        """
        sequence:
          - &failing
            http_error: {status: 500, message: &why "upstream went away"}
          - *failing
          - steps: [{text: *why}, {fail: {kind: server_error, message: *why}}]
    """.replace("\n        ", "\n"),
        "ok.yaml",
        "ok",
    )
    assert [entry.script.http_error.status for entry in scenario.entries[:2]] == [500, 500]
    assert scenario.entries[2].script.steps[0].deltas == ("upstream went away",)


def test_text_that_adds_up_past_the_limit_is_refused_without_generating_it_all():
    step = "  - text: {faker: paragraphs, nb: 10000, seed: %d}\n"
    found = problems_within_bounds("steps:\n" + "".join(step % seed for seed in range(5000)), trace_memory=False)
    assert found == [f"bomb.yaml:4: the scenario's text adds up to more than {MAX_TEXT_CHARS:,} characters"]


def test_text_just_under_the_limit_is_accepted():
    chunk = "b" * 99_000
    steps = "".join("  - text: *t\n" for _ in range(MAX_TEXT_CHARS // len(chunk) - 1))
    assert problems_within_bounds(f"steps:\n  - text: &t {chunk}\n{steps}") == []


async def test_an_alias_bomb_sent_to_the_control_api_is_a_400(base_url):
    async with aiohttp.ClientSession() as session:
        bomb = billion_laughs("steps: [{tool_call: {name: f, arguments: {rows: BOMB}}}]")
        async with session.post(
            base_url + "/_fakehop/scenarios",
            params={"name": "bomb"},
            data=bomb,
            headers={"Content-Type": "application/yaml"},
        ) as response:
            answer = await response.json()
        assert response.status == 400
        assert "aliases expand this document" in answer["problems"][0]
        async with session.get(base_url + "/_fakehop/health") as response:
            assert response.status == 200


@pytest.mark.parametrize("rule", ["NEEDLE", "/NEEDLE/"])
async def test_a_match_reads_the_prompt_to_its_prefix_and_no_further(base_url, rule):
    """Text that ends with the prefix's last character fits; one character later, it does not."""
    async with aiohttp.ClientSession() as session:
        async with session.post(
            base_url + "/_fakehop/scenarios",
            params={"name": "needle"},
            headers={"Content-Type": "application/yaml"},
            data=f"match: {{prompt: '{rule}'}}\nsteps: [{{text: found}}]",
        ) as response:
            assert response.status == 201
        got = []
        for before in (MATCH_PREFIX_CHARS - len("NEEDLE"), MATCH_PREFIX_CHARS - len("NEEDLE") + 1):
            body = {"model": "m", "messages": [{"role": "user", "content": "a" * before + "NEEDLE"}]}
            async with session.post(base_url + "/v1/chat/completions", json=body) as response:
                got.append((await response.json())["choices"][0]["message"]["content"])
    assert got == ["found", "Hello! How can I help you today?"]


@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_tool_call_arguments_nested_too_deep_are_a_problem_at_their_line(depth):
    arguments = '{\\"a\\": ' + "[" * depth + "]" * depth + "}"
    with pytest.raises(ScenarioError) as raised:
        parse_text(f'steps:\n  - tool_call: {{name: f, arguments: "{arguments}"}}\n', "deep.yaml", "deep")
    assert [str(problem) for problem in raised.value.problems] == [
        "deep.yaml:2: tool_call arguments: nested too deep to read as JSON"
    ]
