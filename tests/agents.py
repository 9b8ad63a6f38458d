"""Agent tool loops as apps write them with the official SDKs, one kind per protocol.

An agent asks; when the answer calls tools, the test hands it the tools' results, which the
agent sends back in its protocol's own tool-result shape, and asks again. `loop` runs a whole
loop: ask, answer every call, ask again.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from openai.types.chat import ChatCompletionFunctionToolParam

from . import clients

QUESTION = "What is the weather in Paris, and the time?"
CHAT_TOOLS: list[ChatCompletionFunctionToolParam] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "parameters": {"type": "object", "properties": {"timezone": {"type": "string"}}},
        },
    },
]
RESPONSES_TOOLS = [{"type": "function", **tool["function"]} for tool in CHAT_TOOLS]
MESSAGES_TOOLS = [
    {"name": tool["function"]["name"], "input_schema": tool["function"]["parameters"]} for tool in CHAT_TOOLS
]


class Call(NamedTuple):
    call_id: str
    name: str
    arguments: dict


class Turn(NamedTuple):
    """What one answer held: its text and the tool calls it made."""

    text: str
    calls: list[Call]


class Agent:
    """What every kind of agent keeps: its client, how it asks, the conversation so far, and
    the last answer."""

    protocol = ""
    model = "gpt-5.6-sol"

    def __init__(self, client, stream: bool = False, **options: Any):
        self.client, self.stream, self.options = client, stream, options
        self.messages: list[dict] = [{"role": "user", "content": QUESTION}]
        self.last: Turn | None = None

    def last_calls(self) -> list[Call]:
        """The tool calls of the last answer, which the agent answers."""
        assert self.last is not None, "an agent answers after it asked"
        return self.last.calls


class ChatAgent(Agent):
    """Chat Completions: the assistant message goes back with its `tool_calls`, then a `tool`
    message for each call."""

    protocol = "chat"

    async def ask(self) -> Turn:
        request = dict(model=self.model, messages=self.messages, tools=CHAT_TOOLS, **self.options)
        if self.stream:
            async with self.client.chat.completions.stream(**request) as stream:
                completion = await stream.get_final_completion()
        else:
            completion = await self.client.chat.completions.create(**request)
        message = completion.choices[0].message
        calls = [
            Call(call.id, call.function.name, json.loads(call.function.arguments)) for call in message.tool_calls or []
        ]
        assistant: dict[str, Any] = {"role": "assistant", "content": message.content}
        if calls:
            assistant["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.function.name, "arguments": call.function.arguments},
                }
                for call in message.tool_calls
            ]
        self.messages.append(assistant)
        self.last = Turn(message.content or "", calls)
        return self.last

    def answer(self, results: dict[str, str]) -> None:
        self.messages += [
            {"role": "tool", "tool_call_id": call.call_id, "content": results[call.name]} for call in self.last_calls()
        ]


class ResponsesAgent(Agent):
    """Responses: the whole conversation sent again as input items (the answer's own output
    items, then a `function_call_output` for each call), or with `chain`, only the new items
    and the `previous_response_id` of the last answer."""

    protocol = "responses"

    def __init__(self, client, stream: bool = False, chain: bool = False, **options: Any):
        super().__init__(client, stream, **options)
        self.chain = chain
        self.items: list[dict] = list(self.messages)
        self.new_items: list[dict] = list(self.items)
        self.previous_id: str | None = None
        self.response = None

    async def ask(self) -> Turn:
        request = dict(
            model=self.model, input=self.new_items if self.chain else self.items, tools=RESPONSES_TOOLS, **self.options
        )
        if self.chain and self.previous_id is not None:
            request["previous_response_id"] = self.previous_id
        if self.stream:
            async with self.client.responses.stream(**request) as stream:
                response = await stream.get_final_response()
        else:
            response = await self.client.responses.create(**request)
        output = [item.model_dump(exclude_none=True) for item in response.output]
        calls = [
            Call(item["call_id"], item["name"], json.loads(item["arguments"]))
            for item in output
            if item["type"] == "function_call"
        ]
        self.items += output
        self.new_items, self.previous_id, self.response = [], response.id, response
        self.last = Turn(response.output_text, calls)
        return self.last

    def answer(self, results: dict[str, str]) -> None:
        outputs = [
            {"type": "function_call_output", "call_id": call.call_id, "output": results[call.name]}
            for call in self.last_calls()
        ]
        self.items += outputs
        self.new_items += outputs


class MessagesAgent(Agent):
    """Anthropic Messages: the assistant message goes back with its `tool_use` blocks, then one
    user message with a `tool_result` block for each."""

    protocol = "messages"
    model = "claude-sonnet-5"

    async def ask(self) -> Turn:
        request = dict(model=self.model, max_tokens=1024, messages=self.messages, tools=MESSAGES_TOOLS, **self.options)
        if self.stream:
            async with self.client.messages.stream(**request) as stream:
                message = await stream.get_final_message()
        else:
            message = await self.client.messages.create(**request)
        self.messages.append(
            {"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in message.content]}
        )
        text = "".join(block.text for block in message.content if block.type == "text")
        self.last = Turn(
            text, [Call(block.id, block.name, block.input) for block in message.content if block.type == "tool_use"]
        )
        return self.last

    def answer(self, results: dict[str, str]) -> None:
        blocks = [
            {"type": "tool_result", "tool_use_id": call.call_id, "content": results[call.name]}
            for call in self.last_calls()
        ]
        self.messages.append({"role": "user", "content": blocks})


AGENTS = {agent.protocol: agent for agent in (ChatAgent, ResponsesAgent, MessagesAgent)}


def agent_for(protocol: str, openai_client, anthropic_client, **options: Any):
    client = anthropic_client if protocol == "messages" else openai_client
    return AGENTS[protocol](client, **options)


async def loop(agent, results: dict[str, str]) -> tuple[Turn, Turn]:
    """Ask, answer every tool the answer calls with `results` (by tool name), ask again."""
    first = await agent.ask()
    agent.answer(results)
    return first, await agent.ask()


async def sdk_loop(url: str, protocol: str, results: dict[str, str], **options: Any) -> tuple[Turn, Turn]:
    """A whole loop of the `protocol` agent (with `options`), its official SDK client pointed at the fakehop at `url`."""
    async with (
        clients.openai_async(base_url=url + "/v1", api_key="sk-test", max_retries=0) as openai_client,
        clients.anthropic_async(base_url=url, api_key="sk-test", max_retries=0) as anthropic_client,
    ):
        return await loop(agent_for(protocol, openai_client, anthropic_client, **options), results)


async def agent_weather_loop(agent, journal) -> None:
    """The whole loop of the bundled `agent-weather`, checked: a call of get_weather, then an
    answer that quotes its result, the journal showing turns 1 and 2."""
    first, second = await loop(agent, {"get_weather": "Rain, 12 °C"})
    assert first == Turn(
        "Let me check the weather in Paris.", [Call(first.calls[0].call_id, "get_weather", {"city": "Paris"})]
    )
    assert second == Turn("The weather in Paris: Rain, 12 °C.", [])
    assert [(r.turn, r.scenario) for r in journal.records] == [(1, "agent-weather[1]"), (2, "agent-weather[2]")]
