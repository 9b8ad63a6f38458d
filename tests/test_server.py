"""The server on a real socket: selection, auth, bad input, journal, control basics."""

from __future__ import annotations

import base64
import json
import re

import aiohttp
import pytest

from fakehop.scenario.reader import parse_text

from . import clients

CHAT = "/v1/chat/completions"
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


async def post(url: str, path: str = CHAT, *, json=None, data=None, headers=None) -> tuple[int, dict, object]:
    async with aiohttp.ClientSession() as session:
        async with session.post(url + path, json=json, data=data, headers=headers or {}) as response:
            body = await response.json(content_type=None)
            return response.status, body, response.headers.copy()


def content_of(answer: dict) -> str:
    return answer["choices"][0]["message"]["content"]


@pytest.mark.parametrize(
    "data,message",
    [
        (b"{not json", "could not parse the JSON body"),
        (b"[1, 2]", "must be a JSON object"),
        (b"", "body is empty"),
        (b'"text"', "must be a JSON object"),
    ],
)
async def test_bad_json_is_a_400_in_openai_shape(base_url, data, message):
    status, body, headers = await post(base_url, data=data, headers={"Content-Type": "application/json"})
    assert status == 400
    assert message in body["error"]["message"]
    assert body["error"]["type"] == "invalid_request_error"
    assert headers["x-request-id"].startswith("req_")


@pytest.mark.parametrize(
    "body,param",
    [
        ({"model": "m"}, "messages"),
        ({"messages": [{"role": "user", "content": "hi"}]}, "model"),
        ({"model": "m", "messages": "hi"}, "messages"),
        ({"model": "m", "messages": []}, "messages"),
        ({"model": 5, "messages": [{"role": "user", "content": "hi"}]}, "model"),
        ({**BODY, "stream": "yes"}, "stream"),
        ({**BODY, "max_tokens": 0}, "max_tokens"),
        ({**BODY, "max_tokens": "ten"}, "max_tokens"),
        ({**BODY, "stream_options": {"include_usage": "yes"}}, "stream_options.include_usage"),
    ],
)
async def test_invalid_fields_name_the_param(base_url, body, param):
    status, answer, _ = await post(base_url, json=body)
    assert status == 400
    assert answer["error"]["param"] == param


async def test_unknown_scenario_header_names_the_known_ones(base_url, library):
    status, body, _ = await post(base_url, json=BODY, headers={"X-Fakehop-Scenario": "nope"})
    assert status == 400
    assert "Unknown scenario 'nope'" in body["error"]["message"]
    assert all(name in body["error"]["message"] for name in library.names())


async def test_selection_order_header_queue_match_default(serve, make_gateway):
    gateway = make_gateway(default="weather-tool")
    gateway.global_session.add(parse_text("match: {prompt: weather}\nsteps: [{text: matched}]", "<t>", "matcher"))
    url = await serve(gateway)
    gateway.global_session.queue.extend(["slow-typing"])
    weather = {**BODY, "messages": [{"role": "user", "content": "the weather?"}]}
    _, by_header, _ = await post(url, json=weather, headers={"X-Fakehop-Scenario": "hello"})
    _, by_queue, _ = await post(url, json=weather)
    _, by_match, _ = await post(url, json=weather)
    _, by_default, _ = await post(url, json=BODY)
    assert content_of(by_header) == "Hello! How can I help you today?"
    assert content_of(by_queue) == "The quick brown fox jumps over the lazy dog."
    assert content_of(by_match) == "matched"
    assert content_of(by_default) == "Let me check the weather."
    assert [r.scenario for r in gateway.journal.since(0)] == ["hello", "slow-typing", "matcher", "weather-tool"]


async def test_any_key_is_accepted_without_api_key(base_url):
    for headers in ({}, {"Authorization": "Bearer anything"}, {"x-api-key": "whatever"}):
        status, _, _ = await post(base_url, json=BODY, headers=headers)
        assert status == 200


async def test_api_key_is_enforced_when_set(serve, make_gateway):
    url = await serve(make_gateway(api_key="sekret"))
    assert (await post(url, json=BODY, headers={"Authorization": "Bearer sekret"}))[0] == 200
    assert (await post(url, json=BODY, headers={"x-api-key": "sekret"}))[0] == 200
    status, body, _ = await post(url, json=BODY, headers={"Authorization": "Bearer wrong"})
    assert status == 401
    assert body["error"]["code"] == "invalid_api_key"
    assert (await post(url, json=BODY))[0] == 401


