"""docs/ci/run-with-fakehop.sh run as a CI job runs it: it starts `fakehop serve`, runs an app's
tests against it (the example app under docs/ci, through the openai SDK), saves the journal and
the verdict, stops the server and exits as it documents."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "docs" / "ci" / "run-with-fakehop.sh"
EXAMPLE_APP = ROOT / "docs" / "ci" / "example-app"
WAIT = 120.0  # seconds for a whole run: generous, for a loaded machine

# A client with a retry loop of its own that goes straight back after a 429 (retry_after_ignored).
HASTY_CLIENT = """
import openai

client = openai.OpenAI(max_retries=0)  # base URL and key from the environment the recipe sets
for attempt in range(2):
    try:
        client.chat.completions.create(model="gpt-5.6-sol", messages=[{"role": "user", "content": "Hi"}])
    except openai.RateLimitError:
        continue
"""


def recipe(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """The recipe with fakehop and this Python first on PATH, and none of the variables it sets or reads."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("FAKEHOP_", "OPENAI_", "ANTHROPIC_"))}
    environment["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{environment.get('PATH', '')}"
    environment["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = (
        "1"  # the app's own pytest run, with none of this environment's plugins
    )
    environment.update(env or {})
    return subprocess.run(
        ["bash", str(RECIPE), *args], cwd=cwd, env=environment, capture_output=True, text=True, timeout=WAIT
    )


@pytest.fixture
def app(tmp_path: Path) -> Path:
    """A copy of the example app, outside this repository (so that its pytest run is its own)."""
    return Path(shutil.copytree(EXAMPLE_APP, tmp_path / "app"))


def pytest_command() -> list[str]:
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]


def results_of(app: Path) -> tuple[list[dict], dict, str, str]:
    """The journal, the verdict as JSON and as text, and the URL the server had."""
    results = app / "fakehop-results"
    journal = [json.loads(line) for line in (results / "requests.jsonl").read_text().splitlines()]
    verdict = json.loads((results / "verdict.json").read_text())
    url = (results / "server.log").read_text().splitlines()[0].split(" listening on ")[1]
    return journal, verdict, (results / "verdict.txt").read_text(), url


def assert_stopped(url: str) -> None:
    with pytest.raises(urllib.error.URLError, match="Connection refused"):
        urllib.request.urlopen(url + "/_fakehop/health", timeout=5)


# Run first under FAKEHOP_ADMIN_TOKEN: the control API refuses a call without the token.
UNAUTHENTICATED_CALL = """
import os, urllib.error, urllib.request
try:
    urllib.request.urlopen(os.environ["FAKEHOP_URL"] + "/_fakehop/health", timeout=10)
except urllib.error.HTTPError as error:
    raise SystemExit(0 if error.code == 401 else 3)
raise SystemExit(4)
"""


def test_passing_tests_and_a_clean_verdict_exit_0_with_the_journal_and_verdict_saved(app: Path):
    """Under an admin token, which the server, the app's tests and the recipe's commands all take
    from $FAKEHOP_ADMIN_TOKEN."""
    (app / "check_token.py").write_text(UNAUTHENTICATED_CALL)
    tests = f"{sys.executable} check_token.py && {' '.join(pytest_command())}"
    run = recipe("--time-scale", "0.1", "--", "sh", "-c", tests, cwd=app, env={"FAKEHOP_ADMIN_TOKEN": "s3cret"})
    assert run.returncode == 0, run.stdout + run.stderr
    assert "3 passed" in run.stdout
    journal, verdict, text, url = results_of(app)
    assert [(r["scenario"], r["status"], r["end"]) for r in journal] == [
        ("hello", 200, "completed"),
        ("server-error", 500, "http_error"),
        ("hello", 200, "completed"),
        ("fail-server-error", 200, "failed"),
    ]
    assert (verdict["errors"], verdict["requests"], len(verdict["retried"])) == (0, 3, 1)
    assert text.strip() == "no findings over 3 requests (1 retried): the client kept HopBase's rules"
    assert (
        run.stderr.splitlines()[-1]
        == "run-with-fakehop.sh: the tests passed; the journal and the verdict are in fakehop-results/"
    )
    assert_stopped(url)


