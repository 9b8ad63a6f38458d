"""Request fields of the 2026 APIs that change the answer, through real sockets and the official
SDKs' typed objects: a tool_choice that requires a call meeting a scenario that makes none
(strict: the protocol's 400; else a note in the journal), Responses' conversation, moderation
and service_tier (Chat's too), Messages' context_management and 1-hour cache writes."""

from __future__ import annotations

import anthropic
import openai
import pytest

from .inline_scenarios import add, data_events, last_record, post, problems_of

OPENAI_MODEL = "gpt-5.6-sol"
CLAUDE = "claude-sonnet-5"
HI = [{"role": "user", "content": "Hi"}]
WEATHER = {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
CHAT_TOOLS = [{"type": "function", "function": WEATHER}]
RESPONSES_TOOLS = [{"type": "function", **WEATHER}]
MESSAGES_TOOLS = [{"name": "get_weather", "input_schema": WEATHER["parameters"]}]
# (protocol, path, body whose tool_choice requires a call to any tool, the same naming get_weather)
REQUIRING = [
    (
        "chat",
        "/v1/chat/completions",
        {"model": OPENAI_MODEL, "messages": HI, "tools": CHAT_TOOLS, "tool_choice": "required"},
        {"type": "function", "function": {"name": "get_weather"}},
    ),
    (
        "responses",
        "/v1/responses",
        {"model": OPENAI_MODEL, "input": "Hi", "tools": RESPONSES_TOOLS, "tool_choice": "required"},
        {"type": "function", "name": "get_weather"},
    ),
    (
        "messages",
        "/v1/messages",
        {"model": CLAUDE, "max_tokens": 100, "messages": HI, "tools": MESSAGES_TOOLS, "tool_choice": {"type": "any"}},
        {"type": "tool", "name": "get_weather"},
    ),
]
CALLS_SEARCH = "steps: [{tool_call: {name: search, arguments: {q: x}}}]"
CACHE_WRITES = "usage: {cache_write_tokens: 30}\nsteps: [{text: Hi}]"


# ---------------------------------------------------------------- tool_choice that requires a call


@pytest.mark.parametrize(("protocol", "path", "body", "named"), REQUIRING, ids=[row[0] for row in REQUIRING])
async def test_a_required_call_against_a_scenario_without_one_is_a_strict_400(
    make_gateway, serve, protocol, path, body, named
):
    base_url = await serve(make_gateway(strict=True))
    status, answer = await post(base_url, path, body, {"X-Fakehop-Scenario": "hello"})
    assert status == 400
    error = answer["error"]
    assert "tool_choice requires a tool call" in error["message"] and "'hello'" in error["message"]
    if protocol == "messages":
        assert (answer["type"], error["type"]) == ("error", "invalid_request_error")
    else:
        assert (error["type"], error["param"]) == ("invalid_request_error", "tool_choice")
    assert (await last_record(base_url))["end"] == "rejected"


@pytest.mark.parametrize(("protocol", "path", "body", "named"), REQUIRING, ids=[row[0] for row in REQUIRING])
async def test_a_required_call_against_a_scenario_without_one_is_noted_in_the_journal(
    base_url, protocol, path, body, named
):
    status, _ = await post(base_url, path, body, {"X-Fakehop-Scenario": "hello"})
    record = await last_record(base_url)
    assert status == 200 and record["end"] == "completed"
    (note,) = record["notes"]
    assert "tool_choice requires a tool call" in note and "scenario 'hello' answers without one" in note


@pytest.mark.parametrize(("protocol", "path", "body", "named"), REQUIRING, ids=[row[0] for row in REQUIRING])
async def test_a_named_tool_against_a_scenario_calling_another_is_noted(base_url, gateway, protocol, path, body, named):
    headers = add(gateway, "calls-search", CALLS_SEARCH)
    await post(base_url, path, {**body, "tool_choice": named}, headers)
    (note,) = (await last_record(base_url))["notes"]
    assert "a call to 'get_weather'" in note and "calls 'search'" in note


@pytest.mark.parametrize(("protocol", "path", "body", "named"), REQUIRING, ids=[row[0] for row in REQUIRING])
async def test_a_scenario_that_makes_the_required_call_gets_no_note(make_gateway, serve, protocol, path, body, named):
    base_url = await serve(make_gateway(strict=True))
    for tool_choice in (body["tool_choice"], named):
        status, _ = await post(
            base_url, path, {**body, "tool_choice": tool_choice}, {"X-Fakehop-Scenario": "weather-tool"}
        )
        assert status == 200 and (await last_record(base_url))["notes"] == []


async def test_the_strict_400_reaches_the_sdks_as_their_bad_request_errors(make_gateway, serve):
    from . import clients

    base_url = await serve(make_gateway(strict=True))
    headers = {"X-Fakehop-Scenario": "hello"}
    async with clients.openai_async(base_url=base_url + "/v1", api_key="k", max_retries=0) as client:
        with pytest.raises(openai.BadRequestError, match="tool_choice requires"):
            await client.chat.completions.create(
                model=OPENAI_MODEL, messages=HI, tools=CHAT_TOOLS, tool_choice="required", extra_headers=headers
            )
        with pytest.raises(openai.BadRequestError, match="tool_choice requires"):
            await client.responses.create(
                model=OPENAI_MODEL, input="Hi", tools=RESPONSES_TOOLS, tool_choice="required", extra_headers=headers
            )
    async with clients.anthropic_async(base_url=base_url, api_key="k", max_retries=0) as client:
        with pytest.raises(anthropic.BadRequestError, match="tool_choice requires"):
            await client.messages.create(
                model=CLAUDE,
                max_tokens=100,
                messages=HI,
                tools=MESSAGES_TOOLS,
                tool_choice={"type": "any"},
                extra_headers=headers,
            )


# ---------------------------------------------------------------- Responses: conversation, moderation, service_tier


async def test_a_named_conversation_is_in_every_lifecycle_event_and_the_whole_answer(openai_client, base_url):
    response = await openai_client.responses.create(model=OPENAI_MODEL, input="Hi", conversation="conv_123")
    assert response.conversation is not None and response.conversation.id == "conv_123"
    body = {"model": OPENAI_MODEL, "input": "Hi", "stream": True, "conversation": {"id": "conv_456"}}
    events = await data_events(base_url, "/v1/responses", body, {})
    lifecycle = [event["response"] for event in events if "response" in event]
    assert len(lifecycle) == 3 and all(shown["conversation"] == {"id": "conv_456"} for shown in lifecycle)
    assert list(lifecycle[0])[5:9] == ["billing", "completed_at", "conversation", "error"]


async def test_moderation_gives_a_result_that_flags_nothing(openai_client):
    response = await openai_client.responses.create(
        model=OPENAI_MODEL, input="Hi", moderation={"model": "omni-moderation-latest"}
    )
    moderation = response.moderation
    assert moderation is not None
    for result in (moderation.input, moderation.output):
        assert (result.type, result.model, result.flagged) == ("moderation_result", "omni-moderation-latest", False)
        assert not any(result.categories.values()) and set(result.category_scores) == set(result.categories)
        assert result.category_applied_input_types["violence"] == ["text"]


FLAGS_VIOLENCE = "moderation: {output: [violence]}\nsteps: [{text: Hi}]"


async def test_the_scenario_says_what_moderation_flags(openai_client, gateway, base_url):
    headers = add(gateway, "flags-violence", FLAGS_VIOLENCE)
    asked = {"model": "omni-moderation-latest"}
    response = await openai_client.responses.create(
        model=OPENAI_MODEL, input="Hi", moderation=asked, extra_headers=headers
    )
    moderation = response.moderation
    assert moderation is not None and moderation.input.flagged is False
    output = moderation.output
    assert output.flagged is True and output.categories["violence"] is True and not output.categories["hate"]
    assert output.category_scores["violence"] > 0.5 > output.category_scores["hate"]
    body = {"model": OPENAI_MODEL, "input": "Hi", "stream": True, "moderation": asked}
    events = await data_events(base_url, "/v1/responses", body, headers)
    shown = [event["response"]["moderation"]["output"]["flagged"] for event in events if "response" in event]
    assert shown == [True, True, True]
    plain = await openai_client.responses.create(model=OPENAI_MODEL, input="Hi", extra_headers=headers)
    assert plain.moderation is None  # the request did not ask for moderation


def test_a_moderation_category_that_does_not_exist_is_a_scenario_problem():
    problems = problems_of("moderation: {input: [hat]}\nsteps: [{text: Hi}]")
    assert "moderation input: 'hat' is not a moderation category; did you mean 'hate'?" in problems


async def test_moderation_without_its_model_is_a_400_naming_it(openai_client):
    with pytest.raises(openai.BadRequestError) as raised:
        await openai_client.responses.create(model=OPENAI_MODEL, input="Hi", moderation={})
    assert raised.value.param == "moderation.model" and "'moderation.model'" in raised.value.message


@pytest.mark.parametrize(("asked", "served"), [("flex", "flex"), ("priority", "priority"), ("auto", "default")])
async def test_the_service_tier_asked_for_is_echoed_by_responses_and_chat(openai_client, asked, served):
    response = await openai_client.responses.create(model=OPENAI_MODEL, input="Hi", service_tier=asked)
    assert response.service_tier == served
    completion = await openai_client.chat.completions.create(model=OPENAI_MODEL, messages=HI, service_tier=asked)
    assert completion.service_tier == served
    stream = await openai_client.chat.completions.create(
        model=OPENAI_MODEL, messages=HI, service_tier=asked, stream=True
    )
    assert {chunk.service_tier async for chunk in stream} == {served}


async def test_an_unknown_service_tier_is_a_400_naming_it(openai_client):
    with pytest.raises(openai.BadRequestError) as raised:
        await openai_client.responses.create(model=OPENAI_MODEL, input="Hi", service_tier="gold")
    assert raised.value.param == "service_tier"


async def test_requests_that_ask_for_none_of_them_get_the_defaults(openai_client):
    response = await openai_client.responses.create(model=OPENAI_MODEL, input="Hi")
    assert (response.service_tier, response.moderation, response.conversation, response.background) == (
        "default",
        None,
        None,
        False,
    )
    assert "conversation" not in response.model_dump(exclude_unset=True)


# ---------------------------------------------------------------- Messages: context_management, 1-hour cache writes


async def test_context_management_reports_no_applied_edits(anthropic_client):
    edits = {"edits": [{"type": "clear_tool_uses_20250919"}]}
    message = await anthropic_client.beta.messages.create(
        model=CLAUDE, max_tokens=100, messages=HI, context_management=edits, betas=["context-management-2025-06-27"]
    )
    assert message.context_management is not None and message.context_management.applied_edits == []
    async with anthropic_client.beta.messages.stream(
        model=CLAUDE, max_tokens=100, messages=HI, context_management=edits, betas=["context-management-2025-06-27"]
    ) as stream:
        deltas = [event async for event in stream if event.type == "message_delta"]
        final = await stream.get_final_message()
    assert deltas[0].context_management.applied_edits == []
    assert final.context_management is not None and final.context_management.applied_edits == []


async def test_without_context_management_there_is_no_report(base_url):
    body = {"model": CLAUDE, "max_tokens": 100, "messages": HI, "stream": True}
    events = await data_events(base_url, "/v1/messages", body, {})
    assert "context_management" not in next(event for event in events if event["type"] == "message_delta")


ONE_HOUR = {"type": "ephemeral", "ttl": "1h"}


@pytest.mark.parametrize(
    "where",
    ["top", "system", "tool", "message"],
)
async def test_one_hour_cache_writes_are_counted_as_1h(anthropic_client, gateway, where):
    headers = add(gateway, "cache-writes", CACHE_WRITES)
    options: dict = {"model": CLAUDE, "max_tokens": 100, "messages": HI, "extra_headers": headers}
    if where == "top":
        options["extra_body"] = {"cache_control": ONE_HOUR}
    elif where == "system":
        options["system"] = [{"type": "text", "text": "Be brief.", "cache_control": ONE_HOUR}]
    elif where == "tool":
        options["tools"] = [{**MESSAGES_TOOLS[0], "cache_control": ONE_HOUR}]
    else:
        options["messages"] = [{"role": "user", "content": [{"type": "text", "text": "Hi", "cache_control": ONE_HOUR}]}]
    message = await anthropic_client.messages.create(**options)
    creation = message.usage.cache_creation
    assert message.usage.cache_creation_input_tokens == 30
    assert creation is not None and (creation.ephemeral_1h_input_tokens, creation.ephemeral_5m_input_tokens) == (30, 0)
    async with anthropic_client.messages.stream(**options) as stream:
        final = await stream.get_final_message()
    assert final.usage.cache_creation is not None and final.usage.cache_creation.ephemeral_1h_input_tokens == 30


async def test_five_minute_cache_writes_stay_5m(anthropic_client, gateway):
    headers = add(gateway, "cache-writes", CACHE_WRITES)
    system = [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
    message = await anthropic_client.messages.create(
        model=CLAUDE, max_tokens=100, messages=HI, system=system, extra_headers=headers
    )
    creation = message.usage.cache_creation
    assert creation is not None and (creation.ephemeral_5m_input_tokens, creation.ephemeral_1h_input_tokens) == (30, 0)
