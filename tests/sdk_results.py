"""What the official SDKs make of one answer, in a form two answers can be compared by.

`final_result` asks as an application would (the SDKs' stream helpers where they build the
final object, the raw stream on Responses, whose helper keeps nothing of a failed response)
and gives the final text, refusal, tool calls, reasoning (redacted thinking's data too),
every usage count, the finish and stop sequence; or the exception's type, message, status
and the error's type, code and param. The ids each answer draws afresh (message, response and
item ids, timestamps) are left out; tool-call ids and thinking signatures are kept.
"""

from __future__ import annotations

from typing import Any

import anthropic
import httpx2
import openai
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageToolCallUnion,
    ChatCompletionUserMessageParam,
)
from openai.types.responses import Response, ResponseCompletedEvent, ResponseFailedEvent, ResponseIncompleteEvent

from fakehop.protocols import PROTOCOLS

from . import clients

QUESTION = "Hello"
MODELS = {"chat": "gpt-5.6-sol", "responses": "gpt-5.6-sol", "messages": "claude-sonnet-5"}
TIMEOUT = 30.0  # seconds: long enough for a loaded machine
HANG_TIMEOUT = 1.0  # a `hang` ends in the client's read timeout
SEED = {"X-Fakehop-Seed": "0"}  # the same ids, signatures and request ids in the original and the replay


def request_body(protocol: str, stream: bool) -> dict:
    """The body final_result sends, for clients that send it themselves."""
    body = dict(PROTOCOLS[protocol].EXAMPLE_REQUEST, model=MODELS[protocol], stream=stream)
    if protocol == "chat" and not stream:
        del body["stream_options"]
    return body


async def final_result(
    url: str,
    protocol: str,
    stream: bool,
    headers: dict[str, str] | None = None,
    timeout: float = TIMEOUT,
    max_retries: int = 0,
) -> dict:
    try:
        return await RESULTS[protocol](url, stream, headers or {}, timeout, max_retries)
    except Exception as error:
        return error_result(error)


def error_result(error: Exception) -> dict:
    """An exception as the SDKs raise it, in what fakehop controls: its class and the classes of
    the errors it was raised from (a read timeout, a connection cut short), the HTTP status
    where it has one (200 for Anthropic's error event), the error body fakehop sent and what
    the SDK read of it: type, code, param. The SDK's own message is kept only for an exception
    that carries no body: a connection error's names the port and the request id, which differ
    from server to server, and its wording changes from one SDK release to the next."""
    found: dict[str, Any] = {"error": type(error).__name__, "causes": [type(cause).__name__ for cause in causes(error)]}
    body = getattr(error, "body", None)
    if body is not None:
        found["body"] = body
    elif not isinstance(error, (openai.APIConnectionError, anthropic.APIConnectionError)):
        found["message"] = str(error)
    for name in ("status_code", "type", "code", "param"):
        if getattr(error, name, None) is not None:
            found[name] = getattr(error, name)
    return found


def causes(error: BaseException):
    """The exceptions `error` was raised from, nearest first."""
    while error.__cause__ is not None:
        error = error.__cause__
        yield error


# What each SDK raises when a stream is cut short or a read times out: its own exception, or the
# one its HTTP library raised, as SDK releases have done either way.
CUT_SHORT = (openai.APIConnectionError, anthropic.APIConnectionError, httpx2.RemoteProtocolError)
TIMED_OUT = (openai.APITimeoutError, anthropic.APITimeoutError, httpx2.ReadTimeout)


def caused_by(error: BaseException, kind: type[BaseException]) -> bool:
    """Whether `error` is a `kind`, or was raised from one: an SDK may let its HTTP library's
    exception through or wrap it in its own, from one release to the next."""
    return isinstance(error, kind) or any(isinstance(cause, kind) for cause in causes(error))


def usage_of(usage: Any) -> dict | None:
    """Every count of the usage, the details' too, by its path ("prompt_tokens_details.cached_tokens").
    A count of 0 is left out: an answer that gives no details (a stream written by hand)
    replays with 0 for each."""
    return None if usage is None else dict(counts(usage.model_dump()))


