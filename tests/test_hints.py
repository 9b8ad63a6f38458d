"""Hints where a user is stuck: the scenario a misspelt name meant, wherever a name is given; the
base URL a 404 was meant for; where a scenario's YAML broke, and the tab that broke it; a port
in use. On the wire in the protocol's own error shape (read by the official SDKs), on the
control API in its JSON, on the command line as one line.

The commands run main() in this process (tests/cli_runs.py), but for a port in use: `serve`
and `record` there run as processes of their own, which bind the port as a user's would."""

from __future__ import annotations

import socket
import sys
import traceback
from pathlib import Path

import aiohttp
import anthropic
import openai
import pytest

from fakehop.cli.main import main
from fakehop.scenario.hints import HINT_WORK, did_you_mean, nearest_in_length
from fakehop.scenario.library import LISTED_NAMES, Library, UnknownScenario
from fakehop.server.gateway import Gateway
from fakehop.testing.remote import ControlClient, ControlFailed
from fakehop.testing.thread_server import ThreadServer

from . import clients
from .cli_runs import fakehop_here, fakehop_process
from .conftest import FAST

QUESTION = [{"role": "user", "content": "Hi"}]
NEAR_STALL = "Unknown scenario 'stal'; did you mean 'stall'? Known scenarios: agent-two-tools, "
TAB = "not valid YAML at column {}: a tab, which YAML does not take for indentation: indent with spaces"
TABBED = "description: indented with a tab\nsteps:\n  - text: hi\n\tchunk: word\n"  # line 4, column 1
TABBED_INSIDE = "steps:\n  - text: hi\n    \tchunk: word\n"  # line 3, column 5


def one_line(stream: str) -> str:
    """What a command printed on stderr: exactly one line, and no traceback."""
    assert stream.count("\n") == 1 and "Traceback" not in stream, stream
    return stream.rstrip("\n")


@pytest.fixture(scope="module")
def running():
    """A real server on its own thread, for the commands and SDK clients of a test to reach."""
    with ThreadServer(Gateway(Library.load(), time_scale=FAST)) as server:
        yield server


# ---------------------------------------------------------------- did you mean: on the wire


async def test_a_misspelt_scenario_header_is_a_400_that_the_openai_sdk_raises_with_the_hint(openai_client):
    with pytest.raises(openai.BadRequestError) as chat:
        await openai_client.chat.completions.create(
            model="m", messages=QUESTION, extra_headers={"X-Fakehop-Scenario": "stal"}
        )
    assert chat.value.body["message"].startswith(NEAR_STALL)
    assert chat.value.body["param"] == "X-Fakehop-Scenario"
    with pytest.raises(openai.BadRequestError) as responses:
        await openai_client.responses.create(model="m", input="Hi", extra_headers={"X-Fakehop-Scenario": "helo"})
    assert "Unknown scenario 'helo'; did you mean 'hello'?" in str(responses.value)


async def test_a_misspelt_scenario_header_is_an_anthropic_error_with_the_hint(anthropic_client):
    with pytest.raises(anthropic.BadRequestError) as caught:
        await anthropic_client.messages.create(
            model="m", max_tokens=10, messages=QUESTION, extra_headers={"X-Fakehop-Scenario": "fail-overload"}
        )
    assert caught.value.body["type"] == "error"
    assert caught.value.body["error"]["message"].startswith(
        "Unknown scenario 'fail-overload'; did you mean 'fail-overloaded'? "
    )


async def test_a_name_near_none_lists_the_known_ones_without_a_guess(openai_client):
    with pytest.raises(openai.BadRequestError) as caught:
        await openai_client.chat.completions.create(
            model="m", messages=QUESTION, extra_headers={"X-Fakehop-Scenario": "zzzz"}
        )
    assert caught.value.body["message"].startswith("Unknown scenario 'zzzz'. Known scenarios: agent-two-tools, ")
    assert "did you mean" not in caught.value.body["message"]


# ---------------------------------------------------------------- did you mean: the control API


async def control(base_url: str, method: str, path: str, **kwargs) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as session:
        async with session.request(method, f"{base_url}/_fakehop{path}", **kwargs) as response:
            return response.status, await response.json()


