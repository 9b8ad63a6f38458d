"""One scenario, three protocols: through the official SDKs, every bundled scenario gives the
same text, tool calls, reasoning (where the protocol has it) and failure point."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import anthropic
import httpx2
import openai
import pytest

from fakehop.scenario.library import Library

from . import clients

LIBRARY = Library.load()
HEADER = "X-Fakehop-Scenario"
EXPECTED_ENDINGS = {
    "hello": "completed",
    "weather-tool": "completed",
    "fail-rate-limit": "failed",
    "stall": "failed",
    "interrupted": "failed",
    "disconnect": "disconnected",
    "hang": "hung",
    "malformed": "malformed",
    "rate-limited": "http 429",
    "flaky-then-ok": "http 429",
    "server-error": "http 500",
}
TIMEOUT = 1.5  # a `hang` ends in the client's timeout


@dataclass
class Seen:
    """What a client made of one streamed answer."""

    text: str = ""
    reasoning: str = ""
    calls: list = field(default_factory=list)  # [name, arguments text]
    ending: str = "completed"
    error: str = ""  # the exception the ending was read from, for a failing assertion to show

    def call(self, name: str) -> None:
        self.calls.append([name, ""])

    def arguments(self, fragment: str) -> None:
        self.calls[-1][1] += fragment

    def parsed_calls(self) -> list:
        return [(name, json.loads(arguments)) for name, arguments in self.calls]


def ending_of(error: Exception) -> str:
    """How an SDK exception reads, in words that are the same for every protocol."""
    if isinstance(error, (openai.APITimeoutError, anthropic.APITimeoutError, httpx2.TimeoutException)):
        return "hung"
    if isinstance(error, (openai.APIConnectionError, anthropic.APIConnectionError, httpx2.RemoteProtocolError)):
        return "disconnected"
    if isinstance(error, json.JSONDecodeError):
        return "malformed"
    if isinstance(error, (openai.APIStatusError, anthropic.APIStatusError)) and error.status_code != 200:
        return f"http {error.status_code}"
    return "failed"


async def chat(url: str, name: str) -> Seen:
    seen = Seen()
    client = clients.openai_async(base_url=url + "/v1", api_key="k", max_retries=0, timeout=TIMEOUT)
    try:
        async for chunk in await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Hello"}], stream=True, extra_headers={HEADER: name}
        ):
            delta = chunk.choices[0].delta
            seen.text += delta.content or ""
            for call in delta.tool_calls or []:
                assert call.function is not None
                if call.function.name:
                    seen.call(call.function.name)
                seen.arguments(call.function.arguments or "")
    except Exception as error:
        seen.ending, seen.error = ending_of(error), repr(error)
    finally:
        await client.close()
    return seen


async def responses(url: str, name: str) -> Seen:
    seen = Seen()
    client = clients.openai_async(base_url=url + "/v1", api_key="k", max_retries=0, timeout=TIMEOUT)
    try:
        async for event in await client.responses.create(
            model="m", input="Hello", stream=True, extra_headers={HEADER: name}
        ):
            if event.type == "response.output_text.delta":
                seen.text += event.delta
            elif event.type == "response.reasoning_summary_text.delta":
                seen.reasoning += event.delta
            elif event.type == "response.output_item.added" and event.item.type == "function_call":
                seen.call(event.item.name)
            elif event.type == "response.function_call_arguments.delta":
                seen.arguments(event.delta)
            elif event.type == "response.failed":
                seen.ending = "failed"
    except Exception as error:
        seen.ending, seen.error = ending_of(error), repr(error)
    finally:
        await client.close()
    return seen


async def messages(url: str, name: str) -> Seen:
    seen = Seen()
    client = clients.anthropic_async(base_url=url, api_key="k", max_retries=0, timeout=TIMEOUT)
    try:
        async for event in await client.messages.create(
            model="m",
            max_tokens=1024,
            messages=[{"role": "user", "content": "Hello"}],
            stream=True,
            extra_headers={HEADER: name},
        ):
            if event.type == "content_block_start" and event.content_block.type == "tool_use":
                seen.call(event.content_block.name)
            elif event.type == "content_block_delta":
                delta = event.delta
                if delta.type == "text_delta":
                    seen.text += delta.text
                elif delta.type == "thinking_delta":
                    seen.reasoning += delta.thinking
                elif delta.type == "input_json_delta":
                    seen.arguments(delta.partial_json)
    except Exception as error:
        seen.ending, seen.error = ending_of(error), repr(error)
    finally:
        await client.close()
    return seen


@pytest.mark.parametrize("name", LIBRARY.names())
async def test_every_protocol_tells_the_same_story(base_url, gateway, name):
    seen = {}
    for protocol, play in (("chat", chat), ("responses", responses), ("messages", messages)):
        gateway.global_session.reset()  # each protocol gets the first answer of a sequence
        seen[protocol] = await play(base_url, name)
    chat_seen, responses_seen, messages_seen = seen["chat"], seen["responses"], seen["messages"]
    assert chat_seen.text == responses_seen.text == messages_seen.text
    errors = [chat_seen.error, responses_seen.error, messages_seen.error]
    assert chat_seen.ending == responses_seen.ending == messages_seen.ending, errors
    if chat_seen.ending == "completed":
        assert chat_seen.parsed_calls() == responses_seen.parsed_calls() == messages_seen.parsed_calls()
    assert responses_seen.reasoning == messages_seen.reasoning
    assert chat_seen.reasoning == ""
    assert chat_seen.ending == EXPECTED_ENDINGS.get(name, chat_seen.ending), errors


def test_the_expected_endings_name_bundled_scenarios():
    assert set(EXPECTED_ENDINGS) <= set(LIBRARY.names())
