"""A fakehop server in a process of its own that reports on itself, for the soak and load runs.

`python -m soak.child [--time-scale F] [--journal-size N]` starts the server as `fakehop serve` does (same
`start()`), prints its base URL as the first line on stdout, then answers each `stats` line on
stdin with one JSON line: its asyncio tasks, pending timers, open file descriptors, open
connections, RSS (after a garbage collection and glibc's malloc_trim, so that memory freed but
kept by the allocator is not counted), the highest RSS since it started or since the last
`clear-peak` line (which is answered the same way), and how the requests it finished ended. It logs at WARNING and above to
stderr, as `fakehop serve` would show them, so the caller can check that nothing was logged.
It stops when stdin closes.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import ctypes.util
import gc
import json
import logging
import os
import resource
import sys
import threading
from collections import Counter

from fakehop.scenario.library import Library
from fakehop.server.app import start
from fakehop.server.gateway import Gateway
from fakehop.state import journal as jr

UNFINISHED = "fakehop could not finish this answer"  # the journal's note when an answer ended in an exception


def raise_open_file_limit() -> int:
    """Lift the soft limit on open files to the hard one; returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def trim_heap() -> None:
    """Hand the C heap's free memory back to the system, where the C library can (glibc)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    if hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


def rss_bytes(field: str = "VmRSS") -> int:
    """The process's resident memory now, or with field VmHWM the most since it was last cleared."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def clear_peak_rss() -> None:
    """Start VmHWM again from the RSS now (Linux: 5 to clear_refs)."""
    with open("/proc/self/clear_refs", "w", encoding="ascii") as refs:
        refs.write("5")


class Tally:
    """How the finished requests ended, from the journal's listener: `end status` -> count."""

    def __init__(self) -> None:
        self.ends: Counter[str] = Counter()
        self.unfinished = 0

    def __call__(self, record: jr.Record) -> None:
        self.ends[f"{record.end} {record.status}"] += 1
        if record.error == UNFINISHED:
            self.unfinished += 1


async def stats(runner, tally: Tally) -> dict:
    loop = asyncio.get_running_loop()
    gc.collect()
    trim_heap()
    return {
        "tasks": len(asyncio.all_tasks()) - 1,  # without this one
        "timers": sum(1 for handle in loop._scheduled if not handle.cancelled()),
        "fds": len(os.listdir("/proc/self/fd")),
        "connections": len(runner.server.connections),
        "rss": rss_bytes(),
        "peak_rss": rss_bytes("VmHWM"),
        "ends": dict(tally.ends),
        "unfinished": tally.unfinished,
    }


def answer_stats_lines(loop: asyncio.AbstractEventLoop, runner, tally: Tally, stopped: asyncio.Event) -> None:
    """Runs in a thread: one JSON line on stdout for each `stats` line on stdin, until stdin closes."""
    for line in sys.stdin:
        if line.strip() == "clear-peak":
            clear_peak_rss()
        if line.strip() in ("stats", "clear-peak"):
            figures = asyncio.run_coroutine_threadsafe(stats(runner, tally), loop).result()
            print(json.dumps(figures), flush=True)
    loop.call_soon_threadsafe(stopped.set)


async def serve(time_scale: float, journal_size: int) -> None:
    tally = Tally()
    gateway = Gateway(Library.load(), time_scale=time_scale, journal=jr.Journal(journal_size))
    gateway.journal.listeners.append(tally)
    runner, url = await start(gateway)
    print(url, flush=True)
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    threading.Thread(target=answer_stats_lines, args=(loop, runner, tally, stopped), daemon=True).start()
    try:
        await stopped.wait()
    finally:
        await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-scale", type=float, default=0.01)
    parser.add_argument("--journal-size", type=int, default=jr.DEFAULT_CAPACITY)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    raise_open_file_limit()
    asyncio.run(serve(args.time_scale, args.journal_size))


if __name__ == "__main__":
    main()
