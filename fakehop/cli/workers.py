"""`fakehop serve --workers N`: N processes answering on one port (SO_REUSEPORT), their state
shared on Redis (--state), under one that starts them, waits until each listens, and stops
them all on SIGINT or SIGTERM, or when one of them stops."""

from __future__ import annotations

import argparse
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .. import __version__
from .readyfile import ready_file_holding

__all__ = ["run_workers"]

START_TIMEOUT = 60.0  # seconds for every worker to listen
STOP_TIMEOUT = 10.0  # seconds a worker has to stop before it is killed
POLL_INTERVAL = 0.05


def reserved_port(host: str, port: int) -> socket.socket:
    """A socket bound to `port` (a free one for 0) with SO_REUSEPORT, never listening: it holds
    the port for the workers, who listen on it beside it, while the server runs."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    holder = socket.socket(family, socket.SOCK_STREAM)
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        holder.bind((host, port))
    except OSError:
        holder.close()
        raise
    return holder


def worker_command(args: argparse.Namespace, port: int, ready: Path) -> list[str]:
    """The worker's command: the one given, on the held port, with a ready file of its own."""
    return [
        sys.executable, "-m", "fakehop", *args.argv,
        "--workers", "1", "--port", str(port), "--reuse-port", "--ready-file", str(ready),
    ]  # fmt: skip


class Stop:
    """Set by SIGINT or SIGTERM."""

    def __init__(self) -> None:
        self.asked = False
        for signal_number in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signal_number, self.ask)

    def ask(self, signal_number: int, frame: object) -> None:
        self.asked = True


def run_workers(args: argparse.Namespace) -> int:
    """Serve with args.workers processes until stopped: 0 when stopped by a signal; 1 when a
    worker stopped by itself (all of them stopped then)."""
    with (
        reserved_port(args.host, args.port) as holder,
        tempfile.TemporaryDirectory(prefix="fakehop-workers-") as folder,
    ):
        stop = Stop()
        port = holder.getsockname()[1]
        readies = [Path(folder, f"worker-{number}") for number in range(args.workers)]
        workers = [subprocess.Popen(worker_command(args, port, ready)) for ready in readies]
        try:
            url = all_listening(workers, readies, stop)
            if url is None:
                return next((worker.returncode for worker in workers if worker.returncode), 1)
            with ready_file_holding(url, args.ready_file):
                pids = ", ".join(str(worker.pid) for worker in workers)
                print(
                    f"fakehop {__version__} listening on {url} with {args.workers} workers (pids {pids}), "
                    f"state on {shown_state(args.state)}; Ctrl-C stops",
                    flush=True,
                )
                stopped = first_to_stop(workers, stop)
            if stopped is not None:
                print(
                    f"fakehop: worker {stopped.pid} stopped with exit code {stopped.returncode}; stopping the others",
                    file=sys.stderr,
                )
                return 1
            return 0
        finally:
            stop_all(workers)


def shown_state(url: str) -> str:
    from ..state.redisstate import shown_url

    return shown_url(url)


def all_listening(workers: list[subprocess.Popen], readies: list[Path], stop: Stop) -> str | None:
    """The URL once every worker listens; None when one stopped first, or a signal came."""
    deadline = time.monotonic() + START_TIMEOUT
    while not all(ready.exists() for ready in readies):
        if stop.asked or any(worker.poll() is not None for worker in workers) or time.monotonic() > deadline:
            return None
        time.sleep(POLL_INTERVAL)
    return readies[0].read_text().strip()


def first_to_stop(workers: list[subprocess.Popen], stop: Stop) -> subprocess.Popen | None:
    """Wait for a signal (None) or a worker that stops (that one)."""
    while not stop.asked:
        for worker in workers:
            if worker.poll() is not None:
                return worker
        time.sleep(POLL_INTERVAL)
    return None


def stop_all(workers: list[subprocess.Popen]) -> None:
    for worker in workers:
        if worker.poll() is None:
            worker.terminate()
    deadline = time.monotonic() + STOP_TIMEOUT
    for worker in workers:
        try:
            worker.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
