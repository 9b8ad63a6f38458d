"""Faults laid over any answer: the HTTP kinds (rate_limit, server_error, http_error) in every
protocol, streamed or not, their scope, their sessions, the control API and the fixture.

These tests use the installed plugin's `fakehop` fixture beside the project's own fixtures.
"""

from __future__ import annotations

import aiohttp
import anthropic
import openai
import pytest

from fakehop.protocols import PROTOCOLS as PROTOCOL_OBJECTS
from fakehop.state.faults import parse_fault
from fakehop.testing import Fakehop, RemoteServer, SetFault
from fakehop.testing.remote import ControlClient, ControlFailed

MESSAGES = [{"role": "user", "content": "Hello"}]
HELLO = "Hello! How can I help you today?"
PROTOCOLS = ("chat", "responses", "messages")
# kind, its parameters, the status it answers with, each SDK's exception, the Retry-After it sends
KINDS = {
    "rate_limit": ({"retry_after": 0.5}, 429, openai.RateLimitError, anthropic.RateLimitError, "0.5"),
    "server_error": ({"status": 503}, 503, openai.InternalServerError, anthropic.InternalServerError, None),
    "http_error": (
        {"status": 403, "retry_after": 2, "message": "no entry", "type": "permission_error", "code": "nope"},
        403,
        openai.PermissionDeniedError,
        anthropic.PermissionDeniedError,
        "2",
    ),
}


def ask(fakehop: Fakehop, protocol: str, stream: bool = False, **extra) -> str:
    """One request through the official SDK of `protocol`, without retries; the text it got."""
    messages = extra.pop("messages", MESSAGES)
    if protocol == "messages":
        client = fakehop.anthropic_client(max_retries=0, timeout=10)
        if stream:
            with client.messages.stream(model="claude-sonnet-5", max_tokens=100, messages=messages, **extra) as s:
                return s.get_final_text()
        answer = client.messages.create(model="claude-sonnet-5", max_tokens=100, messages=messages, **extra)
        return answer.content[0].text
    openai_client = fakehop.openai_client(max_retries=0, timeout=10)
    if protocol == "responses":
        if stream:
            events = openai_client.responses.create(model="gpt-5.6-sol", input="Hello", stream=True, **extra)
            return "".join(event.delta for event in events if event.type == "response.output_text.delta")
        return openai_client.responses.create(model="gpt-5.6-sol", input="Hello", **extra).output_text
    if stream:
        chunks = openai_client.chat.completions.create(model="m", messages=messages, stream=True, **extra)
        return "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    return openai_client.chat.completions.create(model="m", messages=messages, **extra).choices[0].message.content


def broken(fakehop: Fakehop, protocol: str = "chat", stream: bool = False, **extra) -> int:
    """The status of the HTTP error a request got (AssertionError when it got an answer)."""
    try:
        text = ask(fakehop, protocol, stream, **extra)
    except (openai.APIStatusError, anthropic.APIStatusError) as exc:
        return exc.status_code
    raise AssertionError(f"expected an HTTP error, got the answer {text!r}")


def control(fakehop: Fakehop, session: str | None = "") -> ControlClient:
    """A control client of the fixture's server, on the test's session unless another is named."""
    return ControlClient(fakehop.url, session=fakehop.session if session == "" else session)


