"""What 2026 answers look like beside what they mean, through real sockets and the official SDKs'
objects: Anthropic's `req_011C…` request ids, the 529 message of Messages."""

from __future__ import annotations

import re

import aiohttp
import anthropic
import pytest

from .inline_scenarios import add, data_events

CLAUDE = "claude-sonnet-5"
ANTHROPIC = {"anthropic-version": "2023-06-01"}
HI = [{"role": "user", "content": "Hi"}]
MESSAGES_BODY = {"model": CLAUDE, "max_tokens": 100, "messages": HI}
ANTHROPIC_REQUEST_ID = re.compile(r"req_011C[1-9A-HJ-NP-Za-km-z]{20}")
OPENAI_REQUEST_ID = re.compile(r"req_[0-9a-f]{24}")
OVERLOADED_2026 = "Overloaded. https://docs.claude.com/en/api/errors"
OVERLOADED = "steps: [{text: Hi}, {fail: {kind: overloaded}}]"


async def post(base_url: str, path: str, body: dict, headers: dict) -> tuple[int, dict, dict]:
    """Status, headers and JSON body of one answer."""
    async with aiohttp.ClientSession() as session:
        async with session.post(base_url + path, json=body, headers=headers) as answer:
            return answer.status, {name.lower(): value for name, value in answer.headers.items()}, await answer.json()


# ---------------------------------------------------------------- request ids


async def test_a_messages_answer_has_a_request_id_as_anthropic_writes_them(base_url):
    ids = set()
    for _ in range(2):
        status, headers, _ = await post(base_url, "/v1/messages", MESSAGES_BODY, ANTHROPIC)
        assert status == 200 and ANTHROPIC_REQUEST_ID.fullmatch(headers["request-id"])
        ids.add(headers["request-id"])
    assert len(ids) == 2


async def test_a_messages_error_names_the_same_anthropic_request_id_in_body_and_header(base_url):
    status, headers, body = await post(base_url, "/v1/messages", {"model": CLAUDE}, ANTHROPIC)
    assert status == 400 and ANTHROPIC_REQUEST_ID.fullmatch(body["request_id"])
    assert headers["request-id"] == body["request_id"]


async def test_an_anthropic_client_lost_on_an_unknown_path_gets_an_anthropic_request_id(base_url):
    status, headers, body = await post(base_url, "/v1/nowhere", MESSAGES_BODY, ANTHROPIC)
    assert status == 404 and ANTHROPIC_REQUEST_ID.fullmatch(headers["request-id"]) and "x-request-id" not in headers


async def test_openai_answers_keep_their_request_ids(base_url):
    body = {"model": "gpt-5.6-sol", "input": "Hi"}
    _, headers, _ = await post(base_url, "/v1/responses", body, {})
    assert OPENAI_REQUEST_ID.fullmatch(headers["x-request-id"])


async def test_a_seeded_messages_answer_keeps_its_seeded_request_id(base_url):
    _, headers, _ = await post(base_url, "/v1/messages", MESSAGES_BODY, {**ANTHROPIC, "X-Fakehop-Seed": "7"})
    assert headers["request-id"] == "req_000000000000000000000007"


async def test_the_anthropic_sdk_reads_the_request_id(anthropic_client):
    message = await anthropic_client.messages.create(model=CLAUDE, max_tokens=100, messages=HI)
    assert ANTHROPIC_REQUEST_ID.fullmatch(message._request_id or "")


# ---------------------------------------------------------------- the 529 message of Messages


@pytest.mark.parametrize("stream", [True, False])
async def test_an_overloaded_fail_on_messages_says_what_the_2026_api_says(base_url, gateway, stream):
    headers = {**ANTHROPIC, **add(gateway, "busy", OVERLOADED)}
    [*_, error] = await data_events(base_url, "/v1/messages", {**MESSAGES_BODY, "stream": stream}, headers)
    assert error["error"] == {"type": "overloaded_error", "message": OVERLOADED_2026}


