"""Scenarios that follow an agent's conversation, in all three protocols, through a real server:
entries by turn with no server-side counting, `match` on the conversation, the real APIs'
conversation checks, and a queued sequence's whole run."""

from __future__ import annotations

import asyncio
import textwrap

import aiohttp
import anthropic
import openai
import pytest

from fakehop.protocols import PROTOCOLS
from fakehop.scenario.reader import parse_text

from . import clients
from .agents import agent_for

PROTOCOL_NAMES = sorted(PROTOCOLS)
FLAKY_TURN_TWO = """
name: agent-flaky-turn-2
conversation:
  - steps: [{tool_call: {name: get_weather, arguments: {city: Paris}}}]
  - use: flaky-answer
"""
FLAKY_ANSWER = """
name: flaky-answer
sequence:
  - http_error: {status: 500}
  - http_error: {status: 500}
  - steps: [{text: {template: "Got {tool_result}."}}]
"""


def add(gateway, text: str, name: str | None = None) -> str:
    scenario = parse_text(textwrap.dedent(text), "<test>", name)
    gateway.global_session.add(scenario)
    return scenario.name


async def send(base_url: str, protocol: str, body: dict, headers: dict | None = None) -> tuple[int, dict]:
    """The status and JSON body of the answer to `body`, asked for whole."""
    async with aiohttp.ClientSession() as session:
        async with session.post(
            base_url + PROTOCOLS[protocol].PATH, json={**body, "stream": False}, headers=headers or {}
        ) as response:
            return response.status, await response.json()


# ---------------------------------------------------------------- entries by turn


@pytest.mark.parametrize("protocol", PROTOCOL_NAMES)
async def test_agent_loops_interleaved_in_parallel_each_get_their_own_turns(
    protocol, gateway, openai_client, anthropic_client
):
    gateway.global_session.default = "agent-two-tools"
    agents = [agent_for(protocol, openai_client, anthropic_client) for _ in range(4)]
    firsts = await asyncio.gather(*(agent.ask() for agent in agents))
    for number, agent in enumerate(agents):
        agent.answer({"get_weather": f"Weather {number}", "get_time": f"0{number}:00"})
    seconds = await asyncio.gather(*(agent.ask() for agent in reversed(agents)))
    assert [[call.name for call in first.calls] for first in firsts] == [["get_weather", "get_time"]] * 4
    assert [second.text for second in reversed(seconds)] == [
        f"In Paris it is 0{number}:00, and the weather: Weather {number}." for number in range(4)
    ]
    assert (
        sorted((r.turn, r.scenario) for r in gateway.journal.records)
        == [(1, "agent-two-tools[1]")] * 4 + [(2, "agent-two-tools[2]")] * 4
    )


@pytest.mark.parametrize("protocol", PROTOCOL_NAMES)
async def test_a_retried_turn_2_gets_turn_2_again_and_a_used_sequence_keeps_its_own_count(protocol, gateway, base_url):
    add(gateway, FLAKY_ANSWER)
    gateway.global_session.default = add(gateway, FLAKY_TURN_TWO)
    async with (
        clients.openai_async(base_url=base_url + "/v1", api_key="sk-test", max_retries=2) as openai_client,
        clients.anthropic_async(base_url=base_url, api_key="sk-test", max_retries=2) as anthropic_client,
    ):
        first, other = (
            agent_for(protocol, openai_client, anthropic_client),
            agent_for(protocol, openai_client, anthropic_client),
        )
        await first.ask()
        await other.ask()
        first.answer({"get_weather": "Fog"})
        assert (await first.ask()).text == "Got Fog."  # after two 500s, retried by the SDK
        other.answer({"get_weather": "Rain"})
        assert (await other.ask()).text == "Got Rain."
    assert [(r.turn, r.scenario, r.status) for r in gateway.journal.records] == [
        (1, "agent-flaky-turn-2[1]", 200),
        (1, "agent-flaky-turn-2[1]", 200),
        (2, "agent-flaky-turn-2[2]->flaky-answer[1]", 500),
        (2, "agent-flaky-turn-2[2]->flaky-answer[2]", 500),
        (2, "agent-flaky-turn-2[2]->flaky-answer[3]", 200),
        (2, "agent-flaky-turn-2[2]->flaky-answer[3]", 200),
    ]


