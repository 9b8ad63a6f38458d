"""aimock beside fakehop and the ceiling (bench/side_by_side.py): streams of as many deltas, a clear
line where node is missing, and a real run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench import side_by_side
from bench.run import aimock, aimock_summary

REPO = Path(__file__).resolve().parent.parent
WORDS = ["food", " character", " a", " wonderful", " x"] * 4


@pytest.mark.parametrize("deltas", [20, 7, 3])
def test_the_fixture_is_cut_by_aimock_into_as_many_deltas_as_fakehop_streams(deltas):
    fixture = side_by_side.fixture("bench-short", WORDS, deltas)
    text, piece = fixture["response"]["content"], fixture["chunkSize"]
    pieces = [text[start : start + piece] for start in range(0, len(text), piece)]  # aimock's own cut
    assert len(pieces) == deltas
    assert text.rstrip() == "".join(WORDS) and fixture["match"] == {"userMessage": "bench-short"}


def test_without_node_the_side_by_side_run_is_skipped_with_a_clear_line(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "bench.side_by_side"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "aimock side by side: skipped: node and npm not found"


def test_the_bench_skips_aimock_in_a_quick_run():
    assert aimock_summary(aimock(["chat"], quick=True, apart=True)) == "aimock side by side: skipped in --quick"


@pytest.mark.parametrize("protocols", ["chat,nope", ","])
def test_a_protocol_the_side_by_side_run_does_not_know_is_a_usage_error(protocols):
    done = subprocess.run(
        [sys.executable, "-m", "bench.side_by_side", "--protocols", protocols],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--protocols: unknown" in done.stderr and "choose from chat, responses, messages" in done.stderr


@pytest.mark.long
@pytest.mark.skipif(shutil.which("node") is None or shutil.which("npm") is None, reason="node is not installed")
@pytest.mark.parametrize("protocol", ["responses", "messages"])
def test_aimock_serves_both_streams_beside_fakehop_and_the_ceiling(tmp_path, protocol):
    results_path = tmp_path / "side.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.side_by_side", "--protocols", protocol, "--rounds", "1", "--seconds", "1"]
        + [
            "--clients",
            "4",
            "--json",
            str(results_path),
        ],  # enough requests for some clock ticks of CPU on a loaded machine
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,  # npm ci the first time
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(results_path.read_text())
    assert results["status"] == "ok" and list(results["per_request"]) == [protocol]
    for scenario, figures in results["per_request"][protocol].items():
        assert figures["errors"] == {"fakehop": 0, "ceiling": 0, "aimock": 0}, scenario
        assert all(cpu > 0 for cpu in figures["server_us_per_request"].values()), scenario
        assert figures["fakehop_to_aimock"] > 0 and figures["fakehop_to_ceiling"] > 0
    assert f"{protocol}  200 deltas" in done.stdout
