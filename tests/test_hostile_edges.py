"""The edges of the command line and of the record proxy against servers and clients that do
not play by the rules: `fakehop wait` against a server that answers a byte at a time, or with
what fakehop never sends; the ready file against a planted link; the record proxy against a
client body nested too deep, an upstream answer too big to hold or with a header too long."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import pytest

from fakehop.remote import ControlClient

from .cli_runs import fakehop_process
from .test_serve_for_scripts import appeared, serve, stop

DRIP_EVERY = 0.2  # seconds between the bytes a dripping server sends


@contextmanager
def raw_server(answer: Callable[[socket.socket], None]) -> Iterator[str]:
    """A server on a real socket that hands each connection to `answer` on a thread of its
    own, the request unread; its URL. Its connections are closed when the block ends."""
    listener = socket.create_server(("127.0.0.1", 0))
    connections: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:  # the listener closed
                return
            connections.append(connection)
            threading.Thread(target=answering, args=(connection,), daemon=True).start()

    def answering(connection: socket.socket) -> None:
        try:
            answer(connection)
        except OSError:  # the client went
            pass

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()
        for connection in connections:
            connection.close()


def drip(head: bytes) -> Callable[[socket.socket], None]:
    """An answer that sends `head` at once, then a byte every DRIP_EVERY seconds for ever."""

    def answer(connection: socket.socket) -> None:
        connection.recv(65536)
        connection.sendall(head)
        while True:
            time.sleep(DRIP_EVERY)
            connection.sendall(b" ")

    return answer


def http_answer(body: bytes) -> Callable[[socket.socket], None]:
    def answer(connection: socket.socket) -> None:
        connection.recv(65536)
        connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                           b"Content-Length: %d\r\n\r\n%s" % (len(body), body))

    return answer


# ---------------------------------------------------------------- fakehop wait

DRIPPED_BODY = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
DRIPPED_HEAD = b"HTTP/1.1 200 OK\r\nX-Slow: "


@pytest.mark.parametrize("head", [DRIPPED_BODY, DRIPPED_HEAD], ids=["body", "headers"])
def test_wait_gives_up_at_its_timeout_on_a_server_that_answers_a_byte_at_a_time(head):
    with raw_server(drip(head)) as url:
        started = time.monotonic()
        result = fakehop_process("wait", "--url", url, "--timeout", "2", timeout=20)
        waited = time.monotonic() - started
    assert result.returncode == 1, result
    assert result.stderr == (f"fakehop: no fakehop server answered at {url} within 2s: its answer did not come whole "
                             "in time\n")
    assert 2 <= waited < 5  # the process's own start included; it went on for minutes when each byte reset the socket's timeout


@pytest.mark.parametrize("body", [b"{}", b'{"status": "ok"}', b'{"status": "ok", "version": 1}', b"[" * 100_000 + b"]" * 100_000],
                         ids=["empty", "no-version", "version-a-number", "nested-100000-deep"])
def test_wait_for_a_server_whose_health_answer_is_not_fakehops_says_so(body):
    with raw_server(http_answer(body)) as url:
        result = fakehop_process("wait", "--url", url, "--timeout", "0.5")
    assert result.returncode == 1, result
    what = "its health check without fakehop's status and version" if body.startswith(b"{") else "HTTP 200 without fakehop's JSON"
    assert result.stderr == f"fakehop: no fakehop server answered at {url} within 0.5s: {url} answered {what}; is it a fakehop server?\n"


# ---------------------------------------------------------------- the ready file


def test_the_ready_file_is_written_past_a_link_planted_where_its_partial_copy_went(tmp_path: Path):
    precious, ready = tmp_path / "precious", tmp_path / "url"
    precious.write_text("kept\n")
    (tmp_path / ".url.partial").symlink_to(precious)
    server = serve("--ready-file", str(ready))
    try:
        url = appeared(ready, server)
        assert ControlClient(url.strip()).call("GET", "/health")["status"] == "ok"
        assert not ready.is_symlink()
        assert sorted(path.name for path in tmp_path.iterdir()) == [".url.partial", "precious", "url"]  # nothing else left
    finally:
        stdout, stderr = stop(server)
    assert (server.returncode, stderr) == (0, "")
    assert precious.read_text() == "kept\n" and (tmp_path / ".url.partial").readlink() == precious
    assert not ready.exists()
