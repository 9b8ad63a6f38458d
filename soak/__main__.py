"""`python -m soak [--quick]`: the long robustness runs, with their figures. Exit 1 if one fails.

Each run gets a fresh server process (`soak.child`); see soak/runs.py for what each checks.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from .child import raise_open_file_limit
from .hostile import HEALTH_BOUND_MS, RSS_BOUND_MIB, hostile_apart
from .runs import (
    LOAD_TIME_SCALE,
    RSS_TOLERANCE_MIB,
    SLOW_MEMORY_BOUND_MIB,
    SOAK_TIME_SCALE,
    Run,
    SlowRun,
    aborts,
    load,
    slow_readers,
)
from .server import ServerProcess

FULL = {"streams": 20_000, "load": 2_000, "rounds": 3, "readers": 20, "stall_seconds": 5.0, "hostile_scale": 1.0}
QUICK = {"streams": 500, "load": 200, "rounds": 2, "readers": 3, "stall_seconds": 1.0, "hostile_scale": 0.1}


def report(run: Run) -> list[str]:
    """Print a run's figures; return what is wrong with it."""
    print(
        f"\n== {run.name}: {run.requests:,} requests in {run.seconds:.1f}s ({run.requests / max(run.seconds, 1e-9):,.0f}/s)"
    )
    print(f"   baseline: {run.baseline.line()}")
    for label, figures in run.checkpoints:
        print(f"   {label}: {figures.line()}")
    since = run.rss_reference[0] if run.rss_reference else "baseline"
    print(f"   after:    {run.after.line()}  (RSS {run.rss_growth_mib:+.1f} MiB since {since})")
    if run.outcomes:
        print("   client side: " + ", ".join(f"{count:,} {kind}" for kind, count in sorted(run.outcomes.items())))
    print("   server side: " + ", ".join(f"{count:,} {end}" for end, count in sorted(run.server_ends.items())))
    print(
        f"   unfinished answers: {run.unfinished}; server log: {run.log_records} records, {len(run.logged):,} bytes; "
        f"answers not as golden: {len(run.wrong)}; sequence entries not handed out once: {len(run.surprises)}"
    )
    problems = []
    if not run.back_to_baseline:
        problems.append("the server did not return to its baseline")
    if run.rss_growth_mib > RSS_TOLERANCE_MIB:
        problems.append(f"the server's RSS grew by {run.rss_growth_mib:.1f} MiB")
    if run.unfinished:
        problems.append(f"the server could not finish {run.unfinished} answers")
    if run.logged:
        problems.append(f"the server logged:\n{run.logged}")
    problems += run.surprises
    problems += [
        f"not as golden: {r.target.protocol} {r.target.scenario} stream={r.target.stream} "
        f"cut_short={r.cut_short} error={r.error} got {r.received[:120]!r}"
        for r in run.wrong[:5]
    ]
    return problems


def report_slow(run: SlowRun) -> list[str]:
    problems = report(run)
    held_back = run.readers * run.stream_bytes / 2**20
    growth = (run.rss_while_stalled - run.baseline.rss) / 2**20
    print(
        f"   one answer: {run.stream_bytes / 2**20:.1f} MiB in {run.stream_events:,} events; held back from "
        f"{run.readers} stalled readers: {held_back:.0f} MiB; most events written to one of them: {run.most_events_written:,}"
    )
    print(f"   highest RSS while stalled: {run.rss_while_stalled / 2**20:.1f} MiB, {growth:+.1f} MiB over the baseline")
    if growth > SLOW_MEMORY_BOUND_MIB:
        problems.append("stalled readers grew the server's memory")
    if run.most_events_written >= run.stream_events:
        problems.append("a stalled reader got the whole answer written to it")
    return problems


def report_hostile(figures: list, logged: str) -> list[str]:
    """Print each hostile case's figures; return what is wrong with them."""
    print(
        f"\n== hostile requests, one at a time, each on a fresh server (health check bound {HEALTH_BOUND_MS:g} ms; RSS bound {RSS_BOUND_MIB:g} MiB)"
    )
    problems = [f"the server logged:\n{logged}"] if logged else []
    for case in figures:
        print(
            f"   {case.name:<64} health check at most {case.health_ms:6.1f} ms, peak RSS {case.peak_rss_mib:6.1f} MiB; {case.outcome}"
        )
        if case.health_ms > HEALTH_BOUND_MS or case.failures:
            problems.append(f"{case.name}: the health check took {case.health_ms:.0f} ms {case.failures[:3]}")
        if case.peak_rss_mib > RSS_BOUND_MIB:
            problems.append(f"{case.name}: peak RSS {case.peak_rss_mib:.0f} MiB")
    return problems


async def main(sizes: dict) -> list[str]:
    problems = []
    with ServerProcess(SOAK_TIME_SCALE) as server:
        problems += report(await aborts(server, sizes["streams"]))
    with ServerProcess(SOAK_TIME_SCALE) as server:
        problems += report_slow(await slow_readers(server, sizes["readers"], sizes["stall_seconds"]))
    with ServerProcess(LOAD_TIME_SCALE) as server:
        problems += report(await load(server, sizes["load"], sizes["rounds"]))
    problems += report_hostile(*await hostile_apart(SOAK_TIME_SCALE, sizes["hostile_scale"]))
    return problems


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small runs of a few seconds each")
    options = parser.parse_args()
    raise_open_file_limit()
    found = asyncio.run(main(QUICK if options.quick else FULL))
    for problem in found:
        print(f"FAILED: {problem}", file=sys.stderr)
    sys.exit(1 if found else 0)
