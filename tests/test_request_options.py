"""Request options the answer follows: Chat's `n` and `logprobs`, Responses' logprobs, and
`tool_choice: "none"` everywhere; on the wire and through the official SDKs."""

from __future__ import annotations

import pytest

from .inline_scenarios import add, data_events

MESSAGES = [{"role": "user", "content": "Hi"}]
WORDS = "usage: {output_tokens: 3}\nsteps: [{text: 'Hello there friend', chunk: word}]"
CALLS = "steps: [{text: Checking.}, {tool_call: {name: lookup, arguments: {q: x}}, chunk: 3}, {text: ' Done.'}]"


def chat_body(**fields) -> dict:
    return {"model": "m", "messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True}, **fields}


async def test_chat_n_choices_interleaved_by_index(base_url, gateway, openai_client):
    headers = add(gateway, "words", WORDS)
    chunks = await data_events(base_url, "/v1/chat/completions", chat_body(n=3), headers)
    indexes = [chunk["choices"][0]["index"] for chunk in chunks if chunk["choices"]]
    assert indexes == [0, 1, 2] * 5  # the role, three words and the finish, each for every choice
    for index in range(3):
        mine = [chunk["choices"][0] for chunk in chunks if chunk["choices"] and chunk["choices"][0]["index"] == index]
        assert "".join(choice["delta"].get("content") or "" for choice in mine) == "Hello there friend"
        assert [choice["finish_reason"] for choice in mine if choice["finish_reason"]] == ["stop"]
    assert chunks[-1]["usage"]["completion_tokens"] == 9  # every choice's output
    async with openai_client.chat.completions.stream(
        model="m", messages=MESSAGES, n=3, extra_headers=headers
    ) as stream:
        completion = await stream.get_final_completion()
    assert [choice.message.content for choice in completion.choices] == ["Hello there friend"] * 3
    whole = await openai_client.chat.completions.create(model="m", messages=MESSAGES, n=2, extra_headers=headers)
    assert [(c.index, c.message.content, c.finish_reason) for c in whole.choices] == [
        (0, "Hello there friend", "stop"),
        (1, "Hello there friend", "stop"),
    ]


async def test_chat_n_choices_each_call_their_own_tool(gateway, openai_client):
    headers = add(gateway, "calls", CALLS)
    async with openai_client.chat.completions.stream(
        model="m", messages=MESSAGES, n=2, extra_headers=headers
    ) as stream:
        completion = await stream.get_final_completion()
    calls = [choice.message.tool_calls[0] for choice in completion.choices]
    assert [(call.function.name, call.function.arguments) for call in calls] == [("lookup", '{"q":"x"}')] * 2
    assert calls[0].id != calls[1].id


async def test_chat_logprobs_one_entry_per_delta(base_url, gateway, openai_client):
    headers = add(gateway, "words", WORDS)
    chunks = await data_events(base_url, "/v1/chat/completions", chat_body(logprobs=True, top_logprobs=2), headers)
    content = [
        chunk["choices"][0] for chunk in chunks if chunk["choices"] and chunk["choices"][0]["delta"].get("content")
    ]
    entries = [choice["logprobs"]["content"] for choice in content]
    assert [[entry["token"] for entry in entry_list] for entry_list in entries] == [["Hello"], [" there"], [" friend"]]
    first = entries[0][0]
    assert (first["bytes"], len(first["top_logprobs"]), first["top_logprobs"][0]["token"]) == (
        list(b"Hello"),
        2,
        "Hello",
    )
    assert first["logprob"] == first["top_logprobs"][0]["logprob"] > first["top_logprobs"][1]["logprob"]
    assert all(choice["logprobs"]["refusal"] is None for choice in content)
    stream = await openai_client.chat.completions.create(
        model="m", messages=MESSAGES, stream=True, logprobs=True, top_logprobs=3, extra_headers=headers
    )
    tokens = [
        entry
        async for chunk in stream
        for entry in (chunk.choices[0].logprobs.content if chunk.choices and chunk.choices[0].logprobs else [])
    ]
    assert [token.token for token in tokens] == ["Hello", " there", " friend"] and all(
        len(token.top_logprobs) == 3 for token in tokens
    )
    whole = await openai_client.chat.completions.create(
        model="m", messages=MESSAGES, logprobs=True, extra_headers=headers
    )
    assert [(entry.token, entry.top_logprobs) for entry in whole.choices[0].logprobs.content] == [
        ("Hello", []),
        (" there", []),
        (" friend", []),
    ]
    plain = await openai_client.chat.completions.create(model="m", messages=MESSAGES, extra_headers=headers)
    assert plain.choices[0].logprobs is None


async def test_responses_logprobs_when_included(base_url, gateway, openai_client):
    headers = add(gateway, "words", WORDS)
    body = {"model": "m", "input": "Hi", "stream": True, "include": ["message.output_text.logprobs"], "top_logprobs": 2}
    events = await data_events(base_url, "/v1/responses", body, headers)
    deltas = [e["logprobs"] for e in events if e["type"] == "response.output_text.delta"]
    assert [[entry["token"] for entry in logprobs] for logprobs in deltas] == [["Hello"], [" there"], [" friend"]]
    assert set(deltas[0][0]) == {"token", "logprob", "bytes", "top_logprobs"} and len(deltas[0][0]["top_logprobs"]) == 2
    part = next(e for e in events if e["type"] == "response.content_part.done")["part"]
    assert [entry["bytes"] for entry in part["logprobs"]] == [list(b"Hello"), list(b" there"), list(b" friend")]
    async with openai_client.responses.stream(
        model="m", input="Hi", include=["message.output_text.logprobs"], top_logprobs=2, extra_headers=headers
    ) as stream:
        final = await stream.get_final_response()
    assert [entry.token for entry in final.output[0].content[0].logprobs] == ["Hello", " there", " friend"]
    whole = await openai_client.responses.create(
        model="m", input="Hi", include=["message.output_text.logprobs"], extra_headers=headers
    )
    assert [entry.token for entry in whole.output[0].content[0].logprobs] == ["Hello", " there", " friend"]
    plain = await openai_client.responses.create(model="m", input="Hi", extra_headers=headers)
    assert plain.output[0].content[0].logprobs == []


@pytest.mark.parametrize(
    "body, param",
    [
        ({"n": 0}, "n"),
        ({"n": 129}, "n"),
        ({"n": "2"}, "n"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"logprobs": "yes"}, "logprobs"),
    ],
)
async def test_bad_chat_options_are_refused(base_url, body, param):
    [error] = await data_events(base_url, "/v1/chat/completions", {"model": "m", "messages": MESSAGES, **body}, {})
    assert error["error"]["param"] == param


