"""Instructions per request, counted by callgrind: the one bench figure other load does not move.

Each server (fakehop and the ceiling) runs under `valgrind --tool=callgrind` with counting off.
After a few requests to warm it up, counting is switched on (`callgrind_control -i on`), a
fixed number of requests is made, and counting is switched off and the counts dumped. The
figure covers the server process alone, in user space (Python, aiohttp's C parts, libc), not
the kernel; it is the same from run to run, where times on a shared machine move by tens of
percent, so it shows what a change to fakehop costs or saves. Memory copies weigh more in it
than in time: callgrind counts a `rep movsb` copy step by step, so copying a 50 KB answer
once more adds tens of thousands.

    python -m bench.instructions [--protocols chat,...] [--scenarios bench-short,...] [--requests N] [--console]

prints one JSON object: per protocol and scenario, instructions per request for each server
and their ratio; with --console also fakehop's with one console watching its push
(`fakehop_console`, `console_ratio`). `make bench` runs it when valgrind is installed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import aiohttp

from fakehop.protocols import PROTOCOLS

from . import console as bench_console
from . import plan as bench_plan
from .run import Server, add_loop_option, ceiling_command, fakehop_command

SCENARIOS = ("bench-short", "bench-long", "bench-long-full-journal")
# Cells that are a scenario answered by a server started otherwise: bench-long with fakehop's
# journal over its bytes at every request, as a load test of long answers has it once the
# journal is full (a fresh server's 200 requests never fill it).
VARIANTS = {"bench-long-full-journal": ("bench-long", ("--journal-bytes", "1M"))}
WARM_UP = 16
CONCURRENCY = 8
VALGRIND_START_TIMEOUT = 240.0  # python under callgrind starts 20-50 times slower, more on a busy machine


def available() -> bool:
    return shutil.which("valgrind") is not None and shutil.which("callgrind_control") is not None


async def send(url: str, protocol_plan: dict, scenario: str, count: int) -> None:
    """`count` requests for `scenario`, CONCURRENCY at a time, each read to its end."""
    headers = {"X-Fakehop-Scenario": scenario, "Authorization": "Bearer sk-bench"}
    async with aiohttp.ClientSession() as session:

        async def one() -> None:
            async with session.post(
                url + protocol_plan["path"], json=protocol_plan["body"], headers=headers
            ) as response:
                await response.read()
                if response.status != 200:
                    raise RuntimeError(f"{scenario}: status {response.status}")

        for start in range(0, count, CONCURRENCY):
            await asyncio.gather(*(one() for _ in range(min(CONCURRENCY, count - start))))


def callgrind_control(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True, timeout=60)


def counted(out_dir: Path) -> int:
    """The instructions in every dump under `out_dir`."""
    total = 0
    for dump in out_dir.iterdir():
        for line in dump.read_text(errors="replace").splitlines():
            if line.startswith("totals:"):
                total += int(line.split()[1])
    return total


def per_request(
    name: str,
    command: list[str],
    protocol_plan: dict,
    scenario: str,
    requests: int,
    scratch: Path,
    console: bool = False,
) -> int:
    """Instructions the server runs per request for `scenario` (`console`: with one console watching)."""
    out_dir = Path(tempfile.mkdtemp(prefix=f"{name}-{scenario}-", dir=scratch))
    server = Server(
        name,
        [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={out_dir}/callgrind.%p",
            *command,
        ],
    )
    try:
        server.wait_ready(timeout=VALGRIND_START_TIMEOUT)
        with bench_console.watching(server.url) if console else contextlib.nullcontext():
            asyncio.run(send(server.url, protocol_plan, scenario, WARM_UP))
            callgrind_control(server.pid, "--instr=on")
            asyncio.run(send(server.url, protocol_plan, scenario, requests))
            callgrind_control(server.pid, "--instr=off")
            callgrind_control(server.pid, "--dump")
    finally:
        server.stop()
    return round(counted(out_dir) / requests)


def measure(protocols: list[str], scenarios: list[str], requests: int, console: bool = False) -> dict:
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="fakehop-instructions-") as scratch_name:
        scratch = Path(scratch_name)
        plan = bench_plan.build(protocols)
        plan_path = scratch / "plan.json"
        bench_plan.write(plan, plan_path)
        for protocol in protocols:
            for cell in scenarios:
                scenario, options = VARIANTS.get(cell, (cell, ()))
                fakehop_serve = [*fakehop_command(), *options]
                fakehop = per_request("fakehop", fakehop_serve, plan[protocol], scenario, requests, scratch)
                ceiling = per_request(
                    "ceiling", ceiling_command(plan_path), plan[protocol], scenario, requests, scratch
                )
                figures = results.setdefault(protocol, {})[cell] = {
                    "fakehop": fakehop,
                    "ceiling": ceiling,
                    "ratio": round(fakehop / ceiling, 3),
                }
                if console:
                    watched = per_request(
                        "fakehop", fakehop_serve, plan[protocol], scenario, requests, scratch, console=True
                    )
                    figures.update(fakehop_console=watched, console_ratio=round(watched / ceiling, 3))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.instructions", description=__doc__.splitlines()[0])
    parser.add_argument("--protocols", default=",".join(PROTOCOLS))
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument(
        "--requests", type=int, default=200, help="requests counted per server and scenario (default 200)"
    )
    parser.add_argument(
        "--console", action="store_true", help="also count fakehop's with one console watching its push"
    )
    add_loop_option(parser)
    args = parser.parse_args(argv)
    if not available():
        print("python -m bench.instructions: valgrind (with callgrind_control) is not installed", file=sys.stderr)
        return 2
    print(json.dumps(measure(args.protocols.split(","), args.scenarios.split(","), args.requests, args.console)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
