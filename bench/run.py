"""`make bench`: fakehop against a hand-written aiohttp ceiling, in separate processes.

For each protocol and section it starts `fakehop serve` and the ceiling (bench/ceiling.py,
the same bytes from a bare handler), then drives them from a separate client process
(bench/client.py), alternating which goes first, round after round; it reports medians,
their spread across rounds, and fakehop / ceiling ratios, as a table and as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import re
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from fakehop.cli.loops import LOOPS
from fakehop.cli.main import raise_open_file_limit
from fakehop.protocols import PROTOCOLS

from . import console as bench_console
from . import plan as bench_plan

REPO = Path(__file__).resolve().parent.parent
DEFAULT_RESULTS = REPO / "bench-results.json"
FIXTURE_OVERHEAD = Path(__file__).parent / "fixture_overhead.py"
URL_PATTERN = re.compile(r"http://\S+")
START_TIMEOUT = 60.0


@dataclass(frozen=True)
class Sizes:
    """How big and how long each measurement is."""

    rounds: int = 4
    warmup: float = 1.0  # seconds of throughput load before a throughput or timing section's rounds
    long_clients: int = 50
    long_seconds: float = 3.0
    short_clients: int = 500
    short_seconds: float = 3.0
    idle_streams: int = 10_000
    idle_rounds: int = 1
    idle_hold: float = 6.0
    idle_connecting: int = 200
    timing_streams: int = 500
    timing_cycles: int = 2
    idle_on_fresh_servers: bool = True  # clean memory figures; a smoke run keeps the one pair

    @classmethod
    def quick(cls) -> Sizes:
        return cls(
            rounds=1,
            warmup=0.0,
            long_clients=4,
            long_seconds=0.5,
            short_clients=8,
            short_seconds=0.5,
            idle_streams=20,
            idle_rounds=1,
            idle_hold=2.2,
            idle_connecting=20,
            timing_streams=8,
            timing_cycles=1,
            idle_on_fresh_servers=False,
        )


@dataclass(frozen=True)
class Section:
    name: str
    scenario: str
    mode: str
    metrics: tuple[str, ...]  # the first is the headline, held to the target
    ratio_at_least: float | None = None  # target: fakehop / ceiling of the headline
    below: float | None = None  # target: fakehop's headline under this

    @property
    def headline(self) -> str:
        return self.metrics[0]


THROUGHPUT_METRICS = (
    "server_us_per_request",
    "latency_p50_ms",
    "latency_p99_ms",
    "server_cpu_percent",
    "client_cpu_percent",
    "errors",
)
SECTIONS = {
    "long_streams": Section(
        "long_streams",
        "bench-long",
        "throughput",
        ("events_per_s", "requests_per_s", *THROUGHPUT_METRICS),
        ratio_at_least=0.9,
    ),
    "short_requests": Section(
        "short_requests",
        "bench-short",
        "throughput",
        ("requests_per_s", "events_per_s", *THROUGHPUT_METRICS),
        ratio_at_least=0.8,
    ),
    "idle_streams": Section(
        "idle_streams",
        "bench-idle",
        "idle",
        (
            "kb_per_stream",
            "server_cpu_percent",
            "keepalives_per_s",
            "open_seconds",
            "listen_overflows",
            "opened",
            "errors",
        ),
        below=30,
    ),
    "timing": Section(
        "timing",
        "bench-paced",
        "timing",
        (
            "error_p99_ms",
            "error_p50_ms",
            "error_max_ms",
            "early_p50_ms",
            "late_p50_ms",
            "drift_ms",
            "early_p99_ms",
            "late_p99_ms",
            "first_frame_p50_ms",
            "server_cpu_percent",
            "client_cpu_percent",
            "errors",
        ),
        below=5,
    ),
}
TARGETS = ("fakehop", "ceiling")


class BenchError(RuntimeError):
    pass


@dataclass(frozen=True)
class Placement:
    """The CPUs the servers and the client may run on.

    Apart (the servers on the first CPU, the client on the others), the client never takes
    the server's core, no process is moved between cores mid-round, and every round and both
    servers are measured with the same placement. Only one server is under load at a time, so
    the two share their CPU.
    """

    servers: tuple[int, ...] | None = None  # None: wherever the scheduler puts them
    client: tuple[int, ...] | None = None

    @classmethod
    def choose(cls, apart: bool) -> Placement:
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        if not apart or len(cpus) < 2:
            return cls()
        return cls(tuple(cpus[:1]), tuple(cpus[1:]))

    def described(self) -> str:
        if self.servers is None:
            return "processes placed by the scheduler"
        return f"servers on CPU {','.join(map(str, self.servers))}, client on CPU {','.join(map(str, self.client))}"

    @staticmethod
    def pin(process: subprocess.Popen, cpus: tuple[int, ...] | None) -> None:
        if cpus is not None:
            os.sched_setaffinity(process.pid, cpus)


# ---------------------------------------------------------------- processes


class Server:
    """A server process; `wait_ready()` returns once it has printed its URL."""

    def __init__(self, name: str, command: list[str], cpus: tuple[int, ...] | None = None):
        self.name = name
        self.url = ""
        self.log = tempfile.TemporaryFile()
        # unbuffered: a buffer could hold the line with the URL that select() then waits for in vain
        self.process = subprocess.Popen(
            command, cwd=REPO, stdout=subprocess.PIPE, stderr=self.log, preexec_fn=raise_open_file_limit, bufsize=0
        )
        Placement.pin(self.process, cpus)

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        line, match = "", None
        while match is None and select.select([self.process.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
            line = self.process.stdout.readline().decode()
            if not line:
                break
            match = URL_PATTERN.search(line)
        if match is None:
            self.log.seek(0)
            raise BenchError(f"{self.name} did not start: {line!r} {self.log.read().decode()[-2000:]}")
        self.url = match.group(0)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process.stdout.close()
        self.log.close()


def bench_loop() -> str:
    """The event loop both servers run on: $BENCH_LOOP (see fakehop.cli.loops.LOOPS), auto by default."""
    return os.environ.get("BENCH_LOOP", "auto")


def loop_in_use() -> str:
    """The loop `bench_loop()` names, auto resolved as the servers resolve it."""
    chosen = bench_loop()
    if chosen != "auto":
        return chosen
    return "uvloop" if importlib.util.find_spec("uvloop") is not None else "asyncio"


def add_loop_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--loop",
        choices=LOOPS,
        type=chosen_loop,
        default=None,
        help="the event loop of fakehop and the ceiling alike (default $BENCH_LOOP, else auto: uvloop where installed)",
    )


def chosen_loop(name: str) -> str:
    """--loop's value, also put in $BENCH_LOOP for every server this process starts."""
    os.environ["BENCH_LOOP"] = name
    return name


