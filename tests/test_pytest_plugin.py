"""The installed pytest plugin, run the way users run it: real throwaway test files under pytester.

Each throwaway test asserts real behaviour through the official SDKs against the plugin's
server; the outer test checks that they all ran and passed (or failed with the right words).
"""

from __future__ import annotations

import json

import openai  # noqa: F401 - imported once here, not again by every in-process run
import pytest

pytest_plugins = ["pytester"]

# The plugins the throwaway projects do not use are left out: loading them is most of a run's time.
INI = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
addopts = -p no:cacheprovider -p no:hypothesispytest -p no:faker -p no:anyio
"""

HELPERS = """
import openai
import pytest

MESSAGES = [{"role": "user", "content": "Hello"}]


def chat_text(client):
    stream = client.chat.completions.create(model="gpt-5.6-sol", messages=MESSAGES, stream=True)
    return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)


def openai_client(fakehop):
    return fakehop.openai_client(max_retries=0, timeout=10)
"""

SDK_TESTS = (
    HELPERS
    + """

def test_sync_openai_client_gets_the_default_scenario(fakehop):
    assert chat_text(openai_client(fakehop)) == "Hello! How can I help you today?"
    [request] = fakehop.requests
    assert (request.method, request.path, request.protocol) == ("POST", "/v1/chat/completions", "chat")
    assert (request.scenario, request.status, request.end) == ("hello", 200, "completed")
    assert request.body["messages"] == MESSAGES and request.stream is True
    assert request.headers["authorization"] == f"Bearer {fakehop.api_key}"  # the test's own session's key
    assert fakehop.api_key == "sk-fakehop-" + fakehop.session and request.session == fakehop.session
    assert request.started_at > 0 and request.duration >= 0


async def test_async_openai_client(fakehop):
    async with fakehop.async_openai_client(max_retries=0, timeout=10) as client:
        stream = await client.chat.completions.create(model="gpt-5.6-sol", messages=MESSAGES, stream=True)
        text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])
    assert text == "Hello! How can I help you today?"
    assert [r.scenario for r in await fakehop.async_wait_for_requests()] == ["hello"]


@pytest.mark.fakehop(scenario="fail-rate-limit", time_scale=0.25)
def test_the_marker_sets_scenario_and_time_scale(fakehop):
    assert fakehop.time_scale == 0.25
    with pytest.raises(openai.APIError, match="Rate limit"):
        chat_text(openai_client(fakehop))
    [request] = fakehop.requests
    assert (request.scenario, request.end) == ("fail-rate-limit", "failed")
    fakehop.queue({"name": "left-over", "steps": [{"text": "left over"}]})


def test_the_next_test_starts_from_a_reset_server(fakehop):
    assert fakehop.requests == []
    assert fakehop.time_scale == 1.0
    with pytest.raises(LookupError, match="left-over"):
        fakehop.use("left-over")
    assert chat_text(openai_client(fakehop)) == "Hello! How can I help you today?"


def test_queued_scenarios_answer_in_order_then_the_default(fakehop):
    fakehop.use({"steps": [{"text": "the default"}]})
    fakehop.queue({"steps": [{"text": "first"}]}, "rate-limited", {"steps": [{"text": "third"}]})
    client = openai_client(fakehop)
    assert chat_text(client) == "first"
    with pytest.raises(openai.RateLimitError):
        chat_text(client)
    assert chat_text(client) == "third"
    assert chat_text(client) == "the default"
    scenarios = [r.scenario for r in fakehop.requests]
    assert scenarios == ["inline-2", "rate-limited", "inline-3", "inline-1"]
    assert [r.end for r in fakehop.requests] == ["completed", "http_error", "completed", "completed"]


def test_use_takes_an_inline_mapping(fakehop):
    name = fakehop.use({"name": "shout", "steps": [{"text": "HELLO THERE", "chunk": "word"}]})
    assert name == "shout"
    assert chat_text(openai_client(fakehop)) == "HELLO THERE"
    assert fakehop.requests[0].scenario == "shout"


