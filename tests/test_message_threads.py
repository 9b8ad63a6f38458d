"""Messages Threads (the `message-threads-2026-08-12` beta) on a real server: a turn that
continues a Thread sends only its new messages, and fakehop answers it as the real API does,
from the conversation it holds; the official SDK's tool runner, which threads its turns by
default, runs its loop through."""

from __future__ import annotations

import asyncio
import contextlib
import json

import aiohttp
import anthropic
import pytest
from anthropic.types import beta as beta_types

from fakehop.protocols import messages

from . import clients

THREADS = {"anthropic-beta": messages.THREADS_BETA}
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]
SDK_THREADS = hasattr(beta_types, "BetaMessageThreadParam")  # the SDKs before 2.17 send no `thread`


def asked(scenario: str = "agent-weather", session: str | None = None) -> dict:
    headers = {**THREADS, "X-Fakehop-Scenario": scenario}
    return headers if session is None else {**headers, "X-Fakehop-Session": session}


def turn(thread: dict, messages_sent: list, **fields) -> dict:
    return {"model": "claude-sonnet-5", "max_tokens": 256, "messages": messages_sent, "thread": thread, **fields}


def continuing(previous: str) -> dict:
    return {"type": "continue", "previous_message_id": previous}


async def post(base_url: str, body: dict, headers: dict) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as session:
        async with session.post(base_url + "/v1/messages", json=body, headers=headers) as response:
            return response.status, await response.json()


async def first_turn(base_url: str, **options) -> dict:
    """A Thread created by the first turn of agent-weather: its answer, a call of get_weather."""
    status, answer = await post(base_url, turn({"type": "create"}, QUESTION), asked(**options))
    assert status == 200, answer
    return answer


