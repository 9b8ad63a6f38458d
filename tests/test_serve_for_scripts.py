"""What a script that starts `fakehop serve` in the background relies on: `--ready-file`, and the
admin token from `$FAKEHOP_ADMIN_TOKEN` as the control commands take it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fakehop.testing.remote import ControlClient, ControlFailed

WAIT = 15.0  # seconds: generous, for a loaded machine


def serve(*options: str, env: dict | None = None) -> subprocess.Popen:
    environment = {**{k: v for k, v in os.environ.items() if not k.startswith("FAKEHOP_")}, **(env or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "fakehop", "serve", "--port", "0", "--quiet", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
    )


def stop(server: subprocess.Popen, signal_number: int = signal.SIGTERM) -> tuple[str, str]:
    server.send_signal(signal_number)
    return server.communicate(timeout=WAIT)


def appeared(path: Path, server: subprocess.Popen) -> str:
    """The ready file's text, polled for as a script would, while the server runs."""
    deadline = time.monotonic() + WAIT
    while not path.exists():
        assert server.poll() is None and time.monotonic() < deadline, server.communicate()
        time.sleep(0.02)
    return path.read_text()


def test_the_ready_file_holds_the_url_once_the_server_answers_and_goes_when_it_stops(tmp_path: Path):
    ready = tmp_path / "fakehop.url"
    server = serve("--ready-file", str(ready))
    try:
        url = appeared(ready, server)
        assert url.endswith("\n") and url.count("\n") == 1
        health = ControlClient(url.strip()).call("GET", "/health")
        assert sorted(path.name for path in tmp_path.iterdir()) == ["fakehop.url"]  # no partial file left
    finally:
        stdout, stderr = stop(server)
    assert health["status"] == "ok" and stdout.startswith(f"fakehop {health['version']} listening on {url.strip()}\n")
    assert server.returncode == 0 and stderr == ""
    assert not ready.exists()


def test_the_ready_file_replaces_a_stale_one_and_goes_on_ctrl_c(tmp_path: Path):
    ready = tmp_path / "fakehop.url"
    ready.write_text("http://127.0.0.1:1\n")
    server = serve("--ready-file", str(ready))
    try:
        deadline = time.monotonic() + WAIT
        while ready.read_text() == "http://127.0.0.1:1\n":
            assert server.poll() is None and time.monotonic() < deadline, server.communicate()
            time.sleep(0.02)
        assert ControlClient(ready.read_text().strip()).call("GET", "/health")["status"] == "ok"
    finally:
        stop(server, signal.SIGINT)
    assert server.returncode == 0 and not ready.exists()


@pytest.mark.parametrize(
    "where,says",
    [
        ("missing/fakehop.url", "No such file or directory"),
        (".", "Is a directory"),
    ],
)
def test_a_ready_file_that_cannot_be_written_is_one_line_and_exit_2(tmp_path: Path, where: str, says: str):
    path = tmp_path / where
    server = serve("--ready-file", str(path))
    stdout, stderr = server.communicate(timeout=WAIT)
    assert server.returncode == 2
    assert stderr == f"fakehop: cannot write --ready-file {path}: {says}\n"
    assert stdout == ""  # it never said it was listening
    assert (
        list(tmp_path.iterdir()) == [] and not path.with_name(f".{path.name}.partial").exists()
    )  # nothing half-written left


def test_serve_takes_the_admin_token_from_the_environment_and_the_option_wins(tmp_path: Path):
    by_environment = serve("--ready-file", str(tmp_path / "a"), env={"FAKEHOP_ADMIN_TOKEN": "s3cret"})
    by_option = serve(
        "--ready-file", str(tmp_path / "b"), "--admin-token", "other", env={"FAKEHOP_ADMIN_TOKEN": "s3cret"}
    )
    empty = serve("--ready-file", str(tmp_path / "c"), env={"FAKEHOP_ADMIN_TOKEN": ""})
    try:
        urls = [
            appeared(tmp_path / name, server).strip() for name, server in zip("abc", (by_environment, by_option, empty))
        ]
        with pytest.raises(ControlFailed, match="HTTP 401"):
            ControlClient(urls[0]).call("GET", "/health")
        assert ControlClient(urls[0], "s3cret").call("GET", "/health")["status"] == "ok"
        with pytest.raises(ControlFailed, match="HTTP 401"):
            ControlClient(urls[1], "s3cret").call("GET", "/health")
        assert ControlClient(urls[1], "other").call("GET", "/health")["status"] == "ok"
        assert ControlClient(urls[2]).call("GET", "/health")["status"] == "ok"  # an empty variable sets no token
    finally:
        for server in (by_environment, by_option, empty):
            stop(server)