async def test_queue_default_and_a_scenario_by_name_take_the_hint(base_url, library):
    status, queued = await control(base_url, "POST", "/queue", json={"scenario": "stal"})
    assert (status, queued["known"]) == (400, library.names())
    assert queued["error"].startswith(NEAR_STALL)
    status, default = await control(base_url, "PUT", "/default", json={"scenario": "helo"})
    assert status == 400 and default["error"].startswith("Unknown scenario 'helo'; did you mean 'hello'? ")
    status, one = await control(base_url, "GET", "/scenarios/slow-typin")
    assert status == 404 and one["error"].startswith("Unknown scenario 'slow-typin'; did you mean 'slow-typing'? ")


async def test_a_session_is_offered_the_scenarios_added_to_it(base_url):
    added = "name: checkout-fault\nsteps: [{text: broken}]\n"
    status, _ = await control(
        base_url, "POST", "/scenarios?session=shop", data=added, headers={"Content-Type": "application/yaml"}
    )
    assert status == 201
    status, in_shop = await control(base_url, "POST", "/queue?session=shop", json={"scenario": "checkout-falt"})
    assert status == 400 and in_shop["error"].startswith(
        "Unknown scenario 'checkout-falt'; did you mean 'checkout-fault'? "
    )
    status, elsewhere = await control(base_url, "POST", "/queue?session=other", json={"scenario": "checkout-falt"})
    assert status == 400 and "did you mean" not in elsewhere["error"]


async def test_a_use_that_misses_in_a_scenario_sent_to_a_session_takes_the_hint(base_url):
    sequence = "name: retry-then-ok\nsequence:\n  - http_error: {status: 500}\n  - use: helo\n"
    status, added = await control(
        base_url, "POST", "/scenarios?session=s1", data=sequence, headers={"Content-Type": "application/yaml"}
    )
    assert status == 400
    assert added["problems"] == ["<POST /_fakehop/scenarios>:4: use: no scenario named 'helo'; did you mean 'hello'?"]
    status, checked = await control(
        base_url,
        "POST",
        "/scenarios?session=s1&check=true",
        data=sequence,
        headers={"Content-Type": "application/yaml"},
    )
    assert checked["problems"] == [{"line": 4, "message": "use: no scenario named 'helo'; did you mean 'hello'?"}]


# ---------------------------------------------------------------- did you mean: the command line


def test_the_control_commands_say_the_hint_in_one_line(running, capsys):
    assert main(["queue", "stal", "--url", running.url]) != 0
    assert one_line(capsys.readouterr().err).startswith("fakehop: HTTP 400: " + NEAR_STALL)
    assert main(["default", "helo", "--url", running.url]) != 0
    assert one_line(capsys.readouterr().err).startswith(
        "fakehop: HTTP 400: Unknown scenario 'helo'; did you mean 'hello'? "
    )


def test_a_control_call_under_the_openai_base_url_says_the_control_api_is_at_the_root(running):
    with pytest.raises(ControlFailed) as refused:
        ControlClient(running.url + "/v1").call("GET", "/health")
    assert str(refused.value) == (
        f"HTTP 404: Unknown path /v1/_fakehop/health; one /v1 too many: the control API is at the server's root,"
        f" {running.url}/_fakehop/"
    )


def test_play_and_serve_say_the_hint_in_one_line():
    played = fakehop_here("play", "hello-world", "--no-wait")
    assert played.returncode != 0 and played.stdout == ""
    assert one_line(played.stderr).startswith("fakehop: Unknown scenario 'hello-world'; did you mean 'hello'? ")
    served = fakehop_here("serve", "--port", "0", "--default", "slow_typing")
    assert served.returncode != 0 and served.stdout == ""
    assert one_line(served.stderr).startswith(
        "fakehop: --default: Unknown scenario 'slow_typing'; did you mean 'slow-typing'? "
    )


