"""The control commands (queue, default, requests, reset) against `fakehop serve` run as its own process."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from typing import Iterator

import openai
import pytest

from fakehop.remote import ControlClient

HELLO = "Hello! How can I help you today?"
WAIT = 15.0  # seconds: generous, for a loaded machine


class ServerProcess:
    """`python -m fakehop serve --port 0` in a subprocess; its stdout lines are collected as they come."""

    def __init__(self, *options: str):
        command = [sys.executable, "-m", "fakehop", "serve", "--port", "0", "--time-scale", "0.01", *options]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        banner = self.process.stdout.readline()
        assert " listening on " in banner, banner + self.process.stderr.read()
        self.url = banner.split()[-1]
        self.process.stdout.readline()  # the second banner line
        self.collector = threading.Thread(target=self.collect, daemon=True)
        self.collector.start()

    def collect(self) -> None:
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))

    def next_line(self) -> str:
        return self.lines.get(timeout=WAIT)

    def stop(self) -> None:
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.collector.join(timeout=WAIT)
        self.process.stderr.close()


def fakehop(*args: str, url: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the fakehop command; the server comes from $FAKEHOP_URL unless `url` is given."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("FAKEHOP_")}
    environment.update(env or {})
    command = [sys.executable, "-m", "fakehop", *args] + (["--url", url] if url else [])
    return subprocess.run(command, capture_output=True, text=True, timeout=WAIT, env=environment)


@pytest.fixture(scope="module")
def server():
    running = ServerProcess()
    yield running
    running.stop()


@pytest.fixture
def url(server) -> str:
    """The shared server, reset, with its log drained."""
    ControlClient(server.url).call("POST", "/reset")
    while not server.lines.empty():
        server.lines.get()
    return server.url


def app(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0)


def ask(client: openai.OpenAI) -> str:
    try:
        completion = client.chat.completions.create(model="gpt-5.6-sol", messages=[{"role": "user", "content": "Hello"}])
    except openai.APIStatusError as exc:
        return f"HTTP {exc.status_code}"
    return completion.choices[0].message.content


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_queue_name_with_times(url):
    result = fakehop("queue", "rate-limited", "--times", "2", url=url)

    assert result.returncode == 0, result.stderr
    assert result.stdout == "queued rate-limited for the next 2 requests that name no scenario; queue now: rate-limited x2\n"
    client = app(url)
    assert [ask(client) for _ in range(3)] == ["HTTP 429", "HTTP 429", HELLO]


def test_queue_a_sequence_queues_its_whole_run(url):
    result = fakehop("queue", "flaky-then-ok", url=url)

    assert result.returncode == 0, result.stderr
    assert result.stdout == ("queued flaky-then-ok for the next 3 requests that name no scenario; "
                             "queue now: flaky-then-ok[1], flaky-then-ok[2], flaky-then-ok[3]\n")
    client = app(url)
    assert [ask(client) for _ in range(4)] == ["HTTP 429", "HTTP 500", HELLO, HELLO]
    recorded = ControlClient(url).call("GET", "/requests")["requests"]
    assert [record["scenario"] for record in recorded] == ["flaky-then-ok[1]", "flaky-then-ok[2]", "flaky-then-ok[3]->hello", "hello"]


def test_lenient_conversations_lets_an_unanswered_tool_call_through():
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": [call]}, {"role": "user", "content": "and?"}]
    server = ServerProcess("--lenient-conversations", "--quiet")
    try:
        answer = app(server.url).chat.completions.create(model="m", messages=messages)
        health = ControlClient(server.url).call("GET", "/health")
    finally:
        server.stop()
    assert answer.choices[0].message.content == HELLO
    assert health["lenient_conversations"] is True


def test_queue_takes_the_url_from_the_environment(url):
    result = fakehop("queue", "server-error", env={"FAKEHOP_URL": url})

    assert result.returncode == 0, result.stderr
    assert ask(app(url)) == "HTTP 500"


def test_queue_a_yaml_file(url, tmp_path):
    path = tmp_path / "quick-stall.yaml"
    path.write_text("steps:\n  - text: from a file\n")

    result = fakehop("queue", str(path), url=url)

    assert result.returncode == 0, result.stderr
    assert ask(app(url)) == "from a file"
    assert [r["scenario"] for r in ControlClient(url).call("GET", "/requests")["requests"]] == ["quick-stall"]


def test_queue_a_bad_file_lists_its_problems_and_sends_nothing(url, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("steps:\n  - text: hi\n  - stal\n  - delay: soon\n")

    result = fakehop("queue", str(path), url=url)

    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"{path}:3: unknown step 'stal'; did you mean 'stall'?",
        f"{path}:4: delay: expected a duration such as 2s, 250ms or 1.5m, got 'soon'",
        f"fakehop: 2 problems in {path}; nothing was sent",
    ]
    assert ask(app(url)) == HELLO


def test_queue_an_unknown_name_is_one_clear_line(url):
    result = fakehop("queue", "stal", url=url)

    assert result.returncode == 1
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("fakehop: HTTP 400: Unknown scenario 'stal'; did you mean 'stall'? Known scenarios: ")
    assert " stall," in result.stderr


def test_default_sets_the_scenario_for_unnamed_requests(url):
    result = fakehop("default", "server-error", url=url)

    assert (result.returncode, result.stdout) == (0, "default scenario: server-error\n")
    assert ask(app(url)) == "HTTP 500"


def test_reset_puts_the_default_back_and_empties_queue_and_journal(url):
    control = ControlClient(url)
    control.call("PUT", "/default", {"scenario": "server-error"})
    control.call("POST", "/queue", {"scenario": "rate-limited", "times": 2})
    ask(app(url))

    result = fakehop("reset", url=url)

    assert (result.returncode, result.stdout) == (0, "reset: queue, journal, sequence counters and added scenarios cleared; default scenario: hello\n")
    assert control.call("GET", "/requests")["requests"] == []
    assert ask(app(url)) == HELLO


def test_requests_prints_the_journal_in_the_servers_own_format(url, server):
    client = app(url)
    ask(client)
    ControlClient(url).call("POST", "/queue", {"scenario": "rate-limited"})
    ask(client)

    printed = fakehop("requests", url=url).stdout.splitlines()

    logged = []  # a late line from an earlier test's request may come first
    while not set(printed) <= set(logged):
        logged.append(server.next_line())
    assert len(printed) == 2
    first, second = (line.split() for line in printed)
    assert first[2:10] == ["POST", "/v1/chat/completions", "chat", "hello", "200", "completed", "0", "events"]
    assert second[2:10] == ["POST", "/v1/chat/completions", "chat", "rate-limited", "429", "http_error", "0", "events"]
    assert int(second[1].lstrip("#")) == int(first[1].lstrip("#")) + 1
    assert second[10].endswith("s") and " ".join(second[11:]) == "Rate limit reached for requests"


def test_requests_json_shows_what_the_app_sent(url):
    ask(app(url))

    result = fakehop("requests", "--json", url=url)

    assert '"messages": [{"role": "user", "content": "Hello"}]' in result.stdout


@contextlib.contextmanager
def following(url: str, *options: str) -> Iterator[queue.Queue[str]]:
    """`fakehop requests --follow` in its own process: its lines, as they come; stopped by Ctrl-C
    at the end, when it must have printed no traceback."""
    command = [sys.executable, "-m", "fakehop", "requests", "--follow", "--interval", "0.05", "--url", url, *options]
    follower = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line.rstrip("\n")) for line in follower.stdout], daemon=True).start()
    try:
        yield lines
    finally:
        follower.send_signal(signal.SIGINT)
        follower.wait(timeout=WAIT)
        errors = follower.stderr.read()
        follower.stderr.close()
    assert "Traceback" not in errors


def test_requests_follow_prints_each_request_as_it_finishes(url):
    with following(url) as lines:
        client = app(url)
        stream = client.chat.completions.create(model="gpt-5.6-sol", messages=[{"role": "user", "content": "hi"}], stream=True,
                                                extra_headers={"X-Fakehop-Scenario": "stall"})
        with pytest.raises(openai.APIError, match="Stream stalled"):
            list(stream)
        ask(client)
        stalled, greeted = lines.get(timeout=WAIT).split(), lines.get(timeout=WAIT).split()
    assert stalled[5:8] == ["stall", "200", "failed"]
    assert int(stalled[8]) > 2  # text, keepalives, the error event
    assert greeted[5:8] == ["hello", "200", "completed"]
    assert int(greeted[1].lstrip("#")) == int(stalled[1].lstrip("#")) + 1


def test_unreachable_server_is_one_clear_line():
    url = f"http://127.0.0.1:{closed_port()}"

    result = fakehop("reset", url=url)

    assert result.returncode == 1
    assert result.stderr == f"fakehop: cannot reach a fakehop server at {url} (Connection refused); start one with `fakehop serve` or pass --url\n"


def test_admin_token_from_option_or_environment():
    server = ServerProcess("--admin-token", "s3cret", "--quiet")
    try:
        refused = fakehop("queue", "server-error", url=server.url)
        by_option = fakehop("queue", "server-error", "--admin-token", "s3cret", url=server.url)
        by_environment = fakehop("queue", "server-error", url=server.url, env={"FAKEHOP_ADMIN_TOKEN": "s3cret"})
        queued = ControlClient(server.url, "s3cret").call("GET", "/queue")["queue"]
    finally:
        server.stop()
    assert (refused.returncode, refused.stderr) == (1, "fakehop: HTTP 401: the control API needs Authorization: Bearer <admin token>\n")
    assert by_option.returncode == 0 and by_environment.returncode == 0
    assert queued == ["server-error", "server-error"]


def test_journal_size_and_quiet():
    server = ServerProcess("--journal-size", "2", "--quiet")
    try:
        client = app(server.url)
        for _ in range(3):
            ask(client)
        recorded = ControlClient(server.url).call("GET", "/requests")["requests"]
    finally:
        server.stop()
    assert [record["seq"] for record in recorded] == [2, 3]
    assert server.lines.empty()


def test_journal_size_must_be_positive():
    result = fakehop("serve", "--journal-size", "0")

    assert result.returncode == 2
    assert "--journal-size: must be a whole number from 1, got 0" in result.stderr
