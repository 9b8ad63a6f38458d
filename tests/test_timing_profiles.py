"""`timing:` blocks and `fakehop serve --timing`: the time to the first delta drawn from a
log-normal fitted to the p50 and p99 asked for, later deltas paced at a rate of tokens a second,
the same pauses for a seed; measured from the player's timeline, on a real socket, and
through the CLI."""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import time
from dataclasses import replace
from pathlib import Path

import aiohttp
import jsonschema
import pytest

from fakehop.play import player
from fakehop.scenario import reader as sc
from fakehop.scenario.model import Script
from fakehop.scenario.schema import scenario_schema
from fakehop.scenario.timings import PROFILES
from fakehop.server import prerender
from fakehop.server.gateway import Gateway

from .cli_runs import fakehop_here
from .inline_scenarios import add, problems_of
from .test_serve_for_scripts import appeared, serve, stop

ANSWER = "The quick brown fox jumps over the lazy dog, and then it rests in the shade of a tall tree. " * 4
TIMED = f"""
timing:
  first_token: {{p50: 800ms, p99: 2.5s}}
  tokens_per_second: {{mean: 60, jitter: 0.2}}
steps:
  - text: "{ANSWER}"
    chunk: word
"""
CHAT = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "stream": True}


def script_of(text: str) -> Script:
    script = sc.parse_text(text, "t.yaml", "t").entries[0].script
    assert script is not None
    return script


def with_seed(script: Script, seed: int | None) -> Script:
    assert script.timing is not None
    return replace(script, timing=replace(script.timing, seed=seed))


def deltas(script: Script, time_scale: float = 1.0) -> list[tuple[float, str]]:
    return [
        (offset, happening.text)
        for offset, happening in player.timeline(script, time_scale=time_scale)
        if type(happening) is player.Delta
    ]


def first_delta(script: Script) -> float:
    return deltas(script)[0][0]


