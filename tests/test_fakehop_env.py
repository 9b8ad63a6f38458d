"""`fakehop_env`: the SDK clients an app builds itself, with no arguments, talk to the test's
session, through throwaway test projects run under pytester as users run them."""

from __future__ import annotations

import os

import pytest

from .test_control_cli import ServerProcess
from .test_pytest_plugin import INI

pytest_plugins = ["pytester"]

VARIABLES = ("OPENAI_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")
BEFORE = {"OPENAI_API_KEY": "sk-outer", "ANTHROPIC_BASE_URL": "https://outer.example", "ANTHROPIC_AUTH_TOKEN": "tok"}

APP = f"""
import os

import anthropic
import openai

VARIABLES = {VARIABLES!r}
BEFORE = {BEFORE!r}
HELLO = "Hello! How can I help you today?"


def app_chat():
    completion = openai.OpenAI().chat.completions.create(
        model="gpt-5.6-sol", messages=[{{"role": "user", "content": "Hi"}}]
    )
    return completion.choices[0].message.content


def app_message():
    message = anthropic.Anthropic().messages.create(
        model="claude-sonnet-4-5", max_tokens=100, messages=[{{"role": "user", "content": "Hi"}}]
    )
    return message.content[0].text


def app_variables():
    return {{name: os.environ[name] for name in VARIABLES if name in os.environ}}


def expected_variables(fakehop):
    return {{
        "OPENAI_BASE_URL": fakehop.url + "/v1",
        "OPENAI_API_KEY": fakehop.api_key,
        "ANTHROPIC_BASE_URL": fakehop.url,
        "ANTHROPIC_API_KEY": fakehop.api_key,
    }}
"""

APP_CLIENT_TESTS = (
    APP
    + """

def test_the_apps_own_clients_land_in_the_tests_session(fakehop_env, fakehop):
    assert fakehop_env is fakehop
    fakehop.queue({"steps": [{"text": "from the queue"}]})
    assert app_chat() == "from the queue"
    assert app_message() == HELLO
    chat, message = fakehop.requests
    assert (chat.path, chat.end, message.path, message.end) == ("/v1/chat/completions", "completed", "/v1/messages", "completed")
    assert chat.session == message.session == fakehop.session
    assert chat.headers["authorization"] == f"Bearer {fakehop.api_key}"
    sent_key = message.headers.get("x-api-key") or message.headers["authorization"].removeprefix("Bearer ")
    assert sent_key == fakehop.api_key  # the SDK's own way, by version; never the environment's auth token
    assert "tok" not in message.headers.get("authorization", "")
"""
)

RESTORE_TESTS = (
    APP
    + """

def test_1_fakehop_env_sets_the_variables(fakehop_env):
    assert app_variables() == expected_variables(fakehop_env)


def test_2_after_it_they_are_as_they_were():
    assert app_variables() == BEFORE


def test_3_fakehop_alone_leaves_them_alone(fakehop):
    assert app_variables() == BEFORE
"""
)

OPTION_TESTS = (
    APP
    + """

def test_1_fakehop_alone_gets_the_variables(fakehop):
    assert app_variables() == expected_variables(fakehop)
    assert app_chat() == HELLO
    [chat] = fakehop.requests
    assert chat.session == fakehop.session


def test_2_a_test_without_fakehop_does_not():
    assert app_variables() == BEFORE
"""
)


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A project whose environment has some of the variables set and the others unset."""
    pytester.makeini(INI)
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in BEFORE.items():
        monkeypatch.setenv(name, value)
    return pytester


def outer_variables() -> dict[str, str]:
    return {name: os.environ[name] for name in VARIABLES if name in os.environ}


def test_an_apps_own_clients_reach_the_tests_session(project):
    project.makepyfile(test_app=APP_CLIENT_TESTS)
    project.runpytest().assert_outcomes(passed=1)


def test_an_apps_own_clients_reach_the_tests_session_of_a_running_server(project):
    """A running server takes a request into a test's session only when the request names it."""
    server = ServerProcess("--time-scale", "1", "--quiet", "--journal-secrets")  # the test reads the keys sent
    try:
        project.makepyfile(test_app=APP_CLIENT_TESTS)
        project.runpytest("--fakehop-url", server.url).assert_outcomes(passed=1)
    finally:
        server.stop()


def test_the_variables_are_put_back_after_the_test(project):
    project.makepyfile(test_restore=RESTORE_TESTS)
    project.runpytest().assert_outcomes(passed=3)
    assert outer_variables() == BEFORE


@pytest.mark.parametrize(("ini", "options"), [("fakehop_env = true\n", ()), ("", ("--fakehop-env",))])
def test_the_ini_option_or_the_command_line_gives_every_fakehop_test_the_variables(project, ini, options):
    project.makeini(INI + ini)
    project.makepyfile(test_option=OPTION_TESTS)
    project.runpytest(*options).assert_outcomes(passed=2)
    assert outer_variables() == BEFORE


@pytest.mark.parametrize("option", ["fakehop_env", "fakehop_lenient_conversations"])
def test_an_ini_flag_that_is_not_true_or_false_is_a_usage_error(project, option):
    project.makeini(INI + f"{option} = maybe\n")
    project.makepyfile(test_option="def test_it(fakehop):\n    pass\n")
    result = project.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"ERROR: {option}: invalid truth value 'maybe', expected true or false" in result.stderr.lines
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