async def test_a_529_http_error_on_messages_says_what_the_2026_api_says(base_url, gateway):
    headers = {**ANTHROPIC, **add(gateway, "busy", "http_error: {status: 529}")}
    status, _, body = await post(base_url, "/v1/messages", MESSAGES_BODY, headers)
    assert status == 529 and body["error"]["message"] == OVERLOADED_2026


async def test_a_message_the_scenario_gives_stays_its_own(base_url, gateway):
    headers = {**ANTHROPIC, **add(gateway, "busy", "steps: [{fail: {kind: overloaded, message: Overloaded}}]")}
    status, _, body = await post(base_url, "/v1/messages", MESSAGES_BODY, headers)
    assert status == 529 and body["error"]["message"] == "Overloaded"


@pytest.mark.parametrize("scenario", [OVERLOADED, "http_error: {status: 529}"])
async def test_the_openai_protocols_keep_their_overloaded_message(base_url, gateway, scenario):
    headers = add(gateway, "busy", scenario)
    _, _, body = await post(base_url, "/v1/chat/completions", {"model": "gpt-5.6-sol", "messages": HI}, headers)
    assert body["error"]["message"] == "Overloaded"


async def test_the_anthropic_sdk_reads_the_2026_overloaded_message(anthropic_client, gateway):
    headers = add(gateway, "busy", OVERLOADED)
    with pytest.raises(anthropic.APIStatusError) as raised:  # InternalServerError, or OverloadedError before 2.x
        await anthropic_client.messages.create(model=CLAUDE, max_tokens=100, messages=HI, extra_headers=headers)
    assert raised.value.status_code == 529
    assert raised.value.body["error"]["message"] == OVERLOADED_2026


# ---------------------------------------------------------------- gpt-5.6's own response fields

SOL = "gpt-5.6-sol"
SEARCHES = """
steps:
  - server_tool: {name: web_search, input: {query: cats}, result: [{url: "https://a.example/cats", title: Cats}]}
  - server_tool: {name: web_fetch, input: {url: "https://b.example/page"}, result: {content: Text, title: B}}
  - text: Done.
"""
NO_TOOL_USAGE = {
    "image_gen": {
        "input_tokens": 0,
        "input_tokens_details": {"image_tokens": 0, "text_tokens": 0},
        "output_tokens": 0,
        "total_tokens": 0,
    },
    "web_search": {"num_requests": 0},
}


async def lifecycle(base_url: str, body: dict, headers: dict | None = None) -> list[dict]:
    """The response objects of a streamed Responses answer's lifecycle events."""
    events = await data_events(base_url, "/v1/responses", {**body, "stream": True}, headers or {})
    return [event["response"] for event in events if "response" in event]


async def test_a_gpt_5_6_answer_shows_what_it_was_not_asked_for(base_url):
    created, in_progress, completed = await lifecycle(base_url, {"model": SOL, "input": "Hi"})
    for shown in (created, in_progress, completed):
        assert shown["billing"] == {"payer": "developer"} and shown["prompt_cache_retention"] == "24h"
        assert shown["reasoning"] == {"effort": "medium", "summary": None}
    assert [created["service_tier"], in_progress["service_tier"], completed["service_tier"]] == [
        "auto",
        "auto",
        "default",
    ]
    assert created["tool_usage"] is None and completed["tool_usage"] == NO_TOOL_USAGE
    keys = list(completed)
    assert keys[4:7] == ["background", "billing", "completed_at"]
    assert keys[keys.index("tool_choice") : keys.index("tool_choice") + 3] == ["tool_choice", "tool_usage", "tools"]


