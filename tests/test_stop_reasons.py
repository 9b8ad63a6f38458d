"""`finish: stop_sequence`, and a token limit that cuts an answer inside a tool call, on the wire and through the SDKs."""

from __future__ import annotations

from fakehop.scenario import reader as sc

from .inline_scenarios import add, data_events, problems_of

MESSAGES = [{"role": "user", "content": "Hi"}]
STOPPED = 'finish: stop_sequence\nstop_sequence: "###"\nsteps: [{text: "Done"}]'
LONG_CALL = "steps: [{text: Checking.}, {tool_call: {name: lookup, arguments: {query: 'a long query that goes on and on'}}, chunk: 4}]"


async def test_messages_stop_sequence(base_url, gateway, anthropic_client):
    headers = add(gateway, "stopped", STOPPED)
    events = await data_events(
        base_url, "/v1/messages", {"model": "c", "max_tokens": 100, "messages": MESSAGES, "stream": True}, headers
    )
    delta = next(e for e in events if e["type"] == "message_delta")["delta"]
    assert delta == {"stop_reason": "stop_sequence", "stop_sequence": "###", "stop_details": None}
    async with anthropic_client.messages.stream(
        model="c", max_tokens=100, messages=MESSAGES, extra_headers=headers
    ) as stream:
        message = await stream.get_final_message()
    assert (message.stop_reason, message.stop_sequence, message.content[0].text) == ("stop_sequence", "###", "Done")
    whole = await anthropic_client.messages.create(model="c", max_tokens=100, messages=MESSAGES, extra_headers=headers)
    assert (whole.stop_reason, whole.stop_sequence, whole.stop_details) == ("stop_sequence", "###", None)


async def test_other_protocols_end_a_stop_sequence_as_a_stop(base_url, gateway, openai_client):
    headers = add(gateway, "stopped", STOPPED)
    chunks = await data_events(
        base_url, "/v1/chat/completions", {"model": "m", "messages": MESSAGES, "stream": True}, headers
    )
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"][0]["finish_reason"]] == ["stop"]
    completion = await openai_client.chat.completions.create(model="m", messages=MESSAGES, extra_headers=headers)
    assert completion.choices[0].finish_reason == "stop"
    async with openai_client.chat.completions.stream(model="m", messages=MESSAGES, extra_headers=headers) as stream:
        assert (await stream.get_final_completion()).choices[0].message.content == "Done"
    response = await openai_client.responses.create(model="m", input="Hi", extra_headers=headers)
    assert (response.status, response.output_text) == ("completed", "Done")


def test_stop_sequence_and_its_finish_go_together():
    assert "needs the sequence" in problems_of("finish: stop_sequence\nsteps: [{text: a}]")
    assert "goes with finish: stop_sequence" in problems_of("stop_sequence: '###'\nsteps: [{text: a}]")
    script = sc.parse_text(STOPPED, "t.yaml", "t").entries[0].script
    assert (script.finish, script.stop_sequence) == ("stop_sequence", "###")


async def test_a_tool_use_block_cut_by_the_token_limit_is_left_open(base_url, gateway, anthropic_client):
    headers = add(gateway, "long-call", LONG_CALL)
    body = {
        "model": "c",
        "max_tokens": 6,
        "messages": MESSAGES,
        "stream": True,
    }  # 24 characters: the text and part of the call
    events = await data_events(base_url, "/v1/messages", body, headers)
    starts = [e["index"] for e in events if e["type"] == "content_block_start"]
    stops = [e["index"] for e in events if e["type"] == "content_block_stop"]
    assert (starts, stops) == ([0, 1], [0])
    assert [e["type"] for e in events[-2:]] == ["message_delta", "message_stop"]
    assert events[-2]["delta"]["stop_reason"] == "max_tokens"
    async with anthropic_client.messages.stream(
        model="c", max_tokens=6, messages=MESSAGES, extra_headers=headers
    ) as stream:
        message = await stream.get_final_message()
    assert message.stop_reason == "max_tokens"
    assert [block.type for block in message.content] == ["text", "tool_use"]


async def test_a_text_block_cut_by_the_token_limit_is_closed(base_url, gateway):
    headers = add(gateway, "long-text", "steps: [{text: 'A sentence much longer than the limit allows', chunk: word}]")
    events = await data_events(
        base_url, "/v1/messages", {"model": "c", "max_tokens": 2, "messages": MESSAGES, "stream": True}, headers
    )
    assert [e["index"] for e in events if e["type"] == "content_block_stop"] == [0]
