"""`@pytest.mark.fakehop_sweep`: one test run once per fault, through throwaway projects run
with plain pytest in a subprocess, as users run them; the app under test builds its own clients."""

from __future__ import annotations

import pytest

from .test_pytest_plugin import INI

pytest_plugins = ["pytester"]

# The contract's kinds, in its table's order: the default sweep runs each.
CONTRACT_KINDS = (
    "rate_limit",
    "server_error",
    "http_error",
    "interrupt",
    "truncate",
    "stall",
    "hang",
    "malformed",
    "latency",
)

APP = """
import time

import anthropic
import openai

HELLO = "Hello! How can I help you today?"


def ask(question, wait=True):
    \"\"\"The app: retries a rate limit three times (waiting as Retry-After says, when `wait`), gives
    up at once on any other error; None when it got no answer.\"\"\"
    client = openai.OpenAI(max_retries=0, timeout=10)
    for _ in range(3):
        try:
            completion = client.chat.completions.create(
                model="gpt-5.6-sol", messages=[{"role": "user", "content": question}]
            )
            return completion.choices[0].message.content
        except openai.RateLimitError as error:
            if wait:
                time.sleep(float(error.response.headers["retry-after"]))
        except openai.APIStatusError:
            return None
    return None


def ask_claude(question):
    client = anthropic.Anthropic(max_retries=0, timeout=10)
    try:
        message = client.messages.create(
            model="claude-sonnet-4-5", max_tokens=100, messages=[{"role": "user", "content": question}]
        )
    except anthropic.APIStatusError as error:
        return error.status_code
    return message.content[0].text
"""

SURVIVING = """
import pytest

from app import HELLO, ask

SWEPT = [{"kind": "rate_limit", "times": 2, "retry_after": 0.2}, "server_error", {"kind": "http_error", "status": 403}]


@pytest.mark.fakehop_sweep(faults=SWEPT)
def test_the_app_survives(fakehop_env, fakehop_sweep_fault):
    answer = ask("Hi")
    requests = fakehop_env.requests
    kind = fakehop_sweep_fault["kind"]
    if kind == "rate_limit":  # its own times=2: two refusals, then the answer
        assert answer == HELLO
        assert [(r.status, r.faults) for r in requests] == [(429, ["rate_limit"]), (429, ["rate_limit"]), (200, [])]
    else:
        assert answer is None
        [request] = requests
        status = {"server_error": 500, "http_error": 403}[kind]
        assert (request.status, request.end, request.faults) == (status, "http_error", [kind])


@pytest.mark.fakehop_sweep(faults=["server_error"])
def test_the_fault_lasts_the_whole_test(fakehop_env):
    assert [ask("Hi") for _ in range(3)] == [None, None, None]
    assert [r.faults for r in fakehop_env.requests] == [["server_error"]] * 3
    [fault] = fakehop_env.faults
    assert (fault.kind, fault.left, fault.settings["times"]) == ("server_error", None, 0)


def test_a_test_without_the_marker_gets_no_fault(fakehop_env, fakehop_sweep_fault):
    assert fakehop_sweep_fault is None and fakehop_env.faults == []
    assert ask("Hi") == HELLO
"""

HASTY = """
import pytest

from app import HELLO, ask


@pytest.mark.fakehop_sweep(faults=[{"kind": "rate_limit", "times": 2}, "server_error", "http_error"])
def test_the_app_without_waits(fakehop_env):
    assert ask("Hi", wait=False) in (HELLO, None)
"""

NARROWED = """
import pytest

from app import HELLO, ask, ask_claude


@pytest.mark.fakehop_sweep(faults=["server_error", {"kind": "http_error", "status": 404, "protocol": "chat"}], protocol="messages")
def test_only_the_messages_protocol_breaks(fakehop_env, fakehop_sweep_fault):
    chat, claude = ask("Hi"), ask_claude("Hi")
    if fakehop_sweep_fault["kind"] == "server_error":  # the sweep's protocol
        assert (chat, claude) == (HELLO, 500)
    else:  # the mapping's own protocol wins
        assert (chat, claude) == (None, HELLO)
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini(INI)
    pytester.makepyfile(app=APP)
    return pytester


def collected(result: pytest.RunResult) -> list[str]:
    return [line for line in result.outlines if "::" in line and not line.startswith(("ERROR", "FAILED"))]


def test_without_arguments_a_sweep_runs_every_kind_of_the_contract(project):
    project.makepyfile(
        test_answer="import pytest\n\n\n@pytest.mark.fakehop_sweep\ndef test_answer(fakehop):\n    pass\n"
    )
    result = project.runpytest_subprocess("--collect-only", "-q")
    assert collected(result) == [f"test_answer.py::test_answer[fault-{kind}]" for kind in CONTRACT_KINDS]


def test_two_faults_of_one_kind_are_numbered_and_other_parameters_join_them(project):
    project.makepyfile(
        test_ids="""
import pytest

TRUNCATES = ["truncate", {"kind": "truncate", "after": 5}, {"kind": "truncate", "after": 9}]


@pytest.mark.fakehop_sweep(faults=TRUNCATES)
def test_answer(fakehop):
    pass


@pytest.mark.fakehop_sweep(faults=["rate_limit"])
@pytest.mark.parametrize("model", ["small", "large"])
def test_models(fakehop, model):
    pass
