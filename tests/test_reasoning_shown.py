"""Reasoning as the request asks for it: Responses summaries and encrypted content, Messages
thinking (enabled, omitted, forced), redacted thinking, summary parts, and the silence it is on
Chat Completions, on the wire and through the official SDKs."""

from __future__ import annotations

import aiohttp
import pytest

from fakehop.play import player
from fakehop.protocols import chat
from fakehop.scenario import reader as sc

from .inline_scenarios import add, data_events, problems_of

MESSAGES = [{"role": "user", "content": "Hi"}]
THOUGHT = "The user says hi; say hi back."
PARTS = (
    'steps: [{reasoning: {parts: ["**Plan**\\n\\nGreet.", "**Check**\\n\\nBe brief."]}, chunk: word}, {text: Hello}]'
)
REDACTED = "steps: [{reasoning: Thinking.}, redacted_thinking, {redacted_thinking: EmwKAhgBEgy3va3pzix}, {text: Done}]"
ENABLED = {"type": "enabled", "budget_tokens": 1024}


def responses_body(**fields) -> dict:
    return {"model": "m", "input": "Hi", "stream": True, **fields}


def messages_body(**fields) -> dict:
    return {"model": "c", "max_tokens": 2048, "messages": MESSAGES, "stream": True, **fields}


def types(events: list[dict]) -> list[str]:
    return [event["type"] for event in events]


# ---------------------------------------------------------------- Responses


async def test_responses_summary_only_when_the_request_asks(base_url, gateway, openai_client):
    headers = add(gateway, "thinks", f"steps: [{{reasoning: '{THOUGHT}', chunk: word}}, {{text: Hi}}]")
    unasked = await data_events(base_url, "/v1/responses", responses_body(), headers)
    assert not [t for t in types(unasked) if t.startswith("response.reasoning_summary")]
    reasoning = [e["item"] for e in unasked if e["type"] == "response.output_item.done"][0]
    assert reasoning == {
        "id": reasoning["id"],
        "type": "reasoning",
        "summary": [],
        "content": [],
        "encrypted_content": None,
    }
    asked = await data_events(base_url, "/v1/responses", responses_body(reasoning={"summary": "auto"}), headers)
    assert "".join(e["delta"] for e in asked if e["type"] == "response.reasoning_summary_text.delta") == THOUGHT
    response = await openai_client.responses.create(model="m", input="Hi", extra_headers=headers)
    assert response.output[0].type == "reasoning" and response.output[0].summary == []
    response = await openai_client.responses.create(
        model="m", input="Hi", reasoning={"summary": "detailed"}, extra_headers=headers
    )
    assert [part.text for part in response.output[0].summary] == [THOUGHT]


async def test_responses_encrypted_content_when_included(base_url, gateway, openai_client):
    headers = add(gateway, "thinks", f"steps: [{{reasoning: '{THOUGHT}'}}, redacted_thinking, {{text: Hi}}]")
    body = responses_body(include=["reasoning.encrypted_content"])
    events = await data_events(base_url, "/v1/responses", body, {**headers, "X-Fakehop-Seed": "3"})
    added = [
        e["item"]["encrypted_content"]
        for e in events
        if e["type"] == "response.output_item.added" and e["item"]["type"] == "reasoning"
    ]
    done = [
        e["item"]["encrypted_content"]
        for e in events
        if e["type"] == "response.output_item.done" and e["item"]["type"] == "reasoning"
    ]
    assert added == done and len(set(done)) == 2 and all(value.startswith("gAAAAAB") for value in done)
    again = await data_events(base_url, "/v1/responses", body, {**headers, "X-Fakehop-Seed": "3"})
    assert again == events
    whole = await openai_client.responses.create(
        model="m", input="Hi", include=["reasoning.encrypted_content"], extra_headers={**headers, "X-Fakehop-Seed": "3"}
    )
    assert [item.encrypted_content for item in whole.output if item.type == "reasoning"] == done
    plain = await openai_client.responses.create(model="m", input="Hi", extra_headers=headers)
    assert [item.encrypted_content for item in plain.output if item.type == "reasoning"] == [None, None]


