"""fakehop.testing: the fixture's handle on the session server, and make_app on the test's own loop.

These tests use the installed plugin's `fakehop` fixture beside the project's own fixtures.
"""

from __future__ import annotations

import http.client
import json
import ssl
from urllib.parse import urlsplit

import aiohttp
import pytest
from aiohttp import web

from fakehop.scenario.library import UnknownScenario
from fakehop.scenario.reader import ScenarioError
from fakehop.testing import Fakehop, make_app, plain_http_tls

MESSAGES = [{"role": "user", "content": "Hello"}]


def chat_text(client) -> str:
    stream = client.chat.completions.create(model="gpt-5.6-sol", messages=MESSAGES, stream=True)
    return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)


def open_stream(url: str, scenario: str) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    address = urlsplit(url)
    assert address.hostname is not None, url
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=10)
    body = json.dumps({"model": "m", "messages": MESSAGES, "stream": True})
    connection.request(
        "POST", "/v1/chat/completions", body, {"Content-Type": "application/json", "X-Fakehop-Scenario": scenario}
    )
    return connection, connection.getresponse()


def test_urls(fakehop):
    assert fakehop.url.startswith("http://127.0.0.1:")
    assert fakehop.openai_base_url == fakehop.url + "/v1"
    assert fakehop.anthropic_base_url == fakehop.url


def test_use_of_an_unknown_name_lists_the_known_ones(fakehop, library):
    with pytest.raises(UnknownScenario) as caught:
        fakehop.use("nope")
    assert str(caught.value).startswith("Unknown scenario 'nope'. Known scenarios: ")
    assert all(name in str(caught.value) for name in library.names())


def test_a_scenario_is_a_name_or_a_mapping(fakehop):
    with pytest.raises(TypeError, match="a name or a mapping"):
        fakehop.queue(["hello"])


def test_inline_problems_name_the_scenario_and_the_key(fakehop):
    with pytest.raises(ScenarioError) as caught:
        fakehop.use({"steps": [{"text": "hi", "chunk": "words"}], "finnish": "stop"})
    message = str(caught.value)
    assert message.startswith("inline scenario 'inline-1': ")
    assert "unknown key 'finnish' in the scenario; did you mean 'finish'?" in message
    assert "chunk" in message


def test_inline_names_count_up_and_an_inline_may_use_a_bundled_one(fakehop):
    assert fakehop.queue({"steps": [{"text": "a"}]}, {"sequence": [{"use": "hello"}]}) == ["inline-1", "inline-2"]
    client = fakehop.openai_client(max_retries=0, timeout=10)
    assert chat_text(client) == "a"
    assert chat_text(client) == "Hello! How can I help you today?"
    assert [r.scenario for r in fakehop.requests] == ["inline-1", "inline-2[1]->hello"]


def test_time_scale_speeds_up_a_stall(fakehop):
    """At 1 this would take the stall's full 120 s; at 0.001 it is over in a blink."""
    with pytest.raises(ValueError, match="more than 0"):
        fakehop.time_scale = 0
    fakehop.time_scale = 0.001
    assert fakehop.time_scale == 0.001
    fakehop.use("stall")
    import openai

    with pytest.raises(openai.APIError, match="stalled"):
        chat_text(fakehop.openai_client(max_retries=0, timeout=10))
    [request] = fakehop.requests
    assert request.end == "failed" and "stalled" in request.error


def test_waiting_for_an_unfinished_request_times_out_showing_what_was_seen(fakehop):
    connection, response = open_stream(fakehop.url, "hang")
    try:
        assert b"Here" in response.read1()
        with pytest.raises(TimeoutError) as caught:
            fakehop.wait_for_requests(timeout=0.1)
        assert "waited 0.1s for 1 finished request(s)" in str(caught.value)
        assert "POST /v1/chat/completions scenario=hang: in_progress 200 after 6 events" in str(caught.value)
    finally:
        connection.close()
    [request] = fakehop.wait_for_requests()
    assert request.end == "client_disconnected"


def test_requests_are_snapshots_with_case_insensitive_headers(fakehop):
    chat_text(fakehop.openai_client(max_retries=0, timeout=10, default_headers={"X-Trace": "abc"}))
    [request] = fakehop.requests
    assert request.headers["x-trace"] == request.headers["X-TRACE"] == "abc"
    assert str(request).startswith(f"#{request.seq} POST /v1/chat/completions scenario=hello: completed 200 after ")
    with pytest.raises(AttributeError):
        request.end = "failed"


