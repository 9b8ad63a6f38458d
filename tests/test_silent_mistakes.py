"""Mistakes that used to pass unnoticed: steps after the stream has ended, a `use` that
`validate` and `serve` judged apart, a user file that takes a bundled scenario's name, and a
misspelled X-Fakehop-* header. Each is now said, through the parts a user meets: the
`fakehop` command, a real server on a real socket, the control API and the official SDKs."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import aiohttp
import anthropic
import openai
import pytest
from multidict import CIMultiDict, CIMultiDictProxy

from fakehop.cli.main import main
from fakehop.scenario.library import Library, bundled_directory
from fakehop.scenario.reader import ScenarioError
from fakehop.server.gateway import Gateway
from fakehop.server.intake import MAX_FINE_NAMES, unknown_fakehop_header
from fakehop.testing.remote import ControlClient
from fakehop.testing.thread_server import ThreadServer

MESSAGES = [{"role": "user", "content": "Hello"}]
KNOWN = "X-Fakehop-Fault, X-Fakehop-Scenario, X-Fakehop-Seed and X-Fakehop-Session"
HELLO = "Hello! How can I help you today?"

# ---------------------------------------------------------------- steps after an ending

ENDINGS = [  # (the step as written, as the problem names it)
    ("- fail: rate_limit", "a fail"),
    ("- fail: {kind: server_error, message: gone}", "a fail"),
    ("- disconnect", "a disconnect"),
    ("- hang", "a hang"),
    ("- stall", "a stall without continue"),
    ("- stall: true", "a stall without continue"),
]
DEAD = "steps:\n  - text: partial\n  {ending}\n  - text: never played\n  - keepalive\n"


def dead_steps_problem(source: str, ending: str) -> str:
    """The problem a DEAD scenario gets: at the first step after the ending (line 4), naming the ending's line (3)."""
    return (
        f"{source}:4: steps after {ending} never play: it ends the stream (line 3); remove them, or move them before it"
    )


