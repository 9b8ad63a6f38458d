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
    with pytest.raises(anthropic.InternalServerError) as raised:
        await anthropic_client.messages.create(model=CLAUDE, max_tokens=100, messages=HI, extra_headers=headers)
    assert raised.value.status_code == 529
    assert raised.value.body["error"]["message"] == OVERLOADED_2026  # type: ignore[index]
