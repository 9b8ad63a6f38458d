"""`pytest --fakehop-report PATH`: a record of each test that used fakehop, as JSON or as one
self-contained HTML page, and a short table at the end of the terminal summary; through
throwaway projects run with plain pytest in a subprocess, under xdist and against a running
server too. The page is opened in Chromium (see test_console_browser for the browser's rules)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fakehop.testing.report import unswept

from .test_console_browser import browser  # noqa: F401 - the module's one Chromium
from .test_control_cli import ServerProcess
from .test_pytest_plugin import INI
from .test_sweep import APP

pytest_plugins = ["pytester"]

TESTS = """
import pytest

from app import HELLO, ask


@pytest.mark.fakehop_sweep(faults=[{"kind": "rate_limit", "times": 1, "retry_after": 0.5}, "server_error"])
def test_hasty_app(fakehop_env):
    assert ask("Hi", wait=False) in (HELLO, None)


@pytest.mark.fakehop(scenario="keepalive-demo")
def test_keepalives(fakehop_env):
    assert ask("Hi") == "Sorry for the wait. Here is the answer."


@pytest.mark.fakehop(scenario="fail-rate-limit")
def test_an_error_in_the_stream(fakehop):
    client = fakehop.openai_client(max_retries=0, timeout=10)
    stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], stream=True)
    with pytest.raises(Exception, match="Rate limit"):
        list(stream)


def test_other_protocols(fakehop):
    with fakehop.anthropic_client(max_retries=0).messages.stream(
        model="claude-sonnet-4-5", max_tokens=100, messages=[{"role": "user", "content": "Hi"}]
    ) as stream:
        assert "".join(stream.text_stream) == HELLO
    assert len(list(fakehop.openai_client(max_retries=0).responses.create(model="m", input="Hi", stream=True))) > 5


@pytest.mark.fakehop(verdicts="error")
def test_judged_at_teardown(fakehop_env):
    fakehop_env.fault("rate_limit", retry_after=0.5)
    assert ask("Hi", wait=False) == HELLO


@pytest.mark.skip(reason="not today")
def test_skipped(fakehop):
    pass


def test_failing(fakehop_env):
    assert ask("Hi") == "something else"


def test_without_fakehop():
    pass
"""
STREAMING_APP = APP.replace(
    'model="gpt-5.6-sol", messages=[{"role": "user", "content": question}]\n',
    'model="gpt-5.6-sol", messages=[{"role": "user", "content": question}], stream=True\n',
).replace(
    "return completion.choices[0].message.content",
    'return "".join(chunk.choices[0].delta.content or "" for chunk in completion if chunk.choices)',
)
TIME_SCALE = "0.1"  # keepalive-demo's 3.5 s of silence as 0.35 s, with its keepalives
PASSING = """
from app import HELLO, ask


def test_passes_with_a_finding(fakehop_env):
    fakehop_env.fault("rate_limit", retry_after=0.5)
    assert ask("Hi", wait=False) == HELLO


def test_passes(fakehop_env):
    assert ask("Hi") == HELLO
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini(INI)
    pytester.makepyfile(app=STREAMING_APP, test_app=TESTS)
    return pytester


def reported(project: pytest.Pytester, *options: str) -> tuple[pytest.RunResult, dict[str, dict]]:
    """Runs the project with a JSON report; its tests by node id."""
    result = project.runpytest_subprocess(
        "--fakehop-report", "report.json", "--fakehop-time-scale", TIME_SCALE, *options
    )
    tests = json.loads((project.path / "report.json").read_text())["tests"]
    return result, {test["nodeid"]: test for test in tests}


