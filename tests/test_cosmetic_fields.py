"""The small fields of 2026's real streams: Chat's id length and system_fingerprint, Responses' completed_at, moderation
and echoed penalties, Anthropic's stop_details, inference_geo and tool callers."""

from __future__ import annotations

import re

from .inline_scenarios import add, data_events

MESSAGES = [{"role": "user", "content": "Hi"}]


async def test_chat_ids_have_the_real_length(base_url):
    chunks = await data_events(base_url, "/v1/chat/completions", {"model": "m", "messages": MESSAGES, "stream": True}, {})
    assert re.fullmatch(r"chatcmpl-[A-Za-z0-9]{29}", chunks[0]["id"])
    assert len({chunk["id"] for chunk in chunks}) == 1


async def test_chat_system_fingerprint_is_null_for_the_gpt_5_family(base_url, gateway, openai_client):
    for model, fingerprint in [("gpt-5", None), ("gpt-5.6-sol", None), ("gpt-5-mini", None), ("gpt-4.1", "fp_fakehop"), ("o3", "fp_fakehop")]:
        body = {"model": model, "messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True}}
        chunks = await data_events(base_url, "/v1/chat/completions", body, {"X-Fakehop-Scenario": "hello"})
        assert {chunk["system_fingerprint"] for chunk in chunks} == {fingerprint}, model
        [whole] = await data_events(base_url, "/v1/chat/completions", {**body, "stream": False}, {"X-Fakehop-Scenario": "hello"})
        assert whole["system_fingerprint"] == fingerprint, model
    async with openai_client.chat.completions.stream(model="gpt-5", messages=MESSAGES, extra_headers={"X-Fakehop-Scenario": "hello"}) as stream:
        assert (await stream.get_final_completion()).system_fingerprint is None
    older = await openai_client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
    assert {chunk.system_fingerprint async for chunk in older} == {"fp_fakehop"}
    named = add(gateway, "named", "model: gpt-5.6-sol\nsteps: [{text: Hi}]")  # the model the answer names decides
    [whole] = await data_events(base_url, "/v1/chat/completions", {"model": "gpt-4o", "messages": MESSAGES}, named)
    assert (whole["model"], whole["system_fingerprint"]) == ("gpt-5.6-sol", None)


async def test_responses_lifecycle_fields(base_url, gateway, openai_client):
    events = await data_events(base_url, "/v1/responses", {"model": "m", "input": "Hi", "stream": True}, {})
    created, completed = events[0]["response"], events[-1]["response"]
    assert (created["completed_at"], completed["completed_at"]) == (None, completed["created_at"])
    assert list(created)[:8] == ["id", "object", "created_at", "status", "background", "completed_at", "error", "frequency_penalty"]
    assert (created["moderation"], created["frequency_penalty"], created["presence_penalty"], created["prompt_cache_retention"]) == (None, 0.0, 0.0, None)
    headers = add(gateway, "cut", "finish: length\nsteps: [{text: a}]")
    incomplete = (await data_events(base_url, "/v1/responses", {"model": "m", "input": "Hi", "stream": True}, headers))[-1]["response"]
    assert (incomplete["status"], incomplete["completed_at"]) == ("incomplete", None)
    sent = {"frequency_penalty": 0.5, "presence_penalty": -1, "prompt_cache_retention": "24h"}  # not every SDK version names them
    response = await openai_client.responses.create(model="m", input="Hi", extra_body=sent)
    assert (response.frequency_penalty, response.presence_penalty, response.prompt_cache_retention) == (0.5, -1, "24h")
    assert response.completed_at == response.created_at and response.moderation is None


async def test_messages_fields(base_url, anthropic_client):
    body = {"model": "c", "max_tokens": 100, "messages": MESSAGES, "stream": True}
    events = await data_events(base_url, "/v1/messages", body, {"X-Fakehop-Scenario": "weather-tool"})
    start = events[0]["message"]
    assert (start["stop_details"], start["usage"]["inference_geo"]) == (None, "global")
    tool = next(e["content_block"] for e in events if e["type"] == "content_block_start" and e["content_block"]["type"] == "tool_use")
    assert tool["caller"] == {"type": "direct"}
    message = await anthropic_client.messages.create(model="c", max_tokens=100, messages=MESSAGES, extra_headers={"X-Fakehop-Scenario": "weather-tool"})
    assert (message.stop_details, message.content[1].caller.type, message.usage.inference_geo) == (None, "direct", "global")


async def test_messages_ping_comes_once_after_the_first_block_starts(base_url, gateway, anthropic_client):
    """As the newest real streams have it, however many blocks follow."""
    headers = add(gateway, "blocks", "steps: [{reasoning: Hmm.}, {text: Looking.}, {tool_call: {name: f, arguments: {a: 1}}}, {text: ' Done.'}]")
    body = {"model": "c", "max_tokens": 100, "messages": MESSAGES, "stream": True, "thinking": {"type": "adaptive"}}
    kinds = [event["type"] for event in await data_events(base_url, "/v1/messages", body, headers)]
    assert kinds.count("content_block_start") == 4
    assert kinds.count("ping") == 1 and kinds[kinds.index("content_block_start") + 1] == "ping"
    async with anthropic_client.messages.stream(model="c", max_tokens=100, messages=MESSAGES, thinking={"type": "adaptive"}, extra_headers=headers) as stream:
        message = await stream.get_final_message()
    assert [block.type for block in message.content] == ["thinking", "text", "tool_use", "text"]
