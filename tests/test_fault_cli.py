"""`fakehop fault` against `fakehop serve` run as its own process: a fault laid over the next
answers, listed, cleared, per session; a wrong one is one line. main() runs in this process
(tests/cli_runs.py) but for one real `python -m fakehop fault` run."""

from __future__ import annotations

import openai
import pytest

from . import clients
from .test_control_cli import HELLO, app, ask, fakehop_here, fakehop_process, server, url  # noqa: F401 - fixtures

pytestmark = pytest.mark.xdist_group("fault-cli")  # one xdist worker runs them all: they share one server process


def test_a_rate_limit_breaks_the_next_two_answers_then_the_usual_one_comes(url):
    added = fakehop_process("fault", "rate_limit", "--times", "2", "--retry-after", "0.5", url=url)
    assert added.returncode == 0, added.stderr
    assert added.stdout.startswith("fault set: fault_") and " rate_limit retry_after=0.5 times=2 " in added.stdout
    assert added.stdout.rstrip().endswith("(2 left)")
    client = app(url)
    assert [ask(client) for _ in range(3)] == ["HTTP 429", "HTTP 429", HELLO]


def test_list_and_clear(url):
    fakehop_here("fault", "server_error", "--status", "503", "--times", "0", url=url)
    fakehop_here("fault", "http_error", "--status", "418", "--protocol", "messages", url=url)
    listed = fakehop_here("fault", "--list", url=url).stdout.splitlines()
    assert [line.split()[1] for line in listed] == ["server_error", "http_error"]
    assert listed[0].endswith("(until cleared)") and "status=503" in listed[0]
    assert "protocol=messages" in listed[1]
    assert ask(app(url)) == "HTTP 503"
    cleared = fakehop_here("fault", "--clear", url=url)
    assert cleared.stdout == "faults cleared: 2 removed\n"
    assert fakehop_here("fault", "--list", url=url).stdout == ""
    assert ask(app(url)) == HELLO


def test_a_session_s_fault_breaks_only_that_session(url):
    added = fakehop_here("fault", "rate_limit", "--session", "ci-9", url=url)
    assert added.returncode == 0 and added.stdout.rstrip().endswith("in session ci-9")
    in_session = clients.openai_sync(base_url=url + "/v1", api_key="sk-fakehop-ci-9", max_retries=0)
    assert ask(app(url)) == HELLO
    assert ask(in_session) == "HTTP 429"


def test_a_wrong_fault_is_one_line_with_the_nearest_kind(url):
    wrong = fakehop_here("fault", "rate_limt", url=url)
    assert wrong.returncode == 1 and wrong.stdout == ""
    [line] = wrong.stderr.splitlines()
    assert "unknown fault kind 'rate_limt'; did you mean 'rate_limit'?" in line
    assert fakehop_here("fault", url=url).returncode == 2
    assert fakehop_here("fault", "rate_limit", "--list", url=url).returncode == 2


@pytest.mark.parametrize("option", ["list", "clear"])
def test_an_option_given_as_a_kind_points_to_the_option(url, option):
    fakehop_here("fault", "rate_limit", url=url)
    wrong = fakehop_here("fault", option, url=url)
    assert wrong.returncode == 2 and wrong.stdout == ""
    assert f"did you mean `fakehop fault --{option}`?" in wrong.stderr
    assert fakehop_here("fault", "--list", url=url).stdout.count("rate_limit") == 1  # nothing added, nothing cleared


def test_the_client_s_exception_carries_the_retry_after(url):
    fakehop_here("fault", "rate_limit", "--retry-after", "3", url=url)
    try:
        app(url).chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}])
    except openai.RateLimitError as error:
        assert error.response.headers["retry-after"] == "3"
    else:
        raise AssertionError("no RateLimitError")


def test_a_stream_breaking_fault_takes_its_own_options(url):
    added = fakehop_here("fault", "truncate", "--after", "2", url=url)
    assert added.returncode == 0 and " truncate after=2 " in added.stdout
    words = []
    stream = app(url).chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], stream=True)
    with pytest.raises(openai.APIConnectionError):
        for chunk in stream:
            words.append(chunk.choices[0].delta.content if chunk.choices else None)
    assert [word for word in words if word] == ["Hello!", " How"]
    fakehop_here("fault", "stall", "--after", "1", "--timeout", "30s", "--then", "continue", url=url)
    fakehop_here("fault", "interrupt", "--error", "overloaded", "--message", "busy", "--protocol", "messages", url=url)
    fakehop_here("fault", "malformed", "--raw", "data: {x\\n\\n", url=url)
    fakehop_here("fault", "latency", "--first", "250ms", "--between", "0.5", "--times", "0", url=url)
    listed = [line.split(" ", 1)[1] for line in fakehop_here("fault", "--list", url=url).stdout.splitlines()]
    assert listed == [
        "stall after=1 then=continue timeout=30.0 times=1 probability=1.0 seed=0 (1 left)",
        "interrupt after=1 error=overloaded message=busy times=1 protocol=messages probability=1.0 seed=0 (1 left)",
        'malformed after=1 raw="data: {x\\n\\n" times=1 probability=1.0 seed=0 (1 left)',
        "latency first=0.25 between=0.5 times=0 probability=1.0 seed=0 (until cleared)",
    ]


def test_a_wrong_option_of_the_new_kinds_is_one_line(url):
    for args in (["--then", "later"], ["--timeout", "soon"], ["--error", "oops"]):
        wrong = fakehop_here("fault", "stall", *args, url=url)
        assert wrong.returncode == 2 and args[0] in wrong.stderr.splitlines()[-1]
    refused = fakehop_here("fault", "truncate", "--then", "error", url=url)
    assert refused.returncode == 1
    [line] = refused.stderr.splitlines()
    assert "truncate: unknown parameter 'then'" in line
    assert fakehop_here("fault", "--list", url=url).stdout == ""