@pytest.mark.parametrize("written,ending", ENDINGS)
def test_validate_finds_steps_after_an_ending_with_file_and_line(tmp_path: Path, capsys, written, ending):
    path = tmp_path / "dead.yaml"
    path.write_text(DEAD.format(ending=written))
    assert main(["validate", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[0].startswith(dead_steps_problem(str(path), ending))
    assert err.splitlines()[1:] == ["1 problem found"]


def test_a_stall_without_continue_is_told_how_to_go_on(tmp_path: Path, capsys):
    (tmp_path / "dead.yaml").write_text(DEAD.format(ending="- stall"))
    main(["validate", str(tmp_path)])
    assert "; or write stall: continue to go on after the stall" in capsys.readouterr().err


def test_steps_after_stall_continue_and_an_ending_that_ends_the_steps_are_fine(tmp_path: Path, capsys):
    (tmp_path / "goes-on.yaml").write_text(
        "steps:\n  - stall: continue\n  - raw: 'data: {}\\n\\n'\n  - text: after\n  - disconnect\n"
    )
    (tmp_path / "fails-last.yaml").write_text("steps: [{text: a}, {fail: overloaded}]\n")
    assert main(["validate", str(tmp_path)]) == 0
    assert capsys.readouterr().out == "ok: 2 scenarios\n"


def test_steps_after_an_ending_in_a_sequence_or_conversation_entry_are_found_at_their_line(tmp_path: Path, capsys):
    (tmp_path / "seq.yaml").write_text("sequence:\n  - steps: [{text: a}]\n  - steps:\n      - hang\n      - text: b\n")
    (tmp_path / "conv.yaml").write_text(
        "conversation:\n  - steps:\n      - disconnect\n      - text: c\n  - use: hello\n"
    )
    assert main(["validate", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert f"{tmp_path / 'seq.yaml'}:5: steps after a hang never play: it ends the stream (line 4)" in err
    assert f"{tmp_path / 'conv.yaml'}:4: steps after a disconnect never play: it ends the stream (line 3)" in err


def test_serve_refuses_to_start_on_steps_after_an_ending(tmp_path: Path, capsys):
    (tmp_path / "dead.yaml").write_text(DEAD.format(ending="- disconnect"))
    assert main(["serve", "--port", "0", "--scenarios", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert dead_steps_problem(str(tmp_path / "dead.yaml"), "a disconnect") in err
    assert err.splitlines()[-1] == "fakehop: 1 scenario problem; nothing was started"


async def test_the_control_api_refuses_steps_after_an_ending_and_adds_nothing(base_url):
    source = "<POST /_fakehop/scenarios>"
    text = DEAD.format(ending="- fail: rate_limit")
    async with aiohttp.ClientSession() as client:
        yaml_type = {"Content-Type": "application/yaml"}
        async with client.post(base_url + "/_fakehop/scenarios?name=dead", data=text, headers=yaml_type) as response:
            assert response.status == 400
            assert (await response.json())["problems"] == [dead_steps_problem(source, "a fail")]
        async with client.post(
            base_url + "/_fakehop/scenarios?name=dead&check=true", data=text, headers=yaml_type
        ) as response:
            checked = await response.json()
        assert checked["valid"] is False
        assert checked["problems"] == [{"line": 4, "message": dead_steps_problem(source, "a fail").split(":4: ")[1]}]
        inline = {"scenario": {"steps": [{"text": "partial"}, "hang", {"text": "never"}]}}
        for method, path in (("POST", "/_fakehop/queue"), ("PUT", "/_fakehop/default")):
            async with client.request(method, base_url + path, json=inline) as response:
                assert response.status == 400
                [problem] = (await response.json())["problems"]
                assert problem.endswith(
                    "steps after a hang never play: it ends the stream (line 0); remove them, or move them before it"
                )
        async with client.get(base_url + "/_fakehop/scenarios") as response:
            names = [scenario["name"] for scenario in (await response.json())["scenarios"]]
        assert names == Library.load().names()


def test_the_fixture_refuses_an_inline_scenario_with_steps_after_an_ending(fakehop):
    with pytest.raises(ScenarioError, match="steps after a fail never play"):
        fakehop.queue({"steps": [{"fail": "rate_limit"}, {"text": "never"}]})


def test_every_bundled_scenario_loads_under_the_rule():
    assert len(Library.load().names()) == len(list(bundled_directory().glob("*.yaml")))


# ---------------------------------------------------------------- validate judges `use` as serve does

BAD_USE = "sequence:\n  - http_error: {status: 500}\n  - use: helo\n"
BUNDLED_USE = "sequence:\n  - http_error: {status: 500}\n  - use: hello\n"


def serve_and_ask(directory: Path, scenario: str, requests: int) -> tuple[list[int | str], str]:
    """`fakehop serve --scenarios directory` as a subprocess: what `requests` chat requests for
    `scenario` get (a status, or the answer's text), and everything it printed."""
    server = subprocess.Popen(
        [sys.executable, "-m", "fakehop", "serve", "--port", "0", "--quiet", "--scenarios", str(directory)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None and server.stderr is not None
    answers: list[int | str] = []
    try:
        first = server.stdout.readline()
        url = first.split(" listening on ")[1].strip()
        body = json.dumps({"model": "m", "messages": MESSAGES}).encode()
        for _ in range(requests):
            request = urllib.request.Request(
                url + "/v1/chat/completions",
                data=body,
                method="POST",
                headers={"Content-Type": "application/json", "X-Fakehop-Scenario": scenario},
            )
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    answers.append(json.load(response)["choices"][0]["message"]["content"])
            except urllib.error.HTTPError as exc:
                answers.append(exc.code)
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=10)
    with server.stdout, server.stderr:
        assert server.returncode == 0 and "Traceback" not in server.stderr.read()
        return answers, first + server.stdout.read()  # from the buffer `first` came from, which may hold the next lines


def test_a_bad_use_gets_the_same_problem_from_validate_file_validate_dir_and_serve(tmp_path: Path, capsys):
    path = tmp_path / "retry.yaml"
    path.write_text(BAD_USE)
    problem = f"{path}:3: use: no scenario named 'helo'; did you mean 'hello'?"
    assert main(["serve", "--port", "0", "--scenarios", str(tmp_path)]) == 1
    assert capsys.readouterr().err.splitlines()[0] == problem
    for given in (path, tmp_path):
        assert main(["validate", str(given)]) == 1
        assert capsys.readouterr().err.splitlines() == [problem, "1 problem found"]


def test_a_use_of_a_bundled_scenario_passes_validate_as_it_plays_in_serve(tmp_path: Path, capsys):
    (tmp_path / "retry.yaml").write_text(BUNDLED_USE)
    for given in (tmp_path / "retry.yaml", tmp_path):
        assert main(["validate", str(given)]) == 0
        assert capsys.readouterr().out == "ok: 1 scenario\n"
    answers, _ = serve_and_ask(tmp_path, "retry", 2)
    assert answers == [500, HELLO]


def test_validate_takes_the_bundled_scenarios_and_every_path_given_together(tmp_path: Path, capsys):
    (tmp_path / "outer.yaml").write_text("sequence: [{use: inner}]\n")
    (tmp_path / "inner.yaml").write_text("steps: [{text: inside}]\n")
    assert main(["validate", str(tmp_path / "outer.yaml")]) == 1
    assert capsys.readouterr().err.splitlines()[0] == f"{tmp_path / 'outer.yaml'}:1: use: no scenario named 'inner'"
    assert main(["validate", str(tmp_path / "outer.yaml"), str(tmp_path / "inner.yaml")]) == 0
    assert capsys.readouterr().out == "ok: 2 scenarios\n"
    assert main(["validate", str(tmp_path), str(bundled_directory())]) == 0  # the bundled ones given again: read once
    assert capsys.readouterr().out == f"ok: {2 + len(Library.load().names())} scenarios\n"


# ---------------------------------------------------------------- a user file with a bundled scenario's name


@pytest.fixture
def replacing(tmp_path: Path) -> Path:
    """A directory whose `greeting.yaml` takes the bundled `hello`'s name, beside a scenario of its own."""
    (tmp_path / "greeting.yaml").write_text("name: hello\ndescription: Our own greeting.\nsteps: [{text: ours}]\n")
    (tmp_path / "mine.yaml").write_text("description: Mine.\nsteps: [{text: mine}]\n")
    return tmp_path


def test_serve_says_which_file_replaces_which_bundled_scenario(replacing: Path):
    answers, printed = serve_and_ask(replacing, "hello", 1)
    assert answers == ["ours"]
    assert printed.splitlines()[2:] == [f"  {replacing / 'greeting.yaml'} replaces the bundled scenario 'hello'"]


def test_serve_says_nothing_of_replacing_when_nothing_is_replaced(tmp_path: Path):
    (tmp_path / "mine.yaml").write_text("steps: [{text: mine}]\n")
    answers, printed = serve_and_ask(tmp_path, "mine", 1)
    assert answers == ["mine"] and len(printed.splitlines()) == 2


def test_a_later_directory_replacing_an_earlier_ones_scenario_is_said_too(replacing: Path, tmp_path_factory, capsys):
    later = tmp_path_factory.mktemp("later")
    (later / "mine.yaml").write_text("steps: [{text: later}]\n")
    assert main(["validate", str(replacing), str(later)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{replacing / 'greeting.yaml'} replaces the bundled scenario 'hello'",
        f"{later / 'mine.yaml'} replaces {replacing / 'mine.yaml'} (scenario 'mine')",
        "ok: 3 scenarios",
    ]


def test_list_shows_each_scenarios_origin(replacing: Path, capsys):
    assert main(["list", "--scenarios", str(replacing)]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line.split(None, 2) for line in lines}
    assert [line.split()[0] for line in lines] == Library.load([replacing]).names()
    assert rows["hello"] == ["hello", str(replacing / "greeting.yaml"), "Our own greeting."]
    assert rows["mine"] == ["mine", str(replacing / "mine.yaml"), "Mine."]
    assert rows["weather-tool"][1] == "bundled" and "get_weather" in rows["weather-tool"][2]
    assert len({line.index(" bundled ") for line in lines if " bundled " in line}) == 1  # one column


def test_list_url_shows_a_running_servers_origins_as_list_shows_the_files(replacing: Path, capsys):
    with ThreadServer(Gateway(Library.load([replacing]))) as server:
        assert server.url is not None
        ControlClient(server.url).call(
            "POST", "/scenarios", text="name: posted\ndescription: Added by a call.\nsteps: [{text: hi}]\n"
        )
        assert main(["list", "--url", server.url]) == 0
    served = capsys.readouterr().out.splitlines()
    assert main(["list", "--scenarios", str(replacing)]) == 0
    assert [line for line in served if not line.startswith("posted ")] == capsys.readouterr().out.splitlines()
    assert [line.split(None, 2) for line in served if line.startswith("posted ")] == [
        ["posted", "api", "Added by a call."]
    ]


# ---------------------------------------------------------------- X-Fakehop-* headers fakehop does not read


async def test_a_misspelled_header_is_a_400_in_openai_shape_naming_the_known_ones(openai_client):
    with pytest.raises(openai.BadRequestError) as chat:
        await openai_client.chat.completions.create(
            model="gpt-5.6-sol", messages=MESSAGES, extra_headers={"X-Fakehop-Senario": "stall"}
        )
    with pytest.raises(openai.BadRequestError) as responses:
        await openai_client.responses.create(
            model="gpt-5.6-sol", input="Hi", extra_headers={"x-fakehop-time-scale": "0.1"}
        )
    error = chat.value.body
    sent = error["param"]  # the name as it came (the SDK sends names in lower case)
    assert (sent.lower(), error["type"], chat.value.status_code) == ("x-fakehop-senario", "invalid_request_error", 400)
    assert error["message"] == (
        f"Unknown header {sent}: fakehop reads only {KNOWN}, and refuses every other "
        "X-Fakehop-* header; did you mean X-Fakehop-Scenario?"
    )
    assert responses.value.body["message"].startswith(
        f"Unknown header x-fakehop-time-scale: fakehop reads only {KNOWN}"
    )


async def test_a_misspelled_header_is_a_400_in_anthropic_shape(anthropic_client):
    with pytest.raises(anthropic.BadRequestError) as caught:
        await anthropic_client.messages.create(
            model="claude-sonnet-5", max_tokens=100, messages=MESSAGES, extra_headers={"X-Fakehop-Sesion": "checkout"}
        )
    assert caught.value.body["type"] == "error"
    assert caught.value.body["error"]["type"] == "invalid_request_error"
    assert caught.value.body["error"]["message"].endswith("X-Fakehop-* header; did you mean X-Fakehop-Session?")


async def test_the_known_headers_pass_in_any_case_and_a_bad_one_beside_them_is_still_refused(openai_client, base_url):
    known = {"x-fakehop-scenario": "weather-tool", "X-FAKEHOP-SEED": "7", "X-Fakehop-Session": "tidy"}
    for _ in range(2):  # the second time, with every name seen before
        completion = await openai_client.chat.completions.create(
            model="gpt-5.6-sol", messages=MESSAGES, extra_headers=known
        )
        assert completion.choices[0].message.tool_calls[0].function.name == "get_weather"
    with pytest.raises(openai.BadRequestError, match="(?i)Unknown header X-Fakehop-Scenarios"):
        await openai_client.chat.completions.create(
            model="gpt-5.6-sol", messages=MESSAGES, extra_headers={**known, "X-Fakehop-Scenarios": "hello"}
        )
    async with aiohttp.ClientSession() as client:
        async with client.get(base_url + "/_fakehop/requests") as response:  # refused before its session is looked at
            last = (await response.json())["requests"][-1]
    assert (last["end"], last["status"], last["scenario"]) == ("rejected", 400, None)
    assert last["error"].lower().startswith("unknown header x-fakehop-scenarios")


async def test_models_and_control_calls_refuse_an_unknown_header_and_take_the_session_one(base_url):
    async with aiohttp.ClientSession() as client:
        async with client.get(base_url + "/v1/models", headers={"X-Fakehop-Model": "m"}) as response:
            assert response.status == 400
            assert (await response.json())["error"]["message"].startswith("Unknown header X-Fakehop-Model")
        async with client.get(base_url + "/_fakehop/health", headers={"X-Fakehop-Sesion": "one"}) as response:
            assert response.status == 400
            assert await response.json() == {
                "error": f"Unknown header X-Fakehop-Sesion: fakehop reads only {KNOWN}, and refuses every other X-Fakehop-* header; "
                "did you mean X-Fakehop-Session?",
                "known": ["X-Fakehop-Fault", "X-Fakehop-Scenario", "X-Fakehop-Seed", "X-Fakehop-Session"],
            }
        async with client.get(base_url + "/_fakehop/health", headers={"X-Fakehop-Session": "one"}) as response:
            assert response.status == 200 and (await response.json())["session"] == "one"


def test_made_up_names_past_the_kept_ones_are_still_judged_right():
    """Names found fine are kept to pass the next request fast; past MAX_FINE_NAMES they start over."""

    def headers(*names: str) -> CIMultiDictProxy:
        return CIMultiDictProxy(CIMultiDict((name, "1") for name in ("Host", *names)))

    for number in range(MAX_FINE_NAMES + 10):
        assert unknown_fakehop_header(headers(f"X-Made-Up-{number}", "X-Fakehop-Seed")) is None
    assert unknown_fakehop_header(headers("X-Made-Up-3", "X-Fakehop-Seeds")) == "X-Fakehop-Seeds"
    assert unknown_fakehop_header(headers("X-Made-Up-3")) is None
