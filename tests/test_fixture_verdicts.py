"""The fixture's verdicts, run the way users run them: throwaway test files under pytester,
the official SDK against the plugin's server. `fakehop.verdict()`, `assert_client_ok`, and the
`fakehop_verdicts` ini / marker option that fails a test at teardown."""

from __future__ import annotations

from pathlib import Path

import pytest

from .test_pytest_plugin import INI

EXAMPLE = Path(__file__).parent.parent / "docs" / "examples" / "test_retry_loop_verdict.py"

pytest_plugins = ["pytester"]

CLIENTS = '''
import openai
import pytest

MESSAGES = [{"role": "user", "content": "Hello"}]


def ask(fakehop, scenario, client=None):
    client = client or fakehop.openai_client(timeout=10)
    return client.chat.completions.create(model="gpt-5.6-sol", messages=MESSAGES, extra_headers={"X-Fakehop-Scenario": scenario})


def retry_at_once(fakehop, scenario):
    """What a hand-rolled retry loop without a pause does: catch, and ask again (within
    milliseconds, far below the 0.25 s that no_backoff's warning allows)."""
    client = fakehop.openai_client(timeout=10, max_retries=0)
    for _ in range(2):
        try:
            ask(fakehop, scenario, client)
        except openai.APIStatusError:
            pass
'''

TEARDOWN_TESTS = (
    CLIENTS
    + """

def test_ignores_retry_after(fakehop):
    retry_at_once(fakehop, "rate-limited")


def test_reissues_at_once_once(fakehop):
    retry_at_once(fakehop, "server-error")


def test_the_sdk_at_its_defaults(fakehop):
    assert ask(fakehop, "flaky-then-ok").choices[0].message.content == "Hello! How can I help you today?"


@pytest.mark.fakehop(verdicts="off")
def test_opted_out(fakehop):
    retry_at_once(fakehop, "rate-limited")


@pytest.mark.fakehop(verdicts="warning")
def test_opted_in_to_warnings(fakehop):
    retry_at_once(fakehop, "server-error")
"""
)


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini(INI)
    pytester.makepyfile(test_clients=TEARDOWN_TESTS)
    return pytester


def errored(result) -> list[str]:
    """The tests that failed at teardown."""
    return sorted(
        line.split("::")[1].split(" ")[0] for line in result.outlines if line.startswith("ERROR ") and "::" in line
    )


def test_off_by_default_only_the_marker_opts_in(project):
    result = project.runpytest("-rE")
    result.assert_outcomes(passed=5, errors=1)
    assert errored(result) == ["test_opted_in_to_warnings"]


def test_error_fails_the_tests_with_an_error_finding_at_teardown(project):
    project.makeini(INI + "fakehop_verdicts = error\n")
    result = project.runpytest("-rE")
    result.assert_outcomes(passed=5, errors=2)
    assert errored(result) == ["test_ignores_retry_after", "test_opted_in_to_warnings"]
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_ignores_retry_after*",
            "*fakehop verdict: 1 finding against HopBase's rules (fakehop's manual, docs/guides/verdicts.md, tells*",
            "*error   retry_after_ignored*Retry-After asked for 2 s*",
        ]
    )


def test_warning_fails_on_warnings_too_and_the_command_line_wins(project):
    project.makeini(INI + "fakehop_verdicts = off\n")
    result = project.runpytest("-rE", "--fakehop-verdicts", "warning")
    result.assert_outcomes(passed=5, errors=3)
    assert errored(result) == ["test_ignores_retry_after", "test_opted_in_to_warnings", "test_reissues_at_once_once"]
    result.stdout.fnmatch_lines(["*warning no_backoff*"])


def test_a_bad_level_is_a_usage_error(project):
    project.makeini(INI + "fakehop_verdicts = loud\n")
    result = project.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "fakehop_verdicts: expected one of error, warning, off, got 'loud'" in result.stderr.str()


def test_a_bad_marker_level_fails_the_test(pytester):
    pytester.makeini(INI)
    pytester.makepyfile(
        test_marker="""
import pytest

@pytest.mark.fakehop(verdicts="always")
def test_it(fakehop):
    pass
"""
    )
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    assert (
        "@pytest.mark.fakehop(verdicts=...): expected one of error, warning, off, got 'always'" in result.stdout.str()
    )


HANDLE_TESTS = (
    CLIENTS
    + """

def test_verdict_and_assert_client_ok(fakehop):
    retry_at_once(fakehop, "rate-limited")
    [finding] = fakehop.verdict()
    first, second = [request.seq for request in fakehop.requests]
    assert (finding.rule, finding.severity, finding.seqs) == ("retry_after_ignored", "error", (first, second))
    assert "HopBase sends Retry-After" in finding.message and str(finding).startswith("error   retry_after_ignored")
    with pytest.raises(AssertionError, match="retry_after_ignored"):
        fakehop.assert_client_ok()
    fakehop.assert_client_ok(allow=["retry_after_ignored"])
    fakehop.assert_client_ok(retry_after_slack=5)  # thresholds as keywords
    assert fakehop.verdict(retry_after_slack=5) == []
    with pytest.raises(ValueError, match="unknown rule nope; the rules are: retry_after_ignored, no_backoff"):
        fakehop.assert_client_ok(allow=["nope"])


def test_the_level_of_assert_client_ok(fakehop):
    retry_at_once(fakehop, "server-error")
    fakehop.assert_client_ok(level="error")
    with pytest.raises(AssertionError, match="warning no_backoff"):
        fakehop.assert_client_ok()


def test_a_clean_client(fakehop):
    ask(fakehop, "flaky-then-ok")
    assert fakehop.verdict() == []
    fakehop.assert_client_ok()


@pytest.mark.fakehop(verdicts="error")
def test_a_failed_test_lists_the_findings_with_its_requests(fakehop):
    retry_at_once(fakehop, "rate-limited")
    assert False, "the test itself fails"
"""
)


def test_the_handle_and_the_failure_report(pytester):
    pytester.makeini(INI)
    pytester.makepyfile(test_handle=HANDLE_TESTS)
    result = pytester.runpytest()
    result.assert_outcomes(passed=3, failed=1)  # a test that failed gets no teardown error on top
    result.stdout.fnmatch_lines(
        [
            "*- fakehop requests -*",
            "#* POST /v1/chat/completions scenario=rate-limited: http_error 429: Rate limit reached for requests",
            "#* POST /v1/chat/completions scenario=rate-limited: http_error 429: Rate limit reached for requests",
            "verdict:",
            "  error   retry_after_ignored*",
        ]
    )


def test_the_docs_example_passes_and_fails_without_its_wait(pytester):
    example = EXAMPLE.read_text()
    pytester.makeini(INI)
    pytester.makepyfile(
        test_waits=example, test_does_not_wait=example.replace("time.sleep(", "(lambda seconds: None)(")
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*AssertionError: fakehop verdict: 1 finding against HopBase's rules*",
            "*error   retry_after_ignored*",
            "FAILED test_does_not_wait.py::test_my_retry_loop_keeps_hopbases_rules*",
        ]
    )