async def test_responses_reasoning_parts_are_summary_parts(base_url, gateway, openai_client):
    headers = add(gateway, "parts", PARTS)
    events = await data_events(base_url, "/v1/responses", responses_body(reasoning={"summary": "auto"}), headers)
    added = [e["summary_index"] for e in events if e["type"] == "response.reasoning_summary_part.added"]
    done = [
        (e["summary_index"], e["part"]["text"]) for e in events if e["type"] == "response.reasoning_summary_part.done"
    ]
    assert added == [0, 1]
    assert done == [(0, "**Plan**\n\nGreet."), (1, "**Check**\n\nBe brief.")]
    assert types(events).index("response.reasoning_summary_part.done") < types(events).index(
        "response.reasoning_summary_part.added", 4
    )
    async with openai_client.responses.stream(
        model="m", input="Hi", reasoning={"summary": "auto"}, extra_headers=headers
    ) as stream:
        final = await stream.get_final_response()
    assert [part.text for part in final.output[0].summary] == ["**Plan**\n\nGreet.", "**Check**\n\nBe brief."]
    whole = await openai_client.responses.create(
        model="m", input="Hi", reasoning={"summary": "auto"}, extra_headers=headers
    )
    assert [part.text for part in whole.output[0].summary] == ["**Plan**\n\nGreet.", "**Check**\n\nBe brief."]


async def test_force_reasoning_shows_summaries_unasked(base_url, gateway):
    headers = add(gateway, "forced", f"force_reasoning: true\nsteps: [{{reasoning: '{THOUGHT}'}}, {{text: Hi}}]")
    events = await data_events(base_url, "/v1/responses", responses_body(), headers)
    assert [e["text"] for e in events if e["type"] == "response.reasoning_summary_text.done"] == [THOUGHT]


# ---------------------------------------------------------------- Messages


async def test_messages_thinking_only_when_the_request_enables_it(base_url, gateway, anthropic_client):
    headers = add(gateway, "thinks", f"steps: [{{reasoning: '{THOUGHT}', chunk: word}}, {{text: Hi}}]")
    for thinking in (None, {"type": "disabled"}):
        events = await data_events(
            base_url, "/v1/messages", messages_body(**({"thinking": thinking} if thinking else {})), headers
        )
        assert [(e["index"], e["content_block"]["type"]) for e in events if e["type"] == "content_block_start"] == [
            (0, "text")
        ]
    for thinking in (ENABLED, {"type": "adaptive"}):
        events = await data_events(base_url, "/v1/messages", messages_body(thinking=thinking), headers)
        assert [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"] == [
            "thinking",
            "text",
        ]
    message = await anthropic_client.messages.create(
        model="c", max_tokens=2048, messages=MESSAGES, extra_headers=headers
    )
    assert [block.type for block in message.content] == ["text"]
    async with anthropic_client.messages.stream(
        model="c", max_tokens=2048, messages=MESSAGES, thinking=ENABLED, extra_headers=headers
    ) as stream:
        message = await stream.get_final_message()
    assert [block.type for block in message.content] == ["thinking", "text"] and message.content[0].thinking == THOUGHT


async def test_force_reasoning_shows_thinking_unasked(base_url, gateway, anthropic_client):
    headers = add(gateway, "forced", f"force_reasoning: true\nsteps: [{{reasoning: '{THOUGHT}'}}, {{text: Hi}}]")
    message = await anthropic_client.messages.create(
        model="c", max_tokens=2048, messages=MESSAGES, extra_headers=headers
    )
    assert [block.type for block in message.content] == ["thinking", "text"]