@pytest.mark.parametrize("protocol", PROTOCOL_NAMES)
async def test_the_scenario_header_and_the_queue_give_a_conversation_too(protocol, gateway, base_url):
    body = PROTOCOLS[protocol].example_request(2)
    gateway.global_session.enqueue("agent-weather")
    assert (await send(base_url, protocol, body))[0] == 200
    assert (await send(base_url, protocol, body, {"X-Fakehop-Scenario": "agent-weather"}))[0] == 200
    assert [(r.turn, r.scenario) for r in gateway.journal.records] == [(2, "agent-weather[2]")] * 2


# ---------------------------------------------------------------- match on the conversation


def offering(protocol: str, body: dict, tool: str) -> dict:
    """`body` offering one tool, in the protocol's own shape."""
    tools = {
        "chat": [{"type": "function", "function": {"name": tool, "parameters": {}}}],
        "responses": [{"type": "function", "name": tool, "parameters": {}}],
        "messages": [{"name": tool, "input_schema": {"type": "object"}}],
    }
    return {**body, "tools": tools[protocol]}


def with_system(protocol: str, body: dict, text: str) -> dict:
    """`body` with a system prompt where the protocol has one: Chat's system message, Responses' instructions, Messages' `system`."""
    if protocol == "chat":
        return {**body, "messages": [{"role": "system", "content": text}, *body["messages"]]}
    return {**body, "instructions" if protocol == "responses" else "system": text}


def at_turn(protocol: str, turn: int) -> dict:
    return PROTOCOLS[protocol].example_request(turn)


# (rule, request that fits, request that does not), each request made for a protocol
MATCH_CASES = [
    ("turn: 2", lambda p: at_turn(p, 2), lambda p: at_turn(p, 1)),
    ("turn: [1, 3]", lambda p: at_turn(p, 3), lambda p: at_turn(p, 2)),
    ('turn: ">=3"', lambda p: at_turn(p, 4), lambda p: at_turn(p, 2)),
    ("tool_result: true", lambda p: at_turn(p, 2), lambda p: at_turn(p, 1)),
    ("tool_result: false", lambda p: at_turn(p, 1), lambda p: at_turn(p, 2)),
    ("tool_result: get_weather", lambda p: at_turn(p, 2), lambda p: at_turn(p, 1)),
    ("tool_result: lookup", lambda p: None, lambda p: at_turn(p, 2)),
    (
        "tools: get_weather",
        lambda p: offering(p, at_turn(p, 1), "get_weather"),
        lambda p: offering(p, at_turn(p, 1), "lookup"),
    ),
    (
        "system: brief",
        lambda p: with_system(p, at_turn(p, 1), "Be brief."),
        lambda p: with_system(p, at_turn(p, 1), "Be thorough."),
    ),
    ('system: "/^Be (brief|short)/"', lambda p: with_system(p, at_turn(p, 1), "Be short."), lambda p: at_turn(p, 1)),
    ("{turn: 2, tool_result: get_time}", lambda p: at_turn(p, 2), lambda p: at_turn(p, 3) if p else None),
]


@pytest.mark.parametrize("protocol", PROTOCOL_NAMES)
@pytest.mark.parametrize("rule, fits, misses", MATCH_CASES, ids=[case[0] for case in MATCH_CASES])
async def test_match_rules_read_the_conversation(protocol, rule, fits, misses, gateway, base_url):
    spec = rule if rule.startswith("{") else "{" + rule + "}"
    add(gateway, f"match: {spec}\nsteps: [{{text: matched}}]", "matched")
    for body, expected in ((fits(protocol), "matched"), (misses(protocol), "hello")):
        if body is not None:
            assert (await send(base_url, protocol, body))[0] == 200
            assert gateway.journal.records[-1].scenario == expected, (rule, body)


@pytest.mark.parametrize("protocol", PROTOCOL_NAMES)
async def test_match_header_globs_a_request_header(protocol, gateway, base_url):
    add(
        gateway,
        'match: {header: {X-Tenant: "acme-*"}, protocol: ' + protocol + "}\nsteps: [{text: matched}]",
        "matched",
    )
    body = at_turn(protocol, 1)
    for headers, expected in (({"x-tenant": "acme-eu"}, "matched"), ({"X-Tenant": "other"}, "hello"), ({}, "hello")):
        await send(base_url, protocol, body, headers)
        assert gateway.journal.records[-1].scenario == expected


