"""The pytest fixture in a session of its own: against a `fakehop serve` it did not start
(`--fakehop-url`), under pytest-xdist and two runs at once, and in strict mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fakehop.testing.remote import ControlClient

from .test_control_cli import ServerProcess
from .test_fixture_verdicts import HANDLE_TESTS, TEARDOWN_TESTS, errored
from .test_pytest_plugin import FAILING_TESTS, INI, SDK_TESTS

pytest_plugins = ["pytester"]

RUN_TIMEOUT = 240  # seconds for a whole inner run, on a loaded machine


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini(INI)
    return pytester


@pytest.fixture
def server():
    running = ServerProcess("--time-scale", "1", "--quiet", "--journal-secrets")  # the SDK tests read the keys sent
    yield running
    running.stop()


def test_the_sdk_tests_pass_against_a_running_server(project, server):
    project.makepyfile(test_sdk=SDK_TESTS)
    result = project.runpytest("--strict-markers", "--fakehop-url", server.url)
    result.assert_outcomes(passed=11)
    control = ControlClient(server.url)
    assert control.call("GET", "/sessions")["sessions"] == []  # each test dropped its own
    journal = control.call("GET", "/requests")["requests"]
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")  # the inner run's, as it is this one's
    assert len(journal) == 14 and all(
        record["session"].startswith(worker + "-") for record in journal
    )  # none in the global session


def test_mistakes_read_the_same_against_a_running_server(project, server, monkeypatch):
    project.makepyfile(test_failing=FAILING_TESTS)
    monkeypatch.setenv("FAKEHOP_URL", server.url)
    result = project.runpytest()
    result.assert_outcomes(passed=1, failed=4, errors=3)
    result.stdout.fnmatch_lines(
        [
            "*- fakehop requests -*",
            "#* POST /v1/chat/completions scenario=rate-limited: http_error 429: Rate limit reached for requests",
        ]
    )
    output = result.stdout.str()
    assert "@pytest.mark.fakehop(scenario=...): Unknown scenario 'nope'" in output
    assert "unknown key 'stepz' in the scenario; did you mean 'steps'?" in output
    assert (
        len(
            [
                line
                for line in result.outlines
                if "Unknown scenario 'nope'. Known scenarios: " in line and "hang, hello" in line
            ]
        )
        >= 3
    )


def test_verdicts_judge_each_tests_own_session_of_a_running_server(project, server):
    project.makepyfile(test_handle=HANDLE_TESTS)
    handle = project.runpytest("--fakehop-url", server.url)
    handle.assert_outcomes(passed=3, failed=1)
    handle.stdout.fnmatch_lines(["verdict:", "  error   retry_after_ignored*"])
    project.makeini(INI + "fakehop_verdicts = error\n")
    project.makepyfile(test_handle="", test_clients=TEARDOWN_TESTS)
    teardown = project.runpytest("-rE", "--fakehop-url", server.url)
    teardown.assert_outcomes(passed=5, errors=2)
    assert errored(teardown) == ["test_ignores_retry_after", "test_opted_in_to_warnings"]
    teardown.stdout.fnmatch_lines(
        [
            "*fakehop verdict: 1 finding against HopBase's rules*",
            "*error   retry_after_ignored*Retry-After asked for 2 s*",
        ]
    )


CONFLICTING_TESTS = """
import json
import os
import urllib.request

import openai
import pytest

from fakehop.testing import plain_http_tls

STATUSES = (400, 403, 404, 409, 422, 429, 500, 503)
HELLO = "Hello! How can I help you today?"


def ask(client, **extra):
    try:
        stream = client.chat.completions.create(model="gpt-5.6-sol", messages=[{"role": "user", "content": "hi"}], stream=True, **extra)
        return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    except openai.APIStatusError as exc:
        return f"HTTP {exc.status_code}"


