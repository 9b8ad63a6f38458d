"""The control commands (queue, default, requests, reset) against `fakehop serve` run as its own process.

The server is always a process of its own. The commands run main() in this process
(tests/cli_runs.py) but where the process is what a test is about: `requests --follow`, which
runs until Ctrl-C; an unknown scenario's exit status 2 in every command; and one run each of
`queue` and `requests`, for the entry point and its exit status.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterable, Iterator
from urllib.parse import urlsplit

import openai
import pytest

from fakehop.testing.remote import ControlClient

from . import cli_runs, clients

pytestmark = pytest.mark.xdist_group("control-cli")  # one xdist worker runs them all: they share one server process

HELLO = "Hello! How can I help you today?"
WAIT = 15.0  # seconds: generous, for a loaded machine


class ServerProcess:
    """`python -m fakehop serve --port 0` in a subprocess; its stdout lines are collected as they come."""

    def __init__(self, *options: str):
        command = [sys.executable, "-m", "fakehop", "serve", "--port", "0", "--time-scale", "0.01", *options]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.process.stdout is not None and self.process.stderr is not None
        self.stdout, self.stderr = self.process.stdout, self.process.stderr
        self.lines: queue.Queue[str] = queue.Queue()
        banner = self.stdout.readline()
        assert " listening on " in banner, banner + self.stderr.read()
        self.url = banner.split()[-1]
        self.stdout.readline()  # the second banner line
        self.collector = threading.Thread(target=self.collect, daemon=True)
        self.collector.start()

    def collect(self) -> None:
        for line in self.stdout:
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
        self.stderr.close()


def fakehop_here(*args: str, url: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the fakehop command through main() in this process, with no $FAKEHOP_ variable but
    those in `env`; the server comes from $FAKEHOP_URL unless `url` is given."""
    return cli_runs.fakehop_here(*args, *url_option(url), env=fakehop_variables(env))


def fakehop_process(*args: str, url: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """As fakehop_here(), as `python -m fakehop` in a process of its own, its output through pipes."""
    return cli_runs.fakehop_process(*args, *url_option(url), env=fakehop_variables(env), timeout=WAIT)


def url_option(url: str | None) -> list[str]:
    return ["--url", url] if url else []


def fakehop_variables(env: dict | None) -> dict[str, str | None]:
    """`env`, and every other $FAKEHOP_ variable of this process taken out."""
    return {**{name: None for name in os.environ if name.startswith("FAKEHOP_")}, **(env or {})}


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
    return clients.openai_sync(base_url=url + "/v1", api_key="sk-test", max_retries=0)


def ask(client: openai.OpenAI) -> str | None:
    try:
        completion = client.chat.completions.create(
            model="gpt-5.6-sol", messages=[{"role": "user", "content": "Hello"}]
        )
    except openai.APIStatusError as exc:
        return f"HTTP {exc.status_code}"
    return completion.choices[0].message.content


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_queue_name_with_times(url):
    result = fakehop_process("queue", "rate-limited", "--times", "2", url=url)

    assert result.returncode == 0, result.stderr
    assert (
        result.stdout
        == "queued rate-limited for the next 2 requests that name no scenario; queue now: rate-limited x2\n"
    )
    client = app(url)
    assert [ask(client) for _ in range(3)] == ["HTTP 429", "HTTP 429", HELLO]


def test_queue_a_sequence_queues_its_whole_run(url):
    result = fakehop_here("queue", "flaky-then-ok", url=url)

    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        "queued flaky-then-ok for the next 3 requests that name no scenario; "
        "queue now: flaky-then-ok[1], flaky-then-ok[2], flaky-then-ok[3]\n"
    )
    client = app(url)
    assert [ask(client) for _ in range(4)] == ["HTTP 429", "HTTP 500", HELLO, HELLO]
    recorded = ControlClient(url).call("GET", "/requests")["requests"]
    assert [record["scenario"] for record in recorded] == [
        "flaky-then-ok[1]",
        "flaky-then-ok[2]",
        "flaky-then-ok[3]->hello",
        "hello",
    ]


def test_lenient_conversations_lets_an_unanswered_tool_call_through():
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "user", "content": "and?"},
    ]
    server = ServerProcess("--lenient-conversations", "--quiet")
    try:
        answer = app(server.url).chat.completions.create(model="m", messages=messages)
        health = ControlClient(server.url).call("GET", "/health")
    finally:
        server.stop()
    assert answer.choices[0].message.content == HELLO
    assert health["lenient_conversations"] is True