def test_failing_tests_exit_with_their_status_and_the_results_are_still_saved(app: Path):
    run = recipe("--default", "fail-server-error", "--", *pytest_command(), cwd=app)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "2 failed, 1 passed" in run.stdout
    journal, verdict, _, url = results_of(app)
    assert [r["scenario"] for r in journal] == [
        "fail-server-error",
        "server-error",
        "fail-server-error",
        "fail-server-error",
    ]
    assert verdict["errors"] == 0
    assert (
        run.stderr.splitlines()[-1]
        == "run-with-fakehop.sh: the tests failed (exit 1); the journal and the verdict are in fakehop-results/"
    )
    assert_stopped(url)


def test_the_command_status_is_passed_on(tmp_path: Path):
    run = recipe("--", sys.executable, "-c", "raise SystemExit(5)", cwd=tmp_path)
    assert run.returncode == 5, run.stderr
    assert "the tests failed (exit 5)" in run.stderr


@pytest.mark.parametrize("gate,status", [("error", 1), ("off", 0)])
def test_an_error_finding_fails_a_run_whose_tests_passed_unless_the_verdict_is_off(
    tmp_path: Path, gate: str, status: int
):
    (tmp_path / "hasty.py").write_text(HASTY_CLIENT)
    run = recipe(
        "--default", "rate-limited", "--", sys.executable, "hasty.py", cwd=tmp_path, env={"FAKEHOP_VERDICT": gate}
    )
    assert run.returncode == status, run.stdout + run.stderr
    journal, verdict, text, url = results_of(tmp_path)
    assert [(r["status"], r["end"]) for r in journal] == [(429, "http_error"), (429, "http_error")]
    assert [finding["rule"] for finding in verdict["findings"]] == ["retry_after_ignored"]
    assert text.startswith("error   retry_after_ignored       #1,#2 ") and text.endswith(
        "1 error, 0 warnings over 1 request (1 retried)\n"
    )
    assert text in run.stdout  # shown in the job's log too
    says = {
        "error": "the tests passed, but fakehop verdict failed (exit 1): see fakehop-results/verdict.txt",
        "off": "the tests passed; the journal and the verdict are in fakehop-results/",
    }[gate]
    assert run.stderr.splitlines()[-1] == f"run-with-fakehop.sh: {says}"
    assert_stopped(url)


def test_a_server_that_does_not_start_is_exit_2_with_its_output_and_the_command_never_runs(tmp_path: Path):
    run = recipe("--scenarios", str(tmp_path / "missing"), "--", sys.executable, "-c", "open('ran', 'w')", cwd=tmp_path)
    assert run.returncode == 2
    assert "run-with-fakehop.sh: fakehop serve stopped (exit 1) before it listened:" in run.stderr
    assert f"{tmp_path / 'missing'}: is not a directory" in run.stderr
    assert not (tmp_path / "ran").exists()


def test_a_server_whose_health_check_does_not_pass_is_exit_2_and_the_command_never_runs(tmp_path: Path):
    """Here the server was given another admin token than the one the recipe's commands send."""
    run = recipe(
        "--admin-token",
        "other",
        "--",
        sys.executable,
        "-c",
        "open('ran', 'w')",
        cwd=tmp_path,
        env={"FAKEHOP_ADMIN_TOKEN": "s3cret"},
    )
    assert run.returncode == 2
    url = (tmp_path / "fakehop-results" / "server.log").read_text().splitlines()[0].split(" listening on ")[1]
    assert run.stderr.splitlines()[-2:] == [
        "fakehop: HTTP 401: the control API needs Authorization: Bearer <admin token>",
        f"run-with-fakehop.sh: fakehop serves at {url}, but its health check did not pass (see above)",
    ]
    assert not (tmp_path / "ran").exists()
    assert_stopped(url)


@pytest.mark.parametrize(
    "args,env,says",
    [
        ([], {}, "usage: run-with-fakehop.sh [SERVE OPTION...] -- COMMAND [ARG...]"),
        (["--time-scale", "0.1", "--"], {}, "usage: run-with-fakehop.sh"),
        (["true"], {"FAKEHOP_VERDICT": "warning"}, "FAKEHOP_VERDICT must be error or off, got 'warning'"),
        (
            ["true"],
            {"FAKEHOP_READY_TIMEOUT": "1.5"},
            "FAKEHOP_READY_TIMEOUT must be a whole number of seconds, got '1.5'",
        ),
    ],
)
def test_a_wrong_setting_is_one_line_and_exit_2(tmp_path: Path, args: list[str], env: dict, says: str):
    run = recipe(*args, cwd=tmp_path, env=env)
    assert (run.returncode, run.stdout) == (2, "")
    assert run.stderr.startswith(f"run-with-fakehop.sh: {says}") and len(run.stderr.splitlines()) == 1, run.stderr