def check_the_records(tests: dict[str, dict]) -> None:
    assert sorted(tests) == sorted(
        f"test_app.py::{name}"
        for name in (
            "test_hasty_app[fault-rate_limit]",
            "test_hasty_app[fault-server_error]",
            "test_keepalives",
            "test_an_error_in_the_stream",
            "test_other_protocols",
            "test_judged_at_teardown",
            "test_skipped",
            "test_failing",
        )
    )
    hasty = tests["test_app.py::test_hasty_app[fault-rate_limit]"]
    assert (hasty["outcome"], hasty["sweep"], hasty["faults"]) == ("passed", "fault-rate_limit", ["rate_limit"])
    assert (hasty["requests"]["count"], hasty["requests"]["ends"]) == (2, {"http_error": 1, "completed": 1})
    assert [(r["status"], r["faults"]) for r in hasty["requests"]["each"]] == [(429, ["rate_limit"]), (200, [])]
    [finding] = hasty["findings"]
    assert (finding["rule"], finding["severity"]) == ("retry_after_ignored", "error")
    assert "Retry-After asked for 0.5 s" in finding["message"]
    server_error = tests["test_app.py::test_hasty_app[fault-server_error]"]
    assert (server_error["faults"], server_error["requests"]["ends"], server_error["findings"]) == (
        ["server_error"],
        {"http_error": 1},
        [],
    )
    [keepalives] = tests["test_app.py::test_keepalives"]["requests"]["each"]
    kinds = [kind for _, kind in keepalives["timeline"]]
    assert kinds.count("keepalive") == 3 and kinds.count("delta") >= 5 and "error" not in kinds
    times = [at for at, _ in keepalives["timeline"]]
    assert times == sorted(times) and times[-1] >= 0.3  # after the silence, on the journal's clock
    [failed_stream] = tests["test_app.py::test_an_error_in_the_stream"]["requests"]["each"]
    assert failed_stream["end"] == "failed" and [kind for _, kind in failed_stream["timeline"]][-1] == "error"
    messages, responses = tests["test_app.py::test_other_protocols"]["requests"]["each"]
    for request in (messages, responses):
        kinds = [kind for _, kind in request["timeline"]]
        assert kinds.count("delta") >= 5 and "error" not in kinds and "event" in kinds, request["protocol"]
    judged = tests["test_app.py::test_judged_at_teardown"]
    assert (judged["outcome"], [f["rule"] for f in judged["findings"]]) == ("failed", ["retry_after_ignored"])
    assert tests["test_app.py::test_skipped"]["outcome"] == "skipped"
    assert tests["test_app.py::test_skipped"]["requests"] == {"count": 0, "ends": {}, "each": []}
    assert tests["test_app.py::test_failing"]["outcome"] == "failed"
    assert tests["test_app.py::test_failing"]["requests"]["ends"] == {"completed": 1}


def test_the_json_report_has_a_record_per_test_that_used_fakehop(project):
    result, tests = reported(project)
    result.assert_outcomes(passed=7, failed=1, skipped=1, errors=1)
    check_the_records(tests)


def test_under_xdist_the_workers_records_reach_the_controller(project, monkeypatch):
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # the workers load these two, not every one installed
    result, tests = reported(project, "-p", "xdist", "-p", "fakehop.testing.plugin", "-n", "2")
    result.assert_outcomes(passed=7, failed=1, skipped=1, errors=1)
    check_the_records(tests)
    result.stdout.fnmatch_lines(
        ["*= fakehop report =*", "8 tests with fakehop (5 passed, 2 failed, 1 skipped); 2 findings (2 errors)"]
    )


def test_against_a_running_server_the_records_come_through_its_control_api(project):
    server = ServerProcess("--quiet")
    try:
        result, tests = reported(project, "--fakehop-url", server.url)
    finally:
        server.stop()
    result.assert_outcomes(passed=7, failed=1, skipped=1, errors=1)
    check_the_records(tests)


def test_the_terminal_summary_ends_with_the_table_and_counts_findings_of_a_passing_run(pytester):
    pytester.makeini(INI)
    pytester.makepyfile(app=STREAMING_APP, test_passing=PASSING)
    result = pytester.runpytest_subprocess("--fakehop-report", "report.json")
    result.assert_outcomes(passed=2)
    lines = result.outlines
    start = next(number for number, line in enumerate(lines) if "= fakehop report =" in line)
    table = [line.split() for line in lines[start + 1 : start + 4]]
    assert table[0] == ["test", "outcome", "faults", "requests", "findings"]
    assert table[1][:2] == ["test_passing.py::test_passes_with_a_finding", "passed"]
    assert table[1][2:] == ["rate_limit", "2:", "1", "http_error,", "1", "completed", "1", "error"]
    assert table[2] == ["test_passing.py::test_passes", "passed", "-", "1:", "1", "completed", "-"]
    assert lines[start + 4 :] == [
        "2 tests with fakehop (2 passed); 1 finding (1 error)",
        "fakehop report: written to report.json",
        lines[-1],
    ]
    assert " 2 passed in " in lines[-1]