def test_the_clients_of_a_plain_http_server_share_a_tls_context_that_trusts_no_one():
    """Made once, not per client; a request sent over TLS with it fails verification."""
    context = plain_http_tls()
    assert context is plain_http_tls()
    assert context.cert_store_stats()["x509_ca"] == 0
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname


@pytest.mark.parametrize("make", ["openai_client", "anthropic_client"])
def test_an_http_client_in_the_options_is_the_one_the_client_sends_with(fakehop, make):
    import anthropic
    import openai

    http_client_class = openai.DefaultHttpxClient if make == "openai_client" else anthropic.DefaultHttpxClient
    client = getattr(fakehop, make)(max_retries=0, http_client=http_client_class(headers={"X-Mine": "yes"}, timeout=10))
    if make == "openai_client":
        chat_text(client)
    else:
        client.messages.create(model="claude-sonnet-5", max_tokens=20, messages=MESSAGES)
    [request] = fakehop.requests
    assert request.headers["x-mine"] == "yes" and request.session == fakehop.session


def test_a_header_sent_twice_keeps_both_values(fakehop):
    address = urlsplit(fakehop.url)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=10)
    body = json.dumps({"model": "m", "messages": MESSAGES}).encode()
    connection.putrequest("POST", "/v1/chat/completions")
    for name, value in [
        ("Content-Type", "application/json"),
        ("Content-Length", str(len(body))),
        ("X-Tag", "a"),
        ("x-tag", "b"),
    ]:
        connection.putheader(name, value)
    connection.endheaders(body)
    assert connection.getresponse().status == 200
    connection.close()

    [request] = fakehop.wait_for_requests()
    assert request.headers.getall("X-Tag") == ["a", "b"]


# ---------------------------------------------------------------- make_app, on the test's own loop


def make_asking_app(llm_base_url: str) -> web.Application:
    """An application under test: it asks the LLM and answers with the text, or 502 on an error."""

    async def ask(request: web.Request) -> web.Response:
        body = {"model": "gpt-5.6-sol", "messages": [{"role": "user", "content": await request.text()}]}
        async with aiohttp.ClientSession() as session:
            async with session.post(llm_base_url + "/chat/completions", json=body) as answer:
                completion = await answer.json()
        if answer.status != 200:
            return web.Response(status=502, text=completion["error"]["message"])
        return web.Response(text=completion["choices"][0]["message"]["content"])

    app = web.Application()
    app.router.add_post("/ask", ask)
    return app


async def test_make_app_serves_on_the_test_loop_for_an_app_under_test(aiohttp_server, aiohttp_client):
    fake = Fakehop.for_server(await aiohttp_server(make_app(time_scale=0.01)))
    fake.queue("fail-server-error", {"steps": [{"text": "Forty-two"}]})
    client = await aiohttp_client(make_asking_app(fake.openai_base_url))
    first = await client.post("/ask", data="What is the answer?")
    assert first.status == 502
    second = await client.post("/ask", data="What is the answer?")
    assert await second.text() == "Forty-two"
    requests = await fake.async_wait_for_requests(2)
    assert [(r.scenario, r.status) for r in requests] == [("fail-server-error", 500), ("inline-1", 200)]
    assert requests[1].body["messages"][0]["content"] == "What is the answer?"
    with pytest.raises(RuntimeError, match="async_wait_for_requests"):
        fake.wait_for_requests()


async def test_make_app_loads_scenario_directories(aiohttp_server, tmp_path):
    (tmp_path / "mine.yaml").write_text("steps:\n  - text: from my directory\n")
    fake = Fakehop.for_server(await aiohttp_server(make_app([tmp_path], default="mine")))
    async with fake.async_openai_client(max_retries=0, timeout=10) as client:
        answer = await client.chat.completions.create(model="m", messages=MESSAGES)
    assert answer.choices[0].message.content == "from my directory"


async def test_the_session_server_serves_async_tests_too(fakehop):
    fakehop.use({"steps": [{"text": "async works"}]})
    async with fakehop.async_openai_client(max_retries=0, timeout=10) as client:
        answer = await client.chat.completions.create(model="m", messages=MESSAGES)
    assert answer.choices[0].message.content == "async works"


def test_a_handle_on_a_session_that_cannot_be_named_is_refused_at_once(fakehop_server):
    """unittest's `self.id()` of a script's test starts with `__main__`, which no session name may."""
    with pytest.raises(ValueError, match=r"^Invalid session name '__main__\.T\.test_a': a session name is 1 to 128"):
        Fakehop(fakehop_server, "__main__.T.test_a")
