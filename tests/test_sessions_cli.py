"""Sessions and strict mode from the command line, and `fakehop wait`, against `fakehop serve` as its own process.

`fakehop serve` is always a process of its own (one test reads its banner), and so are
`requests --follow`, which runs until Ctrl-C, and the `wait` that waits while a server starts,
as a script runs it. The other commands run main() in this process (tests/cli_runs.py).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import openai
import pytest

from fakehop.testing.remote import ControlClient

from . import clients
from .test_control_cli import HELLO, WAIT, ServerProcess, ask, closed_port, fakehop_here, following

pytestmark = pytest.mark.xdist_group("sessions-cli")  # one xdist worker runs them all: they share one server process


@pytest.fixture(scope="module")
def server():
    running = ServerProcess("--max-sessions", "50", "--session-idle", "300")
    yield running
    running.stop()


@pytest.fixture
def url(server) -> str:
    """The shared server with no sessions, its global session reset and its log drained."""
    control = ControlClient(server.url)
    control.call("POST", "/reset")
    for session in control.call("GET", "/sessions")["sessions"]:
        control.call("DELETE", f"/sessions/{session['session']}")
    while not server.lines.empty():
        server.lines.get()
    return server.url


def app(url: str, session: str | None = None) -> openai.OpenAI:
    """The app under test; in `session` by its API key alone."""
    return clients.openai_sync(
        base_url=url + "/v1", api_key=f"sk-fakehop-{session}" if session else "sk-test", max_retries=0
    )


def test_control_commands_take_a_session(url):
    queued = fakehop_here("queue", "server-error", "--times", "2", "--session", "ci-1", url=url)
    default = fakehop_here("default", "rate-limited", "--session", "ci-1", url=url)

    assert (queued.returncode, default.returncode) == (0, 0), queued.stderr + default.stderr
    assert queued.stdout == (
        "queued server-error for the next 2 requests that name no scenario in session ci-1; "
        "session ci-1's queue now: server-error x2\n"
    )
    assert [ask(app(url, "ci-1")) for _ in range(3)] == ["HTTP 500", "HTTP 500", "HTTP 429"]
    assert ask(app(url, "ci-2")) == HELLO
    assert ask(app(url)) == HELLO

    printed = fakehop_here("requests", "--session", "ci-1", url=url).stdout.splitlines()
    everything = fakehop_here("requests", url=url).stdout.splitlines()
    assert [line.split()[5:8] for line in printed] == [["server-error", "500", "http_error"]] * 2 + [
        ["rate-limited", "429", "http_error"]
    ]
    assert all("s  session=ci-1  " in line for line in printed)
    assert len(everything) == 5 and sum("session=ci-2" in line for line in everything) == 1
    assert sum("session=" not in line for line in everything) == 1  # the global session's own request

    reset = fakehop_here("reset", "--session", "ci-1", url=url)
    assert (
        reset.stdout
        == "reset: session ci-1 dropped; its next use starts it as the server started; default scenario: hello\n"
    )
    assert ask(app(url, "ci-1")) == HELLO
    assert fakehop_here("requests", "--session", "ci-1", url=url).stdout.count("\n") == 1


def test_strict_and_sessions_commands(url):
    turned_on = fakehop_here("strict", "on", "--session", "careful", url=url)
    ask(app(url, "other"))

    assert (turned_on.returncode, turned_on.stdout) == (0, "strict: requests no scenario was set up for get a 400\n")
    assert ask(app(url, "careful")) == "HTTP 400"
    assert ask(app(url)) == HELLO
    listing = fakehop_here("sessions", url=url).stdout.splitlines()
    assert [line.split()[0] for line in listing[:-1]] == ["other", "careful"]
    assert listing[1].split()[-1] == "strict" and listing[0].split()[-1] == "-"
    assert "   1 request  queue" in listing[1] and "default hello" in listing[1]
    assert listing[-1] == "2 sessions (at most 50, each dropped after 300s idle)"
    fakehop_here("reset", "--session", "other", url=url)
    assert (
        fakehop_here("sessions", url=url).stdout.splitlines()[-1]
        == "1 session (at most 50, each dropped after 300s idle)"
    )
    turned_off = fakehop_here("strict", "off", "--session", "careful", url=url)
    assert turned_off.stdout == "not strict: requests no scenario was set up for get the default\n"
    assert ask(app(url, "careful")) == HELLO


def test_a_bad_session_name_is_one_clear_line(url):
    result = fakehop_here("queue", "stall", "--session", "no spaces", url=url)

    assert result.returncode == 1
    assert result.stderr.startswith(
        "fakehop: HTTP 400: Invalid session name 'no spaces': a session name is 1 to 128 letters"
    )
    assert result.stderr.count("\n") == 1


def test_requests_follow_shows_each_lines_session(url):
    with following(url) as everything, following(url, "--session", "second") as one_session:
        for session in ("first", None, "second"):
            ask(app(url, session))
        followed = [everything.get(timeout=WAIT) for _ in range(3)]
        [only] = [one_session.get(timeout=WAIT)]
    assert followed[0].endswith("session=first") and followed[2].endswith("session=second")
    assert "session=" not in followed[1] and followed[1].split()[5:8] == ["hello", "200", "completed"]
    assert only == followed[2] and one_session.empty()


def test_serve_strict_refuses_what_was_not_set_up():
    server = ServerProcess("--strict", "--quiet")
    try:
        refused = ask(app(server.url))
        health = ControlClient(server.url).call("GET", "/health")
        [record] = ControlClient(server.url).call("GET", "/requests")["requests"]
        named = app(server.url).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], extra_headers={"X-Fakehop-Scenario": "hello"}
        )
    finally:
        server.stop()
    assert refused == "HTTP 400" and health["strict"] is True
    assert (record["end"], record["status"]) == ("unmatched", 400)
    assert named.choices[0].message.content == HELLO


def test_the_banner_says_the_server_is_strict():
    process = subprocess.Popen(
        [sys.executable, "-m", "fakehop", "serve", "--port", "0", "--strict"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        process.stdout.readline()
        details = process.stdout.readline()
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=WAIT)
        process.stdout.close()
        process.stderr.close()
    assert " scenarios, strict, default 'hello', time scale 1; " in details


def test_wait_for_a_server_that_starts_late():
    port = closed_port()
    url = f"http://127.0.0.1:{port}"
    waiting = subprocess.Popen(
        [sys.executable, "-m", "fakehop", "wait", "--url", url, "--timeout", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    started = time.monotonic()
    try:
        time.sleep(1.0)
        assert waiting.poll() is None  # nothing answers yet
        server = ServerProcess("--port", str(port), "--quiet")
        try:
            stdout, stderr = waiting.communicate(timeout=WAIT)
        finally:
            server.stop()
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.communicate()
    assert (waiting.returncode, stderr) == (0, "")
    assert stdout == f"fakehop 0.1.0 is up at {url}\n"
    assert time.monotonic() - started >= 1.0


def test_wait_for_no_server_gives_up_after_the_timeout():
    url = f"http://127.0.0.1:{closed_port()}"
    started = time.monotonic()

    result = fakehop_here("wait", "--timeout", "0.5", url=url)

    waited = time.monotonic() - started
    assert result.returncode == 1
    assert result.stderr == (
        f"fakehop: no fakehop server answered at {url} within 0.5s: cannot reach a fakehop server at {url} "
        "(Connection refused); start one with `fakehop serve` or pass --url\n"
    )
    assert 0.5 <= waited < WAIT


def test_wait_stops_at_once_when_the_server_refuses():
    server = ServerProcess("--admin-token", "s3cret", "--quiet")
    try:
        refused = fakehop_here("wait", "--timeout", "30", url=server.url)
        allowed = fakehop_here("wait", "--admin-token", "s3cret", url=server.url)
    finally:
        server.stop()
    assert (refused.returncode, refused.stderr) == (
        1,
        "fakehop: HTTP 401: the control API needs Authorization: Bearer <admin token>\n",
    )
    assert allowed.returncode == 0