async def test_tool_choice_none_leaves_the_tool_calls_out(gateway, openai_client, anthropic_client):
    headers = add(gateway, "calls", CALLS)
    completion = await openai_client.chat.completions.create(
        model="m", messages=MESSAGES, tool_choice="none", extra_headers=headers
    )
    assert (
        completion.choices[0].message.content,
        completion.choices[0].message.tool_calls,
        completion.choices[0].finish_reason,
    ) == ("Checking. Done.", None, "stop")
    response = await openai_client.responses.create(model="m", input="Hi", tool_choice="none", extra_headers=headers)
    assert [item.type for item in response.output] == ["message"] and response.output_text == "Checking. Done."
    message = await anthropic_client.messages.create(
        model="c", max_tokens=100, messages=MESSAGES, tool_choice={"type": "none"}, extra_headers=headers
    )
    assert ([block.type for block in message.content], message.stop_reason) == (["text"], "end_turn")
    called = await openai_client.chat.completions.create(
        model="m", messages=MESSAGES, tool_choice="auto", extra_headers=headers
    )
    assert called.choices[0].message.tool_calls[0].function.name == "lookup"


async def test_tool_choice_none_streams_no_tool_call_on_chat(base_url, gateway, openai_client):
    headers = add(gateway, "calls", CALLS)
    chunks = await data_events(base_url, "/v1/chat/completions", chat_body(tool_choice="none"), headers)
    choices = [chunk["choices"][0] for chunk in chunks if chunk["choices"]]
    assert not any("tool_calls" in choice["delta"] for choice in choices)
    assert "".join(choice["delta"].get("content") or "" for choice in choices) == "Checking. Done."
    assert [choice["finish_reason"] for choice in choices if choice["finish_reason"]] == ["stop"]
    called = await data_events(base_url, "/v1/chat/completions", chat_body(), headers)
    assert [c["choices"][0]["finish_reason"] for c in called if c["choices"] and c["choices"][0]["finish_reason"]] == [
        "tool_calls"
    ]
    async with openai_client.chat.completions.stream(
        model="m", messages=MESSAGES, tool_choice="none", extra_headers=headers
    ) as stream:
        kinds = {event.type async for event in stream}
        completion = await stream.get_final_completion()
    assert "tool_calls.function.arguments.done" not in kinds
    message = completion.choices[0].message
    assert (message.content, message.tool_calls, completion.choices[0].finish_reason) == (
        "Checking. Done.",
        None,
        "stop",
    )