def percentiles(values: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return cuts[49], cuts[98]


def within(measured: float, asked: float, tolerance: float) -> bool:
    return abs(measured - asked) <= tolerance * asked


# ---------------------------------------------------------------- the statistics, from the timeline


def test_the_first_deltas_of_1000_seeded_answers_have_the_p50_and_p99_asked_for():
    script = script_of(TIMED)
    p50, p99 = percentiles([first_delta(with_seed(script, seed)) for seed in range(1000)])
    assert within(p50, 0.8, 0.10), p50
    assert within(p99, 2.5, 0.10), p99


def test_unseeded_answers_draw_the_same_distribution():
    """20,000 answers: at 1,000 a p99 wanders some 6% either way from one run to the next."""
    script = script_of("timing: {first_token: {p50: 800ms, p99: 2.5s}}\nsteps: [{text: hi}]")
    p50, p99 = percentiles([first_delta(script) for _ in range(20_000)])
    assert within(p50, 0.8, 0.05), p50
    assert within(p99, 2.5, 0.05), p99


def test_later_deltas_come_at_the_mean_tokens_per_second():
    script = script_of(TIMED)
    rates = []
    for seed in range(200):
        timed = deltas(with_seed(script, seed))
        tokens = sum(len(text) for _, text in timed[1:]) / player.CHARS_PER_TOKEN
        rates.append(tokens / (timed[-1][0] - timed[0][0]))
    assert within(statistics.mean(rates), 60, 0.03), statistics.mean(rates)
    assert statistics.pstdev(rates) > 0  # the jitter spreads them


def test_no_jitter_paces_every_delta_by_its_tokens_exactly():
    script = script_of('timing: {tokens_per_second: {mean: 10}}\nsteps: [{text: ["abcd", "abcdefgh", "ab"]}]')
    assert deltas(script) == [(0.0, "abcd"), (pytest.approx(0.2), "abcdefgh"), (pytest.approx(0.25), "ab")]


def test_a_seed_repeats_the_same_pauses_in_every_answer_and_every_run():
    seeded = TIMED.replace("timing:\n", "timing:\n  seed: 7\n")
    first, again, reread = deltas(script_of(seeded)), deltas(script_of(seeded)), deltas(script_of(seeded))
    assert first == again == reread
    assert deltas(with_seed(script_of(TIMED), 8)) != first


def test_without_a_seed_each_answer_draws_its_own():
    script = script_of(TIMED)
    assert deltas(script) != deltas(script)


def test_the_time_scale_multiplies_the_drawn_pauses():
    script = with_seed(script_of(TIMED), 3)
    assert [(offset * 0.01, text) for offset, text in deltas(script)] == [
        (pytest.approx(offset), text) for offset, text in deltas(script, time_scale=0.01)
    ]


def test_a_delay_before_the_first_output_wins_over_the_drawn_time():
    script = script_of(
        "timing: {first_token: {p50: 5s, p99: 9s}, tokens_per_second: {mean: 10}, seed: 1}\n"
        "steps: [{delay: 250ms}, {text: [abcd, abcd]}]"
    )
    assert deltas(script) == [(0.25, "abcd"), (pytest.approx(0.35), "abcd")]


def test_an_interval_or_chunk_interval_wins_over_the_pace():
    step_interval = script_of(
        "timing: {first_token: {p50: 1s, p99: 1s}, tokens_per_second: {mean: 1}}\n"
        "steps: [{text: [a, b, c], interval: 50ms}, {text: [abcd, abcd]}]"
    )
    assert [offset for offset, _ in deltas(step_interval)] == [
        1.0,
        pytest.approx(1.05),
        pytest.approx(1.1),
        pytest.approx(2.1),  # the next step is paced: 4 characters, a token, at one a second
        pytest.approx(3.1),
    ]
    chunk_interval = script_of(
        "chunk_interval: 20ms\ntiming: {first_token: {p50: 1s, p99: 1s}, tokens_per_second: {mean: 1}}\n"
        "steps: [{text: [a, b]}]"
    )
    assert [offset for offset, _ in deltas(chunk_interval)] == [1.0, pytest.approx(1.02)]


def test_the_time_to_the_first_delta_counts_for_the_first_output_however_it_shows():
    script = script_of(
        "timing: {first_token: {p50: 2s, p99: 2s}, tokens_per_second: {mean: 1}}\n"
        "steps: [{tool_call: {name: f, arguments: {}}}, {text: abcd}]"
    )
    assert [offset for offset, _ in deltas(script)] == [2.0, 3.0]  # `{}`: 2 characters, half a token


def test_a_seeded_timeline_is_kept_and_an_unseeded_one_is_laid_out_per_answer():
    seeded, unseeded = with_seed(script_of(TIMED), 5), script_of(TIMED)
    list(player.timeline(seeded))
    list(player.timeline(unseeded))
    key = (player.PlayRequest(), 1.0)
    assert player._kept_timelines.get(seeded, key) is not player.KeptPerScript.MISSING
    assert player._kept_timelines.get(unseeded, key) is player.KeptPerScript.MISSING


def chat_writes(script: Script, fresh: bool, draws: int) -> list[prerender.TimedWrite]:
    """One streamed chat answer's writes, the timing's pauses drawn from `draws`: as the server
    sends them, or encoded afresh from the timeline."""
    from fakehop.protocols import PROTOCOLS
    from fakehop.protocols.common import Meta

    chat, meta = PROTOCOLS["chat"], Meta("m", 1, rng=random.Random(1))
    parsed = chat.parse(CHAT)
    player._FRESH_DRAWS.seed(draws)
    if fresh:
        return list(prerender.encoded_writes(chat, meta, parsed, player.timeline(script, parsed.play)))
    return list(prerender.stream_writes(chat, script, parsed, meta, 1.0))


KEEPALIVES_VARY = """
keepalive: 1s
timing: {first_token: {p50: 900ms, p99: 3s}, tokens_per_second: {mean: 2, jitter: 1}}
steps: [{text: "Hello there, how are you today?", chunk: word}, keepalive, {text: [Fine, ""]}]
"""


@pytest.mark.parametrize("text", [TIMED, KEEPALIVES_VARY])
def test_unseeded_answers_are_the_kept_bytes_at_their_own_offsets(text):
    """Not kept as a seeded answer is: each answer lays out its own timeline and takes the
    first answer's bytes at its offsets, or is encoded afresh where keepalives fill its silences
    otherwise; either way the bytes encoding afresh would send, at the offsets drawn."""
    script = script_of(text)
    answers = [chat_writes(script, fresh=False, draws=draws) for draws in range(40)]
    assert answers == [chat_writes(script, fresh=True, draws=draws) for draws in range(40)]
    assert len({writes[-1][0] for writes in answers}) == 40  # each drew its own
    [(_, first)] = [entry for entry in prerender._retimed._kept.values() if entry[0] is script]
    assert first is not None  # the first answer's bytes are kept
    keepalive_counts = {sum(b"keepalive" in data for _, data, _, _ in writes) for writes in answers}
    assert (len(keepalive_counts) > 1) is (text == KEEPALIVES_VARY)


# ---------------------------------------------------------------- what a scenario may say


@pytest.mark.parametrize(
    ("timing", "says"),
    [
        ("{first_token: {p50: 2s, p99: 1s}}", "t.yaml:1: timing first_token: p99 (1s) is less than p50 (2s)"),
        ("{first_token: {p50: 0s, p99: 1s}}", "timing first_token p50: must be longer than 0s"),
        ("{first_token: {p50: 1s}}", "timing first_token: needs p99"),
        ("{first_token: {p50: soon, p99: 1s}}", "p50: expected a duration such as 2s, 250ms or 1.5m"),
        ("{tokens_per_second: {mean: 0}}", "timing tokens_per_second mean: expected a number of tokens a second"),
        ("{tokens_per_second: {mean: 50, jitter: 1.5}}", "timing tokens_per_second jitter: expected 0 to 1, got 1.5"),
        ("{tokens_per_second: {mean: 50}, seed: 1.5}", "seed: expected a whole number"),
        ("{tokens_per_second: {mean: 50}, pace: 1}", "unknown key 'pace' in timing"),
        ("{seed: 1}", "timing: give first_token, tokens_per_second or both"),
        ("fast", "timing: expected a mapping such as {first_token:"),
    ],
)
def test_a_bad_timing_is_a_problem_on_its_line(timing, says):
    assert says in problems_of(f"timing: {timing}\nsteps: [{{text: hi}}]")


def test_the_schema_takes_what_the_reader_takes():
    validator = jsonschema.Draft202012Validator(scenario_schema())
    good = {
        "timing": {"first_token": {"p50": "800ms", "p99": 2.5}, "tokens_per_second": {"mean": 60, "jitter": 0.2}},
        "steps": [{"text": "hi"}],
    }
    script_of(json.dumps(good))
    assert not list(validator.iter_errors(good))
    assert list(validator.iter_errors({"timing": {"tokens_per_second": {"mean": 6, "jitter": 2}}, "steps": []}))
    assert list(validator.iter_errors({"timing": {"seed": 1}, "steps": [{"text": "hi"}]}))


def test_fakehop_validate_names_the_timing_problems(tmp_path: Path):
    path = tmp_path / "slow.yaml"
    path.write_text("steps: [{text: hi}]\ntiming:\n  first_token: {p50: 3s, p99: 1s}\n")
    result = fakehop_here("validate", str(path))
    assert result.returncode == 1
    assert f"{path}:3: timing first_token: p99 (1s) is less than p50 (3s)" in result.stdout + result.stderr


# ---------------------------------------------------------------- on a real socket


async def first_content_after(base_url: str, headers: dict) -> float:
    """Seconds from sending a streamed chat request to its first content delta."""
    async with aiohttp.ClientSession() as session:
        began = time.monotonic()
        async with session.post(base_url + "/v1/chat/completions", json=CHAT, headers=headers) as answer:
            assert answer.status == 200
            async for line in answer.content:
                if line.startswith(b"data: {") and json.loads(line[6:])["choices"][0]["delta"].get("content"):
                    return time.monotonic() - began
    raise AssertionError("no content delta")


async def test_a_served_stream_sends_its_first_delta_at_the_drawn_time(serve, make_gateway):
    """p50 = p99: the drawn time is 4 s, 0.4 s at the time scale 0.1."""
    gateway = make_gateway(time_scale=0.1)
    headers = add(gateway, "timed", "timing: {first_token: {p50: 4s, p99: 4s}}\nsteps: [{text: [Hel, lo]}]")
    base_url = await serve(gateway)
    assert 0.35 <= await first_content_after(base_url, headers) < 1.4


async def test_the_server_timing_applies_to_scenarios_without_their_own(serve, library):
    default = script_of("timing: {first_token: {p50: 4s, p99: 4s}}\nsteps: [{text: x}]").timing
    gateway = Gateway(library, time_scale=0.1, timing=default)
    own = add(gateway, "own", "timing: {first_token: {p50: 100ms, p99: 100ms}}\nsteps: [{text: [Hel, lo]}]")
    plain = add(gateway, "plain", "steps: [{text: [Hel, lo]}]")
    base_url = await serve(gateway)
    timed = await asyncio.gather(*(first_content_after(base_url, plain) for _ in range(3)))
    assert all(0.35 <= seconds < 1.4 for seconds in timed), timed
    assert await first_content_after(base_url, own) < 0.3  # its own: 10 ms


# ---------------------------------------------------------------- fakehop serve --timing


def timing_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "timing.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("kind", ["name", "file"])
def test_serve_timing_takes_a_profile_name_or_a_file(tmp_path: Path, kind: str):
    """The reasoning profile's median is 5 s: below 1 s a draw has odds of 1 in 3,000; its first
    delta comes after 0.1 s at the time scale 0.1. The file's 3 s is 0.3 s."""
    given = (
        "responses-reasoning"
        if kind == "name"
        else timing_file(tmp_path, "timing:\n  first_token: {p50: 3s, p99: 3s}\n")
    )
    ready = tmp_path / "ready"
    server = serve("--timing", given, "--time-scale", "0.1", "--ready-file", str(ready))
    try:
        url = appeared(ready, server).strip()
        seconds = asyncio.run(first_content_after(url, {"X-Fakehop-Scenario": "hello"}))
    finally:
        stop(server)
    assert 0.1 <= seconds < (3.0 if kind == "name" else 1.3), seconds
    if kind == "file":
        assert seconds >= 0.25


def test_serve_timing_of_an_unknown_name_lists_the_profiles():
    result = fakehop_here("serve", "--timing", "gpt-9", "--port", "0")
    assert result.returncode == 2
    assert result.stderr == (
        f"fakehop: --timing: 'gpt-9' is neither a bundled profile nor a file; the profiles: {', '.join(PROFILES)}\n"
    )


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("timing:\n  first_token: {p50: 3s, p99: 1s}\n", ":2: timing first_token: p99 (1s) is less than p50 (3s)"),
        ("first_token: {p50: 3s, p99: 4s}\n", ":1: expected a mapping holding a timing: block"),
        ("timing: [\n", ":"),
    ],
)
def test_serve_timing_of_a_bad_file_is_one_line_naming_it(tmp_path: Path, text: str, says: str):
    path = timing_file(tmp_path, text)
    result = fakehop_here("serve", "--timing", path, "--port", "0")
    assert result.returncode == 2
    assert result.stderr.startswith(f"fakehop: --timing: {path}{says}")
    assert result.stderr.count("\n") == 1


