"""The documentation's examples are the files under docs/examples/, which its pages include as
they are: each runs here as a reader would run it, and prints what the page says it prints."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fakehop import Gateway, Library, ThreadServer

pytest_plugins = ["pytester"]

EXAMPLES = Path(__file__).resolve().parent.parent / "docs" / "examples"
WAIT = 60  # seconds: generous, for a loaded machine
DEFAULT_URL = "http://127.0.0.1:8080"  # where the examples that talk to `fakehop serve` expect it
# the test files a reader copies into a project that has the pyproject settings of the fixture's page
FIXTURE_EXAMPLES = {
    "test_fixture_quickstart.py": 6,
    "test_aiohttp_app.py": 1,
    "test_first.py": 2,
    "test_retry_loop_verdict.py": 1,
    "test_app_clients.py": 1,
    "test_resilience.py": 1,
    "test_app_sweep.py": 3,
}
FIXTURE_APP_MODULES = ("resilient_app.py",)  # what those tests import, beside them


def example(name: str) -> str:
    return (EXAMPLES / name).read_text()


@pytest.fixture
def served():
    """A fakehop serving the bundled scenarios as `fakehop serve --time-scale 0.01` would."""
    with ThreadServer(Gateway(Library.load(), time_scale=0.01)) as server:
        yield server.url


def reader_env(server_url: str) -> dict[str, str]:
    """A shell where `fakehop` and `python` are this virtualenv's and the commands reach `server_url`."""
    return {**os.environ, "FAKEHOP_URL": server_url, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}


def run_against(server_url: str, script: str, cwd: Path, *argv: str) -> subprocess.CompletedProcess:
    """Runs an example written for `fakehop serve` on its default port, pointed at `server_url`."""
    (cwd / script).write_text(example(script).replace(DEFAULT_URL, server_url))
    return subprocess.run(
        [*argv, script], cwd=cwd, capture_output=True, text=True, timeout=WAIT, env=reader_env(server_url)
    )


def test_the_fixture_examples_pass_in_a_new_project(pytester):
    """A new user's project: the fixture page's pyproject settings, its example tests, asyncio in strict mode."""
    unused_plugins = "-p no:cacheprovider -p no:hypothesispytest -p no:faker -p no:anyio"
    pytester.makepyprojecttoml(
        example("pytest-settings.toml") + f'addopts = "{unused_plugins}"\n'
        'asyncio_default_fixture_loop_scope = "function"\n'
    )
    pytester.mkdir("tests").joinpath("scenarios").mkdir()
    for name in [*FIXTURE_EXAMPLES, *FIXTURE_APP_MODULES]:
        pytester.path.joinpath(name).write_text(example(name))
    result = pytester.runpytest("--strict-markers")
    result.assert_outcomes(passed=sum(FIXTURE_EXAMPLES.values()))


def test_the_resilience_examples_report_the_table_their_page_shows(pytester):
    """The pytest page's excerpt of the terminal summary is what `--fakehop-report` prints for its examples."""
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider -p no:hypothesispytest -p no:faker -p no:anyio\n")
    for name in ("resilient_app.py", "test_resilience.py", "test_app_sweep.py"):
        pytester.path.joinpath(name).write_text(example(name))
    result = pytester.runpytest_subprocess("--fakehop-report", "report.html")
    result.assert_outcomes(passed=4)
    lines = result.outlines
    start = next(number for number, line in enumerate(lines) if "= fakehop report =" in line) + 1
    assert "\n".join(lines[start:-1]) + "\n" == example("report-summary.txt")


def test_the_example_without_pytest_prints_what_its_page_shows(tmp_path):
    (tmp_path / "tests" / "scenarios").mkdir(parents=True)
    (tmp_path / "without_pytest.py").write_text(example("without_pytest.py"))
    done = subprocess.run(
        [sys.executable, "without_pytest.py"], cwd=tmp_path, capture_output=True, text=True, timeout=WAIT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == example("without_pytest.txt")


def test_the_walkthroughs_fault_file_plays_as_it_says(tmp_path):
    (tmp_path / "my-fault.yaml").write_text(example("my-fault.yaml"))
    played = subprocess.run(
        [sys.executable, "-m", "fakehop", "play", "my-fault", "--scenarios", str(tmp_path), "--no-wait"],
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert played.returncode == 0, played.stderr
    deltas = re.findall(r'"content":"([^"]+)"', played.stdout)
    assert "".join(deltas) == "Let me look that up" and "[DONE]" not in played.stdout


def test_the_tours_sdk_script_prints_the_start_then_raises_the_rate_limit(served, tmp_path):
    done = run_against(served, "tour.py", tmp_path, sys.executable)
    assert done.returncode == 1 and done.stdout == "Here is the start of"
    raised = done.stderr.strip().splitlines()[-1]
    assert raised == "openai.APIError: Rate limit reached, please retry after a short wait"
    assert f"# {raised}\n" in example("tour.py")  # the comment that says what it raises


def test_the_app_gets_the_default_answer_then_the_queued_stall(served, tmp_path):
    """The walkthrough's app.py, then the command-line example of the README: queue a stall, run
    the app, read the journal."""
    answered = run_against(served, "app.py", tmp_path, sys.executable)
    assert (answered.returncode, answered.stdout) == (0, "Hello! How can I help you today?\n"), answered.stderr
    (tmp_path / "queue-a-fault.sh").write_text(example("queue-a-fault.sh"))
    done = subprocess.run(
        ["bash", "queue-a-fault.sh"], cwd=tmp_path, capture_output=True, text=True, timeout=WAIT, env=reader_env(served)
    )
    queued, _, rest = done.stdout.partition("\n")
    assert queued.startswith("queued stall for the next request that names no scenario")
    assert rest.startswith("Let me think about")  # and no newline: the stall's error cut the line
    journal = rest.removeprefix("Let me think about").splitlines()
    assert done.stderr.strip().endswith("openai.APIError: Stream stalled: no output for 120s")
    assert [line.split()[5:8] for line in journal] == [["hello", "200", "completed"], ["stall", "200", "failed"]]