async def test_tool_choice_none_streams_no_function_call_on_responses(base_url, gateway, openai_client):
    headers = add(gateway, "calls", CALLS)
    body = {"model": "m", "input": "Hi", "stream": True, "tool_choice": "none"}
    events = await data_events(base_url, "/v1/responses", body, headers)
    assert not any(event["type"].startswith("response.function_call_arguments") for event in events)
    assert [e["item"]["type"] for e in events if e["type"] == "response.output_item.added"] == ["message"]
    assert (events[-1]["type"], [item["type"] for item in events[-1]["response"]["output"]]) == (
        "response.completed",
        ["message"],
    )
    called = await data_events(base_url, "/v1/responses", {**body, "tool_choice": "auto"}, headers)
    assert "function_call" in [e["item"]["type"] for e in called if e["type"] == "response.output_item.added"]
    async with openai_client.responses.stream(
        model="m", input="Hi", tool_choice="none", extra_headers=headers
    ) as stream:
        kinds = {event.type async for event in stream}
        final = await stream.get_final_response()
    assert "response.function_call_arguments.done" not in kinds
    assert ([item.type for item in final.output], final.output_text) == (["message"], "Checking. Done.")


async def test_tool_choice_none_streams_no_tool_use_on_messages(base_url, gateway, anthropic_client):
    headers = add(gateway, "calls", CALLS)
    body = {"model": "c", "max_tokens": 100, "messages": MESSAGES, "stream": True, "tool_choice": {"type": "none"}}
    events = await data_events(base_url, "/v1/messages", body, headers)
    assert [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"] == ["text"]
    assert not any(e["type"] == "content_block_delta" and e["delta"]["type"] == "input_json_delta" for e in events)
    assert next(e for e in events if e["type"] == "message_delta")["delta"]["stop_reason"] == "end_turn"
    called = await data_events(base_url, "/v1/messages", {**body, "tool_choice": {"type": "auto"}}, headers)
    assert next(e for e in called if e["type"] == "message_delta")["delta"]["stop_reason"] == "tool_use"
    async with anthropic_client.messages.stream(
        model="c", max_tokens=100, messages=MESSAGES, tool_choice={"type": "none"}, extra_headers=headers
    ) as stream:
        kinds = {event.type async for event in stream}
        message = await stream.get_final_message()
    assert "input_json" not in kinds
    assert ([block.type for block in message.content], message.content[0].text, message.stop_reason) == (
        ["text"],
        "Checking. Done.",
        "end_turn",
    )


@pytest.mark.parametrize("include, param", [("reasoning.encrypted_content", "include"), ([5], "include[0]")])
async def test_bad_includes_are_refused(base_url, include, param):
    [error] = await data_events(base_url, "/v1/responses", {"model": "m", "input": "Hi", "include": include}, {})
    assert error["error"]["param"] == param
