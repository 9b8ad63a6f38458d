"""The guard on fakehop's instructions per request: its comparison on made-up counts, and a real count
against the committed baseline."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import guard, instructions, run
from bench.run import guard_counts

REPO = Path(__file__).resolve().parent.parent
BASELINE = {
    "python": "3.0.0",
    "aiohttp": "3.0.0",
    "requests": 200,
    "per_request": {
        "chat": {
            "bench-short": {"fakehop": 450_000, "ceiling": 300_000},
            "bench-long": {"fakehop": 600_000, "ceiling": 400_000},
        }
    },
}


def counts(short_fakehop: int, long_fakehop: int, ceiling_scale: float = 1.0) -> dict:
    return {
        "chat": {
            "bench-short": {"fakehop": short_fakehop, "ceiling": round(300_000 * ceiling_scale)},
            "bench-long": {"fakehop": long_fakehop, "ceiling": round(400_000 * ceiling_scale)},
        }
    }


def test_growth_within_3_percent_passes():
    cells = guard.compare(BASELINE, counts(short_fakehop=463_000, long_fakehop=590_000))
    assert [round(cell.growth_percent, 2) for cell in cells] == [2.89, -1.67]
    assert not any(cell.failed() for cell in cells)
    assert guard.summary(cells, BASELINE).endswith("guard passed")


def test_growth_over_3_percent_fails_and_names_the_cell():
    cells = guard.compare(BASELINE, counts(short_fakehop=450_000, long_fakehop=625_000))
    assert [cell.name for cell in cells if cell.failed()] == ["chat bench-long"]
    report = guard.summary(cells, BASELINE)
    row = next(line for line in report.splitlines() if line.startswith("chat") and "bench-long" in line)
    assert "GREW +4.2% (over 3%)" in row
    assert "guard FAILED: chat bench-long." in report and "python -m bench.guard --update" in report


def test_the_ceiling_moving_with_its_versions_moves_the_allowance_with_it():
    """Both counts 10% up (a new Python, say): the ratio is unchanged and the guard passes; fakehop
    alone 10% up fails, though its count is the same as in the passing run."""
    both_grew = guard.compare(BASELINE, counts(495_000, 660_000, ceiling_scale=1.1))
    assert not any(cell.failed() for cell in both_grew)
    fakehop_grew = guard.compare(BASELINE, counts(495_000, 660_000))
    assert all(cell.failed() for cell in fakehop_grew)


def test_a_cell_the_baseline_lacks_fails_until_the_baseline_is_updated(tmp_path):
    fresh = counts(450_000, 600_000)
    fresh["messages"] = {"bench-short": {"fakehop": 420_000, "ceiling": 300_000}}
    cells = guard.compare(BASELINE, fresh)
    assert [(cell.name, guard.verdict(cell, 3)) for cell in cells if cell.failed()] == [
        ("messages bench-short", "NO BASELINE")
    ]
    path = tmp_path / "baseline.json"
    guard.write(fresh, 200, path)
    written = guard.load(path)
    assert written["requests"] == 200 and written["python"] == guard.versions()["python"]
    assert not any(cell.failed() for cell in guard.compare(written, fresh))


def test_the_committed_baseline_covers_every_cell_with_its_versions():
    committed = guard.load()
    assert set(committed) >= {"python", "aiohttp", "requests", "per_request"}
    for protocol in ("chat", "responses", "messages"):
        assert set(committed["per_request"][protocol]) == set(instructions.SCENARIOS), protocol


def test_the_bench_fails_on_a_grown_count_and_keeps_the_verdict():
    """`python -m bench` holds its own instruction counts to the committed baseline."""
    grown = copy.deepcopy(guard.load()["per_request"])
    grown["messages"]["bench-short"]["fakehop"] = round(grown["messages"]["bench-short"]["fakehop"] * 1.05)
    results = {"instructions": {"status": "ok", "per_request": grown}}
    report = guard_counts(results)
    assert results["guard"]["failed"] == ["messages bench-short"]
    assert "guard FAILED: messages bench-short." in report
    assert guard_counts({"instructions": {"status": "skipped in --quick"}}) == ""


def run_guard(*options: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bench.guard", "--protocols", "chat", "--scenarios", "bench-short", *options],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.long
@pytest.mark.skipif(not instructions.available(), reason="valgrind is not installed")
def test_a_real_count_passes_against_the_committed_baseline():
    done = run_guard()
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert done.stdout.rstrip().endswith("guard passed")


@pytest.mark.long
@pytest.mark.skipif(not instructions.available(), reason="valgrind is not installed")
def test_a_real_count_fails_against_a_baseline_it_grew_from(tmp_path):
    """A baseline whose fakehop figure is 5% under the committed one: the same code has grown from it."""
    shrunk = guard.load()
    cell = shrunk["per_request"]["chat"]["bench-short"]
    cell["fakehop"] = round(cell["fakehop"] / 1.05)
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(shrunk))
    done = run_guard("--baseline", str(path))
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    assert "guard FAILED: chat bench-short." in done.stdout


def test_a_baseline_counted_on_another_loop_is_not_compared(tmp_path):
    """Ratios on uvloop and on asyncio's loop differ by more than the guard's tolerance: a
    baseline of the other loop is refused (exit 2) with the option that matches it, before any count."""
    other = guard.load()
    other["loop"] = "asyncio" if run.loop_in_use() == "uvloop" else "uvloop"
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(other))
    done = run_guard("--baseline", str(path))
    assert done.returncode == 2
    assert f"give --loop {other['loop']}" in done.stderr