def test_queue_takes_the_url_from_the_environment(url):
    result = fakehop_here("queue", "server-error", env={"FAKEHOP_URL": url})

    assert result.returncode == 0, result.stderr
    assert ask(app(url)) == "HTTP 500"


def test_queue_a_yaml_file(url, tmp_path):
    path = tmp_path / "quick-stall.yaml"
    path.write_text("steps:\n  - text: from a file\n")

    result = fakehop_here("queue", str(path), url=url)

    assert result.returncode == 0, result.stderr
    assert ask(app(url)) == "from a file"
    assert [r["scenario"] for r in ControlClient(url).call("GET", "/requests")["requests"]] == ["quick-stall"]


def test_queue_a_bad_file_lists_its_problems_and_sends_nothing(url, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("steps:\n  - text: hi\n  - stal\n  - delay: soon\n")

    result = fakehop_here("queue", str(path), url=url)

    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"{path}:3: unknown step 'stal'; did you mean 'stall'?",
        f"{path}:4: delay: expected a duration such as 2s, 250ms or 1.5m, got 'soon'",
        f"fakehop: 2 problems in {path}; nothing was sent",
    ]
    assert ask(app(url)) == HELLO


def test_queue_an_unknown_name_is_one_clear_line(url):
    result = fakehop_here("queue", "stal", url=url)

    assert result.returncode == 2  # as for every command given an unknown scenario
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(
        "fakehop: HTTP 400: Unknown scenario 'stal'; did you mean 'stall'? Known scenarios: "
    )
    assert " stall," in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["play", "nope"],
        ["serve", "--port", "0", "--default", "nope"],
        ["queue", "nope"],
        ["queue", "--clear", "nope"],
        ["default", "nope"],
    ],
    ids=" ".join,
)
def test_an_unknown_scenario_is_one_line_and_exit_2_in_every_command(url, args):
    control = ControlClient(url)
    control.call("POST", "/queue", {"scenario": "stall"})

    result = fakehop_process(*args, url=url if args[0] in ("queue", "default") else None)

    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Unknown scenario 'nope'" in result.stderr and " stall," in result.stderr
    assert (control.call("GET", "/queue")["queue"], control.call("GET", "/health")["default"]) == (["stall"], "hello")


def test_queue_clear_empties_the_queue_and_may_queue_afresh(url):
    control = ControlClient(url)
    control.call("POST", "/queue", {"scenario": "stall", "times": 3})
    ControlClient(url, session="ci-clear").call("POST", "/queue", {"scenario": "stall"})

    cleared = fakehop_here("queue", "--clear", url=url)
    left = control.call("GET", "/queue")["queue"]
    afresh = fakehop_here("queue", "--clear", "rate-limited", "--times", "2", url=url)
    in_session = fakehop_here("queue", "--clear", "--session", "ci-clear", url=url)

    assert (cleared.returncode, cleared.stdout, left) == (0, "queue cleared: 3 entries removed\n", [])
    assert afresh.stdout == (
        "queue cleared: 0 entries removed\n"
        "queued rate-limited for the next 2 requests that name no scenario; queue now: rate-limited x2\n"
    )
    assert in_session.stdout == "session ci-clear's queue cleared: 1 entry removed\n"
    assert control.call("GET", "/queue")["queue"] == ["rate-limited", "rate-limited"]


def test_list_url_lists_a_running_servers_scenarios_with_the_added_ones(url):
    ControlClient(url).call(
        "POST", "/scenarios", text="name: posted\ndescription: Added by a call.\nsteps: [{text: hi}]\n"
    )
    ControlClient(url, session="ci-list").call("POST", "/scenarios", text="name: only-here\nsteps: [{text: hi}]\n")

    listed = fakehop_here("list", url=url)
    in_session = fakehop_here("list", "--session", "ci-list", url=url)
    local = fakehop_here("list")

    names = [line.split()[0] for line in listed.stdout.splitlines()]
    assert listed.returncode == 0, listed.stderr
    assert names == [scenario["name"] for scenario in ControlClient(url).call("GET", "/scenarios")["scenarios"]]
    assert "posted" in names and "only-here" not in names
    assert any(line.split(None, 2) == ["posted", "api", "Added by a call."] for line in listed.stdout.splitlines())
    assert "only-here" in in_session.stdout.split() and "posted" not in in_session.stdout.split()
    assert local.stdout.splitlines() == [line for line in listed.stdout.splitlines() if line.split()[0] != "posted"]