async def test_messages_without_thinking_count_no_thinking_tokens(base_url, gateway, anthropic_client):
    """A request that does not enable thinking gets a model that did not think: no thinking
    tokens, and output tokens for the text alone (8 characters: 2 tokens); the other protocols,
    whose models reason unseen, still count it."""
    headers = add(gateway, "thinks", f"steps: [{{reasoning: '{THOUGHT}', chunk: word}}, {{text: 'Hi there'}}]")
    thought_tokens = -(-len(THOUGHT) // 4)
    events = await data_events(base_url, "/v1/messages", messages_body(), headers)
    usage = next(e for e in events if e["type"] == "message_delta")["usage"]
    assert (usage["output_tokens"], usage["output_tokens_details"]) == (2, {"thinking_tokens": 0})
    message = await anthropic_client.messages.create(
        model="c", max_tokens=2048, messages=MESSAGES, extra_headers=headers
    )
    assert (message.usage.output_tokens, message.usage.output_tokens_details.thinking_tokens) == (2, 0)
    async with anthropic_client.messages.stream(
        model="c", max_tokens=2048, messages=MESSAGES, thinking=ENABLED, extra_headers=headers
    ) as stream:
        thought = (await stream.get_final_message()).usage
    assert (thought.output_tokens, thought.output_tokens_details.thinking_tokens) == (
        -(-(len(THOUGHT) + 8) // 4),
        thought_tokens,
    )
    cut = await anthropic_client.messages.create(model="c", max_tokens=1, messages=MESSAGES, extra_headers=headers)
    assert (cut.content[0].text, cut.stop_reason) == (
        "Hi t",
        "max_tokens",
    )  # the limit spent on the text, not on reasoning never done
    [response] = await data_events(base_url, "/v1/responses", {"model": "m", "input": "Hi"}, headers)
    assert response["usage"]["output_tokens_details"]["reasoning_tokens"] == thought_tokens


@pytest.mark.parametrize(
    "text, thinking",
    [
        (f"steps: [{{reasoning: '{THOUGHT}', chunk: word}}, {{text: Hi}}]", {**ENABLED, "display": "omitted"}),
        ("steps: [{reasoning: ''}, {text: Hi}]", ENABLED),
    ],
    ids=["display-omitted", "empty-reasoning"],
)
async def test_thinking_with_a_signature_and_no_text(base_url, gateway, anthropic_client, text, thinking):
    headers = add(gateway, "omitted", text)
    events = await data_events(base_url, "/v1/messages", messages_body(thinking=thinking), headers)
    block = [e for e in events if e.get("index") == 0]
    assert [e["type"] for e in block] == ["content_block_start", "content_block_delta", "content_block_stop"]
    assert block[1]["delta"]["type"] == "signature_delta"
    async with anthropic_client.messages.stream(
        model="c", max_tokens=2048, messages=MESSAGES, thinking=thinking, extra_headers=headers
    ) as stream:
        message = await stream.get_final_message()
    assert (message.content[0].type, message.content[0].thinking) == ("thinking", "")
    assert len(message.content[0].signature) > 40


async def test_messages_reasoning_parts_are_one_thinking_block(gateway, anthropic_client):
    headers = add(gateway, "parts", PARTS)
    message = await anthropic_client.messages.create(
        model="c", max_tokens=2048, messages=MESSAGES, thinking=ENABLED, extra_headers=headers
    )
    assert [block.type for block in message.content] == ["thinking", "text"]
    assert message.content[0].thinking == "**Plan**\n\nGreet.**Check**\n\nBe brief."


async def test_redacted_thinking_blocks(base_url, gateway, anthropic_client):
    headers = add(gateway, "redacted", REDACTED)
    events = await data_events(base_url, "/v1/messages", messages_body(thinking=ENABLED), headers)
    starts = [e["content_block"] for e in events if e["type"] == "content_block_start"]
    assert [block["type"] for block in starts] == ["thinking", "redacted_thinking", "redacted_thinking", "text"]
    assert starts[2]["data"] == "EmwKAhgBEgy3va3pzix" and len(starts[1]["data"]) > 100
    assert not [e for e in events if e["type"] == "content_block_delta" and e["index"] in (1, 2)]
    assert [e["index"] for e in events if e["type"] == "content_block_stop"] == [0, 1, 2, 3]
    async with anthropic_client.messages.stream(
        model="c", max_tokens=2048, messages=MESSAGES, thinking=ENABLED, extra_headers=headers
    ) as stream:
        streamed = await stream.get_final_message()
    whole = await anthropic_client.messages.create(
        model="c", max_tokens=2048, messages=MESSAGES, thinking=ENABLED, extra_headers=headers
    )
    for message in (streamed, whole):
        assert [block.type for block in message.content] == [
            "thinking",
            "redacted_thinking",
            "redacted_thinking",
            "text",
        ]
        assert message.content[2].data == "EmwKAhgBEgy3va3pzix"
    unasked = await anthropic_client.messages.create(
        model="c", max_tokens=2048, messages=MESSAGES, extra_headers=headers
    )
    assert [block.type for block in unasked.content] == ["text"]


async def test_redacted_thinking_elsewhere(gateway, openai_client):
    headers = add(gateway, "redacted", REDACTED)
    response = await openai_client.responses.create(
        model="m", input="Hi", reasoning={"summary": "auto"}, extra_headers=headers
    )
    assert [(item.type, len(getattr(item, "summary", []))) for item in response.output] == [
        ("reasoning", 1),
        ("reasoning", 0),
        ("reasoning", 0),
        ("message", 0),
    ]
    completion = await openai_client.chat.completions.create(model="m", messages=MESSAGES, extra_headers=headers)
    assert completion.choices[0].message.content == "Done"


def test_reasoning_steps_are_checked_at_load():
    assert "expected a non-empty list of texts" in problems_of("steps: [{reasoning: {parts: []}}]")
    assert "did you mean 'parts'" in problems_of("steps: [{reasoning: {part: [a]}}]")
    assert "redacted_thinking: expected the block's opaque data" in problems_of("steps: [{redacted_thinking: 5}]")
    assert problems_of("steps: [{redacted_thinking: ''}]").endswith("as a string, or nothing, got an empty string")
    assert "force_reasoning: expected true or false" in problems_of("force_reasoning: always\nsteps: [{text: a}]")
    step = (
        sc.parse_text("steps: [{reasoning: {parts: [a b, c]}, chunk: word}]", "t.yaml", "t").entries[0].script.steps[0]
    )
    assert step == sc.Output("reasoning", ("a", " b", "c"), 0.0, part_starts=(0, 2))
    pieces = sc.parse_text("steps: [{reasoning: {parts: [[Hel, lo], c d]}}]", "t.yaml", "t").entries[0].script.steps[0]
    assert (pieces.deltas, pieces.part_starts) == (("Hel", "lo", "c d"), (0, 2))
    assert "piece 2 is a number" in problems_of("steps: [{reasoning: {parts: [[a, 5]]}}]")
    assert "a part cannot quote the request" in problems_of("steps: [{reasoning: {parts: [{from: prompt}]}}]")


# ---------------------------------------------------------------- Chat Completions: silence


LONG_THOUGHT = "keepalive: 1s\nsteps: [{text: Hmm.}, {reasoning: 'one two three four five six seven eight nine ten', chunk: word, interval: 1.5s}, {text: ' Done.'}]"


def test_chat_reasoning_is_silence_with_keepalives_every_interval():
    script = sc.parse_text(LONG_THOUGHT, "t.yaml", "t").entries[0].script
    laid_out = list(player.timeline(script, chat.parse({"model": "m", "messages": MESSAGES}).play))
    keepalives = [offset for offset, happening in laid_out if happening is player.KEEPALIVE]
    assert keepalives == pytest.approx([float(second) for second in range(1, 14)])  # 13.5 s of reasoning, one a second
    assert not [h for _, h in laid_out if isinstance(h, player.BlockStart) and h.kind == "reasoning"]
    shown = list(player.timeline(script, player.PlayRequest()))
    assert [offset for offset, happening in shown if happening is player.KEEPALIVE] == pytest.approx(
        [1.0 + 1.5 * n for n in range(9)]
    )


async def test_chat_reasoning_silence_reaches_the_client_as_keepalives(base_url, gateway, openai_client):
    headers = add(gateway, "long-thought", LONG_THOUGHT)
    async with aiohttp.ClientSession() as session:
        async with session.post(
            base_url + "/v1/chat/completions",
            json={"model": "m", "messages": MESSAGES, "stream": True},
            headers=headers,
        ) as answer:
            frames = (await answer.text()).split("\n\n")
    assert frames.count(": hopbase-keepalive") == 13
    stream = await openai_client.chat.completions.create(
        model="m", messages=MESSAGES, stream=True, extra_headers=headers
    )
    assert "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices]) == "Hmm. Done."
