"""Every usage detail field, as a scenario sets it (0 unless set), on the wire and through the official SDKs."""

from __future__ import annotations

import pytest

from fakehop.scenario import reader as sc

from .inline_scenarios import add, data_events, problems_of

MESSAGES = [{"role": "user", "content": "Hi"}]
DETAILED = """
usage: {input_tokens: 100, output_tokens: 50, reasoning_tokens: 20, cached_tokens: 40, cache_write_tokens: 10,
        input_audio_tokens: 3, output_audio_tokens: 4, accepted_prediction_tokens: 5, rejected_prediction_tokens: 6}
steps: [{reasoning: "Think."}, {text: "Hi"}]
"""
ANTHROPIC_NAMES = """
usage: {input_tokens: 100, output_tokens: 50, thinking_tokens: 20, cache_read_input_tokens: 40, cache_creation_input_tokens: 10}
steps: [{text: "Hi"}]
"""


async def test_chat_usage_has_every_detail(base_url, gateway, openai_client):
    headers = add(gateway, "detailed", DETAILED)
    body = {"model": "m", "messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True}}
    usage = (await data_events(base_url, "/v1/chat/completions", body, headers))[-1]["usage"]
    assert usage == {
        "prompt_tokens": 100,
        "completion_tokens": 50,
        "total_tokens": 150,
        "prompt_tokens_details": {"cached_tokens": 40, "audio_tokens": 3},
        "completion_tokens_details": {
            "reasoning_tokens": 20,
            "audio_tokens": 4,
            "accepted_prediction_tokens": 5,
            "rejected_prediction_tokens": 6,
        },
    }
    completion = await openai_client.chat.completions.create(model="m", messages=MESSAGES, extra_headers=headers)
    details = completion.usage.completion_tokens_details
    assert (
        completion.usage.prompt_tokens_details.cached_tokens,
        completion.usage.prompt_tokens_details.audio_tokens,
    ) == (40, 3)
    assert (
        details.reasoning_tokens,
        details.audio_tokens,
        details.accepted_prediction_tokens,
        details.rejected_prediction_tokens,
    ) == (20, 4, 5, 6)


async def test_chat_details_are_zero_unless_set(openai_client):
    completion = await openai_client.chat.completions.create(
        model="m", messages=MESSAGES, extra_headers={"X-Fakehop-Scenario": "think-then-tool"}
    )
    details = completion.usage.completion_tokens_details
    assert (
        completion.usage.prompt_tokens_details.cached_tokens,
        completion.usage.prompt_tokens_details.audio_tokens,
    ) == (0, 0)
    assert details.reasoning_tokens == len("The user wants the weather in Paris; call the tool.") // 4 + 1  # estimated
    assert (details.audio_tokens, details.accepted_prediction_tokens, details.rejected_prediction_tokens) == (0, 0, 0)


async def test_responses_usage_has_cache_writes(base_url, gateway, openai_client):
    headers = add(gateway, "detailed", DETAILED)
    events = await data_events(base_url, "/v1/responses", {"model": "m", "input": "Hi", "stream": True}, headers)
    assert events[-1]["response"]["usage"] == {
        "input_tokens": 100,
        "input_tokens_details": {"cached_tokens": 40, "cache_write_tokens": 10},
        "output_tokens": 50,
        "output_tokens_details": {"reasoning_tokens": 20},
        "total_tokens": 150,
    }
    response = await openai_client.responses.create(model="m", input="Hi", extra_headers=headers)
    assert (
        response.usage.input_tokens_details.cached_tokens,
        response.usage.input_tokens_details.cache_write_tokens,
    ) == (40, 10)
    assert response.usage.output_tokens_details.reasoning_tokens == 20


@pytest.mark.parametrize("text", [DETAILED, ANTHROPIC_NAMES], ids=["neutral-names", "anthropic-names"])
async def test_messages_usage_has_cache_and_thinking_counts(base_url, gateway, anthropic_client, text):
    headers = add(gateway, "detailed", text)
    body = {"model": "c", "max_tokens": 500, "messages": MESSAGES, "stream": True}
    events = await data_events(base_url, "/v1/messages", body, headers)
    start, delta = events[0]["message"]["usage"], next(e for e in events if e["type"] == "message_delta")["usage"]
    assert (
        start["cache_read_input_tokens"],
        start["cache_creation_input_tokens"],
        start["cache_creation"]["ephemeral_5m_input_tokens"],
    ) == (40, 10, 10)
    assert "output_tokens_details" not in start
    assert delta == {
        "input_tokens": 100,
        "cache_creation_input_tokens": 10,
        "cache_read_input_tokens": 40,
        "output_tokens": 50,
        "output_tokens_details": {"thinking_tokens": 20},
    }
    async with anthropic_client.messages.stream(
        model="c", max_tokens=500, messages=MESSAGES, extra_headers=headers
    ) as stream:
        message = await stream.get_final_message()
    assert (message.usage.cache_read_input_tokens, message.usage.cache_creation_input_tokens) == (40, 10)
    assert message.usage.output_tokens_details.thinking_tokens == 20
    whole = await anthropic_client.messages.create(model="c", max_tokens=500, messages=MESSAGES, extra_headers=headers)
    assert (
        whole.usage.cache_read_input_tokens,
        whole.usage.output_tokens_details.thinking_tokens,
        whole.usage.inference_geo,
    ) == (40, 20, "global")


def test_usage_names_are_checked_at_load():
    assert "name the same count" in problems_of(
        "usage: {cached_tokens: 1, cache_read_input_tokens: 2}\nsteps: [{text: a}]"
    )
    assert "did you mean 'cached_tokens'" in problems_of("usage: {cache_tokens: 1}\nsteps: [{text: a}]")
    usage = sc.parse_text(ANTHROPIC_NAMES, "t.yaml", "t").entries[0].script.usage
    assert (usage.reasoning_tokens, usage.cached_tokens, usage.cache_write_tokens) == (20, 40, 10)