@pytest.mark.parametrize("number", range(40))
def test_conflicting_faults(fakehop, number):
    status = STATUSES[number % len(STATUSES)]
    fakehop.queue({"name": "fault", "http_error": {"status": status, "message": f"test {number}"}},
                  {"steps": [{"delay": 2}, {"text": f"answer {number}", "chunk": "word"}]})
    client = fakehop.openai_client(max_retries=0, timeout=10)
    assert ask(client) == f"HTTP {status}"
    assert ask(client) == f"answer {number}"
    assert [ask(client, extra_headers={"X-Fakehop-Scenario": "flaky-then-ok"}) for _ in range(3)] == ["HTTP 429", "HTTP 500", HELLO]
    # the apps under test: configured with the session's key alone, no header. One through the openai SDK
    # (its TLS context, never used on plain HTTP, the fixture's: made once rather than for each of 80 apps);
    # one that sends the key as x-api-key to the Anthropic base URL, as the anthropic SDK does, over plain HTTP
    # (that SDK takes seconds to import in each of the four workers, and tests/test_sessions.py runs it)
    app = openai.OpenAI(base_url=fakehop.openai_base_url, api_key=fakehop.api_key, max_retries=0, timeout=10,
                        http_client=openai.DefaultHttpxClient(verify=plain_http_tls()))
    fakehop.use({"steps": [{"text": f"app {number}"}]})
    assert ask(app) == f"app {number}"
    body = {"model": "claude-sonnet-5", "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]}
    claude = urllib.request.Request(fakehop.anthropic_base_url + "/v1/messages", data=json.dumps(body).encode(), method="POST",
                                    headers={"x-api-key": fakehop.api_key, "anthropic-version": "2023-06-01", "content-type": "application/json"})
    with urllib.request.urlopen(claude, timeout=10) as answer:
        assert json.load(answer)["content"][0]["text"] == f"app {number}"
    assert [r.scenario for r in fakehop.requests] == ["fault", "inline-1", "flaky-then-ok[1]", "flaky-then-ok[2]",
                                                     "flaky-then-ok[3]->hello", "inline-2", "inline-2"]
    assert {r.session for r in fakehop.requests} == {fakehop.session}
    assert fakehop.session.startswith(os.environ["PYTEST_XDIST_WORKER"] + "-")
"""


def run_at_once(directory, url: str, runs: int) -> list[subprocess.CompletedProcess]:
    """`runs` pytest runs of the project, with two xdist workers each, all at the same time; with
    xdist and fakehop's plugin alone, since each of the six processes would import every plugin
    installed here (hypothesis, pytest-aiohttp, …), which these tests do not use."""
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "xdist",
        "-p",
        "fakehop.testing.plugin",
        "-n",
        "2",
        "-q",
        "--fakehop-url",
        url,
    ]
    environment = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    processes = [
        subprocess.Popen(
            command, cwd=directory, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for _ in range(runs)
    ]
    return [subprocess.CompletedProcess(p.args, p.wait(timeout=RUN_TIMEOUT), p.communicate()[0]) for p in processes]


@pytest.mark.long
def test_xdist_workers_and_two_runs_at_once_share_one_server(project):
    """Two runs at once, each of two xdist workers queueing conflicting faults in 20 tests apiece."""
    server = ServerProcess("--quiet", "--journal-size", "2000")  # at time scale 0.01: the 2 s delay is 20 ms
    try:
        project.makepyfile(test_conflicts=CONFLICTING_TESTS)
        together = run_at_once(project.path, server.url, 2)
        journal = [record.as_json() for record in ControlClient(server.url).records(0)]
    finally:
        server.stop()
    for run in together:
        assert run.returncode == 0, run.stdout
        assert "40 passed" in run.stdout
    assert len(journal) == 2 * 40 * 7
    sessions = {record["session"] for record in journal}
    assert None not in sessions and len(sessions) == 2 * 40
    assert {name.split("-")[0] for name in sessions} == {"gw0", "gw1"}


LATE_TESTS = """
import threading
import time

LATE = {}
QUESTION = [{"role": "user", "content": "hi"}]


def test_leaves_a_request_behind(fakehop):
    client = fakehop.openai_client(max_retries=0, timeout=10)

    def later():
        time.sleep(0.5)
        LATE["answer"] = client.chat.completions.create(model="m", messages=QUESTION).choices[0].message.content

    LATE["thread"] = threading.Thread(target=later)
    LATE["thread"].start()


def test_the_next_test_never_sees_it(fakehop):
    fakehop.queue({"steps": [{"text": "this test's own"}]})
    LATE["thread"].join()
    assert LATE["answer"] == "Hello! How can I help you today?"  # the ended test's session, made afresh
    assert fakehop.requests == []
    answer = fakehop.openai_client(max_retries=0, timeout=10).chat.completions.create(model="m", messages=QUESTION)
    assert answer.choices[0].message.content == "this test's own"
"""


@pytest.mark.parametrize("remote", [False, True], ids=["in-process", "running-server"])
def test_a_request_from_a_test_that_ended_never_lands_in_the_next(project, remote):
    project.makepyfile(test_late=LATE_TESTS)
    run_in_process_or_against_a_server(project, remote).assert_outcomes(passed=2)


def run_in_process_or_against_a_server(project: pytest.Pytester, remote: bool) -> pytest.RunResult:
    """The project's tests, with the fixture's own server or against a `fakehop serve` started for them."""
    if not remote:
        return project.runpytest()
    server = ServerProcess("--quiet")
    try:
        return project.runpytest("--fakehop-url", server.url)
    finally:
        server.stop()


STRICT_TESTS = """
import openai
import pytest


def ask(fakehop, **extra):
    client = fakehop.openai_client(max_retries=0, timeout=10)
    return client.chat.completions.create(model="gpt-5.6-sol", messages=[{"role": "user", "content": "hi"}], **extra)


def test_a_request_no_scenario_was_set_up_for(fakehop):
    with pytest.raises(openai.BadRequestError, match="No scenario was set up for this request"):
        ask(fakehop)


def test_a_queued_answer_is_set_up(fakehop):
    fakehop.queue({"steps": [{"text": "queued"}]})
    assert ask(fakehop).choices[0].message.content == "queued"
    assert ask(fakehop, extra_headers={"X-Fakehop-Scenario": "hello"}).choices[0].message.content.startswith("Hello")
    assert fakehop.strict is True


@pytest.mark.fakehop(strict=False)
def test_the_marker_turns_it_off(fakehop):
    assert ask(fakehop).choices[0].message.content.startswith("Hello")
    assert fakehop.strict is False
"""


@pytest.mark.parametrize("remote", [False, True], ids=["in-process", "running-server"])
def test_strict_mode_fails_a_test_that_made_an_unmatched_request_at_teardown(project, remote):
    project.makeini(INI + "fakehop_strict = true\n")
    project.makepyfile(test_strict=STRICT_TESTS)
    result = run_in_process_or_against_a_server(project, remote)
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_a_request_no_scenario_was_set_up_for*",
            "*fakehop: no scenario was set up for these requests (strict mode):",
            "#1 POST /v1/chat/completions scenario=None: unmatched 400: No scenario was set up for this request, and session '*-test_strict.py-test_a_request_no_scenario_was_set_up_for' *",
        ]
    )


def test_the_strict_marker_on_a_server_started_strict(project):
    project.makepyfile(
        test_strict=STRICT_TESTS.replace(
            "def test_a_queued_answer_is_set_up(fakehop):",
            "@pytest.mark.fakehop(strict=True)\ndef test_a_queued_answer_is_set_up(fakehop):",
        )
    )
    result = project.runpytest()
    result.assert_outcomes(
        passed=2, failed=1
    )  # not strict by default: the first test gets hello, not the 400 it expects


def test_a_server_that_is_not_there_fails_the_tests_that_use_it(project):
    project.makepyfile(test_one="def test_one(fakehop):\n    pass\n\n\ndef test_two():\n    pass\n")
    result = project.runpytest("--fakehop-url", "http://127.0.0.1:9")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*fakehop: the server given by --fakehop-url, fakehop_url or $FAKEHOP_URL: cannot reach a fakehop server at http://127.0.0.1:9*"
        ]
    )


def test_a_url_that_is_not_one_is_a_usage_error(project):
    project.makepyfile(test_one="def test_one(fakehop):\n    pass\n")
    result = project.runpytest("--fakehop-url", "localhost:8080")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "fakehop URL: expected one such as http://127.0.0.1:8080, got 'localhost:8080'" in result.stderr.str()


def test_scenario_directories_the_running_server_lacks_are_named(project, server):
    project.makeini(INI + "fakehop_scenarios = scenarios\n")
    project.mkdir("scenarios").joinpath("mine.yaml").write_text("steps:\n  - text: mine\n")
    project.makepyfile(test_one="def test_one(fakehop):\n    pass\n")
    result = project.runpytest("--fakehop-url", server.url)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [f"*fakehop: the server at {server.url} does not have the scenarios mine; start it with the same --scenarios*"]
    )


OPTIONS_TESTS = """
import json


def test_settings(fakehop):
    print("SETTINGS " + json.dumps({"time_scale": fakehop.time_scale, "strict": fakehop.strict}))
"""


def test_with_a_url_the_time_scale_is_the_servers_unless_one_is_set(project, server):
    project.makepyfile(test_options=OPTIONS_TESTS)
    settings = []
    for options in ([], ["--fakehop-time-scale", "0.125"]):
        result = project.runpytest("-s", "--fakehop-url", server.url, *options)
        result.assert_outcomes(passed=1)
        [line] = [line for line in result.outlines if "SETTINGS " in line]
        settings.append(json.loads(line.split("SETTINGS ", 1)[1]))
    assert settings == [{"time_scale": 1.0, "strict": False}, {"time_scale": 0.125, "strict": False}]
