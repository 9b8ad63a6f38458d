"""fakehop, the ceiling and aimock side by side: server CPU per request on the streams aimock serves too.

aimock (npm `@copilotkit/aimock`, a Node mock LLM server, at the version bench/aimock/package-lock.json
pins) is installed into bench/aimock/node_modules with `npm ci` the first time. It is started as its
`llmock` command runs it, with a fixture file written from the bench's own text: for each bench
scenario, the words fakehop streams, which aimock cuts into pieces of a fixed number of characters;
the words are padded with spaces to a whole number of pieces so that its answer has exactly as
many deltas as fakehop's (20 or 200). aimock picks its fixture by the request's user message, so
its requests carry the scenario's name there; fakehop and the ceiling get the bench's usual body.

Each round drives the three servers in turn from the bench's client process, the first of them
rotating from round to round, and reads each server's CPU time from /proc over its run (all its
threads: Node's collector and libuv's too). In every protocol aimock's stream has the events
fakehop's has, each with fewer fields.

    python -m bench.side_by_side [--protocols chat,responses,messages] [--rounds N] [--seconds S] [--clients N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp

from . import plan as bench_plan
from .run import (
    BenchError,
    Client,
    Placement,
    Server,
    add_loop_option,
    aligned,
    ceiling_command,
    chosen_names,
    fakehop_command,
    progress,
)

NODE_DIR = Path(__file__).parent / "aimock"
AIMOCK_CLI = NODE_DIR / "node_modules" / "@copilotkit" / "aimock" / "dist" / "cli.js"
PROTOCOLS = ("chat", "responses", "messages")
SCENARIOS = {"bench-short": 20, "bench-long": 200}  # scenario: its deltas
TARGETS = ("fakehop", "ceiling", "aimock")
# a frame with a piece of text, in any protocol
DELTA = re.compile(r'"content":"[^"]|"type":"text_delta"|"type":"response\.output_text\.delta"')


@dataclass(frozen=True)
class Sizes:
    rounds: int = 3
    seconds: float = 1.5
    clients: int = 50
    warmup: float = 1.0


def missing() -> str:
    """Why aimock cannot be run here ("" when it can)."""
    absent = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    return f"{' and '.join(absent)} not found" if absent else ""


def install() -> None:
    if not AIMOCK_CLI.exists():
        progress("npm ci in bench/aimock")
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=NODE_DIR,
            check=True,
            capture_output=True,
            timeout=600,
        )


def streamed_words(plan: dict, scenario: str) -> list[str]:
    """The deltas of fakehop's Chat Completions answer for `scenario`, in order."""
    words = []
    for _, frames in plan["chat"]["scenarios"][scenario]:
        for frame in frames:
            data = frame.removeprefix("data: ").strip()
            if data.startswith("{"):
                choices = json.loads(data)["choices"]
                if choices and choices[0]["delta"].get("content"):
                    words.append(choices[0]["delta"]["content"])
    return words


def fixture(scenario: str, words: list[str], deltas: int) -> dict:
    """An aimock fixture answering `scenario` with `words`, cut into exactly `deltas` pieces."""
    text = "".join(words)
    piece = math.ceil(len(text) / deltas)
    return {"match": {"userMessage": scenario}, "response": {"content": text.ljust(piece * deltas)}, "chunkSize": piece}


def write_fixtures(plan: dict, path: Path) -> None:
    fixtures = [fixture(name, streamed_words(plan, name), deltas) for name, deltas in SCENARIOS.items()]
    path.write_text(json.dumps({"fixtures": fixtures}))


def aimock_command(fixtures_path: Path) -> list[str]:
    return ["node", str(AIMOCK_CLI), "--port", "0", "--fixtures", str(fixtures_path)]


def aimock_body(protocol: str, protocol_plan: dict, scenario: str) -> dict:
    """The bench's body for `protocol` with `scenario` as its user message, by which aimock picks the fixture."""
    if protocol == "responses":
        return {**protocol_plan["body"], "input": scenario}
    return {**protocol_plan["body"], "messages": [{"role": "user", "content": scenario}]}


async def fetch(url: str, body: dict) -> bytes:
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as response:
        data = await response.read()
        if response.status != 200:
            raise BenchError(f"aimock answered {url} with {response.status}: {data[:300]!r}")
        return data


def aimock_groups(server: Server, protocol: str, protocol_plan: dict, scenario: str) -> list:
    """aimock's answer as one group of frames, checked to hold the scenario's deltas."""
    data = asyncio.run(fetch(server.url + protocol_plan["path"], aimock_body(protocol, protocol_plan, scenario)))
    frames = [frame.decode() for frame in bench_plan.split_frames(data)]
    deltas = sum(DELTA.search(frame) is not None for frame in frames)
    if deltas != SCENARIOS[scenario]:
        raise BenchError(f"aimock answered {scenario} with {deltas} deltas, not {SCENARIOS[scenario]}")
    return [[0.0, frames]]


def rotated(number: int) -> tuple[str, ...]:
    start = number % len(TARGETS)
    return TARGETS[start:] + TARGETS[:start]


def spec(server: Server, protocol_plan: dict, scenario: str, sizes: Sizes, groups: list, body: dict) -> dict:
    return {
        "mode": "throughput",
        "url": server.url,
        "server_pid": server.pid,
        "path": protocol_plan["path"],
        "body": body,
        "scenario": scenario,
        "groups": groups,
        "concurrency": sizes.clients,
        "duration": sizes.seconds,
    }