def test_a_use_that_misses_in_a_file_is_a_load_time_problem_with_its_line(tmp_path: Path):
    (tmp_path / "base.yaml").write_text("name: checkout-fault\nsteps: [{text: broken}]\n")
    (tmp_path / "retry.yaml").write_text("sequence:\n  - http_error: {status: 500}\n  - use: checkout-falt\n")
    validated = fakehop_here("validate", str(tmp_path))
    assert validated.returncode == 1
    assert (
        f"{tmp_path / 'retry.yaml'}:3: use: no scenario named 'checkout-falt'; did you mean 'checkout-fault'?\n"
        in validated.stderr
    )
    (tmp_path / "conversation.yaml").write_text("conversation:\n  - use: stal\n")
    served = fakehop_here("serve", "--port", "0", "--scenarios", str(tmp_path))
    assert served.returncode == 1
    assert (
        f"{tmp_path / 'conversation.yaml'}:2: use: no scenario named 'stal'; did you mean 'stall'?\n" in served.stderr
    )


# ---------------------------------------------------------------- a 404 says what the base URL should be


async def test_an_openai_base_url_without_v1_gets_a_404_saying_it_ends_in_v1(base_url):
    hint = f"; the OpenAI base URL ends in /v1: {base_url}/v1"
    async with clients.openai_async(base_url=base_url, api_key="sk-test", max_retries=0) as client:
        with pytest.raises(openai.NotFoundError) as chat:
            await client.chat.completions.create(model="m", messages=QUESTION, stream=True)
        with pytest.raises(openai.NotFoundError) as responses:
            await client.responses.create(model="m", input="Hi")
        with pytest.raises(openai.NotFoundError) as models:
            await client.models.list()
    assert chat.value.body["message"] == "Unknown path /chat/completions" + hint
    assert responses.value.body["message"] == "Unknown path /responses" + hint
    assert models.value.body["message"] == "Unknown path /models" + hint
    assert hint in str(chat.value) and chat.value.body["type"] == "invalid_request_error"


async def test_an_anthropic_base_url_with_v1_gets_a_404_saying_it_has_none(base_url):
    async with clients.anthropic_async(base_url=base_url + "/v1", api_key="sk-test", max_retries=0) as client:
        with pytest.raises(anthropic.NotFoundError) as caught:
            await client.messages.create(model="m", max_tokens=10, messages=QUESTION)
    assert caught.value.body["type"] == "error" and caught.value.body["error"]["type"] == "not_found_error"
    assert caught.value.body["error"]["message"] == (
        f"Unknown path /v1/v1/messages; one /v1 too many: Anthropic's base URL is the server's root, {base_url}, "
        "with no /v1 (the Anthropic SDK adds /v1/messages itself)"
    )
    assert "one /v1 too many" in str(caught.value)


async def test_an_openai_base_url_with_v1_twice_gets_a_404_saying_once(base_url):
    async with clients.openai_async(base_url=base_url + "/v1/v1", api_key="sk-test", max_retries=0) as client:
        with pytest.raises(openai.NotFoundError) as caught:
            await client.chat.completions.create(model="m", messages=QUESTION)
    assert (
        caught.value.body["message"]
        == f"Unknown path /v1/v1/chat/completions; one /v1 too many: the OpenAI base URL has it once, {base_url}/v1"
    )


async def test_messages_without_v1_and_other_paths(base_url, gateway):
    async with aiohttp.ClientSession() as session:
        async with session.post(base_url + "/messages", json={}) as response:
            messages = await response.json()
        async with session.post(base_url + "/v1/nothing", json={}) as response:
            nothing = await response.json()
    assert messages["error"]["message"] == (
        f"Unknown path /messages; Messages is served at /v1/messages: a client that adds /messages to its base URL needs one "
        f"ending in /v1, {base_url}/v1 (the Anthropic SDK adds /v1 itself: its base URL is the server's root, {base_url})"
    )
    assert nothing["error"]["message"] == "Unknown path /v1/nothing"
    journaled = [record.error for record in gateway.journal.since()]
    assert journaled == [messages["error"]["message"], "Unknown path /v1/nothing"]


# ---------------------------------------------------------------- YAML syntax: line, column and the tab


def test_validate_names_the_tab_with_its_line_and_column(tmp_path: Path):
    (tmp_path / "tabbed.yaml").write_text(TABBED)
    (tmp_path / "inside.yaml").write_text(TABBED_INSIDE)
    (tmp_path / "unclosed.yaml").write_text("steps:\n  - text: [unclosed\n")
    result = fakehop_here("validate", str(tmp_path))
    assert result.returncode == 1
    problems = result.stderr.splitlines()
    assert f"{tmp_path / 'tabbed.yaml'}:4: {TAB.format(1)}" in problems
    assert f"{tmp_path / 'inside.yaml'}:3: {TAB.format(5)}" in problems
    [unclosed] = [line for line in problems if "unclosed.yaml" in line]
    assert (
        unclosed.startswith(f"{tmp_path / 'unclosed.yaml'}:3: not valid YAML at column 1: ")
        and "a tab," not in unclosed
    )