@pytest.mark.parametrize("protocol", PROTOCOL_NAMES)
async def test_the_prompt_is_the_last_user_text_never_a_tool_result(protocol, gateway, base_url):
    add(gateway, "match: {prompt: Hello, tool_result: true}\nsteps: [{text: matched}]", "matched")
    await send(base_url, protocol, at_turn(protocol, 2))
    assert gateway.journal.records[-1].scenario == "matched"


# ---------------------------------------------------------------- the real APIs' conversation checks

USER = {"role": "user", "content": "Weather?"}
CHAT_CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}},
        {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
    ],
}
USE = {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}]}


def chat_body(*messages: dict) -> dict:
    return {"model": "gpt-5.6-sol", "messages": [USER, *messages]}


def responses_body(*items: dict) -> dict:
    return {"model": "gpt-5.6-sol", "input": [USER, *items]}


def messages_body(*messages: dict, max_tokens: int | None = 100) -> dict:
    body = {"model": "claude-sonnet-5", "messages": [USER, *messages]}
    return body if max_tokens is None else {**body, "max_tokens": max_tokens}


def tool(call_id: str, content: str = "Sunny") -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def output(call_id: str) -> dict:
    return {"type": "function_call_output", "call_id": call_id, "output": "Sunny"}


def result(call_id: str) -> dict:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": "Sunny"}]}


FUNCTION_CALL = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"}
# (protocol, passing body, failing body, the real API's message, its param) for each rule
CHECKS = {
    "chat: a tool message answers the tool_calls before it": (
        "chat",
        chat_body(CHAT_CALL, tool("call_1"), tool("call_2")),
        chat_body({"role": "assistant", "content": "Hm."}, tool("call_1")),
        "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.",
        "messages.[2].role",
    ),
    "chat: a tool message names one of those calls": (
        "chat",
        chat_body(CHAT_CALL, tool("call_2"), tool("call_1")),
        chat_body(CHAT_CALL, tool("call_1"), tool("call_3")),
        "Invalid parameter: 'tool_call_id' of 'call_3' not found in 'tool_calls' of previous message.",
        "messages.[3].tool_call_id",
    ),
    "chat: every tool call is answered before the next message": (
        "chat",
        chat_body(CHAT_CALL, tool("call_1"), tool("call_2"), {"role": "user", "content": "And?"}),
        chat_body(CHAT_CALL, tool("call_1"), {"role": "user", "content": "And?"}),
        "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. "
        "The following tool_call_ids did not have response messages: call_2",
        "messages.[1].role",
    ),
    "responses: a function_call_output answers a function_call": (
        "responses",
        responses_body(FUNCTION_CALL, output("call_1")),
        responses_body(FUNCTION_CALL, output("call_9")),
        "No tool call found for function call output with call_id call_9.",
        "input",
    ),
    "messages: each tool_use is answered in the next message": (
        "messages",
        messages_body(USE, result("toolu_1")),
        messages_body(USE, {"role": "user", "content": "Well?"}),
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_1. "
        "Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
        None,
    ),
    "messages: each tool_result answers a tool_use": (
        "messages",
        messages_body(USE, result("toolu_1")),
        messages_body({"role": "assistant", "content": "Hm."}, result("toolu_1")),
        "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_1. "
        "Each `tool_result` block must have a corresponding `tool_use` block in the previous message.",
        None,
    ),
    "messages: max_tokens is required": (
        "messages",
        messages_body(),
        messages_body(max_tokens=None),
        "max_tokens: Field required",
        None,
    ),
}


