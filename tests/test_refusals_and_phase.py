"""`refusal` steps in each protocol, and `phase` on Responses message items, on the wire and through the official SDKs."""

from __future__ import annotations

import pydantic

from fakehop.scenario import reader as sc

from .inline_scenarios import add, data_events, problems_of

MESSAGES = [{"role": "user", "content": "Hi"}]
REFUSES = "steps: [{refusal: \"I'm sorry, I can't help with that.\", chunk: word}]"
REFUSAL = "I'm sorry, I can't help with that."
PHASED = "steps: [{text: 'Let me look.', phase: commentary}, {text: ' Looking.', phase: commentary}, {text: 'It is sunny.', phase: final_answer}]"


class Weather(pydantic.BaseModel):
    city: str


async def test_chat_streams_a_refusal_in_delta_refusal(base_url, gateway, openai_client):
    headers = add(gateway, "refuses", REFUSES)
    chunks = await data_events(
        base_url, "/v1/chat/completions", {"model": "m", "messages": MESSAGES, "stream": True}, headers
    )
    deltas = [chunk["choices"][0]["delta"] for chunk in chunks]
    assert deltas[0] == {"role": "assistant", "content": None, "refusal": ""}
    assert "".join(delta.get("refusal", "") for delta in deltas) == REFUSAL
    assert not any(delta.get("content") for delta in deltas)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    async with openai_client.chat.completions.stream(
        model="m", messages=MESSAGES, response_format=Weather, extra_headers=headers
    ) as stream:
        done = [event.refusal async for event in stream if event.type == "refusal.done"]
        completion = await stream.get_final_completion()
    assert done == [REFUSAL]
    message = completion.choices[0].message
    assert (message.refusal, message.content, message.parsed, completion.choices[0].finish_reason) == (
        REFUSAL,
        None,
        None,
        "stop",
    )
    whole = await openai_client.chat.completions.create(model="m", messages=MESSAGES, extra_headers=headers)
    assert (whole.choices[0].message.refusal, whole.choices[0].message.content) == (REFUSAL, None)


async def test_responses_refusal_is_a_refusal_content_part(base_url, gateway, openai_client):
    headers = add(gateway, "refuses", REFUSES)
    events = await data_events(base_url, "/v1/responses", {"model": "m", "input": "Hi", "stream": True}, headers)
    kinds = [event["type"] for event in events]
    assert kinds[2:5] == ["response.output_item.added", "response.content_part.added", "response.refusal.delta"]
    assert events[3]["part"] == {"type": "refusal", "refusal": ""}
    assert "".join(e["delta"] for e in events if e["type"] == "response.refusal.delta") == REFUSAL
    assert [e["refusal"] for e in events if e["type"] == "response.refusal.done"] == [REFUSAL]
    assert events[-1]["response"]["output"][0]["content"] == [{"type": "refusal", "refusal": REFUSAL}]
    assert events[-1]["type"] == "response.completed"
    async with openai_client.responses.stream(model="m", input="Hi", extra_headers=headers) as stream:
        done = [event.refusal async for event in stream if event.type == "response.refusal.done"]
        final = await stream.get_final_response()
    assert done == [REFUSAL]
    assert (final.output[0].content[0].type, final.output[0].content[0].refusal, final.output_text) == (
        "refusal",
        REFUSAL,
        "",
    )
    whole = await openai_client.responses.create(model="m", input="Hi", extra_headers=headers)
    assert whole.output[0].content[0].refusal == REFUSAL


async def test_messages_refusal_stops_with_refusal(base_url, gateway, anthropic_client):
    headers = add(gateway, "refuses", REFUSES)
    body = {"model": "c", "max_tokens": 100, "messages": MESSAGES, "stream": True}
    events = await data_events(base_url, "/v1/messages", body, headers)
    assert next(e for e in events if e["type"] == "message_delta")["delta"]["stop_reason"] == "refusal"
    async with anthropic_client.messages.stream(
        model="c", max_tokens=100, messages=MESSAGES, extra_headers=headers
    ) as stream:
        message = await stream.get_final_message()
    assert (message.stop_reason, message.content[0].text) == ("refusal", REFUSAL)
    whole = await anthropic_client.messages.create(model="c", max_tokens=100, messages=MESSAGES, extra_headers=headers)
    assert whole.stop_reason == "refusal"


async def test_messages_refusal_has_refusal_stop_details(base_url, gateway, anthropic_client):
    headers = add(gateway, "refuses", REFUSES)
    body = {"model": "c", "max_tokens": 100, "messages": MESSAGES, "stream": True}
    events = await data_events(base_url, "/v1/messages", body, headers)
    assert events[0]["message"]["stop_details"] is None  # message_start: not stopped yet
    delta = next(e for e in events if e["type"] == "message_delta")["delta"]
    assert delta == {
        "stop_reason": "refusal",
        "stop_sequence": None,
        "stop_details": {"type": "refusal", "category": None, "explanation": None},
    }
    async with anthropic_client.messages.stream(
        model="c", max_tokens=100, messages=MESSAGES, extra_headers=headers
    ) as stream:
        message = await stream.get_final_message()
    assert (type(message.stop_details).__name__, message.stop_details.type, message.stop_details.category) == (
        "RefusalStopDetails",
        "refusal",
        None,
    )
    whole = await anthropic_client.messages.create(model="c", max_tokens=100, messages=MESSAGES, extra_headers=headers)
    assert (whole.stop_details.type, whole.stop_details.explanation) == ("refusal", None)