def ratio(cpu: float, other: float) -> float | None:
    """cpu / other; None when the other server's CPU came to less than a clock tick (too short a run to say)."""
    return round(cpu / other, 3) if other else None


def shown_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def cell(runs: dict[str, list[dict]], answer_bytes: dict[str, int]) -> dict:
    """Each server's median CPU per request and the ratios of fakehop's to the others'."""
    median = {
        target: statistics.median(run["server_us_per_request"] for run in target_runs)
        for target, target_runs in runs.items()
    }
    return {
        "server_us_per_request": {target: round(value, 1) for target, value in median.items()},
        "fakehop_to_ceiling": ratio(median["fakehop"], median["ceiling"]),
        "fakehop_to_aimock": ratio(median["fakehop"], median["aimock"]),
        "errors": {target: sum(run["errors"] for run in target_runs) for target, target_runs in runs.items()},
        "answer_bytes": answer_bytes,
        "runs": runs,
    }


def measure_protocol(protocol: str, plan: dict, paths: dict[str, Path], client: Client, placement, sizes: Sizes):
    protocol_plan = plan[protocol]
    started = {
        "fakehop": Server("fakehop", fakehop_command(), placement.servers),
        "ceiling": Server("ceiling", ceiling_command(paths["plan"]), placement.servers),
        "aimock": Server("aimock", aimock_command(paths["fixtures"]), placement.servers),
    }
    try:
        for server in started.values():
            server.wait_ready()
        cells = {}
        for scenario in SCENARIOS:
            progress(f"side by side with aimock: {protocol} {scenario}")
            groups = dict.fromkeys(("fakehop", "ceiling"), protocol_plan["scenarios"][scenario])
            groups["aimock"] = aimock_groups(started["aimock"], protocol, protocol_plan, scenario)
            bodies = {"fakehop": protocol_plan["body"], "ceiling": protocol_plan["body"]}
            bodies["aimock"] = aimock_body(protocol, protocol_plan, scenario)
            specs = {
                target: spec(started[target], protocol_plan, scenario, sizes, groups[target], bodies[target])
                for target in TARGETS
            }
            for target in TARGETS:  # first requests cost more: a JIT, caches
                client.run({**specs[target], "duration": sizes.warmup})
            runs = {target: [] for target in TARGETS}
            for number in range(sizes.rounds):
                for target in rotated(number):
                    runs[target].append(client.run(specs[target]))
            answer_bytes = {
                target: sum(len(frame) for _, frames in groups[target] for frame in frames) for target in TARGETS
            }
            cells[scenario] = cell(runs, answer_bytes)
        return cells
    finally:
        for server in started.values():
            server.stop()


def measure(protocols: list[str], sizes: Sizes, apart: bool = True) -> dict:
    """Every cell for `protocols` (of PROTOCOLS), or why aimock was not run."""
    reason = missing()
    if reason:
        return {"status": f"skipped: {reason}"}
    install()
    placement = Placement.choose(apart)
    results: dict = {"status": "ok", "sizes": asdict(sizes)}
    with tempfile.TemporaryDirectory(prefix="fakehop-aimock-") as scratch:
        plan = bench_plan.build(sorted({"chat", *protocols}))  # the fixtures' words are chat's
        paths = {"plan": Path(scratch) / "plan.json", "fixtures": Path(scratch) / "fixtures.json"}
        bench_plan.write(plan, paths["plan"])
        write_fixtures(plan, paths["fixtures"])
        client = Client(placement.client)
        try:
            results["per_request"] = {
                protocol: measure_protocol(protocol, plan, paths, client, placement, sizes) for protocol in protocols
            }
        finally:
            client.close()
    return results


def summary(results: dict) -> str:
    if results["status"] != "ok":
        return f"aimock side by side: {results['status']}"
    sizes = results["sizes"]
    heading = (
        "server CPU per request (µs, median of the rounds), aimock side by side "
        f"({sizes['clients']} clients, {sizes['rounds']} rounds of {sizes['seconds']:g} s):"
    )
    lines = [heading]
    rows = [("protocol", "stream", "fakehop", "ceiling", "aimock", "fakehop/ceiling", "fakehop/aimock", "bytes f/c/a")]
    for protocol, by_scenario in results["per_request"].items():
        for scenario, figures in by_scenario.items():
            cpu = figures["server_us_per_request"]
            rows.append(
                (
                    protocol,
                    f"{SCENARIOS[scenario]} deltas",
                    *(f"{cpu[target]:g}" for target in TARGETS),
                    shown_ratio(figures["fakehop_to_ceiling"]),
                    shown_ratio(figures["fakehop_to_aimock"]),
                    "/".join(str(figures["answer_bytes"][target]) for target in TARGETS),
                )
            )
    lines += aligned(rows, "  ")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.side_by_side", description=__doc__.splitlines()[0])
    parser.add_argument("--protocols", default=",".join(PROTOCOLS))
    defaults = Sizes()
    parser.add_argument("--rounds", type=int, default=defaults.rounds)
    parser.add_argument("--seconds", type=float, default=defaults.seconds, help="each server's run in a round")
    parser.add_argument("--clients", type=int, default=defaults.clients)
    parser.add_argument("--json", type=Path, help="also write the results there")
    add_loop_option(parser)
    args = parser.parse_args(argv)
    sizes = Sizes(
        rounds=args.rounds, seconds=args.seconds, clients=args.clients, warmup=min(defaults.warmup, args.seconds)
    )
    results = measure(chosen_names(parser, "protocols", args.protocols, PROTOCOLS), sizes)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    print(summary(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
