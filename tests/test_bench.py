"""`python -m bench --quick` runs end to end: real servers, a real client, every section in the JSON."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from bench import client, instructions
from bench import plan as bench_plan
from bench.run import FIXTURE_OVERHEAD, SECTIONS, TARGETS, Placement
from fakehop.protocols import PROTOCOLS
from fakehop.scenario.library import Library, bundled_directory
from fakehop.server.gateway import Gateway

REPO = Path(__file__).resolve().parent.parent
TINY = ["--long-clients", "2", "--short-clients", "3", "--idle-streams", "8", "--timing-streams", "3"]


@pytest.mark.long
def test_quick_bench_writes_every_section(tmp_path):
    """With a console watching fakehop all along, as `--console` keeps one."""
    results_path = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", *TINY, "--console", "--json", str(results_path)],
        cwd=REPO,
        capture_output=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    results = json.loads(results_path.read_text())
    assert set(results["sections"]) == {*SECTIONS, "fixture_overhead"}
    fixture = results["sections"]["fixture_overhead"]
    assert fixture["status"] == ("ok" if FIXTURE_OVERHEAD.exists() else "not present"), fixture
    for name, section in SECTIONS.items():
        assert set(results["sections"][name]) == set(PROTOCOLS), name
        for protocol, outcome in results["sections"][name].items():
            for target in TARGETS:
                assert len(outcome[target]["runs"]) == 1, (name, protocol, target)
                assert outcome[target]["median"]["errors"] == 0, (name, protocol, target, outcome[target]["runs"])
                assert outcome[target]["median"][section.headline] is not None, (name, protocol, target)
            assert outcome["verdict"]["metric"] == section.headline
    assert "events_per_s" in done.stdout.decode()
    assert results["instructions"] == {"status": "skipped in --quick"}
    assert results["console"] is True
    assert results["cpus"] == json.loads(json.dumps(asdict(Placement.choose(apart=True))))


CPUS = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


@pytest.mark.skipif(len(CPUS) < 2, reason="placing processes apart takes 2 CPUs")
def test_servers_and_client_are_placed_apart():
    placement = Placement.choose(apart=True)
    assert placement.servers == tuple(CPUS[:1]) and placement.client == tuple(CPUS[1:])
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        Placement.pin(process, placement.client)
        assert os.sched_getaffinity(process.pid) == set(placement.client)
    finally:
        process.kill()
        process.wait()
    assert Placement.choose(apart=False) == Placement(None, None)


@pytest.mark.parametrize(
    "scenario,whole", [("bench-paced", True), ("rate-limited", False), ("disconnect", False), ("hello", False)]
)
async def test_timing_client_counts_only_whole_paced_streams(serve, scenario, whole):
    library = Library.load([bench_plan.SCENARIO_DIR, bundled_directory()])
    url = await serve(Gateway(library, time_scale=0.2))
    timed = await asyncio.to_thread(
        bench_plan.timed_groups, library, "chat", "bench-paced"
    )  # it runs a loop of its own
    groups = [[offset, [frame.decode() for frame in frames]] for offset, frames in timed]
    spec = {
        "url": url,
        "path": "/v1/chat/completions",
        "body": PROTOCOLS["chat"].EXAMPLE_REQUEST,
        "scenario": scenario,
        "groups": groups,
        "concurrency": 3,
        "streams_each": 2,
        "spread": 0.1,
        "server_pid": os.getpid(),
    }
    result = await asyncio.wait_for(client.timing(spec), 30)
    assert result["errors"] == (0 if whole else 6)
    assert result["deltas"] == (6 * len(groups) if whole else 0)


@pytest.mark.long
@pytest.mark.skipif(not instructions.available(), reason="valgrind is not installed")
def test_instructions_per_request_are_counted_for_both_servers():
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.instructions",
            "--protocols",
            "chat",
            "--scenarios",
            "bench-short",
            "--requests",
            "16",
        ],
        cwd=REPO,
        capture_output=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    for protocol, by_scenario in json.loads(done.stdout).items():
        figures = by_scenario["bench-short"]
        assert figures["ceiling"] > 100_000 and figures["fakehop"] > figures["ceiling"] / 2, (
            protocol
        )  # hundreds of thousands each
        assert figures["ratio"] == round(figures["fakehop"] / figures["ceiling"], 3)


def test_the_bench_console_is_counted_by_the_server_while_it_watches(library):
    from bench.console import watching
    from fakehop.testing.thread_server import ThreadServer

    with ThreadServer(Gateway(library)) as server:
        listening = lambda: server.call(lambda: len(server.gateway.journal.listeners))  # noqa: E731
        with watching(server.url):
            assert listening() == 1
        deadline = time.monotonic() + 5
        while listening() and time.monotonic() < deadline:  # the server sees the console go a moment later
            time.sleep(0.05)
        assert listening() == 0
