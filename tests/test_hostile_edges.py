"""The edges of the command line and of the record proxy against servers and clients that do
not play by the rules: `fakehop wait` against a server that answers a byte at a time, or with
what fakehop never sends; the ready file against a planted link; the record proxy against a
client body nested too deep, an upstream answer too big to hold or with a header too long."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from fakehop.testing.remote import ControlClient

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
        connection.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )

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
    assert result.stderr == (
        f"fakehop: no fakehop server answered at {url} within 2s: its answer did not come whole in time\n"
    )
    assert 2 <= waited < 6  # its start included; it went on for minutes when each byte reset the socket's timeout


@pytest.mark.parametrize(
    "body",
    [b"{}", b'{"status": "ok"}', b'{"status": "ok", "version": 1}', b"[" * 100_000 + b"]" * 100_000],
    ids=["empty", "no-version", "version-a-number", "nested-100000-deep"],
)
def test_wait_for_a_server_whose_health_answer_is_not_fakehops_says_so(body):
    with raw_server(http_answer(body)) as url:
        result = fakehop_process("wait", "--url", url, "--timeout", "2", timeout=20)
    assert result.returncode == 1, result
    not_json = not body.startswith(b"{")
    what = "HTTP 200 without fakehop's JSON" if not_json else "its health check without fakehop's status and version"
    assert result.stderr == (
        f"fakehop: no fakehop server answered at {url} within 2s: {url} answered {what}; is it a fakehop server?\n"
    )


def test_wait_reports_what_a_finished_try_was_told_when_a_later_one_is_cut_short_by_the_deadline():
    """As on a loaded machine: the first health check comes back whole and is not fakehop's,
    the later ones do not finish before the deadline. The reason is the first one's."""
    answered = []
    not_json, dripping = http_answer(b"[]"), drip(DRIPPED_BODY)

    def answer(connection: socket.socket) -> None:
        answered.append(connection)
        (not_json if len(answered) == 1 else dripping)(connection)

    with raw_server(answer) as url:
        result = fakehop_process("wait", "--url", url, "--timeout", "1", timeout=20)
    assert result.returncode == 1, result
    assert len(answered) >= 2
    assert result.stderr == (
        f"fakehop: no fakehop server answered at {url} within 1s: "
        f"{url} answered HTTP 200 without fakehop's JSON; is it a fakehop server?\n"
    )


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
        assert sorted(path.name for path in tmp_path.iterdir()) == [".url.partial", "precious", "url"]  # nothing else
    finally:
        stdout, stderr = stop(server)
    assert (server.returncode, stderr) == (0, "")
    assert precious.read_text() == "kept\n" and (tmp_path / ".url.partial").readlink() == precious
    assert not ready.exists()


# ---------------------------------------------------------------- the record proxy

MODELS_BYTES = 200 * 1024 * 1024
PIECE = b" " * (1024 * 1024)
CHAT = {"model": "gpt-5.6-sol", "messages": [{"role": "user", "content": "Hello"}]}


@contextmanager
def recording_proxy(upstream_url: str, out: Path) -> Iterator[tuple[str, subprocess.Popen]]:
    """`fakehop record` in a process of its own in front of `upstream_url`: its URL and the
    process, whose stderr is checked for tracebacks when the block ends."""
    proxy = subprocess.Popen(
        [sys.executable, "-m", "fakehop", "record", "--upstream", upstream_url, "--out", str(out), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proxy.stdout is not None and proxy.stderr is not None
    try:
        banner = proxy.stdout.readline()
        assert banner.startswith("fakehop "), (banner, proxy.stderr.read() if proxy.poll() is not None else "")
        yield banner.split()[4].rstrip(":"), proxy
    finally:
        proxy.send_signal(signal.SIGTERM)
        _, stderr = proxy.communicate(timeout=15)
    assert stderr == ""


def post(url: str, body: bytes) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def peak_rss_mib(process: subprocess.Popen) -> float:
    with open(f"/proc/{process.pid}/status", encoding="ascii") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024


def huge_answer(connection: socket.socket) -> None:
    connection.recv(65536)
    connection.sendall(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % MODELS_BYTES
    )
    for _ in range(MODELS_BYTES // len(PIECE)):
        connection.sendall(PIECE)


def long_header(connection: socket.socket) -> None:
    connection.recv(65536)
    connection.sendall(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Long: "
        + b"a" * 100_000
        + b"\r\nContent-Length: 2\r\n\r\n{}"
    )


def test_the_proxy_refuses_a_body_nested_too_deep_as_serve_does(tmp_path: Path):
    with raw_server(http_answer(b"{}")) as upstream, recording_proxy(upstream, tmp_path) as (url, _):
        status, error = post(url + "/v1/chat/completions", b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    assert status == 400, error
    said = error["error"]["message"]
    assert said == "We could not use the JSON body of your request: it is nested more than 128 levels deep."
    assert error["error"]["type"] == "invalid_request_error"
    assert list(tmp_path.iterdir()) == []


def test_the_proxy_passes_a_huge_models_answer_on_without_holding_it(tmp_path: Path):
    with raw_server(huge_answer) as upstream, recording_proxy(upstream, tmp_path) as (url, proxy):
        before = peak_rss_mib(proxy)
        received = 0
        with urllib.request.urlopen(url + "/v1/models", timeout=30) as response:
            while piece := response.read(1024 * 1024):
                received += len(piece)
        grew = peak_rss_mib(proxy) - before
    assert received == MODELS_BYTES
    assert grew < 50, f"the proxy grew by {grew:.0f} MiB"  # it held the whole answer: 200 MiB and more


def not_http(connection: socket.socket) -> None:
    connection.recv(65536)
    connection.sendall(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")


@pytest.mark.parametrize("answer", [long_header, not_http], ids=["header-of-100-KB", "not-http"])
def test_an_upstream_answer_whose_head_cannot_be_read_is_a_502_and_no_recording(tmp_path: Path, answer):
    with raw_server(answer) as upstream, recording_proxy(upstream, tmp_path) as (url, _):
        status, error = post(url + "/v1/messages", json.dumps({**CHAT, "max_tokens": 10}).encode())
    assert status == 502, error
    assert error["type"] == "error" and error["error"]["type"] == "api_error"
    message = error["error"]["message"]
    assert message.startswith(f"fakehop record could not read the answer of the upstream {upstream}: ")
    assert "\n" not in message
    assert list(tmp_path.iterdir()) == []