@pytest.mark.fakehop(scenario="hang")
def test_the_journal_sees_a_client_hang_up_mid_stream(fakehop):
    stream = openai_client(fakehop).chat.completions.create(model="gpt-5.6-sol", messages=MESSAGES, stream=True)
    chunks = iter(stream)
    read = [next(chunks), next(chunks)]
    stream.close()
    assert read[1].choices[0].delta.content == "Here"
    [request] = fakehop.wait_for_requests()
    assert (request.scenario, request.end, request.status) == ("hang", "client_disconnected", 200)
    assert request.events == 6  # the role chunk and five words, all sent before the hang


def test_sync_anthropic_client(fakehop):
    client = fakehop.anthropic_client(max_retries=0, timeout=10)
    with client.messages.stream(model="claude-sonnet-5", max_tokens=100, messages=MESSAGES) as stream:
        text = "".join(stream.text_stream)
    assert text == "Hello! How can I help you today?"
    [request] = fakehop.requests
    assert (request.path, request.protocol, request.scenario, request.end) == ("/v1/messages", "messages", "hello", "completed")
    assert "anthropic-version" in request.headers and "sk-fakehop" in request.headers["authorization"]


@pytest.mark.fakehop(scenario="fail-overloaded")
async def test_async_anthropic_client(fakehop):
    import anthropic

    async with fakehop.async_anthropic_client(max_retries=0, timeout=10) as client:
        with pytest.raises(anthropic.APIStatusError, match="Overloaded"):
            await client.messages.create(model="claude-sonnet-5", max_tokens=100, messages=MESSAGES)
    [request] = fakehop.requests
    assert (request.protocol, request.status, request.end) == ("messages", 529, "failed")


@pytest.mark.fakehop(scenario="hang")
def test_the_journal_sees_an_anthropic_client_hang_up(fakehop):
    client = fakehop.anthropic_client(max_retries=0, timeout=10)
    stream = client.messages.create(model="claude-sonnet-5", max_tokens=100, messages=MESSAGES, stream=True)
    events = iter(stream)
    assert [next(events).type, next(events).type] == ["message_start", "content_block_start"]
    stream.close()
    [request] = fakehop.wait_for_requests()
    assert (request.protocol, request.end) == ("messages", "client_disconnected")
    assert request.events == 8  # message_start, content_block_start, ping and five words


def test_a_request_to_a_wrong_path_shows_in_requests(fakehop):
    client = fakehop.openai_client(base_url=fakehop.url, max_retries=0, timeout=10)
    with pytest.raises(openai.NotFoundError):
        chat_text(client)
    [request] = fakehop.requests
    assert (request.path, request.protocol, request.status, request.end) == ("/chat/completions", None, 404, "rejected")
    assert "Unknown path /chat/completions" in request.error
"""
)


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini(INI)
    return pytester


def test_sdk_clients_marker_queue_and_journal(project):
    project.makepyfile(test_sdk=SDK_TESTS)
    result = project.runpytest("--strict-markers", "-W", "error::DeprecationWarning")
    result.assert_outcomes(passed=11)


FAILING_TESTS = """
import pytest


@pytest.mark.fakehop(scenario="nope")
def test_marker_with_an_unknown_scenario(fakehop):
    pass


def test_use_with_an_unknown_scenario(fakehop):
    fakehop.use("nope")


def test_queue_with_an_unknown_scenario(fakehop):
    fakehop.queue("hello", "nope")


def test_a_failed_queue_call_queues_nothing(fakehop):
    with pytest.raises(LookupError):
        fakehop.queue({"steps": [{"text": "queued"}]}, "nope")
    client = fakehop.openai_client(max_retries=0, timeout=10)
    answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert answer.choices[0].message.content == "Hello! How can I help you today?"


def test_inline_scenario_with_a_mistake(fakehop):
    fakehop.use({"stepz": [{"text": "hi"}]})


@pytest.mark.fakehop(time_scale=0)
def test_marker_with_a_bad_time_scale(fakehop):
    pass