def test_requests_marks_the_requests_that_streamed(url):
    client = app(url)
    list(client.chat.completions.create(model="gpt-5.6-sol", messages=[{"role": "user", "content": "hi"}], stream=True))
    ask(client)
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(
            model="gpt-5.6-sol",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            extra_headers={"X-Fakehop-Scenario": "rate-limited"},
        )

    printed = fakehop_here("requests", url=url).stdout.splitlines()

    assert [line.split()[5:8] for line in printed] == [
        ["hello", "200", "completed"],
        ["hello", "200", "completed"],
        ["rate-limited", "429", "http_error"],
    ]
    assert [line.split()[11:12] for line in printed] == [["streamed"], [], ["Rate"]]  # a 429 comes before any stream


def test_default_sets_the_scenario_for_unnamed_requests(url):
    result = fakehop_here("default", "server-error", url=url)

    assert (result.returncode, result.stdout) == (0, "default scenario: server-error\n")
    assert ask(app(url)) == "HTTP 500"


def test_reset_puts_the_default_back_and_empties_queue_faults_and_journal(url):
    control = ControlClient(url)
    control.call("PUT", "/default", {"scenario": "server-error"})
    control.call("POST", "/queue", {"scenario": "rate-limited", "times": 2})
    control.call("POST", "/faults", {"kind": "truncate", "times": 0})
    control.call("PUT", "/strict", {"strict": True})
    ask(app(url))

    result = fakehop_here("reset", url=url)

    assert (result.returncode, result.stdout) == (
        0,
        "reset: queue, faults, journal, sequence counters and added scenarios cleared; time scale and strict mode"
        " as the server started; default scenario: hello\n",
    )
    assert control.call("GET", "/requests")["requests"] == []
    assert control.call("GET", "/faults")["faults"] == []
    assert control.call("GET", "/health")["strict"] is False
    assert ask(app(url)) == HELLO


def test_requests_prints_the_journal_in_the_servers_own_format(url, server):
    client = app(url)
    ask(client)
    ControlClient(url).call("POST", "/queue", {"scenario": "rate-limited"})
    ask(client)

    printed = fakehop_process("requests", url=url).stdout.splitlines()

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

    result = fakehop_here("requests", "--json", url=url)

    assert '"messages": [{"role": "user", "content": "Hello"}]' in result.stdout


def lines_into(stream: Iterable[str], lines: queue.Queue[str]) -> threading.Thread:
    """A thread that puts each line of `stream` into `lines` as it comes."""

    def put_each() -> None:
        for line in stream:
            lines.put(line.rstrip("\n"))

    reader = threading.Thread(target=put_each, daemon=True)
    reader.start()
    return reader


@contextlib.contextmanager
def following(url: str, *options: str, notes: queue.Queue[str] | None = None) -> Iterator[queue.Queue[str]]:
    """`fakehop requests --follow` in its own process: its lines, as they come (and its stderr's
    into `notes`); stopped by Ctrl-C at the end, when it must have printed no traceback."""
    command = [sys.executable, "-m", "fakehop", "requests", "--follow", "--interval", "0.05", "--url", url, *options]
    follower = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert follower.stdout is not None and follower.stderr is not None
    lines: queue.Queue[str] = queue.Queue()
    notes = queue.Queue() if notes is None else notes
    lines_into(follower.stdout, lines)
    reading_notes = lines_into(follower.stderr, notes)
    try:
        yield lines
    finally:
        follower.send_signal(signal.SIGINT)
        follower.wait(timeout=WAIT)
        reading_notes.join(timeout=WAIT)
        follower.stderr.close()
    assert all("Traceback" not in notes.get() for _ in range(notes.qsize()))


def test_requests_follow_prints_each_request_as_it_finishes(url):
    with following(url) as lines:
        client = app(url)
        stream = client.chat.completions.create(
            model="gpt-5.6-sol",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            extra_headers={"X-Fakehop-Scenario": "stall"},
        )
        with pytest.raises(openai.APIError, match="Stream stalled"):
            list(stream)
        ask(client)
        stalled, greeted = lines.get(timeout=WAIT).split(), lines.get(timeout=WAIT).split()
    assert stalled[5:8] == ["stall", "200", "failed"]
    assert int(stalled[8]) > 2  # text, keepalives, the error event
    assert greeted[5:8] == ["hello", "200", "completed"]
    assert int(greeted[1].lstrip("#")) == int(stalled[1].lstrip("#")) + 1


