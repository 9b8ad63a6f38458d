"""The small fields of 2026's real streams: Chat's id length and system_fingerprint, Responses' completed_at, moderation
and echoed penalties, Anthropic's stop_details, inference_geo and tool callers."""

from __future__ import annotations

import re

import pytest

from .inline_scenarios import add, data_events

MESSAGES = [{"role": "user", "content": "Hi"}]


async def test_chat_ids_have_the_real_length(base_url):
    chunks = await data_events(
        base_url, "/v1/chat/completions", {"model": "m", "messages": MESSAGES, "stream": True}, {}
    )
    assert re.fullmatch(r"chatcmpl-[A-Za-z0-9]{29}", chunks[0]["id"])
    assert len({chunk["id"] for chunk in chunks}) == 1


async def test_chat_system_fingerprint_is_null_for_the_gpt_5_family(base_url, gateway, openai_client):
    for model, fingerprint in [
        ("gpt-5", None),
        ("gpt-5.6-sol", None),
        ("gpt-5-mini", None),
        ("gpt-4.1", "fp_fakehop"),
        ("o3", "fp_fakehop"),
    ]:
        body = {"model": model, "messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True}}
        chunks = await data_events(base_url, "/v1/chat/completions", body, {"X-Fakehop-Scenario": "hello"})
        assert {chunk["system_fingerprint"] for chunk in chunks} == {fingerprint}, model
        [whole] = await data_events(
            base_url, "/v1/chat/completions", {**body, "stream": False}, {"X-Fakehop-Scenario": "hello"}
        )
        assert whole["system_fingerprint"] == fingerprint, model
    async with openai_client.chat.completions.stream(
        model="gpt-5", messages=MESSAGES, extra_headers={"X-Fakehop-Scenario": "hello"}
    ) as stream:
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
    assert list(created)[:8] == [
        "id",
        "object",
        "created_at",
        "status",
        "background",
        "completed_at",
        "error",
        "frequency_penalty",
    ]
    assert (
        created["moderation"],
        created["frequency_penalty"],
        created["presence_penalty"],
        created["prompt_cache_retention"],
    ) == (None, 0.0, 0.0, None)
    headers = add(gateway, "cut", "finish: length\nsteps: [{text: a}]")
    incomplete = (await data_events(base_url, "/v1/responses", {"model": "m", "input": "Hi", "stream": True}, headers))[
        -1
    ]["response"]
    assert (incomplete["status"], incomplete["completed_at"]) == ("incomplete", None)
    sent = {
        "frequency_penalty": 0.5,
        "presence_penalty": -1,
        "prompt_cache_retention": "24h",
    }  # not every SDK version names them
    response = await openai_client.responses.create(model="m", input="Hi", extra_body=sent)
    assert (response.frequency_penalty, response.presence_penalty, response.prompt_cache_retention) == (0.5, -1, "24h")
    assert response.completed_at == response.created_at and response.moderation is None


async def test_messages_fields(base_url, anthropic_client):
    body = {"model": "c", "max_tokens": 100, "messages": MESSAGES, "stream": True}
    events = await data_events(base_url, "/v1/messages", body, {"X-Fakehop-Scenario": "weather-tool"})
    start = events[0]["message"]
    assert (start["stop_details"], start["usage"]["inference_geo"]) == (None, "global")
    tool = next(
        e["content_block"]
        for e in events
        if e["type"] == "content_block_start" and e["content_block"]["type"] == "tool_use"
    )
    assert tool["caller"] == {"type": "direct"}
    message = await anthropic_client.messages.create(
        model="c", max_tokens=100, messages=MESSAGES, extra_headers={"X-Fakehop-Scenario": "weather-tool"}
    )
    assert (message.stop_details, message.content[1].caller.type, message.usage.inference_geo) == (
        None,
        "direct",
        "global",
    )


async def test_messages_ping_comes_once_after_the_first_block_starts(base_url, gateway, anthropic_client):
    """As the newest real streams have it, however many blocks follow."""
    headers = add(
        gateway,
        "blocks",
        "steps: [{reasoning: Hmm.}, {text: Looking.}, {tool_call: {name: f, arguments: {a: 1}}}, {text: ' Done.'}]",
    )
    body = {"model": "c", "max_tokens": 100, "messages": MESSAGES, "stream": True, "thinking": {"type": "adaptive"}}
    kinds = [event["type"] for event in await data_events(base_url, "/v1/messages", body, headers)]
    assert kinds.count("content_block_start") == 4
    assert kinds.count("ping") == 1 and kinds[kinds.index("content_block_start") + 1] == "ping"
    async with anthropic_client.messages.stream(
        model="c", max_tokens=100, messages=MESSAGES, thinking={"type": "adaptive"}, extra_headers=headers
    ) as stream:
        message = await stream.get_final_message()
    assert [block.type for block in message.content] == ["thinking", "text", "tool_use", "text"]


def padded(text: str, obfuscation: str, offset: int) -> bool:
    return re.fullmatch(r"[A-Za-z0-9]*", obfuscation) is not None and (len(text) + len(obfuscation)) % 16 == offset


async def test_chat_chunks_carry_obfuscation_unless_turned_off(base_url, openai_client):
    body = {"model": "m", "messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True}}
    headers = {"X-Fakehop-Scenario": "weather-tool"}
    chunks = await data_events(base_url, "/v1/chat/completions", body, headers)
    assert all(list(chunk)[-1] == "obfuscation" for chunk in chunks)  # the last field of every chunk, the usage one too
    texts = [
        (chunk["choices"][0]["delta"]["content"], chunk["obfuscation"])
        for chunk in chunks
        if chunk["choices"] and chunk["choices"][0]["delta"].get("content")
    ]
    assert len(texts) == 5 and all(padded(text, obfuscation, 10) for text, obfuscation in texts)
    assert len({obfuscation for _, obfuscation in texts}) == 5
    off = await data_events(
        base_url,
        "/v1/chat/completions",
        {**body, "stream_options": {"include_usage": True, "include_obfuscation": False}},
        headers,
    )
    assert len(off) == len(chunks) and not any("obfuscation" in chunk for chunk in off)
    [whole] = await data_events(base_url, "/v1/chat/completions", {**body, "stream": False}, headers)
    assert "obfuscation" not in whole
    stream = await openai_client.chat.completions.create(
        model="m", messages=MESSAGES, stream=True, extra_headers={"X-Fakehop-Scenario": "hello"}
    )
    parsed = [chunk async for chunk in stream]
    assert all(chunk.obfuscation for chunk in parsed[1:])  # ChatCompletionChunk has the field
    assert (
        "".join(chunk.choices[0].delta.content or "" for chunk in parsed if chunk.choices)
        == "Hello! How can I help you today?"
    )


async def test_responses_deltas_carry_obfuscation_unless_turned_off(base_url, openai_client):
    body = {"model": "m", "input": "Hi", "stream": True}
    headers = {"X-Fakehop-Scenario": "weather-tool"}
    events = await data_events(base_url, "/v1/responses", body, headers)
    deltas = [event for event in events if event["type"].endswith(".delta")]
    assert {event["type"] for event in deltas} == {
        "response.output_text.delta",
        "response.function_call_arguments.delta",
    }
    assert all(list(event)[-1] == "obfuscation" and padded(event["delta"], event["obfuscation"], 0) for event in deltas)
    assert not any("obfuscation" in event for event in events if not event["type"].endswith(".delta"))
    off = await data_events(
        base_url, "/v1/responses", {**body, "stream_options": {"include_obfuscation": False}}, headers
    )
    assert [event["type"] for event in off] == [event["type"] for event in events] and not any(
        "obfuscation" in event for event in off
    )
    stream = await openai_client.responses.create(model="m", input="Hi", stream=True, extra_headers=headers)
    extras = [
        event.model_extra.get("obfuscation") async for event in stream if event.type == "response.output_text.delta"
    ]
    assert len(extras) == 5 and all(extras)  # an extra field of the SDK's event, kept as sent
    async with openai_client.responses.stream(model="m", input="Hi", extra_headers=headers) as helped:
        final = await helped.get_final_response()
    assert final.output_text == "Let me check the weather."


@pytest.mark.parametrize(
    "path, body",
    [
        (
            "/v1/chat/completions",
            {"model": "m", "messages": MESSAGES, "stream": True, "stream_options": {"include_obfuscation": "no"}},
        ),
        ("/v1/responses", {"model": "m", "input": "Hi", "stream": True, "stream_options": {"include_obfuscation": 0}}),
    ],
)
async def test_include_obfuscation_must_be_a_boolean(base_url, path, body):
    [error] = await data_events(base_url, path, body, {})
    assert error["error"]["param"] == "stream_options.include_obfuscation"