def test_without_the_option_there_is_no_table(pytester):
    pytester.makeini(INI)
    pytester.makepyfile(app=STREAMING_APP, test_passing=PASSING)
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=2)
    assert "fakehop report" not in result.stdout.str()


def test_the_reports_directories_are_made_and_one_that_cannot_be_is_said_at_the_end(pytester):
    pytester.makeini(INI)
    pytester.makepyfile(test_it="def test_it(fakehop):\n    pass\n")
    pytester.path.joinpath("a-file").write_text("")
    made = pytester.runpytest_subprocess("--fakehop-report", "reports/today/report.json")
    made.assert_outcomes(passed=1)
    assert json.loads((pytester.path / "reports" / "today" / "report.json").read_text())["tests"][0]["nodeid"] == (
        "test_it.py::test_it"
    )
    refused = pytester.runpytest_subprocess("--fakehop-report", "a-file/report.json")
    refused.assert_outcomes(passed=1)
    assert refused.outlines[-2].startswith(f"fakehop report: could not write {pytester.path / 'a-file'}")
    assert "INTERNALERROR" not in refused.stdout.str() + refused.stderr.str()


def test_a_swept_tests_row_is_its_node_id_less_the_sweeps_id():
    assert unswept("t.py::test_x[fault-truncate]", "fault-truncate") == "t.py::test_x"
    assert unswept("t.py::test_x[fault-truncate-2-small]", "fault-truncate-2") == "t.py::test_x[small]"
    assert unswept("t.py::test_x[a-fault-rate_limit-b]", "fault-rate_limit") == "t.py::test_x[a-b]"
    assert unswept("t.py::test_x[a]", None) == "t.py::test_x[a]"


def test_a_report_path_of_another_kind_is_a_usage_error(project):
    result = project.runpytest_subprocess("--fakehop-report", "report.txt")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "ERROR: --fakehop-report: expected a path ending in .json or .html, got 'report.txt'" in result.stderr.lines
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


def test_the_html_report_renders_its_table_and_timelines_with_nothing_fetched(project, browser):
    result = project.runpytest_subprocess("--fakehop-report", "report.html", "--fakehop-time-scale", TIME_SCALE)
    result.assert_outcomes(passed=7, failed=1, skipped=1, errors=1)
    path: Path = project.path / "report.html"
    text = path.read_text()
    assert "<script" not in text and "<link" not in text and "url(" not in text
    page = browser.new_page()
    fetched: list[str] = []
    page.on("request", lambda request: fetched.append(request.url))

    def only_the_file(route):
        if route.request.url == path.as_uri():
            route.continue_()
        else:
            route.abort()

    page.route("**/*", only_the_file)
    try:
        page.goto(path.as_uri())
        header = page.locator("table.matrix thead th").all_inner_texts()
        assert header == ["test", "fault-rate_limit", "fault-server_error", "no sweep"]
        rows = {
            row.locator("td.test").inner_text(): [cell.get_attribute("class") for cell in row.locator("td").all()[1:]]
            for row in page.locator("table.matrix tbody tr").all()
        }
        assert rows == {
            "test_app.py::test_hasty_app": ["passed", "passed", None],
            "test_app.py::test_keepalives": [None, None, "passed"],
            "test_app.py::test_an_error_in_the_stream": [None, None, "passed"],
            "test_app.py::test_other_protocols": [None, None, "passed"],
            "test_app.py::test_judged_at_teardown": [None, None, "failed"],
            "test_app.py::test_skipped": [None, None, "skipped"],
            "test_app.py::test_failing": [None, None, "failed"],
        }
        colours = {
            page.locator(f"td.{outcome}").first.evaluate("cell => getComputedStyle(cell).backgroundColor")
            for outcome in ("passed", "failed", "skipped")
        }
        assert len(colours) == 3
        timelines = page.locator("section svg.timeline")
        assert timelines.count() == 7  # every test that made a request
        for index in range(timelines.count()):
            box = timelines.nth(index).bounding_box()
            assert box is not None and box["width"] > 500 and box["height"] > 20
        keepalive_test = page.locator("section", has_text="test_keepalives")
        assert keepalive_test.locator("svg circle.keepalive").count() == 3
        assert keepalive_test.locator("svg rect.delta").count() >= 5
        assert page.locator("section", has_text="test_an_error_in_the_stream").locator("svg path.error").count() == 1
        assert page.locator("section", has_text="retry_after_ignored").count() == 2
    finally:
        page.close()
    assert fetched == [path.as_uri()]