@pytest.mark.fakehop(scenaro="hello")
def test_marker_with_a_misspelt_option(fakehop):
    pass


def test_a_failing_test_shows_what_fakehop_saw(fakehop):
    fakehop.queue("rate-limited")
    client = fakehop.openai_client(max_retries=0, timeout=10)
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
"""


def test_mistakes_fail_the_test_at_once_and_say_why(project):
    project.makepyfile(test_failing=FAILING_TESTS)
    result = project.runpytest()
    result.assert_outcomes(passed=1, failed=4, errors=3)
    output = result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*- fakehop requests -*",
            "#* POST /v1/chat/completions scenario=rate-limited: http_error 429: Rate limit reached for requests",
        ]
    )
    unknown = [line for line in result.outlines if "Unknown scenario 'nope'. Known scenarios: " in line]
    assert len(unknown) >= 3 and all("hang, hello" in line for line in unknown)
    assert "@pytest.mark.fakehop(scenario=...): Unknown scenario 'nope'" in output
    assert "unknown key 'stepz' in the scenario; did you mean 'steps'?" in output
    assert "@pytest.mark.fakehop(time_scale=...): expected a number more than 0, got 0" in output
    assert "@pytest.mark.fakehop: unknown option scenaro; it takes scenario, time_scale" in output


OPTION_TEST = """
import json


def test_report_settings(fakehop):
    fakehop.use("greet")
    client = fakehop.openai_client(max_retries=0, timeout=10)
    answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    print("SETTINGS " + json.dumps({"text": answer.choices[0].message.content, "time_scale": fakehop.time_scale}))
"""


def greeting(text: str) -> str:
    return f"steps:\n  - text: {json.dumps(text)}\n"


def reported_settings(result) -> dict:
    [line] = [line for line in result.outlines if "SETTINGS " in line]
    return json.loads(line.split("SETTINGS ", 1)[1])


def test_ini_and_command_line_options(project, monkeypatch):
    """Ini directories are relative to the rootdir, command-line ones to where pytest runs; the command line wins."""
    project.makeini(INI + "fakehop_scenarios = scenarios\nfakehop_time_scale = 0.5\n")
    project.mkdir("scenarios").joinpath("greet.yaml").write_text(greeting("from the ini directory"))
    tests = project.mkdir("tests")
    tests.joinpath("test_options.py").write_text(OPTION_TEST)
    tests.joinpath("mine").mkdir()
    tests.joinpath("mine", "greet.yaml").write_text(greeting("from the command line directory"))
    monkeypatch.chdir(tests)

    from_ini = project.runpytest("-s")
    from_ini.assert_outcomes(passed=1)
    assert reported_settings(from_ini) == {"text": "from the ini directory", "time_scale": 0.5}

    from_command_line = project.runpytest("-s", "--fakehop-scenarios", "mine", "--fakehop-time-scale", "0.125")
    from_command_line.assert_outcomes(passed=1)
    assert reported_settings(from_command_line) == {"text": "from the command line directory", "time_scale": 0.125}


def test_a_bad_time_scale_option_is_a_usage_error(project):
    project.makepyfile(test_options=OPTION_TEST)
    result = project.runpytest("--fakehop-time-scale", "fast")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "fakehop time scale: expected a number more than 0, got 'fast'" in result.stderr.str()


def test_a_broken_scenario_directory_fails_the_tests_that_use_fakehop(project):
    project.makeini(INI + "fakehop_scenarios = scenarios\n")
    project.mkdir("scenarios").joinpath("broken.yaml").write_text("steps:\n  - txet: hi\n")
    project.makepyfile(test_options=OPTION_TEST + "\n\ndef test_without_fakehop():\n    pass\n")
    result = project.runpytest()
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*fakehop could not load its scenarios:*", "*broken.yaml:2: *txet*"])


XDIST_TESTS = """
import json
import os
import urllib.request

import pytest

BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()


