"""`fakehop serve --loop`: uvloop where it is installed, asyncio's own loop on request, and the
journal's times on one clock whichever loop paces the stream."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path

import openai
import pytest

from .test_cli import started, stopped

UVLOOP_INSTALLED = importlib.util.find_spec("uvloop") is not None
PACED = """\
description: four deltas 40 ms apart
steps:
  - text: "one two three four"
    chunk: word
    interval: 40ms
"""
WITHOUT_UVLOOP = textwrap.dedent(
    """\
    import sys
    sys.modules["uvloop"] = None  # an interpreter where uvloop does not import
    from fakehop.cli.main import main
    sys.exit(main(sys.argv[1:]))
    """
)


def health(url: str) -> dict:
    with urllib.request.urlopen(url + "/_fakehop/health", timeout=10) as response:
        return json.load(response)


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def streamed_text(url: str) -> str:
    client = openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0)
    stream = client.chat.completions.create(
        model="gpt-5.6-sol", messages=[{"role": "user", "content": "Hi"}], stream=True
    )
    return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)


@pytest.mark.parametrize(
    ("option", "expected"),
    [((), "uvloop" if UVLOOP_INSTALLED else "asyncio"), (("--loop", "asyncio"), "asyncio")]
    + ([(("--loop", "uvloop"), "uvloop")] if UVLOOP_INSTALLED else []),
    ids=lambda value: " ".join(value) or "default" if isinstance(value, tuple) else value,
)
def test_serve_runs_on_the_loop_asked_for_and_answers_an_sdk_stream(option, expected):
    process, url = started("serve", "--port", "0", "--quiet", "--time-scale", "0.01", *option)
    try:
        assert health(url)["loop"] == expected
        assert streamed_text(url)
    finally:
        stopped(process)


def test_the_lock_installs_uvloop_so_serve_defaults_to_it():
    assert UVLOOP_INSTALLED


def run_without_uvloop(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WITHOUT_UVLOOP, *args], capture_output=True, text=True, timeout=60)


def test_loop_uvloop_where_it_does_not_import_is_one_line_and_exit_2():
    result = run_without_uvloop("serve", "--port", "0", "--loop", "uvloop")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "--loop uvloop" in result.stderr
    assert "Traceback" not in result.stderr


def test_loop_auto_where_uvloop_does_not_import_serves_on_asyncio():
    process = subprocess.Popen(
        [sys.executable, "-c", WITHOUT_UVLOOP, "serve", "--port", "0", "--quiet", "--time-scale", "0.01"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = process.stdout.readline() if process.stdout else ""
        url = first.split(" on ", 1)[1].split()[0]
        assert health(url)["loop"] == "asyncio"
        assert streamed_text(url)
    finally:
        stopped(process)


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"] if UVLOOP_INSTALLED else ["asyncio"])
def test_journal_times_count_from_arrival_on_either_loop(loop, tmp_path: Path):
    """uvloop's own clock is in whole milliseconds and read once a turn: the journal's times
    must not come from it, or a stream's first write would seem to begin before its request."""
    (tmp_path / "paced.yaml").write_text(PACED)
    process, url = started("serve", "--port", "0", "--quiet", "--loop", loop, "--scenarios", str(tmp_path))
    try:
        for _ in range(8):
            request = urllib.request.Request(
                url + "/v1/chat/completions",
                data=json.dumps(
                    {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "stream": True}
                ).encode(),
                headers={"Content-Type": "application/json", "X-Fakehop-Scenario": "paced"},
            )
            with urllib.request.urlopen(request, timeout=10) as response:
                response.read()
        for seq in range(1, 9):
            record = get_json(f"{url}/_fakehop/requests/{seq}")["request"]
            times = [at for at, _ in record["frames"]]
            assert times == sorted(times) and times[0] >= 0, times
            assert record["duration"] >= times[-1]
            # each delta at its offset from the stream's start or later (2 ms: a timer's rounding), however loaded the machine
            assert len(times) == 4 and all(at >= 0.040 * number - 0.002 for number, at in enumerate(times)), times
    finally:
        stopped(process)
