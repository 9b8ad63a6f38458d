"""The control calls the console's editor, detail view and settings use: a scenario checked
without being added, one scenario in full, and the time scale."""

from __future__ import annotations

import aiohttp
import pytest

from fakehop.scenario.library import bundled_directory

from .conftest import FAST
from .test_control_api import Control, session  # noqa: F401 - the fixture, shared

TYPO = "name: typo-demo\nsteps:\n  - txt: hello\n"
CHAT = "/v1/chat/completions"
STREAM = {"model": "gpt-5.6-sol", "messages": [{"role": "user", "content": "Hi"}], "stream": True}


@pytest.fixture
def control(session, base_url) -> Control:
    return Control(session, base_url)


async def check(control: Control, text: str, **kwargs) -> dict:
    return await control.ok("POST", "/scenarios?check=true", data=text, **kwargs)


# ---------------------------------------------------------------- checking without adding


async def test_a_typo_is_found_with_its_line_and_the_nearest_key_and_nothing_is_added(control):
    answer = await check(control, TYPO)
    assert answer == {
        "valid": False,
        "problems": [{"line": 3, "message": "unknown key 'txt' in a step; did you mean 'text'?"}],
    }
    names = [s["name"] for s in (await control.ok("GET", "/scenarios"))["scenarios"]]
    assert "typo-demo" not in names


async def test_every_problem_comes_with_its_line(control):
    text = "name: many\nkeepalive: soon\nsteps:\n  - text: hi\n    chunk: lots\n  - fail: exploded\n"
    problems = (await check(control, text))["problems"]
    assert [problem["line"] for problem in problems] == [2, 5, 6]
    assert "keepalive: expected a duration" in problems[0]["message"]
    assert "fail: unknown kind 'exploded'" in problems[2]["message"]


async def test_yaml_that_does_not_parse_is_a_problem_at_its_line(control):
    [problem] = (await check(control, "name: broken\nsteps:\n  - text: [unclosed\n"))["problems"]
    assert problem["line"] >= 3 and problem["message"].startswith("not valid YAML")


async def test_a_use_of_a_scenario_the_server_lacks_is_a_problem(control):
    [problem] = (await check(control, "name: uses\nsequence:\n  - use: no-such-scenario\n"))["problems"]
    assert problem == {"line": 3, "message": "use: no scenario named 'no-such-scenario'"}


async def test_a_good_scenario_is_valid_and_still_not_added(control):
    answer = await check(control, "steps:\n  - text: fine\n", params={"name": "named-by-query"})
    assert answer == {"valid": True, "scenario": {"name": "named-by-query", "kind": "steps", "description": ""}}
    status, _ = await control.call("GET", "/scenarios/named-by-query")
    assert status == 404


async def test_checking_json_and_a_bad_check_value(control):
    answer = await control.ok("POST", "/scenarios?check=true", json={"name": "as-json", "http_error": {"status": 429}})
    assert answer["valid"] and answer["scenario"]["kind"] == "http_error"
    status, body = await control.call(
        "POST", "/scenarios?check=true", data="{not json", headers={"Content-Type": "application/json"}
    )
    assert status == 400 and body["error"].startswith("the body is not valid JSON")
    status, body = await control.call("POST", "/scenarios?check=yes", data=TYPO)
    assert (status, body["error"]) == (400, "check: expected true or false, got 'yes'")


async def test_checking_needs_the_admin_token(serve, make_gateway, session):
    url = await serve(make_gateway(admin_token="t0ken"))
    status, _ = await Control(session, url).call("POST", "/scenarios?check=true", data=TYPO)
    assert status == 401
    assert (await check(Control(session, url, "t0ken"), TYPO))["valid"] is False


# ---------------------------------------------------------------- one scenario


async def test_a_bundled_scenario_comes_with_its_file_and_what_it_plays(control):
    scenario = (await control.ok("GET", "/scenarios/hello"))["scenario"]
    assert scenario["text"] == (bundled_directory() / "hello.yaml").read_text()
    assert (scenario["name"], scenario["kind"], scenario["origin"]) == ("hello", "steps", "bundled")
    [entry] = scenario["definition"]["entries"]
    [step] = entry["script"]["steps"]
    assert step["type"] == "output" and "".join(step["deltas"]) == "Hello! How can I help you today?"