def counts(values: dict, path: str = ""):
    for key, value in values.items():
        if isinstance(value, dict):
            yield from counts(value, f"{path}{key}.")
        elif isinstance(value, int) and not isinstance(value, bool) and value:
            yield f"{path}{key}", value


async def chat(url: str, stream: bool, headers: dict, timeout: float, max_retries: int) -> dict:
    async with clients.openai_async(
        base_url=url + "/v1", api_key="sk-test", max_retries=max_retries, timeout=timeout
    ) as client:
        model, question = MODELS["chat"], [ChatCompletionUserMessageParam(role="user", content=QUESTION)]
        completion: ChatCompletion
        if stream:
            async with client.chat.completions.stream(
                model=model, messages=question, extra_headers=headers, stream_options={"include_usage": True}
            ) as events:
                async for _ in events:
                    pass
                completion = await events.get_final_completion()
        else:
            completion = await client.chat.completions.create(model=model, messages=question, extra_headers=headers)
    choice = completion.choices[0]
    calls = [function_call(call) for call in choice.message.tool_calls or []]
    return {
        "model": completion.model,
        "text": choice.message.content,
        "refusal": choice.message.refusal,
        "tool_calls": calls,
        "finish": choice.finish_reason,
        "usage": usage_of(completion.usage),
    }


def function_call(call: ChatCompletionMessageToolCallUnion) -> tuple:
    assert isinstance(call, ChatCompletionMessageFunctionToolCall), call  # the only kind fakehop sends
    return (call.id, call.function.name, call.function.arguments)


def responses_item(item: Any) -> tuple:
    if item.type == "message":
        return (
            "message",
            item.status,
            getattr(item, "phase", None),
            [(part.type, getattr(part, part.type.removeprefix("output_"))) for part in item.content],
        )
    if item.type == "reasoning":
        return ("reasoning", [part.text for part in item.summary])
    return ("function_call", item.status, item.call_id, item.name, item.arguments)


async def responses(url: str, stream: bool, headers: dict, timeout: float, max_retries: int) -> dict:
    async with clients.openai_async(
        base_url=url + "/v1", api_key="sk-test", max_retries=max_retries, timeout=timeout
    ) as client:
        model = MODELS["responses"]
        response: Response | None = None
        if stream:
            async for event in await client.responses.create(
                model=model, input=QUESTION, extra_headers=headers, stream=True
            ):
                if isinstance(event, (ResponseCompletedEvent, ResponseIncompleteEvent, ResponseFailedEvent)):
                    response = event.response
        else:
            response = await client.responses.create(model=model, input=QUESTION, extra_headers=headers)
    if response is None:
        return {"ended": "without a terminal event"}
    return {
        "model": response.model,
        "status": response.status,
        "output": [responses_item(item) for item in response.output],
        "usage": usage_of(response.usage),
        "error": response.error and response.error.model_dump(),
        "incomplete": response.incomplete_details and response.incomplete_details.reason,
    }


def messages_block(block: Any) -> tuple:
    if block.type == "text":
        return ("text", block.text)
    if block.type == "thinking":
        return ("thinking", block.thinking, block.signature)
    if block.type == "redacted_thinking":
        return ("redacted_thinking", block.data)
    return ("tool_use", block.id, block.name, block.input)


async def messages(url: str, stream: bool, headers: dict, timeout: float, max_retries: int) -> dict:
    async with clients.anthropic_async(
        base_url=url, api_key="sk-test", max_retries=max_retries, timeout=timeout
    ) as client:
        request = {
            "model": MODELS["messages"],
            "max_tokens": 1024,
            "messages": [{"role": "user", "content": QUESTION}],
            "extra_headers": headers,
            "thinking": PROTOCOLS["messages"].EXAMPLE_REQUEST["thinking"],
        }  # as request_body asks, so that thinking shows
        if stream:
            async with client.messages.stream(**request) as events:
                async for _ in events:
                    pass
                message = await events.get_final_message()
        else:
            message = await client.messages.create(**request)
    return {
        "model": message.model,
        "content": [messages_block(block) for block in message.content],
        "stop": message.stop_reason,
        "stop_sequence": message.stop_sequence,
        "usage": usage_of(message.usage),
    }


RESULTS = {"chat": chat, "responses": responses, "messages": messages}
