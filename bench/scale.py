"""`fakehop serve --workers N` and `--state redis://`: requests a second and server CPU per request.

Three cells, each a fresh `fakehop serve` driven by the bench's client process with short
Chat Completions answers (`bench-short`, 20 deltas) back to back: one process with its state in
memory, one process with its state on Redis, and N processes (N = the CPUs the bench may use)
with their state on Redis. A redis-server of the bench's own (a free port, a temporary
directory, no persistence) holds the state, emptied before each cell; its CPU per request is
reported beside the server's (all its processes'). Rounds rotate which cell goes first.

No process is pinned: N workers get every CPU the bench has, and the client and Redis compete
with them for it, so on a machine with few cores the requests a second say how far the
workers get beside their client, not how far they would get on cores of their own.

    python -m bench.scale [--quick] [--rounds N] [--seconds S] [--clients N] [--redis-server PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from . import plan as bench_plan
from .run import BenchError, Client, Server, add_loop_option, aligned, fakehop_command, progress

PROTOCOL = "chat"
SCENARIO = "bench-short"
REDIS_START_TIMEOUT = 15.0
METRICS = (
    "requests_per_s",
    "server_us_per_request",
    "redis_us_per_request",
    "server_cpu_percent",
    "client_cpu_percent",
)


@dataclass(frozen=True)
class Sizes:
    rounds: int = 3
    seconds: float = 2.0
    clients: int = 50
    warmup: float = 0.5

    @classmethod
    def quick(cls) -> Sizes:
        return cls(rounds=1, seconds=0.5, clients=8, warmup=0.0)


@dataclass(frozen=True)
class Cell:
    name: str
    workers: int
    shared: bool  # state on Redis

    def options(self, state_url: str) -> list[str]:
        return ["--workers", str(self.workers), *(["--state", state_url] if self.shared else [])]


def cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def cells(workers: int) -> tuple[Cell, ...]:
    one = (Cell("workers 1", 1, False), Cell("workers 1, state", 1, True))
    return (*one, Cell(f"workers {workers}, state", workers, True)) if workers > 1 else one


def missing(redis_server: str) -> str:
    """Why the section cannot run here ("" when it can)."""
    if shutil.which(redis_server) is None:
        return f"{redis_server} is not installed (apt-get install redis-server)"
    try:
        import redis  # noqa: F401
    except ImportError:
        return "the redis package is not installed (pip install 'fakehop[redis]')"
    return ""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def redis_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as connection:
            connection.sendall(b"FLUSHALL\r\n")
            return connection.recv(16).startswith(b"+OK")
    except OSError:
        return False


@contextlib.contextmanager
def redis(redis_server: str, directory: str) -> Iterator[tuple[subprocess.Popen, int]]:
    """A redis-server of the bench's own, with no persistence, and its port."""
    port = free_port()
    command = [redis_server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    process = subprocess.Popen([*command, "--dir", directory], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + REDIS_START_TIMEOUT
        while not redis_answers(port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise BenchError(f"{redis_server} did not start on port {port}")
            time.sleep(0.02)
        yield process, port
    finally:
        process.terminate()
        process.wait(REDIS_START_TIMEOUT)


def server_pids(server: Server) -> list[int]:
    """The server's process and its workers (the processes it started)."""
    with open(f"/proc/{server.pid}/task/{server.pid}/children") as file:
        return [server.pid, *map(int, file.read().split())]


def measure_cell(cell: Cell, client: Client, plan: dict, redis_pid: int, redis_port: int, sizes: Sizes) -> dict:
    """One round of one cell: a fresh server on an emptied Redis."""
    if not redis_answers(redis_port):
        raise BenchError(f"redis-server on port {redis_port} stopped answering")
    server = Server(cell.name, [*fakehop_command(), *cell.options(f"redis://127.0.0.1:{redis_port}/0")])
    try:
        server.wait_ready()
        protocol_plan = plan[PROTOCOL]
        spec = {
            "mode": "throughput",
            "url": server.url,
            "server_pid": server.pid,
            "server_pids": server_pids(server),
            **({"redis_pid": redis_pid} if cell.shared else {}),
            "path": protocol_plan["path"],
            "body": protocol_plan["body"],
            "scenario": SCENARIO,
            "groups": protocol_plan["scenarios"][SCENARIO],
            "concurrency": sizes.clients,
        }
        if sizes.warmup:
            client.run({**spec, "duration": sizes.warmup})
        return client.run({**spec, "duration": sizes.seconds})
    finally:
        server.stop()


def median_of(runs: list[dict], metric: str) -> float | None:
    values = [run[metric] for run in runs if run.get(metric) is not None]
    return round(statistics.median(values), 1) if values else None


def summarized(runs: list[dict]) -> dict:
    return {
        "median": {metric: median_of(runs, metric) for metric in METRICS},
        "errors": sum(run["errors"] for run in runs),
        "runs": runs,
    }


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    return round(numerator / denominator, 2) if numerator and denominator else None


def comparisons(by_cell: dict[str, dict], workers: int) -> dict:
    """What the cells say together: what Redis adds per request, and what N workers give."""
    alone, shared = by_cell["workers 1"]["median"], by_cell["workers 1, state"]["median"]
    compared = {"state_cpu_ratio": ratio(shared["server_us_per_request"], alone["server_us_per_request"])}
    if workers > 1:
        many = by_cell[f"workers {workers}, state"]["median"]
        compared["workers_requests_ratio"] = ratio(many["requests_per_s"], shared["requests_per_s"])
    return compared


def measure(sizes: Sizes, redis_server: str = "redis-server") -> dict:
    """Every cell, or why the section was skipped."""
    reason = missing(redis_server)
    if reason:
        return {"status": f"skipped: {reason}"}
    workers = cpus()
    chosen = cells(workers)
    runs: dict[str, list[dict]] = {cell.name: [] for cell in chosen}
    plan = bench_plan.build([PROTOCOL])
    with tempfile.TemporaryDirectory(prefix="fakehop-bench-redis-") as directory:
        with redis(redis_server, directory) as (redis_process, port):
            client = Client(None)
            try:
                for number in range(sizes.rounds):
                    for cell in chosen[number % len(chosen) :] + chosen[: number % len(chosen)]:
                        progress(f"workers and shared state: {cell.name} (round {number + 1})")
                        runs[cell.name].append(measure_cell(cell, client, plan, redis_process.pid, port, sizes))
            finally:
                client.close()
    by_cell = {name: summarized(cell_runs) for name, cell_runs in runs.items()}
    return {
        "status": "ok",
        "sizes": asdict(sizes),
        "cpus": workers,
        "cells": by_cell,
        "compared": comparisons(by_cell, workers),
    }


def summary(results: dict) -> str:
    if results["status"] != "ok":
        return f"workers and shared state: {results['status']}"
    sizes, workers = results["sizes"], results["cpus"]
    heading = (
        f"workers and shared state ({PROTOCOL} {SCENARIO}, {sizes['clients']} clients, median of {sizes['rounds']} "
        f"rounds of {sizes['seconds']:g} s; nothing pinned: the client and redis-server share the {workers} CPUs "
        "with the workers):"
    )
    lines = [heading]
    rows = [("cell", "requests/s", "server µs/request", "redis µs/request", "server CPU %", "client CPU %", "errors")]
    for name, cell in results["cells"].items():
        median = cell["median"]
        rows.append((name, *(format_value(median[metric]) for metric in METRICS), str(cell["errors"])))
    lines += aligned(rows, "  ")
    compared = results["compared"]
    lines.append(f"  server CPU per request with --state / without: {format_value(compared['state_cpu_ratio'])}")
    if "workers_requests_ratio" in compared:
        lines.append(
            f"  requests a second with {workers} workers / 1 (both with --state): "
            f"{format_value(compared['workers_requests_ratio'])}; with the client on the same {workers} CPUs this "
            f"is not what {workers} cores of their own would give"
        )
    else:
        lines.append("  one CPU: no cell with more than one worker")
    return "\n".join(lines)


def format_value(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: a few clients, one short round")
    defaults = Sizes()
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--seconds", type=float, help="each cell's measured run in a round")
    parser.add_argument("--clients", type=int)
    parser.add_argument("--redis-server", default="redis-server", help="the redis-server to start (default: on PATH)")
    parser.add_argument("--json", type=Path, help="also write the results there")
    add_loop_option(parser)
    args = parser.parse_args(argv)
    base = Sizes.quick() if args.quick else defaults
    sizes = Sizes(
        rounds=args.rounds or base.rounds,
        seconds=args.seconds or base.seconds,
        clients=args.clients or base.clients,
        warmup=base.warmup,
    )
    results = measure(sizes, args.redis_server)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    print(summary(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