def fakehop_command() -> list[str]:
    """`fakehop serve` as a load test runs it: no line printed per request."""
    return [
        sys.executable,
        "-m",
        "fakehop",
        "serve",
        "--port",
        "0",
        "--quiet",
        "--time-scale",
        "1",
        "--scenarios",
        str(bench_plan.SCENARIO_DIR),
        "--loop",
        bench_loop(),
    ]


def ceiling_command(plan_path: Path) -> list[str]:
    return [sys.executable, "-m", "bench.ceiling", str(plan_path), "--loop", bench_loop()]


@contextlib.contextmanager
def servers(plan_path: Path, cpus: tuple[int, ...] | None, console: bool = False) -> Iterator[dict[str, Server]]:
    """fakehop and the ceiling, started side by side; `console`: with one console watching fakehop."""
    started: dict[str, Server] = {}
    try:
        started["fakehop"] = Server("fakehop", fakehop_command(), cpus)
        started["ceiling"] = Server("ceiling", ceiling_command(plan_path), cpus)
        for server in started.values():
            server.wait_ready()
        with bench_console.watching(started["fakehop"].url) if console else contextlib.nullcontext():
            yield started
    finally:
        for server in started.values():
            server.stop()


class Client:
    """The load client process (bench/client.py): one JSON spec in, one JSON result out, per line."""

    def __init__(self, cpus: tuple[int, ...] | None) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.client"],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            preexec_fn=raise_open_file_limit,
        )
        Placement.pin(self.process, cpus)

    def run(self, spec: dict) -> dict:
        self.process.stdin.write(json.dumps(spec).encode() + b"\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise BenchError(f"the client died during {spec['mode']} {spec['scenario']}")
        result = json.loads(line)
        if "failure" in result:
            raise BenchError(f"client failed ({spec['mode']} {spec['scenario']}): {result['failure']}")
        return result

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(30)
        self.process.stdout.close()


# ---------------------------------------------------------------- measuring


STARTED = time.monotonic()


def progress(step: str) -> None:
    print(f"bench: {time.monotonic() - STARTED:6.1f} s  {step}", file=sys.stderr, flush=True)


def round_order(number: int) -> tuple[str, ...]:
    return TARGETS if number % 2 == 0 else TARGETS[::-1]


class Bench:
    """One protocol's sections, measured against both servers."""

    def __init__(
        self,
        sizes: Sizes,
        plan: dict,
        plan_path: Path,
        client: Client,
        protocol: str,
        server_cpus: tuple[int, ...] | None,
        console: bool = False,
    ):
        self.sizes = sizes
        self.console = console
        self.server_cpus = server_cpus
        self.plan = plan
        self.plan_path = plan_path
        self.client = client
        self.protocol = protocol

    def spec(self, section: Section, server: Server, **overrides) -> dict:
        protocol_plan, sizes = self.plan[self.protocol], self.sizes
        spec = {
            "mode": section.mode,
            "url": server.url,
            "server_pid": server.pid,
            "path": protocol_plan["path"],
            "body": protocol_plan["body"],
            "scenario": section.scenario,
            "groups": protocol_plan["scenarios"][section.scenario],
        }
        if section.name == "long_streams":
            spec.update(concurrency=sizes.long_clients, duration=sizes.long_seconds)
        elif section.name == "short_requests":
            spec.update(concurrency=sizes.short_clients, duration=sizes.short_seconds)
        elif section.name == "idle_streams":
            groups = spec["groups"]
            spec.update(
                streams=sizes.idle_streams,
                hold=sizes.idle_hold,
                keepalive_interval=groups[1][0] - groups[0][0],
                connect_concurrency=sizes.idle_connecting,
                settle=min(1.0, sizes.idle_hold / 4),
            )
        else:  # stream starts spread over one stream's length, so the load is steady rather than one burst
            spec.update(
                concurrency=sizes.timing_streams, streams_each=sizes.timing_cycles, spread=spec["groups"][-1][0]
            )
        spec.update(overrides)
        return spec

    def warm_up(self, running: dict[str, Server]) -> None:
        """Load each server briefly so the measured rounds do not pay for first-request costs."""
        if not self.sizes.warmup:
            return
        short = SECTIONS["short_requests"]
        for server in running.values():
            self.client.run(
                self.spec(short, server, concurrency=min(50, self.sizes.short_clients), duration=self.sizes.warmup)
            )

    def one_round(self, section: Section, running: dict[str, Server], number: int, runs: dict[str, list[dict]]) -> None:
        for target in round_order(number):
            runs[target].append(self.client.run(self.spec(section, running[target])))

    def sections(self, names: list[str]) -> dict[str, dict]:
        """Each section's outcome. Idle streams get fresh servers each round, for clean memory figures
        (unless the sizes say otherwise); the others share one pair."""
        runs = {name: {target: [] for target in TARGETS} for name in names}
        fresh = ["idle_streams"] if "idle_streams" in names and self.sizes.idle_on_fresh_servers else []
        shared = [name for name in names if name not in fresh]
        if shared:
            with servers(self.plan_path, self.server_cpus, self.console) as running:
                self.warm_up(running)
                for name in shared:
                    progress(f"{name} ({self.protocol})")
                    for number in range(self.sizes.idle_rounds if name == "idle_streams" else self.sizes.rounds):
                        self.one_round(SECTIONS[name], running, number, runs[name])
        if fresh:
            progress(f"idle_streams ({self.protocol})")
            for number in range(self.sizes.idle_rounds):
                with servers(self.plan_path, self.server_cpus, self.console) as running:
                    self.warm_up(running)
                    self.one_round(SECTIONS["idle_streams"], running, number, runs["idle_streams"])
        return {name: outcome(SECTIONS[name], runs[name]) for name in names}


# ---------------------------------------------------------------- summaries


def spread_percent(values: list[float]) -> float | None:
    """(max - min) / median across rounds: how noisy a figure was."""
    middle = statistics.median(values)
    return round(100 * (max(values) - min(values)) / middle, 1) if middle else None


def summarize_target(runs: list[dict], metrics: tuple[str, ...]) -> dict:
    medians, spreads = {}, {}
    for metric in metrics:
        values = [run[metric] for run in runs if run.get(metric) is not None]
        if not values:
            medians[metric] = None
            continue
        medians[metric] = round(statistics.median(values), 3)
        if len(values) > 1 and metric != "errors":
            spreads[metric] = spread_percent(values)
    medians["errors"] = sum(run["errors"] for run in runs)
    return {"median": medians, "spread_percent": spreads, "runs": runs}


def verdict(section: Section, summary: dict) -> dict:
    """The headline figure, what it is held to, and whether it made it (with no errors)."""
    fakehop, ceiling = summary["fakehop"]["median"], summary["ceiling"]["median"]
    clean = fakehop["errors"] == 0
    headline = section.headline
    if section.ratio_at_least is not None:
        ratio = round(fakehop[headline] / ceiling[headline], 3) if ceiling[headline] else None
        rounds = [
            round(f[headline] / c[headline], 3) if c[headline] else None
            for f, c in zip(summary["fakehop"]["runs"], summary["ceiling"]["runs"])
        ]
        cost = fakehop["server_us_per_request"]
        return {
            "metric": headline,
            "ratio": ratio,
            "round_ratios": rounds,
            "target": f">= {section.ratio_at_least:g}",
            "met": clean and ratio is not None and ratio >= section.ratio_at_least,
            "server_cost_ratio": round(ceiling["server_us_per_request"] / cost, 3) if cost else None,
        }
    return {
        "metric": headline,
        "fakehop": fakehop[headline],
        "ceiling": ceiling[headline],
        "target": f"< {section.below:g}",
        "met": clean and fakehop[headline] is not None and fakehop[headline] < section.below,
    }


def outcome(section: Section, runs: dict[str, list[dict]]) -> dict:
    summary = {target: summarize_target(runs[target], section.metrics) for target in TARGETS}
    return {**summary, "verdict": verdict(section, summary)}


# ---------------------------------------------------------------- fixture overhead


def fixture_overhead(quick: bool) -> dict:
    """The pytest fixture's costs, from bench/fixture_overhead.py (which prints them as JSON)."""
    if not FIXTURE_OVERHEAD.exists():
        return {"status": "not present", "hook": str(FIXTURE_OVERHEAD.relative_to(REPO))}
    command = [sys.executable, str(FIXTURE_OVERHEAD), *(["--tests", "10"] if quick else [])]
    done = subprocess.run(command, cwd=REPO, capture_output=True, timeout=600)
    if done.returncode != 0:
        return {"status": "failed", "exit_code": done.returncode, "stderr": done.stderr.decode()[-2000:]}
    try:
        return {"status": "ok", "figures": json.loads(done.stdout)}
    except ValueError:
        return {"status": "failed", "output": done.stdout.decode()[-2000:]}


# ---------------------------------------------------------------- instructions per request


def instructions(protocols: list[str], quick: bool, console: bool = False) -> dict:
    """Instructions per request under callgrind, from bench/instructions.py (which prints them as JSON)."""
    from .instructions import available

    if quick:
        return {"status": "skipped in --quick"}
    if not available():
        return {"status": "not available: valgrind is not installed"}
    command = [
        sys.executable,
        "-m",
        "bench.instructions",
        "--protocols",
        ",".join(protocols),
        *(["--console"] if console else []),
    ]
    done = subprocess.run(command, cwd=REPO, capture_output=True, timeout=1800)
    if done.returncode != 0:
        return {"status": "failed", "exit_code": done.returncode, "stderr": done.stderr.decode()[-2000:]}
    return {"status": "ok", "per_request": json.loads(done.stdout)}


# ---------------------------------------------------------------- aimock


def aimock(protocols: list[str], quick: bool, apart: bool) -> dict:
    """Server CPU per request beside aimock, from bench/side_by_side.py."""
    from . import side_by_side

    if quick:
        return {"status": "skipped in --quick"}
    try:
        return side_by_side.measure(protocols, side_by_side.Sizes(), apart)
    except (BenchError, OSError, subprocess.SubprocessError) as error:  # the rest of the bench's figures still count
        return {"status": f"failed: {error}"}


def aimock_summary(results: dict) -> str:
    from . import side_by_side

    return side_by_side.summary(results)


# ---------------------------------------------------------------- workers and shared state


def scale(quick: bool) -> dict:
    """Requests a second with --workers 1 and N, server CPU per request with --state and without,
    from bench/scale.py."""
    from . import scale as bench_scale

    try:
        return bench_scale.measure(bench_scale.Sizes.quick() if quick else bench_scale.Sizes())
    except (BenchError, OSError, subprocess.SubprocessError) as error:  # the rest of the bench's figures still count
        return {"status": f"failed: {error}"}


def scale_summary(results: dict) -> str:
    from . import scale as bench_scale

    return bench_scale.summary(results)


# ---------------------------------------------------------------- report


def format_number(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:g}" if isinstance(value, float) else str(value)


def table(results: dict) -> str:
    rows = [("protocol", "section", "metric", "fakehop", "ceiling", "ratio", "target", "met", "spread f/c %")]
    for name, by_protocol in results["sections"].items():
        if name not in SECTIONS:
            continue
        section = SECTIONS[name]
        for protocol, outcome in by_protocol.items():
            for metric in section.metrics:
                fakehop, ceiling = outcome["fakehop"], outcome["ceiling"]
                f_value, c_value = fakehop["median"].get(metric), ceiling["median"].get(metric)
                headline = metric == section.headline
                ratio = outcome["verdict"].get("ratio") if headline else None
                spreads = f"{format_number(fakehop['spread_percent'].get(metric))}/{format_number(ceiling['spread_percent'].get(metric))}"
                rows.append(
                    (
                        protocol,
                        name if headline else "",
                        metric,
                        format_number(f_value),
                        format_number(c_value),
                        format_number(ratio),
                        outcome["verdict"]["target"] if headline else "",
                        ("yes" if outcome["verdict"]["met"] else "NO") if headline else "",
                        spreads,
                    )
                )
    return "\n".join(aligned(rows))


def aligned(rows: list[tuple[str, ...]], indent: str = "") -> list[str]:
    """Rows of text as lines, each column as wide as its widest cell."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]


def instructions_summary(counts: dict) -> str:
    if counts["status"] != "ok":
        return f"instructions per request: {counts['status']} {counts.get('stderr', '')}".rstrip()
    lines = ["instructions per request (callgrind; the same from run to run):"]
    for protocol, by_scenario in counts["per_request"].items():
        for scenario, figures in by_scenario.items():
            line = (
                f"  {protocol:<10} {scenario:<24} fakehop {figures['fakehop'] / 1000:,.0f}k  "
                f"ceiling {figures['ceiling'] / 1000:,.0f}k  fakehop/ceiling {figures['ratio']:g}"
            )
            if "fakehop_console" in figures:
                line += (
                    f"; with a console watching {figures['fakehop_console'] / 1000:,.0f}k, {figures['console_ratio']:g}"
                )
            lines.append(line)
    return "\n".join(lines)


def fixture_summary(overhead: dict) -> str:
    figures = overhead.get("figures")
    if overhead["status"] != "ok" or not figures:
        return f"fixture overhead: {overhead['status']} {overhead.get('hook') or overhead.get('stderr') or overhead.get('output', '')}"
    per_test = ", ".join(f"{kind} {numbers['median_ms']:g} ms" for kind, numbers in figures["per_test"].items())
    goals = figures["goals"]
    return (
        f"fixture overhead: session start {figures['session_start_ms']:g} ms (goal < {goals['session_start_ms_below']:g}), "
        f"warm start {figures['warm_start_ms']:g} ms; per test (median) {per_test}; "
        f"the fixture adds {figures['fixture_overhead_ms']:g} ms (goal < {goals['fixture_overhead_ms_below']:g}); "
        f"met: {'yes' if goals['met'] else 'NO'}"
    )


# ---------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: a few clients, one round")
    parser.add_argument(
        "--protocols", default=",".join(PROTOCOLS), help=f"comma-separated (default: all, {','.join(PROTOCOLS)})"
    )
    parser.add_argument(
        "--sections", default=",".join(SECTIONS), help=f"comma-separated (default: all, {','.join(SECTIONS)})"
    )
    parser.add_argument("--json", type=Path, default=DEFAULT_RESULTS, metavar="PATH", help="where to write the results")
    add_loop_option(parser)
    parser.add_argument("--no-fixture-overhead", action="store_true", help="skip bench/fixture_overhead.py")
    parser.add_argument(
        "--no-pinning",
        action="store_true",
        help="let the scheduler place the processes (default, with 2 CPUs or more: the servers on the first, the client on the rest)",
    )
    parser.add_argument(
        "--no-instructions",
        action="store_true",
        help="skip bench/instructions.py (instructions per request, under valgrind)",
    )
    parser.add_argument(
        "--no-aimock",
        action="store_true",
        help="skip bench/side_by_side.py (aimock beside fakehop and the ceiling; needs node and npm)",
    )
    parser.add_argument(
        "--no-scale",
        action="store_true",
        help="skip bench/scale.py (--workers 1 and N, --state redis:// and not; needs redis-server)",
    )
    parser.add_argument(
        "--console",
        action="store_true",
        help="with one console watching fakehop's push throughout (and its instructions per request counted both ways)",
    )
    for field in fields(Sizes):
        flag = "--" + field.name.replace("_", "-")
        parser.add_argument(
            flag,
            type=type(field.default),
            default=None,
            metavar="N",
            help=f"default {field.default} (or $BENCH_{field.name.upper()})",
        )
    args = parser.parse_args(argv)
    for option, known in (("protocols", PROTOCOLS), ("sections", SECTIONS)):
        setattr(args, option, chosen_names(parser, option, getattr(args, option), known))
    return args


def chosen_names(parser: argparse.ArgumentParser, option: str, value: str, known: Sequence[str]) -> list[str]:
    """The comma-separated names of `value`, given for `--option`; a usage error unless each is one of `known`."""
    chosen = [name for name in value.split(",") if name]
    unknown = [name for name in chosen if name not in known]
    if unknown or not chosen:
        parser.error(f"--{option}: unknown {', '.join(unknown) or 'empty list'}; choose from {', '.join(known)}")
    return chosen


def sizes_from(args: argparse.Namespace) -> Sizes:
    """Quick or full sizes, then $BENCH_* variables, then command-line options."""
    sizes = Sizes.quick() if args.quick else Sizes()
    changes = {}
    for field in fields(Sizes):
        from_env = os.environ.get(f"BENCH_{field.name.upper()}")
        value = getattr(args, field.name)
        if value is not None:
            changes[field.name] = value
        elif from_env:
            changes[field.name] = type(field.default)(from_env)
    return replace(sizes, **changes)


def machine() -> dict:
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg": list(os.getloadavg()),
        "loop": loop_in_use(),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = sizes_from(args)
    raise_open_file_limit()
    started = time.monotonic()
    placement = Placement.choose(apart=not args.no_pinning)
    results = {
        "machine_before": machine(),
        "sizes": asdict(sizes),
        "protocols": args.protocols,
        "cpus": asdict(placement),
        "console": args.console,
        "sections": {name: {} for name in args.sections},
    }
    with tempfile.TemporaryDirectory(prefix="fakehop-bench-") as scratch:
        plan = bench_plan.build(args.protocols)
        plan_path = Path(scratch) / "plan.json"
        bench_plan.write(plan, plan_path)
        client = Client(placement.client)
        try:
            for protocol in args.protocols:
                outcomes = Bench(sizes, plan, plan_path, client, protocol, placement.servers, args.console).sections(
                    args.sections
                )
                for name, result in outcomes.items():
                    results["sections"][name][protocol] = result
        finally:
            client.close()
    if not args.no_fixture_overhead:
        progress("fixture_overhead")
        results["sections"]["fixture_overhead"] = fixture_overhead(args.quick)
    if not args.no_instructions:
        progress("instructions")
        results["instructions"] = instructions(args.protocols, args.quick, args.console)
    if not args.no_aimock:
        progress("aimock side by side")
        results["aimock"] = aimock(args.protocols, args.quick, not args.no_pinning)
    if not args.no_scale:
        progress("workers and shared state")
        results["scale"] = scale(args.quick)
    guarded = guard_counts(results)
    results["machine_after"] = machine()
    results["seconds"] = round(time.monotonic() - started, 1)
    args.json.write_text(json.dumps(results, indent=2) + "\n")
    print(table(results))
    if "fixture_overhead" in results["sections"]:
        print("\n" + fixture_summary(results["sections"]["fixture_overhead"]))
    if "instructions" in results:
        print("\n" + instructions_summary(results["instructions"]))
    if "aimock" in results:
        print("\n" + aimock_summary(results["aimock"]))
    if "scale" in results:
        print("\n" + scale_summary(results["scale"]))
    if guarded:
        print("\n" + guarded)
    print(
        f"\n{results['seconds']:g} s; {placement.described()}; load average before {results['machine_before']['loadavg']}, "
        f"after {results['machine_after']['loadavg']}; results in {args.json}"
    )
    return 1 if results.get("guard", {}).get("failed") else 0


def guard_counts(results: dict) -> str:
    """The counted instructions held to bench/baseline.json (bench/guard.py): its verdict kept in
    the results, its table returned ("" when nothing was counted)."""
    from . import guard

    counts = results.get("instructions", {})
    if counts.get("status") != "ok":
        return ""
    baseline = guard.load()
    cells = guard.compare(baseline, counts["per_request"])
    results["guard"] = {
        "failed": [cell.name for cell in cells if cell.failed()],
        "growth_percent": {cell.name: cell.growth_percent for cell in cells},
    }
    return guard.summary(cells, baseline)