"""
    )
    result = project.runpytest_subprocess("--collect-only", "-q")
    assert collected(result) == [
        "test_ids.py::test_answer[fault-truncate]",
        "test_ids.py::test_answer[fault-truncate-2]",
        "test_ids.py::test_answer[fault-truncate-3]",
        "test_ids.py::test_models[fault-rate_limit-small]",
        "test_ids.py::test_models[fault-rate_limit-large]",
    ]


def test_an_app_that_retries_survives_each_served_kind(project):
    project.makepyfile(test_surviving=SURVIVING)
    result = project.runpytest_subprocess("-v", "--strict-markers", "--fakehop-verdicts", "error")
    result.assert_outcomes(passed=5)
    passed = [line.split(" PASSED")[0] for line in result.outlines if " PASSED" in line]
    assert passed == [f"test_surviving.py::test_the_app_survives[fault-{kind}]" for kind in CONTRACT_KINDS[:3]] + [
        "test_surviving.py::test_the_fault_lasts_the_whole_test[fault-server_error]",
        "test_surviving.py::test_a_test_without_the_marker_gets_no_fault",
    ]


def test_the_runs_verdicts_judge_the_app_under_each_fault(project):
    """Retrying a rate limit without waiting breaks HopBase's rules: that run fails at teardown, naming the rule."""
    project.makepyfile(test_hasty=HASTY)
    result = project.runpytest_subprocess("--fakehop-verdicts", "error")
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_the_app_without_waits[[]fault-rate_limit[]]*"])
    result.stdout.fnmatch_lines(["*fakehop verdict: * finding*", "*error*retry_after_ignored*"])
    assert "Traceback" not in result.stdout.str()


def test_protocol_narrows_the_faults_unless_one_names_its_own(project):
    project.makepyfile(test_narrowed=NARROWED)
    project.runpytest_subprocess().assert_outcomes(passed=2)


BAD_MARKERS = {
    "positional": ('("truncate")', ": takes keywords only (faults, protocol), got ('truncate',)"),
    "unknown_option": ('(fault=["truncate"])', ": unknown option 'fault'; did you mean 'faults'?"),
    "text": ('(faults="truncate")', "(faults=...): expected a list of kind names or mappings, got 'truncate'"),
    "empty": ("(faults=[])", "(faults=...): the list is empty"),
    "unknown_kind": ('(faults=["truncat"])', "(faults=...): unknown fault kind 'truncat'; did you mean 'truncate'?"),
    "no_kind": ('(faults=[{"after": 3}])', "(faults=...): each is a kind name or a mapping with a 'kind'"),
    "bad_parameter": (
        '(faults=[{"kind": "rate_limit", "retry_afer": 1}])',
        "(faults=...): rate_limit: unknown parameter 'retry_afer'; did you mean 'retry_after'?",
    ),
    "bad_value": (
        '(faults=[{"kind": "server_error", "status": 404}])',
        "(faults=...): status: a server_error is one of",
    ),
    "protocol": ('(protocol="chatt")', "(protocol=...): unknown protocol 'chatt'; did you mean 'chat'?"),
}


def test_bad_marker_arguments_are_collection_errors_naming_the_test(project):
    for name, (arguments, _) in BAD_MARKERS.items():
        project.makepyfile(
            **{
                f"test_{name}": f"import pytest\n\n\n@pytest.mark.fakehop_sweep{arguments}\ndef test_it(fakehop):\n    pass\n"
            }
        )
    project.makepyfile(test_no_fixture="import pytest\n\n\n@pytest.mark.fakehop_sweep\ndef test_it():\n    pass\n")
    result = project.runpytest_subprocess("--collect-only")
    output = result.stdout.str()
    assert result.ret == pytest.ExitCode.INTERRUPTED and f"{len(BAD_MARKERS) + 1} errors" in output
    for name, (_, message) in BAD_MARKERS.items():
        assert f"test_{name}.py::test_it: @pytest.mark.fakehop_sweep{message}" in output, name
    assert "test_no_fixture.py::test_it: @pytest.mark.fakehop_sweep: the test uses no fakehop fixture" in output
    assert "Traceback" not in output and "INTERNALERROR" not in output + result.stderr.str()


EVERY_KIND = """
import openai
import pytest


@pytest.mark.fakehop_sweep
def test_each_kind_reaches_the_apps_stream(fakehop_env, fakehop_sweep_fault):
    client = openai.OpenAI(max_retries=0, timeout=3)
    try:
        stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], stream=True)
        words = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    except (openai.APIError, ValueError) as error:  # a malformed frame is the SDK's JSON error
        words = type(error).__name__
    kind = fakehop_sweep_fault["kind"]
    [request] = fakehop_env.requests
    assert request.faults == [kind]
    print(f"\\nSWEPT {kind} {words!r} {request.end}")
"""


def test_the_default_sweep_lays_each_kind_over_the_apps_stream(project):
    project.makepyfile(test_every=EVERY_KIND)
    result = project.runpytest_subprocess("-s", "-o", "fakehop_time_scale=0.05", "--fakehop-verdicts", "off")
    result.assert_outcomes(passed=len(CONTRACT_KINDS))
    ends = dict(line.split(" ", 2)[1:] for line in result.outlines if line.startswith("SWEPT "))
    assert list(ends) == list(CONTRACT_KINDS)
    assert ends["rate_limit"] == "'RateLimitError' http_error"
    assert ends["server_error"] == "'InternalServerError' http_error"
    assert ends["truncate"].endswith("disconnected")
    assert ends["hang"].startswith("'APITimeoutError'")
    assert ends["malformed"].startswith("'JSONDecodeError'")
    assert ends["latency"] == "'Hello! How can I help you today?' completed"