def test_every_profile_is_a_timing_the_reader_takes():
    for name, profile in PROFILES.items():
        assert profile.first_token_p50 is not None and profile.first_token_p99 is not None, name
        assert 0 < profile.first_token_p50 <= profile.first_token_p99, name
        assert profile.tokens_per_second and 0 <= profile.jitter <= 1, name
    assert {name.split("-")[0] for name in PROFILES} == {"chat", "responses", "messages"}


# ---------------------------------------------------------------- the pytest fixture's server

pytest_plugins = ["pytester"]
TIMED_FIXTURE_TEST = """
import time


def test_the_first_delta_waits(fakehop):
    client = fakehop.openai_client(max_retries=0)
    began = time.monotonic()
    stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], stream=True)
    first = next(chunk for chunk in stream if chunk.choices and chunk.choices[0].delta.content)
    print("FIRST", time.monotonic() - began, first.choices[0].delta.content)
"""
PLUGIN_INI = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
addopts = -p no:cacheprovider -p no:hypothesispytest -p no:faker -p no:anyio
fakehop_time_scale = 0.1
"""


def test_the_fixture_server_takes_fakehop_timing_from_the_ini(pytester: pytest.Pytester):
    pytester.makeini(PLUGIN_INI + "fakehop_timing = timing.yaml\n")
    pytester.path.joinpath("timing.yaml").write_text("timing:\n  first_token: {p50: 4s, p99: 4s}\n")
    pytester.makepyfile(test_timed=TIMED_FIXTURE_TEST)
    result = pytester.runpytest("-s")
    result.assert_outcomes(passed=1)
    [line] = [line for line in result.outlines if "FIRST " in line]
    assert 0.35 <= float(line.split("FIRST ")[1].split()[0]) < 1.4, line


def test_a_bad_fakehop_timing_is_a_usage_error(pytester: pytest.Pytester):
    pytester.makeini(PLUGIN_INI + "fakehop_timing = gpt-9\n")
    pytester.makepyfile(test_timed=TIMED_FIXTURE_TEST)
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "fakehop_timing: 'gpt-9' is neither a bundled profile nor a file; the profiles: chat-fast" in (
        result.stderr.str()
    )