def test_a_character_yaml_refuses_has_its_line_and_column(tmp_path: Path):
    path = tmp_path / "control.yaml"
    path.write_text("steps:\n  - text: a\x0cb\n")
    result = fakehop_here("validate", str(path))
    assert result.returncode == 1
    assert one_line(result.stderr.split("1 problem found")[0]).startswith(
        f"{path}:2: not valid YAML at column 12: character U+000C: "
    )


def test_serve_refuses_to_start_on_a_tab_naming_it(tmp_path: Path):
    (tmp_path / "tabbed.yaml").write_text(TABBED)
    result = fakehop_here("serve", "--port", "0", "--scenarios", str(tmp_path))
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.splitlines()[0] == f"{tmp_path / 'tabbed.yaml'}:4: {TAB.format(1)}"


async def test_the_control_api_names_the_tab_in_a_posted_scenario(base_url):
    yaml_type = {"Content-Type": "application/yaml"}
    status, added = await control(base_url, "POST", "/scenarios?name=tabbed", data=TABBED_INSIDE, headers=yaml_type)
    assert (status, added["problems"]) == (400, [f"<POST /_fakehop/scenarios>:3: {TAB.format(5)}"])
    status, checked = await control(
        base_url, "POST", "/scenarios?name=tabbed&check=true", data=TABBED, headers=yaml_type
    )
    assert (status, checked["problems"]) == (200, [{"line": 4, "message": TAB.format(1)}])


# ---------------------------------------------------------------- a port in use


@pytest.fixture
def taken_port():
    """A port that a socket of this process listens on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


@pytest.mark.parametrize("command", [["serve"], ["record", "--upstream", "http://127.0.0.1:9", "--out", "recorded"]])
def test_a_port_in_use_is_one_line_suggesting_port_0(taken_port, command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = fakehop_process(*command, "--port", str(taken_port))
    assert result.returncode == 2 and result.stdout == ""
    assert one_line(result.stderr) == (
        f"fakehop: port {taken_port} on 127.0.0.1 is already in use: give another --port, "
        "or --port 0 for a free one (the URL is printed once it listens)"
    )


def test_a_thread_server_on_a_port_in_use_raises_without_the_threads_frames(taken_port):
    server = ThreadServer(Gateway(Library.load()), port=taken_port)
    with pytest.raises(OSError, match="address already in use") as caught:
        server.start()
    frames = [(frame.filename, frame.name) for frame in traceback.extract_tb(caught.value.__traceback__)]
    assert frames == [
        (__file__, "test_a_thread_server_on_a_port_in_use_raises_without_the_threads_frames"),
        (sys.modules[ThreadServer.__module__].__file__, "start"),
    ]  # none of the server's thread
    assert server.url is None


MANY_LONG_NAMES = [
    f"{number:04d}-" + "x" * 123 for number in range(10_000)
]  # as many added scenarios as a server keeps, of the longest names


def test_the_hint_among_many_long_names_compares_only_those_nearest_in_length():
    compared = nearest_in_length("x" * 128, MANY_LONG_NAMES)
    assert len(compared) == HINT_WORK // (128 * 128)
    assert did_you_mean("checkout-falt", [*MANY_LONG_NAMES, "checkout-fault"]) == "; did you mean 'checkout-fault'?"
    assert did_you_mean("0001-" + "x" * 122 + "y", MANY_LONG_NAMES[:10]) == f"; did you mean {MANY_LONG_NAMES[1]!r}?"


def test_an_unknown_name_among_many_lists_the_first_hundred_and_how_many_more():
    message = str(UnknownScenario("nope", MANY_LONG_NAMES))
    assert message.count(", ") == LISTED_NAMES - 1
    assert message.endswith(
        f"{MANY_LONG_NAMES[LISTED_NAMES - 1]} and 9,900 more (`fakehop list --url URL` lists them all)"
    )
