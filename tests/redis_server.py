"""A real `redis-server` (Debian's package) for the shared-state tests: started on a free port
in a temporary directory, with no persistence, and stopped after. Without one the tests are
skipped, saying why, unless FAKEHOP_REDIS_TESTS=required (as .ci/run sets): then they fail."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REDIS_SERVER = os.environ.get("FAKEHOP_REDIS_SERVER", "redis-server")
REQUIRED = os.environ.get("FAKEHOP_REDIS_TESTS") == "required"
NO_PERSISTENCE = ("--save", "", "--appendonly", "no")
WAIT = 15.0  # seconds: generous, for a loaded machine


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class RedisServer:
    """One redis-server process on `port`; `stop` and `start` again keep the port, as a restarted Redis would."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                REDIS_SERVER,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                *NO_PERSISTENCE,
                "--dir",
                str(self.directory),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + WAIT
        while not self.answers():
            assert self.process.poll() is None, f"redis-server exited with {self.process.returncode}"
            assert time.monotonic() < deadline, "redis-server did not answer in time"
            time.sleep(0.02)

    def answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as connection:
                connection.sendall(b"PING\r\n")
                return connection.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(WAIT)
            self.process = None


def redis_missing() -> str | None:
    if shutil.which(REDIS_SERVER) is None:
        return f"no {REDIS_SERVER} on this machine (apt-get install redis-server)"
    try:
        import redis  # noqa: F401
    except ImportError:
        return "the redis package is not installed (pip install -e '.[test]')"
    return None


@pytest.fixture
def redis_server(tmp_path_factory):
    """A running redis-server of the test's own, stopped after it."""
    missing = redis_missing()
    if missing:
        if REQUIRED:
            pytest.fail(f"the Redis tests must run here (FAKEHOP_REDIS_TESTS=required), but there is {missing}")
        pytest.skip(missing)
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def serve_process(*options: str, ready: Path, quiet: bool = True) -> subprocess.Popen:
    """`fakehop serve` as a process of its own, with OPTIONS, writing its URL to `ready`
    (`quiet`: printing no line per request)."""
    environment = {name: value for name, value in os.environ.items() if not name.startswith("FAKEHOP_")}
    return subprocess.Popen(
        [sys.executable, "-m", "fakehop", "serve", *["--quiet"] * quiet, "--time-scale", "0.01", "--ready-file",
         str(ready), *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
    )  # fmt: skip


def url_in(ready: Path, server: subprocess.Popen) -> str:
    """The URL a server wrote to its ready file, once it listens."""
    deadline = time.monotonic() + WAIT
    while not ready.exists():
        assert server.poll() is None, server.communicate()
        assert time.monotonic() < deadline, "fakehop serve did not listen in time"
        time.sleep(0.02)
    return ready.read_text().strip()


def stopped(server: subprocess.Popen) -> tuple[str, str]:
    """Stop a server (SIGTERM) and return its output."""
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
    try:
        return server.communicate(timeout=WAIT)
    except subprocess.TimeoutExpired:
        server.kill()
        return server.communicate()


@contextmanager
def fakehop_servers(directory: Path, count: int, *options: str) -> Iterator[list[str]]:
    """`count` fakehop servers, each with OPTIONS on a free port; their base URLs."""
    readies = [directory / f"fakehop-{number}.url" for number in range(count)]
    servers = [serve_process("--port", "0", *options, ready=ready) for ready in readies]
    try:
        yield [url_in(ready, server) for ready, server in zip(readies, servers)]
    finally:
        for server in servers:
            stopped(server)