async def test_an_added_scenario_has_no_file_but_its_definition(control):
    await control.ok(
        "POST", "/scenarios", data="name: added\nsequence:\n  - http_error: {status: 500}\n  - use: hello\n"
    )
    scenario = (await control.ok("GET", "/scenarios/added"))["scenario"]
    assert (scenario["origin"], scenario["text"], scenario["kind"]) == ("api", None, "sequence")
    first, second = scenario["definition"]["entries"]
    assert first["script"]["http_error"]["status"] == 500 and second["use"] == "hello"


async def test_an_unknown_scenario_is_a_404_naming_the_known_ones(control, library):
    status, body = await control.call("GET", "/scenarios/nothing-like-it")
    assert status == 404 and body["known"] == library.names()


# ---------------------------------------------------------------- the time scale


async def stream_seconds(base_url: str, scenario: str) -> float:
    async with aiohttp.ClientSession() as client:
        async with client.post(base_url + CHAT, json=STREAM, headers={"X-Fakehop-Scenario": scenario}) as response:
            await response.read()
    async with aiohttp.ClientSession() as client:
        async with client.get(base_url + "/_fakehop/requests") as response:
            return (await response.json())["requests"][-1]["duration"]


async def test_the_time_scale_applies_to_the_next_answers_until_reset(control, base_url):
    assert await stream_seconds(base_url, "keepalive-demo") < 3.5 * 0.1  # 3.5 s of silence, at FAST
    assert (await control.ok("PUT", "/time_scale", json={"time_scale": 0.1})) == {"time_scale": 0.1}
    assert (await control.ok("GET", "/health"))["time_scale"] == 0.1
    assert await stream_seconds(base_url, "keepalive-demo") >= 3.5 * 0.1
    await control.ok("POST", "/reset")
    assert (await control.ok("GET", "/health"))["time_scale"] == FAST


@pytest.mark.parametrize(
    "body", [{"time_scale": 0}, {"time_scale": -1}, {"time_scale": "fast"}, {"time_scale": True}, {}, {"scale": 1}]
)
async def test_a_time_scale_that_is_not_a_number_above_zero_is_refused(control, body):
    status, answer = await control.call("PUT", "/time_scale", json=body)
    assert status == 400 and ("time_scale" in answer["error"] or "unknown key" in answer["error"])
    assert (await control.ok("GET", "/health"))["time_scale"] == FAST


USER_FORMS = {
    "regex-prompt": 'match: {prompt: "/hel+o/"}\nsteps: [{text: hi}]\n',
    "globs": 'match: {protocol: chat, model: "gpt-*", header: {x-team: "blue-*"}}\nsteps: [{text: hi}]\n',
    "turns": 'match: {turn: [1, 3], system: "/be (brief|short)/", tool_result: get_weather, tools: get_weather}\n'
    "steps: [{text: hi}]\n",
    "turns-on": 'match: {turn: ">=2"}\nsteps: [{text: hi}]\n',
    "a-conversation": "conversation:\n  - steps: [{tool_call: {name: get_weather, arguments: {city: Paris}}}]\n"
    "  - steps: [{text: Sunny.}]\n",
    "a-sequence": "sequence:\n  - http_error: {status: 429, retry_after: 0.5}\n  - use: hello\n  - steps: [{text: hi}, stall]\n",
}


async def test_every_scenario_s_definition_is_served_as_json(control, library):
    """Bundled scenarios and each form a user's may take: regexes, globs, header and turn rules,
    conversations and sequences."""
    for name, text in USER_FORMS.items():
        await control.ok("POST", "/scenarios", data=f"name: {name}\n{text}")
    for name in [*library.names(), *USER_FORMS]:
        status, body = await control.call("GET", f"/scenarios/{name}")
        assert status == 200, (name, body)
        assert body["scenario"]["name"] == name and body["scenario"]["definition"]["entries"], name
    definition = (await control.ok("GET", "/scenarios/regex-prompt"))["scenario"]["definition"]
    assert definition["match"]["prompt"] == {"type": "text_rule", "text": "/hel+o/"}
    definition = (await control.ok("GET", "/scenarios/turns"))["scenario"]["definition"]
    assert definition["match"]["turn"] == {"type": "turn_rule", "turns": [1, 3], "at_least": None}
