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
from http.client import HTTPConnection
from pathlib import Path
from urllib.parse import urlsplit

import pytest

pytestmark = pytest.mark.skipif(not Path("/proc/self/limits").exists(), reason="reads /proc")

BURST = 600  # more than aiohttp's default listen backlog of 128


def start_serve(*options: str, preexec_fn=None) -> tuple[subprocess.Popen, tuple[str, int]]:
    server = subprocess.Popen(
        [sys.executable, "-m", "fakehop", "serve", "--port", "0", *options],
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


def minor_page_faults(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[7])


def test_a_server_keeping_few_records_does_not_fault_its_memory_in_again_at_every_answer(tmp_path: Path):
    """The memory of long answers the journal lets go is reused for the next ones: it is not
    let go in a heap large enough for glibc to give back to the system, to be faulted in again
    page by page (one per 4 KiB of each answer)."""
    (tmp_path / "long.yaml").write_text("steps:\n  - text: {faker: words, nb: 200, seed: 7}\n    chunk: word\n")
    server, (host, port) = start_serve("--quiet", "--journal-size", "10", "--scenarios", str(tmp_path))
    connection = HTTPConnection(host, port, timeout=10)
    body = b'{"model": "m", "stream": true, "messages": [{"role": "user", "content": "Hi"}]}'

    def answer() -> int:
        connection.request("POST", "/v1/chat/completions", body, {"X-Fakehop-Scenario": "long"})
        response = connection.getresponse()
        return len(response.read())

    try:
        assert answer() > 50_000
        for _ in range(600):  # past the journal's bound and the metrics' batches, the heap grown
            answer()
        before = minor_page_faults(server.pid)
        answers = 1000
        for _ in range(answers):
            answer()
        faults = minor_page_faults(server.pid) - before
        assert faults < answers / 4, f"{faults} page faults for {answers} answers of 60 KB"
    finally:
        connection.close()
        server.terminate()
        server.wait(10)