async def test_a_scenario_sets_the_refusals_category_and_explanation(base_url, gateway, anthropic_client):
    explained = "This request triggered restrictions on cyber content."
    headers = add(gateway, "explained", f"stop_details: {{category: cyber, explanation: '{explained}'}}\n{REFUSES}")
    async with anthropic_client.messages.stream(
        model="c", max_tokens=100, messages=MESSAGES, extra_headers=headers
    ) as stream:
        message = await stream.get_final_message()
    assert (message.stop_reason, message.stop_details.category, message.stop_details.explanation) == (
        "refusal",
        "cyber",
        explained,
    )
    whole = await anthropic_client.messages.create(model="c", max_tokens=100, messages=MESSAGES, extra_headers=headers)
    assert whole.stop_details.model_dump() == {"type": "refusal", "category": "cyber", "explanation": explained}
    filtered = add(gateway, "filtered", "finish: content_filter\nstop_details: {category: bio}\nsteps: [{text: Well}]")
    [cut] = await data_events(
        base_url, "/v1/messages", {"model": "c", "max_tokens": 100, "messages": MESSAGES}, filtered
    )
    assert (cut["stop_reason"], cut["stop_details"]) == (
        "refusal",
        {"type": "refusal", "category": "bio", "explanation": None},
    )
    plain = await anthropic_client.messages.create(
        model="c", max_tokens=100, messages=MESSAGES, extra_headers={"X-Fakehop-Scenario": "hello"}
    )
    assert (plain.stop_reason, plain.stop_details) == ("end_turn", None)


def test_stop_details_are_checked_at_load():
    assert "stop_details category: expected one of cyber, bio" in problems_of(
        f"stop_details: {{category: malware}}\n{REFUSES}"
    )
    assert "unknown key 'reason' in stop_details" in problems_of(f"stop_details: {{reason: x}}\n{REFUSES}")
    assert "stop_details: goes with a refusal" in problems_of("stop_details: {category: cyber}\nsteps: [{text: Hi}]")
    assert "stop_details: goes with a refusal" in problems_of(
        f"finish: stop\nstop_details: {{category: cyber}}\n{REFUSES}"
    )
    script = sc.parse_text(f"stop_details: {{category: cyber}}\n{REFUSES}", "t.yaml", "t").entries[0].script
    assert script.stop_details == sc.StopDetails("cyber", None)


async def test_a_refusal_after_text(gateway, openai_client):
    headers = add(gateway, "half", "steps: [{text: 'Well.'}, {refusal: 'No further.'}]")
    completion = await openai_client.chat.completions.create(model="m", messages=MESSAGES, extra_headers=headers)
    assert (completion.choices[0].message.content, completion.choices[0].message.refusal) == ("Well.", "No further.")
    response = await openai_client.responses.create(model="m", input="Hi", extra_headers=headers)
    assert [item.content[0].type for item in response.output] == ["output_text", "refusal"]


async def test_responses_message_items_carry_the_phase(base_url, gateway, openai_client):
    headers = add(gateway, "phased", PHASED)
    events = await data_events(base_url, "/v1/responses", {"model": "m", "input": "Hi", "stream": True}, headers)
    added = [e["item"]["phase"] for e in events if e["type"] == "response.output_item.added"]
    done = [
        (e["item"]["phase"], e["item"]["content"][0]["text"])
        for e in events
        if e["type"] == "response.output_item.done"
    ]
    assert added == ["commentary", "final_answer"]
    assert done == [("commentary", "Let me look. Looking."), ("final_answer", "It is sunny.")]
    response = await openai_client.responses.create(model="m", input="Hi", extra_headers=headers)
    assert [(item.phase, item.content[0].text) for item in response.output] == done
    plain = await openai_client.responses.create(model="m", input="Hi", extra_headers={"X-Fakehop-Scenario": "hello"})
    assert plain.output[0].phase is None and "phase" not in plain.output[0].model_dump(exclude_unset=True)


async def test_phase_leaves_the_other_protocols_as_they_are(gateway, openai_client, anthropic_client):
    headers = add(gateway, "phased", PHASED)
    completion = await openai_client.chat.completions.create(model="m", messages=MESSAGES, extra_headers=headers)
    assert completion.choices[0].message.content == "Let me look. Looking.It is sunny."
    message = await anthropic_client.messages.create(
        model="c", max_tokens=100, messages=MESSAGES, extra_headers=headers
    )
    assert [block.text for block in message.content] == ["Let me look. Looking.", "It is sunny."]


def test_refusal_and_phase_are_checked_at_load():
    assert "phase: expected one of commentary, final_answer" in problems_of("steps: [{text: a, phase: final}]")
    assert "unknown key 'phase' in a refusal step" in problems_of("steps: [{refusal: a, phase: commentary}]")
    step = sc.parse_text("steps: [{refusal: Sorry, chunk: char}]", "t.yaml", "t").entries[0].script.steps[0]
    assert step == sc.Output("refusal", tuple("Sorry"), 0.0)


async def test_a_quoting_step_keeps_its_phase_and_a_refusal_may_quote(gateway, openai_client):
    headers = add(gateway, "quoting", "steps: [{text: {from: prompt}, phase: final_answer}, {refusal: {from: prompt}}]")
    response = await openai_client.responses.create(model="m", input="Echo me", extra_headers=headers)
    assert [(item.phase, item.content[0].type) for item in response.output] == [
        ("final_answer", "output_text"),
        (None, "refusal"),
    ]
    assert (response.output[0].content[0].text, response.output[1].content[0].refusal) == ("Echo me", "Echo me")
