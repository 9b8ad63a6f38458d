"""Colour in the command's human output: on a terminal (a pseudo-terminal here), and never with NO_COLOR."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time

import pytest

from fakehop.testing.remote import ControlClient

from .test_control_cli import WAIT, ServerProcess, app, ask, fakehop_process

pytestmark = pytest.mark.xdist_group("colour")  # one xdist worker runs them all: they share one server process

ESCAPE = "\x1b["
BOLD, GREEN, RED, RESET = "\x1b[1m", "\x1b[32m", "\x1b[31m", "\x1b[0m"


class Terminal:
    """A fakehop command whose stdout and stderr are a pseudo-terminal; what it writes, as it comes."""

    def __init__(self, *args: str, **env: str):
        environment = {k: v for k, v in os.environ.items() if not k.startswith("FAKEHOP_") and k != "NO_COLOR"}
        environment.update({"TERM": "xterm", **env})
        self.reader, writer = pty.openpty()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "fakehop", *args],
            stdin=subprocess.DEVNULL,
            stdout=writer,
            stderr=writer,
            env=environment,
        )
        os.close(writer)
        self.output = ""

    def read_until(self, text: str) -> str:
        """All it wrote so far, once it holds `text` (or it has ended)."""
        deadline = time.monotonic() + WAIT
        while text not in self.output and time.monotonic() < deadline:
            ready, _, _ = select.select([self.reader], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(self.reader, 65536)
                except OSError:  # the command ended and closed the terminal
                    break
                if not chunk:
                    break
                self.output += chunk.decode()
        return self.output

    def finish(self) -> tuple[int, str]:
        """Its exit status, once it has ended, and all it wrote."""
        self.read_until("\0")  # never written: reads to the end
        code = self.process.wait(timeout=WAIT)
        os.close(self.reader)
        return code, self.output

    def stop(self) -> str:
        self.process.send_signal(signal.SIGINT)
        return self.finish()[1]


def on_terminal(*args: str, **env: str) -> tuple[int, str]:
    return Terminal(*args, **env).finish()


@pytest.fixture(scope="module")
def server():
    running = ServerProcess("--quiet")
    yield running
    running.stop()


def test_list_names_are_bold_on_a_terminal_and_plain_with_no_color_or_in_a_pipe():
    code, shown = on_terminal("list")
    _, no_color = on_terminal("list", NO_COLOR="1")
    _, empty_no_color = on_terminal("list", NO_COLOR="")
    _, dumb = on_terminal("list", TERM="dumb")
    piped = fakehop_process("list").stdout

    assert code == 0
    assert f"{BOLD}hello" in shown and RESET in shown
    assert ESCAPE not in no_color and ESCAPE not in dumb and ESCAPE not in piped
    assert empty_no_color == shown  # an empty NO_COLOR does not count
    assert no_color.replace("\r\n", "\n") == piped


def test_requests_colour_how_each_answer_ended(server):
    ControlClient(server.url).call("POST", "/reset")
    client = app(server.url)
    ask(client)
    ControlClient(server.url).call("POST", "/queue", {"scenario": "server-error"})
    ask(client)

    _, shown = on_terminal("requests", "--url", server.url)
    _, no_color = on_terminal("requests", "--url", server.url, NO_COLOR="yes")
    piped = fakehop_process("requests", url=server.url).stdout

    first, second = shown.splitlines()
    assert f"{GREEN}completed" in first and f"{BOLD}hello" in first
    assert f"{RED}http_error" in second and f"{RED}The server had an error" in second
    assert ESCAPE not in no_color and ESCAPE not in piped
    assert no_color.replace("\r\n", "\n") == piped


def test_verdict_and_errors_are_coloured_on_a_terminal(server):
    ControlClient(server.url).call("POST", "/reset")
    ask(app(server.url))

    _, verdict = on_terminal("verdict", "--url", server.url)
    _, error = on_terminal("play", "nope")
    _, plain_error = on_terminal("play", "nope", NO_COLOR="1")

    assert verdict.startswith(f"{GREEN}no findings over 1 request")
    assert error.startswith(f"{RED}fakehop:{RESET} Unknown scenario 'nope'")
    assert plain_error.startswith("fakehop: Unknown scenario 'nope'")


def test_serve_colours_its_log_on_a_terminal():
    serving = Terminal("serve", "--port", "0", "--time-scale", "0.01")
    try:
        banner = serving.read_until("Ctrl-C stops")
        url = banner.split(" listening on ")[1].split()[0]
        ask(app(url))
        logged = serving.read_until("completed")
    finally:
        serving.stop()
    assert f"{BOLD}hello" in logged and f"{GREEN}completed" in logged