def test_requests_follow_carries_on_when_the_server_comes_back_restarted():
    first = ServerProcess("--quiet")
    url, port = first.url, urlsplit(first.url).port
    notes: queue.Queue[str] = queue.Queue()
    try:
        with following(url, notes=notes) as lines:
            ask(app(url))
            before = lines.get(timeout=WAIT).split()
            first.process.kill()
            lost = notes.get(timeout=WAIT)
            second = ServerProcess("--port", str(port), "--quiet")
            try:
                assert ask(app(url).with_options(default_headers={"X-Fakehop-Scenario": "server-error"})) == "HTTP 500"
                after = lines.get(timeout=WAIT).split()
                back = [notes.get(timeout=WAIT), notes.get(timeout=WAIT)]
            finally:
                second.stop()
    finally:
        first.stop()
    assert before[1:8] == ["#1", "POST", "/v1/chat/completions", "chat", "hello", "200", "completed"]
    assert after[1:8] == ["#1", "POST", "/v1/chat/completions", "chat", "server-error", "500", "http_error"]
    assert lost == f"fakehop: lost the connection to {url}; reconnecting"
    assert back == [
        f"fakehop: reconnected to {url}",
        f"fakehop: the server at {url} restarted: its requests are numbered from #1 again",
    ]


class Relay:
    """A TCP relay on 127.0.0.1 to a server's port, which can be cut (every connection closed,
    none taken) and opened again on the same port: a network that drops, in front of a server
    that stays up."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.port = 0
        self.sockets: list[socket.socket] = []
        self.open()

    def open(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", self.port))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self.accept, args=(self.listener,), daemon=True).start()

    def accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # cut
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            self.sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=pump, args=(source, sink), daemon=True).start()

    def cut(self) -> None:
        for connection in [self.listener, *self.sockets]:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)  # wakes the threads blocked on it
            connection.close()
        self.sockets.clear()


def pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
        sink.shutdown(socket.SHUT_WR)


def test_requests_follow_carries_on_where_it_was_when_the_connection_comes_back(url):
    relay = Relay(urlsplit(url).port)
    relayed = f"http://127.0.0.1:{relay.port}"
    client = app(url)  # the app reaches the server directly; only the follower's connection drops
    notes: queue.Queue[str] = queue.Queue()
    try:
        with following(relayed, notes=notes) as lines:
            ask(client)
            seen = [lines.get(timeout=WAIT)]
            relay.cut()
            lost = notes.get(timeout=WAIT)
            ask(client)  # while the follower cannot reach the server
            relay.open()
            back = notes.get(timeout=WAIT)
            seen.append(lines.get(timeout=WAIT))
            ask(client)
            seen.append(lines.get(timeout=WAIT))
            more_notes = [notes.get_nowait() for _ in range(notes.qsize())]
    finally:
        relay.cut()
    seqs = [int(line.split()[1].lstrip("#")) for line in seen]
    assert seqs == [seqs[0], seqs[0] + 1, seqs[0] + 2]  # none missed, none repeated
    assert (lost, back) == (
        f"fakehop: lost the connection to {relayed}; reconnecting",
        f"fakehop: reconnected to {relayed}",
    )
    assert more_notes == []  # no word of a restart


def test_unreachable_server_is_one_clear_line():
    url = f"http://127.0.0.1:{closed_port()}"

    result = fakehop_here("reset", url=url)

    assert result.returncode == 1
    assert (
        result.stderr
        == f"fakehop: cannot reach a fakehop server at {url} (Connection refused); start one with `fakehop serve` or pass --url\n"
    )


def test_admin_token_from_option_or_environment():
    server = ServerProcess("--admin-token", "s3cret", "--quiet")
    try:
        refused = fakehop_here("queue", "server-error", url=server.url)
        by_option = fakehop_here("queue", "server-error", "--admin-token", "s3cret", url=server.url)
        by_environment = fakehop_here("queue", "server-error", url=server.url, env={"FAKEHOP_ADMIN_TOKEN": "s3cret"})
        queued = ControlClient(server.url, "s3cret").call("GET", "/queue")["queue"]
        list_refused = fakehop_here("list", url=server.url)
        listed = fakehop_here("list", "--admin-token", "s3cret", url=server.url)
    finally:
        server.stop()
    assert (refused.returncode, refused.stderr) == (
        1,
        "fakehop: HTTP 401: the control API needs Authorization: Bearer <admin token>\n",
    )
    assert by_option.returncode == 0 and by_environment.returncode == 0
    assert queued == ["server-error", "server-error"]
    assert list_refused.returncode == 1 and list_refused.stderr.startswith("fakehop: HTTP 401: ")
    assert listed.returncode == 0 and "hello" in listed.stdout.split()


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
    result = fakehop_here("serve", "--journal-size", "0")

    assert result.returncode == 2
    assert "--journal-size: must be a whole number from 1, got 0" in result.stderr