async def test_what_a_gpt_5_6_request_asks_for_wins(base_url):
    body = {
        "model": SOL,
        "input": "Hi",
        "service_tier": "priority",
        "prompt_cache_retention": "in_memory",
        "reasoning": {"effort": "high", "summary": "auto", "context": "all_turns", "mode": "pro"},
    }
    created, _, completed = await lifecycle(base_url, body)
    assert created["service_tier"] == completed["service_tier"] == "priority"
    assert completed["prompt_cache_retention"] == "in_memory"
    assert completed["reasoning"] == {"effort": "high", "summary": "auto", "context": "all_turns", "mode": "pro"}


async def test_tool_usage_counts_the_searches_not_the_pages_opened(base_url, gateway):
    *_, completed = await lifecycle(base_url, {"model": SOL, "input": "Hi"}, add(gateway, "search", SEARCHES))
    assert completed["tool_usage"]["web_search"] == {"num_requests": 1}


@pytest.mark.parametrize("model", ["gpt-5.5", "gpt-4o", "o3"])
async def test_other_models_answer_as_before(base_url, model):
    """Even right after a gpt-5.6 answer of the same scenario, whose stream the server keeps."""
    await lifecycle(base_url, {"model": SOL, "input": "Hi"})
    for shown in await lifecycle(base_url, {"model": model, "input": "Hi"}):
        assert "billing" not in shown and "tool_usage" not in shown
        assert shown["service_tier"] == "default" and shown["prompt_cache_retention"] is None
        assert shown["reasoning"] == {"effort": None, "summary": None}


async def test_the_openai_sdk_types_the_gpt_5_6_fields(openai_client):
    async with openai_client.responses.stream(model=SOL, input="Hi") as stream:
        created = [event async for event in stream][0]
        response = await stream.get_final_response()
    assert created.type == "response.created" and created.response.service_tier == "auto"
    assert response.service_tier == "default" and response.prompt_cache_retention == "24h"
    assert response.reasoning is not None and response.reasoning.effort == "medium"
    usage = response.tool_usage  # typed in the SDKs that know it, an extra mapping in older ones
    assert usage is not None
    assert (usage["web_search"] if isinstance(usage, dict) else usage.web_search.model_dump())["num_requests"] == 0
    assert (response.model_extra or {})["billing"] == {"payer": "developer"}  # no typed field in openai 3.63
    whole = await openai_client.responses.create(model=SOL, input="Hi")
    assert whole.service_tier == "default" and whole.tool_usage == response.tool_usage


# ---------------------------------------------------------------- bytes in Responses' delta logprobs

WORDS = "steps: [{text: Héllo}, {text: ' there'}]"
WITH_LOGPROBS = {"model": SOL, "input": "Hi", "include": ["message.output_text.logprobs"], "top_logprobs": 2}


async def test_a_text_deltas_logprobs_carry_each_tokens_utf8_bytes(base_url, gateway):
    events = await data_events(base_url, "/v1/responses", {**WITH_LOGPROBS, "stream": True}, add(gateway, "w", WORDS))
    [first, second] = [event["logprobs"] for event in events if event["type"] == "response.output_text.delta"]
    assert [list(entry) for entry in first] == [["token", "logprob", "bytes", "top_logprobs"]]
    assert first[0]["bytes"] == list("Héllo".encode()) and second[0]["bytes"] == list(b" there")
    assert all(other["bytes"] == list(other["token"].encode()) for other in first[0]["top_logprobs"])
    plain = await data_events(base_url, "/v1/responses", {"model": SOL, "input": "Hi", "stream": True}, {})
    assert all(event["logprobs"] == [] for event in plain if event["type"] == "response.output_text.delta")


async def test_the_openai_sdk_reads_the_delta_bytes(openai_client, gateway):
    headers = add(gateway, "w", WORDS)
    async with openai_client.responses.stream(**WITH_LOGPROBS, extra_headers=headers) as stream:
        deltas = [event async for event in stream if event.type == "response.output_text.delta"]
    assert [(delta.logprobs[0].model_extra or {})["bytes"] for delta in deltas] == [  # not typed in openai 3.63
        list("Héllo".encode()),
        list(b" there"),
    ]