@pytest.mark.parametrize("number", range(6))
def test_each_worker_has_its_own_server(fakehop, number):
    request = urllib.request.Request(fakehop.openai_base_url + "/chat/completions", BODY, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        answer = json.load(response)
    assert answer["choices"][0]["message"]["content"] == "Hello! How can I help you today?"
    assert len(fakehop.requests) == 1
    seen = {"worker": os.environ["PYTEST_XDIST_WORKER"], "url": fakehop.url}
    with open(os.environ["SEEN_FILE"], "a") as out:
        out.write(json.dumps(seen) + "\\n")
"""


def test_under_xdist_each_worker_runs_its_own_server(project, monkeypatch):
    seen_file = project.path / "seen.jsonl"
    monkeypatch.setenv("SEEN_FILE", str(seen_file))
    monkeypatch.setenv(
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1"
    )  # the workers import xdist and fakehop's plugin, not every one installed
    project.makepyfile(test_xdist=XDIST_TESTS)
    result = project.runpytest("-p", "xdist", "-p", "fakehop.testing.plugin", "-n", "2")
    result.assert_outcomes(passed=6)
    seen = [json.loads(line) for line in seen_file.read_text().splitlines()]
    urls_by_worker: dict[str, set] = {}
    for entry in seen:
        urls_by_worker.setdefault(entry["worker"], set()).add(entry["url"])
    assert sorted(urls_by_worker) == ["gw0", "gw1"]
    assert all(len(urls) == 1 for urls in urls_by_worker.values())
    assert urls_by_worker["gw0"] != urls_by_worker["gw1"]


CONVERSATION_TESTS = (
    HELPERS
    + """

def test_a_queued_sequence_plays_its_whole_run(fakehop):
    assert fakehop.queue("flaky-then-ok") == ["flaky-then-ok"]
    client = openai_client(fakehop)
    with pytest.raises(openai.RateLimitError):
        chat_text(client)
    with pytest.raises(openai.InternalServerError):
        chat_text(client)
    assert chat_text(client) == "Hello! How can I help you today?"
    assert [r.scenario for r in fakehop.requests] == ["flaky-then-ok[1]", "flaky-then-ok[2]", "flaky-then-ok[3]->hello"]


@pytest.mark.fakehop(scenario="agent-weather")
def test_a_tool_loop_and_its_turns_in_the_journal(fakehop):
    client = openai_client(fakehop)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    [call] = client.chat.completions.create(model="m", messages=messages, tools=tools).choices[0].message.tool_calls
    messages += [{"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                 {"role": "tool", "tool_call_id": call.id, "content": "Sunny"}]
    answer = client.chat.completions.create(model="m", messages=messages, tools=tools)
    assert answer.choices[0].message.content == "The weather in Paris: Sunny."
    assert [(r.turn, r.scenario) for r in fakehop.requests] == [(1, "agent-weather[1]"), (2, "agent-weather[2]")]
"""
)

UNANSWERED_TOOL_CALL = """
import urllib.error
import urllib.request
import json


def test_report_status(fakehop):
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "user", "content": "and?"}]
    body = json.dumps({"model": "m", "messages": messages}).encode()
    request = urllib.request.Request(fakehop.openai_base_url + "/chat/completions", body, {"Content-Type": "application/json"})
    try:
        status = urllib.request.urlopen(request, timeout=10).status
    except urllib.error.HTTPError as error:
        status = error.code
    print(f"STATUS {status}")
"""


def test_the_fixture_plays_conversations_and_queued_sequences(project):
    project.makepyfile(test_conversations=CONVERSATION_TESTS)
    project.runpytest().assert_outcomes(passed=2)


@pytest.mark.parametrize(
    "ini, options, status",
    [
        ("", [], 400),
        ("fakehop_lenient_conversations = true\n", [], 200),
        ("", ["--fakehop-lenient-conversations"], 200),
    ],
)
def test_lenient_conversations_from_the_ini_or_the_command_line(project, ini, options, status):
    project.makeini(INI + ini)
    project.makepyfile(test_lenient=UNANSWERED_TOOL_CALL)
    result = project.runpytest("-s", *options)
    result.assert_outcomes(passed=1)
    assert f"STATUS {status}" in result.stdout.str()