def results_for(answer: dict, text: str = "Rain, 12 °C") -> list:
    [call] = [block for block in answer["content"] if block["type"] == "tool_use"]
    return [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": text}]}]


def error_of(answer: dict) -> tuple[str, str | None]:
    return answer["error"]["type"], answer["error"].get("details", {}).get("error_code")


@pytest.mark.skipif(not SDK_THREADS, reason="this anthropic SDK has no message threads")
@pytest.mark.parametrize("stream", [False, True])
async def test_the_sdks_tool_runner_runs_its_loop_in_a_thread(base_url, gateway, stream):
    async with clients.anthropic_async(base_url=base_url, api_key="sk-test", max_retries=0) as client:

        @anthropic.beta_async_tool
        async def get_weather(city: str) -> str:
            """The weather in a city."""
            return f"Rain, 12 °C in {city}"

        runner = client.beta.messages.tool_runner(
            model="claude-sonnet-5",
            max_tokens=256,
            messages=QUESTION,
            tools=[get_weather],
            stream=stream,
            extra_headers={"X-Fakehop-Scenario": "agent-weather"},
        )
        stops = [(await item.get_final_message()).stop_reason if stream else item.stop_reason async for item in runner]

    assert stops == ["tool_use", "end_turn"]
    first, second = gateway.journal.records
    assert [(r.end, r.turn, r.scenario) for r in (first, second)] == [
        ("completed", 1, "agent-weather[1]"),
        ("completed", 2, "agent-weather[2]"),
    ]
    assert first.body["thread"] == {"type": "create"}
    assert second.body["thread"]["type"] == "continue"
    [result] = second.body["messages"]  # the tool's result alone: the Thread holds the rest
    assert result["content"][0]["type"] == "tool_result"
    assert messages.THREADS_BETA in second.headers["anthropic-beta"]


@pytest.mark.skipif(not SDK_THREADS, reason="this anthropic SDK has no message threads")
async def test_the_tool_runner_adds_a_tool_in_a_system_message(base_url, gateway):
    async with clients.anthropic_async(base_url=base_url, api_key="sk-test", max_retries=0) as client:

        @anthropic.beta_async_tool
        async def get_weather(city: str) -> str:
            """The weather in a city."""
            return f"Rain, 12 °C in {city}"

        @anthropic.beta_async_tool
        async def get_time(timezone: str) -> str:
            """The time in a timezone."""
            return "14:05"

        runner = client.beta.messages.tool_runner(
            model="claude-sonnet-5",
            max_tokens=256,
            messages=QUESTION,
            tools=[get_weather],
            betas=["inline-tools-2026-09-15"],
            extra_headers={"X-Fakehop-Scenario": "agent-weather"},
        )
        replies = []
        async for message in runner:
            replies.append(message)
            if len(replies) == 1:
                runner.add_tools(get_time)

    assert [reply.stop_reason for reply in replies] == ["tool_use", "end_turn"]
    # the tool's result is read from before the system message
    assert replies[1].content[0].text == "The weather in Paris: Rain, 12 °C in Paris."
    second = gateway.journal.records[1]
    assert [m["role"] for m in second.body["messages"]] == ["user", "system"]
    assert second.body["messages"][1]["content"][0]["type"] == "tool_addition"


async def test_a_continuing_turn_is_checked_and_counted_with_the_whole_conversation(base_url, gateway):
    answer = await first_turn(base_url)
    wrong = [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_nope", "content": "x"}]}]

    refused, body = await post(base_url, turn(continuing(answer["id"]), wrong), asked())
    status, second = await post(base_url, turn(continuing(answer["id"]), results_for(answer)), asked())

    assert (refused, error_of(body)[0]) == (400, "invalid_request_error")  # the call it answers is in the Thread
    assert status == 200 and second["stop_reason"] == "end_turn"
    assert second["content"][0]["text"] == "The weather in Paris: Rain, 12 °C."
    assert [(r.status, r.turn) for r in gateway.journal.records] == [(200, 1), (400, None), (200, 2)]


async def test_a_turn_continues_a_streamed_answer_as_the_stream_gave_it(base_url, gateway):
    """The held answer is read back from the stream's bytes: the call's id and input as streamed."""
    async with clients.anthropic_async(base_url=base_url, api_key="sk-test", max_retries=0) as client:
        async with client.messages.stream(
            model="claude-sonnet-5",
            max_tokens=256,
            messages=QUESTION,
            extra_headers=asked(),
            extra_body={"thread": {"type": "create"}},
        ) as stream:
            streamed = (await stream.get_final_message()).model_dump(mode="json")

    status, second = await post(base_url, turn(continuing(streamed["id"]), results_for(streamed)), asked())

    assert status == 200 and second["content"][0]["text"] == "The weather in Paris: Rain, 12 °C."


@pytest.mark.parametrize("scenario", ["malformed", "interrupted", "disconnect"])
async def test_a_thread_whose_answer_broke_or_held_a_raw_frame_is_continued_or_not_found(base_url, scenario):
    """An answer with a frame no event reads is held as far as it reads; one that did not end
    well is held for no later turn."""
    async with aiohttp.ClientSession() as session:
        created = turn({"type": "create"}, QUESTION, stream=True)
        async with session.post(base_url + "/v1/messages", json=created, headers=asked(scenario)) as response:
            streamed = bytearray()
            with contextlib.suppress(aiohttp.ClientPayloadError):  # a disconnect cuts the body short
                async for data in response.content.iter_any():
                    streamed += data
    previous = messages.answer_id(bytes(streamed), whole=False)
    more = [{"role": "user", "content": "And tomorrow?"}]
    status, body = await post(base_url, turn(continuing(previous), more), asked("hello"))

    assert status == (200 if scenario == "malformed" else 404), body


async def test_an_answer_is_continued_once(base_url):
    answer = await first_turn(base_url)
    ok, _ = await post(base_url, turn(continuing(answer["id"]), results_for(answer)), asked())
    again, body = await post(base_url, turn(continuing(answer["id"]), results_for(answer)), asked())

    assert ok == 200
    assert (again, error_of(body)) == (400, ("invalid_request_error", "thread_already_continued"))


async def test_a_turn_continuing_what_another_still_continues_is_in_flight(base_url, gateway):
    answer = await first_turn(base_url)
    first_continue = turn(continuing(answer["id"]), results_for(answer), stream=True)
    async with aiohttp.ClientSession() as session:
        async with session.post(base_url + "/v1/messages", json=first_continue, headers=asked("hang")) as hanging:
            await hanging.content.readline()  # under way, and never ending
            in_flight, body = await post(base_url, turn(continuing(answer["id"]), results_for(answer)), asked())
    while gateway.journal.records[-1].end == "in_progress":  # the hanging one, once its client has gone
        await asyncio.sleep(0.01)
    after, _ = await post(base_url, turn(continuing(answer["id"]), results_for(answer)), asked())

    assert (in_flight, error_of(body)) == (400, ("invalid_request_error", "thread_continue_in_flight"))
    assert after == 200  # the answer that went first was never kept: the Thread may go on from the same answer


async def test_an_answer_no_thread_holds_is_not_found(base_url, anthropic_client):
    with pytest.raises(anthropic.NotFoundError) as raised:
        await anthropic_client.messages.create(
            model="claude-sonnet-5",
            max_tokens=256,
            messages=QUESTION,
            extra_headers=asked(),
            extra_body={"thread": continuing("msg_01NeverGiven")},
        )
    assert raised.value.status_code == 404
    assert error_of(raised.value.body) == ("not_found_error", "thread_not_found")


async def test_a_thread_is_held_in_its_session_and_dropped_with_it(base_url):
    answer = await first_turn(base_url, session="one")
    elsewhere, body = await post(base_url, turn(continuing(answer["id"]), results_for(answer)), asked(session="two"))
    async with aiohttp.ClientSession() as session:
        async with session.post(base_url + "/_fakehop/reset", headers={"X-Fakehop-Session": "one"}) as reset:
            assert reset.status == 200
    dropped, _ = await post(base_url, turn(continuing(answer["id"]), results_for(answer)), asked(session="one"))

    assert (elsewhere, error_of(body)[1]) == (404, "thread_not_found")
    assert dropped == 404


@pytest.mark.parametrize(
    ("fields", "unsupported"),
    [
        ({"thinking": {"type": "adaptive"}}, ["thinking"]),
        (
            {"context_management": {"edits": []}, "cache_control": {"type": "ephemeral"}},
            ["cache_control", "context_management"],
        ),
    ],
)
async def test_what_a_thread_cannot_carry_is_named(base_url, fields, unsupported):
    status, body = await post(base_url, turn({"type": "create"}, QUESTION, **fields), asked())

    assert (status, error_of(body)) == (400, ("invalid_request_error", "thread_unsupported_request"))
    assert body["error"]["details"]["unsupported"] == unsupported


@pytest.mark.parametrize(
    ("thread", "fields", "param"),
    [
        ("create", {}, "thread"),
        ({"type": "fork"}, {}, "thread"),
        ({"type": "continue"}, {}, "thread.previous_message_id"),
        ({"type": "create", "previous_message_id": "msg_1"}, {}, "thread.previous_message_id"),
        (continuing("msg_1"), {"system": "Be brief."}, "system"),
        (continuing("msg_1"), {"tools": []}, "tools"),
    ],
)
async def test_a_thread_asked_wrongly_is_a_400_naming_what(base_url, gateway, thread, fields, param):
    status, body = await post(base_url, turn(thread, QUESTION, **fields), asked())

    assert (status, error_of(body)) == (400, ("invalid_request_error", None))
    assert param in body["error"]["message"]
    assert gateway.journal.records[-1].end == "rejected"


@pytest.mark.parametrize("scenario", ["think-then-tool", "weather-tool", "agent-two-tools"])
async def test_the_reply_read_back_from_a_stream_is_the_whole_answers_content(base_url, scenario):
    """What a Thread holds of a streamed answer (see messages.reply_of) is the content the same
    answer has unstreamed: the same seed gives both the same ids and signatures."""
    body = {**messages.EXAMPLE_REQUEST, "messages": QUESTION}
    headers = {"X-Fakehop-Scenario": scenario, "X-Fakehop-Seed": "7"}
    async with aiohttp.ClientSession() as session:
        async with session.post(base_url + "/v1/messages", json=body, headers=headers) as response:
            streamed = await response.read()
        async with session.post(base_url + "/v1/messages", json={**body, "stream": False}, headers=headers) as response:
            whole = await response.read()

    read_back = messages.reply_of(streamed, whole=False)
    assert read_back == {"role": "assistant", "content": json.loads(whole)["content"]}
    assert {block["type"] for block in read_back["content"]} >= {"tool_use"}
    assert messages.answer_id(streamed, whole=False) == json.loads(whole)["id"]
