"""The parent's handle on a `soak.child` server process: start it, ask it for figures, stop it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from fakehop.state.journal import DEFAULT_CAPACITY

ROOT = Path(__file__).resolve().parent.parent
IDLE_TIMEOUT = 20.0


@dataclass(frozen=True)
class Figures:
    """What the server process reports about itself at one moment."""

    tasks: int
    timers: int
    fds: int
    connections: int
    rss: int
    peak_rss: int
    ends: dict
    unfinished: int

    @property
    def rss_mib(self) -> float:
        return self.rss / 2**20

    def line(self) -> str:
        return (
            f"tasks {self.tasks}, timers {self.timers}, open fds {self.fds}, connections {self.connections}, "
            f"RSS {self.rss_mib:.1f} MiB"
        )


class ServerProcess:
    """`python -m soak.child` with its stderr kept in a file. A context manager."""

    def __init__(self, time_scale: float, journal_size: int = DEFAULT_CAPACITY):
        self.time_scale = time_scale
        self.journal_size = journal_size
        self.stderr = tempfile.TemporaryFile()
        self.process: subprocess.Popen | None = None
        self.url = ""

    def __enter__(self) -> ServerProcess:
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "soak.child",
                "--time-scale",
                str(self.time_scale),
                "--journal-size",
                str(self.journal_size),
            ],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
        )
        self.url = self.process.stdout.readline().strip()
        if not self.url.startswith("http://"):
            self.stop()
            raise RuntimeError(f"the soak server did not start: {self.logged()}")
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def figures(self, command: str = "stats") -> Figures:
        """The server's figures now; with `clear-peak`, its peak RSS starts again from now."""
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return Figures(**json.loads(self.process.stdout.readline()))

    async def figures_async(self) -> Figures:
        return await asyncio.to_thread(self.figures)

    async def idle_figures(self, tasks_at_rest: int) -> Figures:
        """Figures once the server has no connection open and no more tasks than at rest (or IDLE_TIMEOUT passed)."""
        deadline = time.monotonic() + IDLE_TIMEOUT
        while True:
            figures = await self.figures_async()
            if (figures.connections == 0 and figures.tasks <= tasks_at_rest) or time.monotonic() > deadline:
                return figures
            await asyncio.sleep(0.05)

    def logged(self) -> str:
        """Everything the server wrote to stderr so far."""
        self.stderr.seek(0)
        return self.stderr.read().decode("utf-8", "replace")
