"""The bench's workers and shared state section: `python -m bench --quick` measures each cell on a
redis-server of its own, and says in one line why it skipped when there is none."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.scale import METRICS, cells, cpus

from .redis_server import REQUIRED, redis_missing

REPO = Path(__file__).resolve().parent.parent
MISSING = redis_missing()


def bench(*options: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *options], cwd=REPO, capture_output=True, timeout=300, text=True)


@pytest.mark.long
@pytest.mark.skipif(bool(MISSING) and not REQUIRED, reason=MISSING or "")
def test_quick_bench_measures_every_cell_with_workers_and_shared_state(tmp_path):
    results_path = tmp_path / "bench.json"
    done = bench(
        "bench", "--quick", "--protocols", "chat", "--sections", "short_requests", "--short-clients", "3",
        "--no-fixture-overhead", "--no-aimock", "--json", str(results_path),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    scale = json.loads(results_path.read_text())["scale"]
    assert scale["status"] == "ok", scale
    assert scale["cpus"] == cpus()
    names = [cell.name for cell in cells(cpus())]
    assert list(scale["cells"]) == names
    for cell in cells(cpus()):
        figures = scale["cells"][cell.name]
        assert len(figures["runs"]) == 1 and figures["errors"] == 0, figures
        assert figures["runs"][0]["requests"] > 0
        measured = {metric for metric, value in figures["median"].items() if value is not None}
        assert measured == set(METRICS) - ({"redis_us_per_request"} if not cell.shared else set()), cell
    assert scale["compared"]["state_cpu_ratio"] > 0
    assert ("workers_requests_ratio" in scale["compared"]) == (cpus() > 1)
    printed = done.stdout[done.stdout.index("workers and shared state") :]
    assert all(name in printed for name in names)
    assert "server CPU per request with --state / without" in printed
    if cpus() > 1:
        assert "is not what" in printed  # the client shares the workers' CPUs, and the output says so


def test_without_redis_server_the_section_is_skipped_in_one_line(tmp_path):
    absent = str(tmp_path / "no-redis-server")
    done = bench("bench.scale", "--quick", "--redis-server", absent, "--json", str(tmp_path / "scale.json"))
    assert done.returncode == 0, done.stderr
    assert (
        done.stdout == f"workers and shared state: skipped: {absent} is not installed (apt-get install redis-server)\n"
    )
    assert json.loads((tmp_path / "scale.json").read_text()) == {"status": done.stdout.split(": ", 1)[1].strip()}


def test_a_server_with_workers_is_measured_over_all_its_processes():
    """The CPU the client reads for a server is the sum over every pid it is given."""
    from bench.client import Window, cpu_seconds

    busy = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\ntime.sleep(60)"
    processes = [subprocess.Popen([sys.executable, "-c", busy]) for _ in range(2)]
    try:
        window = Window([os.getpid(), *(process.pid for process in processes)])
        pids = window.server_pids
        while min(cpu_seconds(pid) for pid in pids[1:]) < 0.3:
            time.sleep(0.02)
        measured = window.close()
    finally:
        for process in processes:
            process.kill()
            process.wait()
    assert measured["server_cpu_seconds"] >= 0.4  # both busy processes' time (their start before the window aside)
