"""What the `fakehop` pytest fixture costs: session start, and per test against a test without it.

Runs a generated test module in-process, three kinds of test interleaved: `plain` takes no
fixture, `fixture` takes `fakehop` (reset before each test), `request` takes `fakehop` and
sends it one chat request (for scale: most of that is the request itself). Prints JSON: the
session server's start time (the first `fakehop_server` setup, imports and scenario loading
included; `warm_start_ms` is the same without the imports) and the median and 90th percentile cost of each kind (setup + call + teardown).
Usage: python bench/fixture_overhead.py [--tests N]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pytest

SESSION_START_GOAL_MS = 1000.0
OVERHEAD_GOAL_MS = 2.0
KINDS = ("plain", "fixture", "request")
# pytest-aiohttp imports aiohttp when it loads; without it, the session start pays for that import.
PYTEST_OPTIONS = ("-p", "no:aiohttp")
MODULE_HEAD = """
import http.client
import json
from urllib.parse import urlsplit

BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})


def ask(url):
    address = urlsplit(url)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=10)
    connection.request("POST", "/v1/chat/completions", BODY, {"Content-Type": "application/json"})
    assert connection.getresponse().status == 200
    connection.close()
"""
KIND_BODIES = {
    "plain": "def test_{n}_plain():\n    pass\n",
    "fixture": "def test_{n}_fixture(fakehop):\n    pass\n",
    "request": "def test_{n}_request(fakehop):\n    ask(fakehop.url)\n",
}


def test_module(count: int) -> str:
    tests = [KIND_BODIES[kind].format(n=number) for number in range(count) for kind in KINDS]
    return MODULE_HEAD + "\n\n" + "\n\n".join(tests)


class Timings:
    """A pytest plugin that notes each test's total duration and the session server's start."""

    def __init__(self) -> None:
        self.per_test: dict[str, float] = {}
        self.session_start: float | None = None

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef, request):
        started = time.perf_counter()
        try:
            return (yield)
        finally:
            if fixturedef.argname == "fakehop_server":
                self.session_start = time.perf_counter() - started

    def pytest_runtest_logreport(self, report) -> None:
        self.per_test[report.nodeid] = self.per_test.get(report.nodeid, 0.0) + report.duration


def summary(seconds: list[float]) -> dict:
    ordered = sorted(seconds)
    return {
        "median_ms": round(statistics.median(ordered) * 1000, 3),
        "p90_ms": round(ordered[int(len(ordered) * 0.9)] * 1000, 3),
        "tests": len(ordered),
    }


def warm_start_seconds() -> float:
    """Load the scenarios and start a server again, with every module already imported."""
    from fakehop.scenario.library import Library
    from fakehop.server.gateway import Gateway
    from fakehop.testing.thread_server import ThreadServer

    started = time.perf_counter()
    server = ThreadServer(Gateway(Library.load()))
    server.start()
    elapsed = time.perf_counter() - started
    server.stop()
    return elapsed


def run(count: int) -> dict:
    timings = Timings()
    with tempfile.TemporaryDirectory() as directory:
        Path(directory, "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
        Path(directory, "test_overhead.py").write_text(test_module(count))
        with contextlib.redirect_stdout(sys.stderr):  # stdout carries only the JSON
            exit_code = pytest.main([directory, "-q", "--rootdir", directory, *PYTEST_OPTIONS], plugins=[timings])
    if exit_code != 0:
        raise SystemExit(f"the generated tests did not pass (pytest exit code {exit_code})")
    by_kind = {kind: [] for kind in KINDS}
    first_fakehop = "test_overhead.py::test_0_fixture"
    for nodeid, seconds in timings.per_test.items():
        if nodeid != first_fakehop:  # its setup is the session start, reported on its own
            by_kind[nodeid.rsplit("_", 1)[1]].append(seconds)
    per_test = {kind: summary(by_kind[kind]) for kind in KINDS}
    overhead = per_test["fixture"]["median_ms"] - per_test["plain"]["median_ms"]
    session_start_ms = round(timings.session_start * 1000, 1)
    return {
        "session_start_ms": session_start_ms,
        "warm_start_ms": round(warm_start_seconds() * 1000, 1),
        "bytecode_writing_off": bool(sys.flags.dont_write_bytecode),  # then every import compiles from source
        "per_test": per_test,
        "fixture_overhead_ms": round(overhead, 3),
        "goals": {
            "session_start_ms_below": SESSION_START_GOAL_MS,
            "fixture_overhead_ms_below": OVERHEAD_GOAL_MS,
            "met": session_start_ms < SESSION_START_GOAL_MS and overhead < OVERHEAD_GOAL_MS,
        },
        "python": sys.version.split()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=300, help="tests of each kind (default 300)")
    args = parser.parse_args()
    result = run(args.tests)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