def refusal(client: ControlClient, body) -> str:
    with pytest.raises(ControlFailed) as caught:
        client.call("POST", "/faults", body)
    assert caught.value.status == 400 and caught.value.answer is not None
    return caught.value.answer["error"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("kind", KINDS)
def test_each_http_kind_breaks_one_answer_in_each_protocol(fakehop, kind, protocol, stream):
    parameters, status, openai_error, anthropic_error, retry_after = KINDS[kind]
    fault = fakehop.fault(kind, **parameters)
    assert isinstance(fault, SetFault)
    assert (fault.kind, fault.left, fault.id.startswith("fault_")) == (kind, 1, True)
    with pytest.raises(anthropic_error if protocol == "messages" else openai_error) as caught:
        ask(fakehop, protocol, stream)
    assert caught.value.status_code == status
    assert caught.value.response.headers.get("retry-after") == retry_after
    if kind == "http_error":
        assert "no entry" in caught.value.message
    assert ask(fakehop, protocol, stream) == HELLO  # times: 1
    assert fakehop.faults == []
    first, second = fakehop.requests
    assert (first.end, first.status, first.faults, first.scenario) == ("http_error", status, [kind], "hello")
    assert (second.end, second.faults) == ("completed", [])


def test_a_rate_limit_says_retry_after_one_second_by_default(fakehop):
    fakehop.fault("rate_limit")
    with pytest.raises(anthropic.RateLimitError) as caught:
        ask(fakehop, "messages")
    assert caught.value.response.headers["retry-after"] == "1"
    assert caught.value.response.headers["x-should-retry"] == "true"


def test_a_server_error_is_a_500_by_default_and_may_be_a_529(fakehop):
    fakehop.fault("server_error")
    fakehop.fault("server_error", status=529)
    assert broken(fakehop, "messages") == 500
    assert broken(fakehop, "messages") == 529


def test_laid_over_a_queued_and_a_matched_scenario(fakehop):
    control(fakehop).call(
        "POST", "/scenarios", {"name": "weather", "match": {"prompt": "weather"}, "steps": [{"text": "Sunny."}]}
    )
    fakehop.queue("slow-typing")
    fakehop.fault("rate_limit", times=2)
    assert broken(fakehop) == 429
    assert broken(fakehop, messages=[{"role": "user", "content": "the weather?"}]) == 429
    assert ask(fakehop, "chat", messages=[{"role": "user", "content": "the weather?"}]) == "Sunny."
    assert [(r.scenario, r.faults) for r in fakehop.requests] == [
        ("slow-typing", ["rate_limit"]),
        ("weather", ["rate_limit"]),
        ("weather", []),
    ]


def test_times_two_then_the_usual_answer(fakehop):
    fakehop.fault("server_error", times=2)
    assert [fault.left for fault in fakehop.faults] == [2]
    assert broken(fakehop) == 500
    assert [fault.left for fault in fakehop.faults] == [1]
    assert broken(fakehop, stream=True) == 500
    assert ask(fakehop, "chat") == HELLO


def test_times_zero_breaks_every_request_until_removed(fakehop):
    fault = fakehop.fault("rate_limit", times=0)
    assert fault.left is None
    assert [broken(fakehop, protocol) for protocol in PROTOCOLS] == [429, 429, 429]
    assert [(f.id, f.left) for f in fakehop.faults] == [(fault.id, None)]
    fakehop.clear_faults()
    assert fakehop.faults == []
    assert ask(fakehop, "chat") == HELLO


def test_the_oldest_fitting_fault_is_taken(fakehop):
    fakehop.fault("server_error", protocol="messages")
    fakehop.fault("rate_limit")
    fakehop.fault("http_error", status=418)
    assert broken(fakehop, "chat") == 429  # the messages-only one does not fit
    assert broken(fakehop, "responses") == 418
    assert ask(fakehop, "chat") == HELLO
    assert broken(fakehop, "messages") == 500
    assert ask(fakehop, "messages") == HELLO


def test_a_scenario_glob_breaks_only_the_scenarios_it_names(fakehop):
    fakehop.queue("slow-typing", "long-text")
    fakehop.fault("rate_limit", scenario="long-*", times=0)
    assert ask(fakehop, "chat") == "The quick brown fox jumps over the lazy dog."  # slow-typing
    assert broken(fakehop) == 429
    assert ask(fakehop, "chat") == HELLO
    assert [(r.scenario, r.faults) for r in fakehop.requests] == [
        ("slow-typing", []),
        ("long-text", ["rate_limit"]),
        ("hello", []),
    ]


async def test_a_seeded_probability_repeats_exactly_on_another_server(make_gateway, serve):
    async def statuses() -> list[int]:
        url = await serve(make_gateway())
        fault = {"kind": "server_error", "probability": 0.5, "seed": 7, "times": 0}
        async with aiohttp.ClientSession() as http:
            async with http.post(url + "/_fakehop/faults", json=fault) as response:
                assert response.status == 201
            body = {"model": "m", "messages": MESSAGES}
            got = []
            for _ in range(24):
                async with http.post(url + "/v1/chat/completions", json=body) as response:
                    got.append(response.status)
        return got

    first, second = await statuses(), await statuses()
    assert first == second
    assert set(first) == {200, 500}


def test_a_fault_of_one_session_never_touches_another(fakehop):
    other = Fakehop(RemoteServer(fakehop.url), "faults-elsewhere")
    try:
        other.fault("rate_limit", times=0)
        assert ask(fakehop, "chat") == HELLO
        assert fakehop.faults == []
        assert broken(other) == 429
        assert [r.faults for r in other.requests] == [["rate_limit"]]
    finally:
        other.close()


def test_a_reset_removes_the_faults(fakehop):
    fakehop.fault("rate_limit", times=0)
    fakehop.reset()
    assert fakehop.faults == []
    assert ask(fakehop, "chat") == HELLO


def test_a_reset_of_the_global_session_removes_its_faults(make_gateway):
    gateway = make_gateway()
    gateway.global_session.faults.append(parse_fault({"kind": "rate_limit"}))
    gateway.global_session.reset()
    assert gateway.global_session.faults == []


def test_the_fixture_drives_a_remote_server_through_its_control_api(fakehop):
    remote = Fakehop(RemoteServer(fakehop.url), "faults-remote")
    try:
        fault = remote.fault("http_error", status=409, times=3, protocol="responses")
        assert (fault.kind, fault.left, fault.settings["status"], fault.settings["protocol"]) == (
            "http_error",
            3,
            409,
            "responses",
        )
        assert [f.id for f in remote.faults] == [fault.id]
        with pytest.raises(ValueError, match="did you mean 'retry_after'"):
            remote.fault("rate_limit", retry_afer=1)
        remote.clear_faults()
        assert remote.faults == []
    finally:
        remote.close()


def test_a_wrong_fault_in_the_fixture_names_the_nearest_name(fakehop):
    with pytest.raises(ValueError, match="unknown fault kind 'rate_limt'; did you mean 'rate_limit'"):
        fakehop.fault("rate_limt")
    with pytest.raises(ValueError, match="status: expected a whole number from 400 to 599, got 200"):
        fakehop.fault("http_error", status=200)
    assert fakehop.faults == []


def test_the_control_api_adds_lists_and_removes_faults(fakehop):
    client = control(fakehop)
    added = client.call("POST", "/faults", {"kind": "rate_limit", "times": 2, "scenario": "hel*"})
    assert added == {
        "id": added["id"],
        "kind": "rate_limit",
        "retry_after": 1,
        "message": None,
        "times": 2,
        "protocol": None,
        "scenario": "hel*",
        "probability": 1.0,
        "seed": 0,
        "left": 2,
    }
    other = client.call("POST", "/faults", {"kind": "server_error", "status": 502, "times": 0})
    assert [f["id"] for f in client.call("GET", "/faults")["faults"]] == [added["id"], other["id"]]
    assert client.call("DELETE", f"/faults/{added['id']}")["removed"] == added["id"]
    with pytest.raises(ControlFailed) as caught:
        client.call("DELETE", f"/faults/{added['id']}")
    assert caught.value.status == 404
    assert client.call("DELETE", "/faults") == {"removed": 1, "faults": []}
    assert control(fakehop, None).call("GET", "/faults") == {"faults": []}  # the global session has none


def test_the_control_api_refuses_a_wrong_fault_naming_the_problem(fakehop):
    client = control(fakehop)
    assert "did you mean 'rate_limit'" in refusal(client, {"kind": "rate_limt"})
    assert "unknown parameter 'retry_afer'; did you mean 'retry_after'" in refusal(
        client, {"kind": "rate_limit", "retry_afer": 1}
    )
    assert "the parameters are: " in refusal(client, {"kind": "rate_limit", "colour": 1})
    assert "after: expected a whole number from 0" in refusal(client, {"kind": "truncate", "after": -1})
    assert "needs a status" in refusal(client, {"kind": "http_error"})
    assert "500, 502, 503, 529" in refusal(client, {"kind": "server_error", "status": 501})
    assert "times: expected a whole number from 0" in refusal(client, {"kind": "rate_limit", "times": -1})
    assert "probability: expected a number from 0 to 1" in refusal(client, {"kind": "rate_limit", "probability": 2})
    assert "did you mean 'chat'" in refusal(client, {"kind": "rate_limit", "protocol": "chta"})
    assert "retry_after: expected a number" in refusal(client, {"kind": "rate_limit", "retry_after": "soon"})
    assert "kind: expected a fault kind" in refusal(client, {"kind": ["rate_limit"]})
    assert "must be a JSON object" in refusal(client, ["rate_limit"])
    assert client.call("GET", "/faults") == {"faults": []}


def test_the_journal_shows_the_faults_laid_over_each_request(fakehop):
    fakehop.fault("http_error", status=400, code="bad")
    broken(fakehop, "responses", stream=True)
    ask(fakehop, "responses")
    records = control(fakehop).call("GET", "/requests")["requests"]
    assert [(r["faults"], r["end"], r["status"]) for r in records] == [
        (["http_error"], "http_error", 400),
        ([], "completed", 200),
    ]


# ---------------------------------------------------------------- X-Fakehop-Fault: one request's own

CHAT = "/v1/chat/completions"


def path_of(protocol: str) -> str:
    return PROTOCOL_OBJECTS[protocol].PATH


def body_of(protocol: str) -> dict:
    return dict(PROTOCOL_OBJECTS[protocol].EXAMPLE_REQUEST, stream=False)


@pytest.mark.parametrize("protocol", ["chat", "responses", "messages"])
async def test_a_fault_named_by_a_header_breaks_that_request_alone(base_url, gateway, protocol):
    header = {"X-Fakehop-Fault": "server_error; status=503; retry_after=2"}
    async with aiohttp.ClientSession() as client:
        async with client.post(base_url + path_of(protocol), json=body_of(protocol), headers=header) as answer:
            assert (answer.status, answer.headers["Retry-After"]) == (503, "2")
        async with client.post(base_url + path_of(protocol), json=body_of(protocol)) as answer:
            assert answer.status == 200
    assert [record.faults for record in gateway.journal.since(0)] == [("server_error",), ()]


async def test_a_header_s_fault_comes_before_the_session_s_and_leaves_it(base_url, gateway):
    gateway.global_session.faults.append(parse_fault({"kind": "rate_limit"}))
    headers = {"X-Fakehop-Fault": "http_error; status=418; protocol=messages, http_error; status=409"}
    async with aiohttp.ClientSession() as client:
        for expected in (409, 429, 200):
            async with client.post(
                base_url + CHAT, json=body_of("chat"), headers=headers if expected == 409 else {}
            ) as answer:
                assert answer.status == expected


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("rate_limt", "did you mean 'rate_limit'?"),
        ("http_error; status", "is not a name=value parameter"),
        ("http_error; status=99", "status"),
        ("truncate; after=1; after=2", "after is given twice"),
        ("truncate; times=2", "times has no place here"),
        ("; after=1", "starts with its kind"),
        ("truncate, ", "starts with its kind"),
    ],
)
async def test_a_wrong_fault_header_is_a_400_naming_it(base_url, value, says):
    async with aiohttp.ClientSession() as client:
        async with client.post(base_url + CHAT, json=body_of("chat"), headers={"X-Fakehop-Fault": value}) as answer:
            error = (await answer.json())["error"]
    assert answer.status == 400 and error["param"] == "X-Fakehop-Fault"
    assert error["message"].startswith("X-Fakehop-Fault: ") and says in error["message"]
