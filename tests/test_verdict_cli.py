"""`fakehop verdict` against `fakehop serve` run as its own process, as a CI step runs it.

An error finding's exit status 1 is read from `python -m fakehop verdict` run as a process of
its own, as CI reads it; the other verdicts run main() in this process (tests/cli_runs.py).
"""

from __future__ import annotations

import json

import openai
from openai.types.chat import ChatCompletionMessageParam

from . import clients
from .test_control_cli import closed_port, fakehop_here, fakehop_process, server, url  # noqa: F401 - server and url are fixtures

MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Hello"}]


def client(url: str, api_key: str = "sk-test", **options) -> openai.OpenAI:
    return clients.openai_sync(base_url=url + "/v1", api_key=api_key, **options)


def retry_at_once(url: str, scenario: str, times: int, api_key: str = "sk-test") -> None:
    """A client that catches the error and asks again straight away (in a session where its key names one)."""
    app = client(url, api_key=api_key, max_retries=0)
    for _ in range(times):
        try:
            app.chat.completions.create(
                model="gpt-5.6-sol", messages=MESSAGES, extra_headers={"X-Fakehop-Scenario": scenario}
            )
        except openai.APIStatusError:
            pass


def test_a_clean_run_exits_0_with_one_summary_line(url):
    answer = client(url).chat.completions.create(
        model="gpt-5.6-sol", messages=MESSAGES, extra_headers={"X-Fakehop-Scenario": "flaky-then-ok"}
    )
    assert answer.choices[0].message.content == "Hello! How can I help you today?"
    result = fakehop_here("verdict", url=url)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "no findings over 1 request (1 retried): the client kept HopBase's rules\n"


def test_an_error_finding_exits_1_with_a_line_for_it(url):
    retry_at_once(url, "rate-limited", 2)
    result = fakehop_process("verdict", url=url)
    assert result.returncode == 1, result.stderr
    finding, summary = result.stdout.splitlines()
    first, second = (int(seq) for seq in finding.split()[2].lstrip("#").split(",#"))  # seqs count on over resets
    assert finding.split()[:2] == ["error", "retry_after_ignored"] and second == first + 1
    assert "Retry-After asked for 2 s" in finding
    assert summary == "1 error, 0 warnings over 1 request (1 retried)"


def test_only_warnings_exit_0(url):
    retry_at_once(url, "server-error", 2)
    result = fakehop_here("verdict", url=url)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[:2] == ["warning", "no_backoff"]
    assert result.stdout.splitlines()[-1] == "0 errors, 1 warning over 1 request (1 retried)"


def test_thresholds_from_the_command_line(url):
    retry_at_once(url, "server-error", 2)
    assert fakehop_here("verdict", "--backoff-floor", "0", url=url).stdout.startswith("no findings")
    result = fakehop_here("verdict", "--max-attempts", "1", "--backoff-floor", "0", url=url)
    assert result.returncode == 1 and result.stdout.split()[:2] == ["error", "retry_storm"]


def test_json_prints_the_whole_verdict(url):
    retry_at_once(url, "rate-limited", 2)
    result = fakehop_here("verdict", "--json", "--retry-after-slack", "0.5", url=url)
    assert result.returncode == 1
    answer = json.loads(result.stdout)
    assert [f["rule"] for f in answer["findings"]] == ["retry_after_ignored"]
    assert answer["settings"]["retry_after_slack"] == 0.5 and answer["retried"][0]["attempts"] == 2


def test_the_session_option_judges_that_sessions_requests(url):
    retry_at_once(url, "rate-limited", 2)
    result = fakehop_here("verdict", "--session", "nobody", url=url)
    assert result.returncode == 0 and result.stdout.startswith("no findings over 0 requests")


def test_requests_made_in_sessions_are_named_as_left_to_their_own_verdicts(url):
    for session in ("ci-a", "ci-b"):
        retry_at_once(url, "rate-limited", 2 if session == "ci-a" else 1, api_key=f"sk-fakehop-{session}")
    result = fakehop_here("verdict", url=url)
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        "no findings over 0 requests (0 retried) made in no session: nothing was judged; 3 requests in 2 sessions"
        " are left to each session's own verdict (fakehop verdict --session NAME; the pytest fixture judges its tests')\n"
    )
    assert (
        fakehop_here("verdict", "--session", "ci-a", url=url).stdout.splitlines()[-1]
        == "1 error, 0 warnings over 1 request (1 retried)"
    )


def test_a_bad_threshold_is_one_line_and_exit_2(url):
    result = fakehop_here("verdict", "--backoff-retries", "0", url=url)
    assert result.returncode == 2 and result.stdout == ""
    assert (
        result.stderr
        == "fakehop verdict: argument --backoff-retries: expected a whole number from 1, got '0' (see fakehop verdict --help)\n"
    )


def test_no_server_is_one_line_on_stderr():
    result = fakehop_here("verdict", url=f"http://127.0.0.1:{closed_port()}")
    assert result.returncode == 1 and result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and "cannot reach a fakehop server" in result.stderr
