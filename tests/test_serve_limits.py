"""`fakehop serve` takes the load a load test brings: many open sockets, bursts of connections."""

from __future__ import annotations

import os
import resource
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

pytestmark = pytest.mark.skipif(not Path("/proc/self/limits").exists(), reason="reads /proc")

BURST = 600  # more than aiohttp's default listen backlog of 128


def start_serve(preexec_fn=None) -> tuple[subprocess.Popen, tuple[str, int]]:
    server = subprocess.Popen(
        [sys.executable, "-m", "fakehop", "serve", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=preexec_fn,
    )
    assert server.stdout is not None
    url = urlsplit(server.stdout.readline().split()[-1])
    assert url.hostname is not None and url.port is not None, url
    return server, (url.hostname, url.port)


def soft_open_file_limit(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError("no open file limit listed")


def test_serve_raises_its_open_file_limit_to_the_hard_limit():
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = min(256, hard)
    server, _ = start_serve(preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard)))
    try:
        assert soft_open_file_limit(server.pid) == hard
    finally:
        server.terminate()
        server.wait(10)


@pytest.mark.skipif(int(Path("/proc/sys/net/core/somaxconn").read_text()) < BURST, reason="somaxconn caps the backlog")
def test_a_burst_of_connections_is_queued_while_the_server_is_busy():
    """With the server stopped, the kernel alone completes handshakes, up to the listen backlog."""
    server, address = start_serve()
    sockets = []
    try:
        os.kill(server.pid, signal.SIGSTOP)
        for _ in range(BURST):
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex(address)
            sockets.append(sock)
        pending, deadline = set(sockets), time.monotonic() + 3
        while pending and time.monotonic() < deadline:
            _, writable, _ = select.select([], list(pending)[:500], [], 0.2)
            pending -= {sock for sock in writable if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0}
        assert len(pending) == 0, f"{len(pending)} of {BURST} connections were not accepted into the backlog"
    finally:
        for sock in sockets:
            sock.close()
        os.kill(server.pid, signal.SIGCONT)
        server.terminate()
        server.wait(10)