async def test_sdk_sees_authentication_error(serve, make_gateway):
    import openai

    url = await serve(make_gateway(api_key="sekret"))
    client = clients.openai_async(base_url=url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        await client.chat.completions.create(model="m", messages=BODY["messages"])


async def test_unknown_path_and_method_in_protocol_shape(base_url):
    async with aiohttp.ClientSession() as session:
        async with session.post(base_url + "/v1/nothing", json=BODY) as response:
            assert response.status == 404
            assert "Unknown path /v1/nothing" in (await response.json())["error"]["message"]
        async with session.get(base_url + CHAT) as response:
            assert response.status == 405
            assert (await response.json())["error"]["type"] == "invalid_request_error"


async def test_body_over_the_limit_is_a_413(serve, gateway):
    status, body, _ = await post(
        await serve(gateway), data=b"{" + b" " * (40 * 1024 * 1024) + b"}", headers={"Content-Type": "application/json"}
    )
    assert status == 413
    assert "larger than the limit" in body["error"]["message"]


async def test_models_health_journal_and_reset(base_url, gateway):
    async with aiohttp.ClientSession() as session:
        async with session.get(base_url + "/v1/models") as response:
            models = await response.json()
        assert "gpt-5.6-sol" in [m["id"] for m in models["data"]]
        async with session.get(base_url + "/_fakehop/health") as response:
            assert (await response.json())["status"] == "ok"
        await session.post(
            base_url + CHAT, json={**BODY, "stream": True}, headers={"X-Fakehop-Scenario": "flaky-then-ok"}
        )
        async with session.get(base_url + "/_fakehop/requests") as response:
            [record] = (await response.json())["requests"]
        assert record["path"] == CHAT and record["protocol"] == "chat" and record["scenario"] == "flaky-then-ok[1]"
        assert record["status"] == 429 and record["end"] == "http_error" and record["body"]["model"] == "m"
        async with session.post(base_url + "/_fakehop/reset") as response:
            assert response.status == 200
        async with session.get(base_url + "/_fakehop/requests") as response:
            assert (await response.json())["requests"] == []
        async with session.post(
            base_url + CHAT, json=BODY, headers={"X-Fakehop-Scenario": "flaky-then-ok"}
        ) as response:
            assert response.status == 429  # the sequence counter was reset too


async def test_journal_records_how_streams_ended(base_url, gateway):
    async with aiohttp.ClientSession() as session:
        for name in ("hello", "fail-rate-limit", "disconnect"):
            async with session.post(
                base_url + CHAT, json={**BODY, "stream": True}, headers={"X-Fakehop-Scenario": name}
            ) as response:
                try:
                    await response.read()
                except aiohttp.ClientPayloadError:
                    pass
    ends = [(r.scenario, r.end, r.events > 0) for r in gateway.journal.since(0)]
    assert ends == [
        ("hello", "completed", True),
        ("fail-rate-limit", "failed", True),
        ("disconnect", "disconnected", True),
    ]
    assert gateway.journal.since(0)[1].error.startswith("rate_limit: ")


async def streamed_events(url: str, path: str, body: dict, scenario: str) -> list[dict]:
    async with aiohttp.ClientSession() as session:
        async with session.post(url + path, json=body, headers={"X-Fakehop-Scenario": scenario}) as response:
            text = (await response.read()).decode()
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]


async def test_unseeded_answers_get_fresh_ids_of_the_official_shape(base_url):
    messages_body = {
        "model": "claude-sonnet-5",
        "max_tokens": 100,
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
        "thinking": {"type": "adaptive"},
    }
    chat_body = {**BODY, "stream": True}
    ids = []
    for _ in range(2):
        events = await streamed_events(base_url, "/v1/messages", messages_body, "think-then-tool")
        message_id = events[0]["message"]["id"]
        tool_id = next(
            e["content_block"]["id"]
            for e in events
            if e["type"] == "content_block_start" and e["content_block"]["type"] == "tool_use"
        )
        signature = next(e["delta"]["signature"] for e in events if e.get("delta", {}).get("type") == "signature_delta")
        chunk_id = (await streamed_events(base_url, CHAT, chat_body, "hello"))[0]["id"]
        assert re.fullmatch(r"msg_01[A-Za-z0-9]{22}", message_id)
        assert re.fullmatch(r"toolu_01[A-Za-z0-9]{22}", tool_id)
        assert re.fullmatch(r"chatcmpl-[A-Za-z0-9]{29}", chunk_id)
        assert base64.b64decode(signature, validate=True)
        ids.append((message_id, tool_id, signature, chunk_id))
    assert all(first != second for first, second in zip(*ids))


MESSAGES_BODY = {"model": "claude-x", "max_tokens": 50, "messages": [{"role": "user", "content": "Hi"}]}
ANTHROPIC = {"anthropic-version": "2023-06-01"}
ANTHROPIC_REQUEST_ID = r"req_011C[1-9A-HJ-NP-Za-km-z]{20}"  # as the Anthropic API writes them


@pytest.mark.parametrize(
    "method,path,body,headers,names",
    [
        ("POST", CHAT, {**BODY, "stream": True}, {}, ["x-request-id"]),
        ("POST", CHAT, BODY, {}, ["x-request-id"]),
        ("POST", CHAT, {"model": "m"}, {}, ["x-request-id"]),
        ("POST", "/v1/responses", {"model": "m", "input": "Hi", "stream": True}, {}, ["x-request-id"]),
        ("POST", "/v1/messages", {**MESSAGES_BODY, "stream": True}, ANTHROPIC, ["request-id"]),
        ("POST", "/v1/messages", MESSAGES_BODY, ANTHROPIC, ["request-id"]),
        ("POST", "/v1/messages", {"model": "m"}, ANTHROPIC, ["request-id"]),
        ("POST", "/v1/nowhere", BODY, {}, ["x-request-id"]),
        ("POST", "/v1/nowhere", BODY, ANTHROPIC, ["request-id"]),
        ("GET", CHAT, None, {}, ["x-request-id"]),
        ("GET", "/v1/models", None, {}, ["x-request-id"]),
        ("GET", "/v1/models", None, ANTHROPIC, ["request-id"]),
        ("GET", "/_fakehop/health", None, {}, ["x-request-id", "request-id"]),
        ("GET", "/_fakehop/nowhere", None, {}, ["x-request-id", "request-id"]),
    ],
)
async def test_every_answer_carries_its_request_id_where_its_sdk_reads_it(base_url, method, path, body, headers, names):
    async with aiohttp.ClientSession() as session:
        async with session.request(method, base_url + path, json=body, headers=headers) as response:
            await response.read()
            ids = {name: response.headers.get(name) for name in ("x-request-id", "request-id")}
    assert [name for name, value in ids.items() if value is not None] == names
    form = ANTHROPIC_REQUEST_ID if names == ["request-id"] else r"req_[0-9a-f]{24}"
    assert all(re.fullmatch(form, ids[name]) for name in names)