def error_shape(protocol: str, message: str, param: str | None, answer: dict) -> dict:
    """The protocol's own 400 body for `message` (the Anthropic request id as it came)."""
    if protocol == "messages":
        return {
            "type": "error",
            "error": {"type": "invalid_request_error", "message": message},
            "request_id": answer.get("request_id"),
        }
    return {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": None}}


@pytest.mark.parametrize("rule", CHECKS)
async def test_each_conversation_check_passes_a_good_request_and_refuses_a_bad_one(rule, gateway, base_url):
    protocol, good, bad, message, param = CHECKS[rule]
    assert (await send(base_url, protocol, good))[0] == 200
    status, answer = await send(base_url, protocol, bad)
    assert (status, answer) == (400, error_shape(protocol, message, param, answer))
    assert answer.get("request_id", "req_").startswith("req_")
    assert [r.end for r in gateway.journal.records] == ["completed", "rejected"]


@pytest.mark.parametrize("rule", CHECKS)
async def test_lenient_conversations_let_the_bad_requests_through(rule, make_gateway, serve):
    protocol, _, bad, _, _ = CHECKS[rule]
    base_url = await serve(make_gateway(lenient_conversations=True))
    assert (await send(base_url, protocol, bad))[0] == 200


@pytest.mark.parametrize("rule", [rule for rule in CHECKS if "max_tokens" not in rule])
async def test_the_official_sdks_raise_the_check_as_a_bad_request(rule, openai_client, anthropic_client):
    protocol, _, bad, message, param = CHECKS[rule]
    with pytest.raises((openai.BadRequestError, anthropic.BadRequestError)) as caught:
        if protocol == "chat":
            await openai_client.chat.completions.create(**bad)
        elif protocol == "responses":
            await openai_client.responses.create(**bad)
        else:
            await anthropic_client.messages.create(**bad)
    assert message in caught.value.message
    assert getattr(caught.value, "param", None) == param


async def test_a_function_call_output_may_answer_a_call_of_the_chained_response(openai_client, gateway):
    gateway.global_session.default = "agent-weather"
    first = await openai_client.responses.create(model="gpt-5.6-sol", input="Weather?")
    [call] = [item for item in first.output if item.type == "function_call"]
    second = await openai_client.responses.create(
        model="gpt-5.6-sol", previous_response_id=first.id, input=[output(call.call_id)]
    )
    assert second.output_text == "The weather in Paris: Sunny."
    with pytest.raises(openai.BadRequestError) as caught:
        await openai_client.responses.create(
            model="gpt-5.6-sol", previous_response_id=second.id, input=[output(call.call_id + "x")]
        )
    assert (caught.value.param, caught.value.body["message"]) == (
        "input",
        f"No tool call found for function call output with call_id {call.call_id}x.",
    )


# ---------------------------------------------------------------- a queued sequence plays its whole run


async def test_a_queued_sequence_plays_every_entry_in_order(gateway, base_url):
    body = at_turn("chat", 1)
    async with aiohttp.ClientSession() as session:
        async with session.post(
            base_url + "/_fakehop/queue", json={"scenario": "flaky-then-ok", "times": 2}
        ) as response:
            queued = await response.json()
        async with session.get(base_url + "/_fakehop/queue") as response:
            listed = await response.json()
        assert queued == {"queued": "flaky-then-ok", "times": 2, "requests": 6, "length": 6}
        assert listed == {"queue": ["flaky-then-ok[1]", "flaky-then-ok[2]", "flaky-then-ok[3]"] * 2}
        statuses = [(await send(base_url, "chat", body))[0] for _ in range(7)]
    assert statuses == [429, 500, 200] * 2 + [200]
    assert [r.scenario for r in gateway.journal.records] == [
        "flaky-then-ok[1]",
        "flaky-then-ok[2]",
        "flaky-then-ok[3]->hello",
    ] * 2 + ["hello"]
    await send(base_url, "chat", body, {"X-Fakehop-Scenario": "flaky-then-ok"})
    assert gateway.journal.records[-1].scenario == "flaky-then-ok[1]"  # the queue left its counter where it was


async def test_the_control_api_names_a_conversations_kind_and_the_lenient_setting(base_url):
    async with aiohttp.ClientSession() as session:
        async with session.get(base_url + "/_fakehop/scenarios") as response:
            kinds = {scenario["name"]: scenario["kind"] for scenario in (await response.json())["scenarios"]}
        async with session.get(base_url + "/_fakehop/health") as response:
            health = await response.json()
    assert (kinds["agent-weather"], kinds["agent-two-tools"], kinds["flaky-then-ok"], kinds["hello"]) == (
        "conversation",
        "conversation",
        "sequence",
        "steps",
    )
    assert health["lenient_conversations"] is False
