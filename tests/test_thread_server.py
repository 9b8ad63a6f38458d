"""ThreadServer: a real fakehop server on its own loop in a thread, reachable from anywhere."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from urllib.parse import urlsplit

import pytest

from fakehop.scenario.library import UnknownScenario
from fakehop.server.gateway import Gateway
from fakehop.state import journal as jr
from fakehop.testing.thread_server import ThreadServer

from .conftest import FAST

CHAT_BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True})


def health(url: str) -> dict:
    with urllib.request.urlopen(url + "/_fakehop/health", timeout=10) as response:
        return json.load(response)


@pytest.fixture
def server(library):
    with ThreadServer(Gateway(library, time_scale=FAST), shutdown_timeout=0.2) as running:
        yield running


def test_serves_on_a_free_port_and_stops(library):
    server = ThreadServer(Gateway(library))
    url = server.start()
    assert url.startswith("http://127.0.0.1:") and urlsplit(url).port != 0
    assert health(url)["status"] == "ok"
    server.stop()
    with pytest.raises(urllib.error.URLError):
        health(url)
    with pytest.raises(RuntimeError, match="not running"):
        server.call(lambda: None)


def test_a_client_in_another_process_reaches_it(server):
    script = (
        f"import urllib.request; print(urllib.request.urlopen({server.url + '/_fakehop/health'!r}, timeout=10).status)"
    )
    finished = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert finished.stdout.strip() == "200", finished.stderr


def test_call_runs_on_the_server_loop(server):
    def where() -> tuple[str, bool]:
        return threading.current_thread().name, asyncio.get_running_loop() is not None

    assert server.call(where) == ("fakehop-server", True)
    assert server.call(lambda a, b: a + b, 2, 3) == 5


def test_call_raises_what_the_function_raised(server):
    with pytest.raises(UnknownScenario, match="Unknown scenario 'nope'"):
        server.call(server.gateway.global_session.check_name, "nope")


def test_a_port_in_use_fails_start_with_the_os_error(library):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = ThreadServer(Gateway(library), port=taken.getsockname()[1])
        with pytest.raises(OSError):
            server.start()
    with pytest.raises(RuntimeError, match="not running"):
        server.call(lambda: None)


def test_stop_ends_a_stream_that_would_hang_forever(library):
    server = ThreadServer(Gateway(library), shutdown_timeout=0.2)
    address = urlsplit(server.start())
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=10)
    connection.request(
        "POST", "/v1/chat/completions", CHAT_BODY, {"Content-Type": "application/json", "X-Fakehop-Scenario": "hang"}
    )
    response = connection.getresponse()
    assert b"Here" in response.read1()
    server.stop()
    with pytest.raises(http.client.IncompleteRead):  # cut off mid-stream, not left waiting
        response.read()
    connection.close()
    [record] = server.gateway.journal.since(0)
    assert record.scenario == "hang" and record.end == jr.CLIENT_DISCONNECTED


def test_what_is_posted_comes_before_what_is_sent_after(server):
    """post() does not wait, yet a request sent after it is already answered in its light."""
    address = urlsplit(server.url)
    for scenario in ("fail-rate-limit", "hello", "fail-server-error"):
        server.post(setattr, server.gateway.global_session, "default", scenario)
        connection = http.client.HTTPConnection(address.hostname, address.port, timeout=10)
        connection.request("POST", "/v1/chat/completions", CHAT_BODY, {"Content-Type": "application/json"})
        connection.getresponse().read()
        connection.close()
    assert [r.scenario for r in server.call(server.gateway.journal.since, 0)] == [
        "fail-rate-limit",
        "hello",
        "fail-server-error",
    ]
