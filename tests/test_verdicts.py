"""Each verdict rule against real clients: the official SDKs, at their defaults and
misconfigured, and small hand-written aiohttp and httpx clients, every one through a real
server and read back through GET /_fakehop/verdict. For every rule, one client that trips it
and one that does not."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import anthropic
import httpx2
import openai
import pytest

from fakehop.scenario.reader import parse_document
from fakehop.scenario.yamlsource import with_lines
from fakehop.state import journal as jr
from fakehop.testing import Fakehop, make_app
from fakehop.verdicts import RETRY_COUNT_HEADER, RULES, Settings

from . import clients
from .sdk_results import TIMED_OUT, caused_by

CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"
MODEL = "gpt-5.6-sol"
HUGE = {
    "name": "huge",
    "steps": [{"text": {"faker": "paragraphs", "nb": 3000, "seed": 1}, "chunk": 4}],
}  # some 30 MB of chunks
BUSY_THEN_OK = {
    "name": "busy-then-ok",
    "sequence": [{"http_error": {"status": 429, "retry_after": 1}}, {"use": "hello"}],
}
# retry-after-ms, which the SDKs read before Retry-After, asks for a wait of its own
BUSY_IN_MS = {
    "name": "busy-in-ms",
    "sequence": [
        {"http_error": {"status": 429, "retry_after": 5, "headers": {"Retry-After-Ms": "1200"}}},
        {"use": "hello"},
    ],
}
DOWN_DO_NOT_RETRY = {"name": "down-do-not-retry", "http_error": {"status": 500, "headers": {"x-should-retry": "false"}}}
ALWAYS_400_RETRY = {"name": "bad-but-retry", "http_error": {"status": 400, "headers": {"x-should-retry": "true"}}}


def add(gateway, mapping: dict) -> None:
    gateway.global_session.add(parse_document(with_lines(mapping), "test", None))


def chat_body(prompt: str, stream: bool = False, history: list | None = None) -> dict:
    return {"model": MODEL, "messages": [*(history or []), {"role": "user", "content": prompt}], "stream": stream}


def scenario(name: str) -> dict:
    return {"X-Fakehop-Scenario": name}


async def verdict(base_url: str, **settings) -> dict:
    async with aiohttp.ClientSession() as session:
        async with session.get(
            base_url + "/_fakehop/verdict", params={k: str(v) for k, v in settings.items()}
        ) as response:
            assert response.status == 200, await response.text()
            return await response.json()


def rules_of(answer: dict, severity: str | None = None) -> list[str]:
    return [f["rule"] for f in answer["findings"] if severity is None or f["severity"] == severity]


async def answering(gateway) -> None:
    """Until the first request has its scenario and, streamed, its first events: then a hang is under way."""
    for _ in range(500):
        first = gateway.journal.records[0] if gateway.journal.records else None
        if first is not None and first.scenario is not None and (first.events or not first.stream):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("no answer began")


async def settled(gateway, timeout: float = 5.0) -> None:
    """Until every request has ended: a client's hang-up reaches the server a moment later."""
    for _ in range(int(timeout / 0.01)):
        if gateway.journal.records and all(r.end != jr.IN_PROGRESS for r in gateway.journal.records):
            return
        await asyncio.sleep(0.01)
    raise AssertionError([str(r.log_line()) for r in gateway.journal.records])


# ---------------------------------------------------------------- hand-written clients


async def post_until_ok(
    base_url: str, body: dict, name: str, waits: list[float], honour_retry_after: bool = False
) -> list[int]:
    """An aiohttp client that posts, and after each failure waits waits[i] (or what Retry-After
    says) and posts the same body again; the statuses it got."""
    statuses = []
    async with aiohttp.ClientSession() as session:
        for wait in [*waits, None]:
            async with session.post(base_url + CHAT, json=body, headers=scenario(name)) as response:
                await response.read()
                statuses.append(response.status)
                retry_after = response.headers.get("Retry-After")
            if response.status == 200 or wait is None:
                return statuses
            await asyncio.sleep(float(retry_after) if honour_retry_after and retry_after else wait)
    return statuses


async def read_chat_stream(session: aiohttp.ClientSession, base_url: str, body: dict, name: str) -> tuple[str, str]:
    """A hand-written SSE reader: the text it got, and how the stream ended for it
    ("done" at [DONE], "error" at an error event, "cut" when the body broke off)."""
    text: list[str] = []
    try:
        async with session.post(base_url + CHAT, json=body, headers=scenario(name)) as response:
            async for line in response.content:
                if not line.startswith(b"data: "):
                    continue
                if line.strip() == b"data: [DONE]":
                    return "".join(text), "done"
                event = json.loads(line[6:])
                if "error" in event:
                    return "".join(text), "error"
                text.append(event["choices"][0]["delta"].get("content") or "")
    except aiohttp.ClientPayloadError:
        pass
    return "".join(text), "cut"


# ---------------------------------------------------------------- which attempts are one request's


async def test_retries_whose_first_attempt_never_arrived_are_requests_of_their_own(base_url):
    """Three callers of one request, two of whose first attempts never reached the server (a
    connection the kernel dropped): sent as the SDKs send them, with their retry counts, their
    retries are not a storm of the third's."""
    async with httpx2.AsyncClient(base_url=base_url) as client:

        async def attempt(count: int) -> int:
            headers = {**scenario("server-error"), RETRY_COUNT_HEADER: str(count)}
            return (await client.post(CHAT, json=chat_body("same"), headers=headers)).status_code

        assert await attempt(0) == 500
        for wait, count in ((0.4, 1), (0.8, 2)):
            await asyncio.sleep(wait)
            assert await asyncio.gather(*(attempt(count) for _ in range(3))) == [500] * 3
    answer = await verdict(base_url)
    assert answer["findings"] == [] and answer["requests"] == 3
    assert sorted(retried["attempts"] for retried in answer["retried"]) == [2, 2, 3]


async def test_an_sdk_told_not_to_retry_a_500_sends_copies_at_once_not_retries(base_url, gateway):
    add(gateway, DOWN_DO_NOT_RETRY)
    async with clients.openai_async(base_url=base_url + "/v1", api_key="sk-test") as client:
        copies = [
            client.chat.completions.create(
                model=MODEL, messages=chat_body("x")["messages"], extra_headers=scenario("down-do-not-retry")
            )
            for _ in range(3)
        ]
        assert all(
            isinstance(error, openai.InternalServerError)
            for error in await asyncio.gather(*copies, return_exceptions=True)
        )
    answer = await verdict(base_url)
    assert (answer["findings"], answer["requests"], answer["retried"]) == ([], 3, [])


async def test_an_app_retrying_by_itself_with_its_sdk_retries_off_is_judged_as_one_request(base_url):
    async with clients.openai_async(base_url=base_url + "/v1", api_key="sk-test", max_retries=0) as client:
        for _ in range(3):
            with pytest.raises(openai.InternalServerError):
                await client.chat.completions.create(
                    model=MODEL, messages=chat_body("x")["messages"], extra_headers=scenario("server-error")
                )
    answer = await verdict(base_url)
    assert [(f["rule"], f["severity"], f["seqs"]) for f in answer["findings"]] == [("no_backoff", "warning", [1, 2, 3])]


# ---------------------------------------------------------------- retry_after_ignored


async def test_a_client_that_retries_at_once_after_a_429_ignored_retry_after(base_url):
    statuses = await post_until_ok(base_url, chat_body("now"), "rate-limited", waits=[0, 0])
    assert statuses == [429, 429, 429]
    answer = await verdict(base_url)
    [finding] = [f for f in answer["findings"] if f["rule"] == "retry_after_ignored"]
    assert finding["severity"] == "error" and finding["seqs"] == [1, 2, 3]
    assert "Retry-After asked for 2 s" in finding["message"]
    assert answer["retried"][0]["seqs"] == [1, 2, 3] and answer["retried"][0]["attempts"] == 3


async def test_a_retry_after_set_among_the_headers_in_lower_case_is_judged_too(base_url, gateway):
    add(gateway, {"name": "busy-lower-case", "http_error": {"status": 429, "headers": {"retry-after": "1"}}})
    async with aiohttp.ClientSession() as session:
        async with session.post(
            base_url + CHAT, json=chat_body("now"), headers=scenario("busy-lower-case")
        ) as response:
            assert (response.status, response.headers.getall("Retry-After")) == (429, ["1"])
    assert await post_until_ok(base_url, chat_body("now"), "busy-lower-case", waits=[0]) == [429, 429]
    assert [record.retry_after for record in gateway.journal.records] == ["1", "1", "1"]
    [finding] = (await verdict(base_url))["findings"]
    assert finding["rule"] == "retry_after_ignored" and "Retry-After asked for 1 s" in finding["message"]


@pytest.mark.parametrize(
    ("busy", "asked", "longest"),
    [(BUSY_THEN_OK, 1.0, None), (BUSY_IN_MS, 1.2, 5.0)],
    ids=["retry-after", "retry-after-ms"],
)
async def test_the_sdks_at_their_defaults_wait_as_retry_after_says(base_url, gateway, busy, asked, longest):
    """Retry-After, or retry-after-ms before it, as the SDKs read them: so does the verdict."""
    add(gateway, busy)
    async with clients.openai_async(base_url=base_url + "/v1", api_key="sk-test") as client:
        completion = await client.chat.completions.create(
            model=MODEL, messages=chat_body("wait")["messages"], extra_headers=scenario(busy["name"])
        )
    assert completion.choices[0].message.content == "Hello! How can I help you today?"
    answer = await verdict(base_url)
    assert answer["findings"] == []
    [retried] = answer["retried"]
    assert retried["ends"] == ["http_error", "completed"] and retried["waits"][0] >= asked
    assert longest is None or retried["waits"][0] < longest


async def test_retrying_before_a_retry_after_ms_is_over_ignored_it(base_url, gateway):
    add(gateway, BUSY_IN_MS)
    assert await post_until_ok(base_url, chat_body("now"), "busy-in-ms", waits=[0.3]) == [429, 200]
    assert [record.retry_after_ms for record in gateway.journal.records] == ["1200", None]
    [finding] = (await verdict(base_url))["findings"]
    assert finding["rule"] == "retry_after_ignored" and "whose retry-after-ms asked for 1.2 s" in finding["message"]


async def test_a_hand_written_client_that_honours_retry_after_is_clean(base_url, gateway):
    add(gateway, BUSY_THEN_OK)
    assert await post_until_ok(base_url, chat_body("patient"), "busy-then-ok", waits=[0], honour_retry_after=True) == [
        429,
        200,
    ]
    assert (await verdict(base_url))["findings"] == []


# ---------------------------------------------------------------- no_backoff


async def test_immediate_retries_of_a_500_are_no_backoff(base_url):
    async with httpx2.AsyncClient(base_url=base_url) as client:
        for _ in range(4):
            response = await client.post(CHAT, json=chat_body("hammer"), headers=scenario("server-error"))
            assert response.status_code == 500
    answer = await verdict(base_url)
    [finding] = [f for f in answer["findings"] if f["rule"] == "no_backoff"]
    assert finding["severity"] == "error" and finding["seqs"] == [1, 2, 3, 4]
    assert "never grew" in finding["message"]


async def test_a_steady_pause_between_retries_is_no_backoff_too(base_url):
    await post_until_ok(
        base_url, chat_body("steady"), "server-error", waits=[0.8, 0.8, 0.8]
    )  # 0.2 s from growing: room for load
    assert rules_of(await verdict(base_url), "error") == ["no_backoff"]


async def test_one_hasty_reissue_after_an_interrupted_stream_is_a_warning(base_url):
    async with aiohttp.ClientSession() as session:
        assert (await read_chat_stream(session, base_url, chat_body("go", stream=True), "interrupted-then-ok"))[
            1
        ] == "error"
        assert (await read_chat_stream(session, base_url, chat_body("go", stream=True), "interrupted-then-ok"))[
            1
        ] == "done"
    answer = await verdict(base_url)
    assert [(f["rule"], f["severity"], f["seqs"]) for f in answer["findings"]] == [("no_backoff", "warning", [1, 2])]


async def test_the_sdks_back_off_between_retries(base_url):
    async with clients.anthropic_async(base_url=base_url, api_key="sk-test", max_retries=3) as client:
        with pytest.raises(anthropic.InternalServerError):
            await client.messages.create(
                model="claude-sonnet-5",
                max_tokens=50,
                messages=chat_body("x")["messages"],
                extra_headers=scenario("server-error"),
            )
    answer = await verdict(base_url)
    [retried] = answer["retried"]
    assert retried["attempts"] == 4 and retried["waits"] == sorted(retried["waits"])
    assert answer["findings"] == []


async def test_a_growing_backoff_by_hand_is_clean(base_url):
    await post_until_ok(base_url, chat_body("grow"), "server-error", waits=[0.3, 0.6, 1.2])
    assert (await verdict(base_url))["findings"] == []


# ---------------------------------------------------------------- retry_storm


async def test_many_attempts_of_one_request_are_a_retry_storm_even_with_backoff(base_url):
    waits = [0.3 * 1.3**k for k in range(6)]
    assert len(await post_until_ok(base_url, chat_body("storm"), "server-error", waits=waits)) == 7
    answer = await verdict(base_url)
    assert rules_of(answer) == ["retry_storm"]
    assert (
        answer["findings"][0]["seqs"] == list(range(1, 8))
        and "7 times, more than 5" in answer["findings"][0]["message"]
    )


async def test_the_sdk_with_more_retries_than_the_limit_storms(base_url):
    async with clients.openai_async(base_url=base_url + "/v1", api_key="sk-test", max_retries=3) as client:
        with pytest.raises(openai.InternalServerError):
            await client.chat.completions.create(
                model=MODEL, messages=chat_body("x")["messages"], extra_headers=scenario("server-error")
            )
    assert rules_of(await verdict(base_url, max_attempts=3)) == ["retry_storm"]
    assert rules_of(await verdict(base_url)) == []  # 4 attempts: within the default limit of 5


# ---------------------------------------------------------------- retried_non_retryable


async def test_resending_a_request_that_got_a_400_is_retrying_the_non_retryable(base_url):
    statuses = await post_until_ok(base_url, chat_body("bad"), "fail-invalid-prompt", waits=[0.3, 0.6])
    assert statuses == [400, 400, 400]
    answer = await verdict(base_url)
    [finding] = answer["findings"]
    assert (finding["rule"], finding["seqs"]) == ("retried_non_retryable", [1, 2, 3])
    assert "after a 400" in finding["message"]


async def test_reissuing_a_stream_that_failed_with_invalid_prompt_is_retrying_the_non_retryable(base_url):
    async with aiohttp.ClientSession() as session:
        for _ in range(2):
            assert (
                await read_chat_stream(session, base_url, chat_body("flagged", stream=True), "fail-invalid-prompt")
            )[1] == "error"
            await asyncio.sleep(0.3)
    answer = await verdict(base_url)
    assert rules_of(answer) == ["retried_non_retryable"] and "invalid_prompt" in answer["findings"][0]["message"]


async def test_the_sdk_with_max_retries_high_does_not_retry_a_400(base_url):
    async with clients.openai_async(base_url=base_url + "/v1", api_key="sk-test", max_retries=10) as client:
        with pytest.raises(openai.BadRequestError):
            await client.chat.completions.create(
                model=MODEL, messages=chat_body("x")["messages"], extra_headers=scenario("fail-invalid-prompt")
            )
    answer = await verdict(base_url)
    assert answer["findings"] == [] and answer["requests"] == 1 and answer["retried"] == []


async def test_a_400_that_says_x_should_retry_may_be_retried(base_url, gateway):
    add(gateway, ALWAYS_400_RETRY)
    async with clients.openai_async(base_url=base_url + "/v1", api_key="sk-test", max_retries=1) as client:
        with pytest.raises(openai.BadRequestError):
            await client.chat.completions.create(
                model=MODEL, messages=chat_body("x")["messages"], extra_headers=scenario("bad-but-retry")
            )
    answer = await verdict(base_url)
    assert answer["retried"][0]["attempts"] == 2 and answer["findings"] == []


# ---------------------------------------------------------------- resumed_partial_output


async def test_sending_the_partial_answer_back_to_continue_it_is_resuming_partial_output(base_url):
    async with aiohttp.ClientSession() as session:
        question = chat_body("Tell me", stream=True)
        partial, ending = await read_chat_stream(session, base_url, question, "fail-server-error")
        assert (partial, ending) == ("Here is the start of", "error")
        continuation = {**question, "messages": [*question["messages"], {"role": "assistant", "content": partial}]}
        await read_chat_stream(session, base_url, continuation, "hello")
    answer = await verdict(base_url)
    [finding] = answer["findings"]
    assert (finding["rule"], finding["seqs"]) == ("resumed_partial_output", [1, 2])
    assert "reissue the whole request" in finding["message"]


async def test_the_anthropic_sdk_prefilling_the_interrupted_text_resumes_partial_output(base_url):
    question = [{"role": "user", "content": "Explain"}]
    async with clients.anthropic_async(base_url=base_url, api_key="sk-test") as client:
        got = []
        with pytest.raises(anthropic.APIStatusError, match="interrupted"):
            async with client.messages.stream(
                model="claude-sonnet-5", max_tokens=100, messages=question, extra_headers=scenario("interrupted")
            ) as stream:
                async for text in stream.text_stream:
                    got.append(text)
        async with client.messages.stream(
            model="claude-sonnet-5",
            max_tokens=100,
            extra_headers=scenario("hello"),
            messages=[*question, {"role": "assistant", "content": "".join(got)}],
        ) as stream:
            await stream.get_final_message()
    assert rules_of(await verdict(base_url)) == ["resumed_partial_output"]


async def test_the_anthropic_sdk_reissuing_the_whole_request_after_a_pause_is_clean(base_url):
    question = [{"role": "user", "content": "Explain"}]
    async with clients.anthropic_async(base_url=base_url, api_key="sk-test") as client:
        for attempt in range(2):
            try:
                async with client.messages.stream(
                    model="claude-sonnet-5",
                    max_tokens=100,
                    messages=question,
                    extra_headers=scenario("interrupted-then-ok"),
                ) as stream:
                    message = await stream.get_final_message()
                break
            except anthropic.APIStatusError:
                await asyncio.sleep(0.5)
    assert message.content[0].text == "Hello! How can I help you today?"
    answer = await verdict(base_url)
    assert answer["findings"] == [] and answer["retried"][0]["ends"] == ["failed", "completed"]


# ---------------------------------------------------------------- truncated_stream_accepted


async def test_taking_a_cut_stream_as_the_answer_and_going_on_accepts_a_truncated_stream(base_url):
    async with aiohttp.ClientSession() as session:
        first = chat_body("Start a story", stream=True)
        text, ending = await read_chat_stream(session, base_url, first, "disconnect")
        assert (text, ending) == ("Here is the start of", "cut")
        history = [*first["messages"], {"role": "assistant", "content": text}]
        await read_chat_stream(session, base_url, chat_body("Go on", stream=True, history=history), "hello")
    answer = await verdict(base_url)
    [finding] = answer["findings"]
    assert (finding["rule"], finding["seqs"]) == ("truncated_stream_accepted", [1, 2])


async def test_a_responses_client_carrying_cut_text_into_the_next_turn_accepts_a_truncated_stream(base_url):
    """A hand-written httpx client of the Responses API that joins the text deltas it got."""
    async with httpx2.AsyncClient(base_url=base_url) as client:
        text = []
        with pytest.raises(httpx2.RemoteProtocolError):
            async with client.stream(
                "POST",
                RESPONSES,
                json={"model": MODEL, "input": "Start", "stream": True},
                headers=scenario("disconnect"),
            ) as response:
                async for line in response.aiter_lines():
                    if line.startswith("data: ") and json.loads(line[6:])["type"] == "response.output_text.delta":
                        text.append(json.loads(line[6:])["delta"])
        turns = [
            {"role": "user", "content": "Start"},
            {"role": "assistant", "content": "".join(text)},
            {"role": "user", "content": "More"},
        ]
        response = await client.post(RESPONSES, json={"model": MODEL, "input": turns}, headers=scenario("hello"))
        assert response.status_code == 200
    assert rules_of(await verdict(base_url)) == ["truncated_stream_accepted"]


async def test_a_client_that_reissues_a_stream_without_its_terminator_is_clean(base_url, gateway):
    add(gateway, {"name": "cut-then-ok", "sequence": [{"use": "disconnect"}, {"use": "hello"}]})
    async with aiohttp.ClientSession() as session:
        question = chat_body("Start a story", stream=True)
        text, ending = await read_chat_stream(session, base_url, question, "cut-then-ok")
        while ending != "done":
            await asyncio.sleep(0.5)
            text, ending = await read_chat_stream(session, base_url, question, "cut-then-ok")
        history = [*question["messages"], {"role": "assistant", "content": text}]
        await read_chat_stream(session, base_url, chat_body("Go on", stream=True, history=history), "hello")
    answer = await verdict(base_url)
    assert answer["findings"] == [] and answer["retried"][0]["ends"] == ["disconnected", "completed"]


# ---------------------------------------------------------------- gave_up_during_keepalive

# reasoning-pause at this scale: keepalives every 0.5 s through 2.25 s of silence.
PAUSE_SCALE = 0.05


async def stream_reasoning_pause(base_url: str, timeout: float) -> str:
    async with clients.openai_async(
        base_url=base_url + "/v1", api_key="sk-test", timeout=timeout, max_retries=0
    ) as client:
        stream = await client.chat.completions.create(
            model=MODEL,
            messages=chat_body("prove it")["messages"],
            stream=True,
            extra_headers=scenario("reasoning-pause"),
        )
        return "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])


async def test_a_read_timeout_shorter_than_the_keepalive_interval_gives_up_during_keepalive(serve, make_gateway):
    gateway = make_gateway(time_scale=PAUSE_SCALE)
    base_url = await serve(gateway)
    with pytest.raises(TIMED_OUT) as caught:
        await stream_reasoning_pause(base_url, timeout=0.2)
    assert caused_by(caught.value, httpx2.ReadTimeout)
    await settled(gateway)
    answer = await verdict(base_url)
    [finding] = answer["findings"]
    assert (finding["rule"], finding["severity"], finding["seqs"]) == ("gave_up_during_keepalive", "error", [1])
    assert "hopbase-keepalive" in finding["message"]


async def test_the_anthropic_sdk_with_a_short_read_timeout_gives_up_during_keepalive(serve, make_gateway):
    gateway = make_gateway(time_scale=PAUSE_SCALE)
    base_url = await serve(gateway)
    async with clients.anthropic_async(base_url=base_url, api_key="sk-test", timeout=0.2, max_retries=0) as client:
        with pytest.raises(TIMED_OUT) as caught:
            async with client.messages.stream(
                model="claude-sonnet-5",
                max_tokens=100,
                messages=chat_body("prove it")["messages"],
                thinking={"type": "enabled", "budget_tokens": 50},
                extra_headers=scenario("reasoning-pause"),
            ) as stream:
                await stream.get_final_message()
        assert caused_by(
            caught.value, httpx2.ReadTimeout
        )  # whether the SDK wraps its HTTP library's error or lets it through
    await settled(gateway)
    assert rules_of(await verdict(base_url)) == ["gave_up_during_keepalive"]


async def test_a_read_timeout_longer_than_the_keepalive_interval_reads_through_the_silence(serve, make_gateway):
    gateway = make_gateway(time_scale=PAUSE_SCALE)
    base_url = await serve(gateway)
    assert await stream_reasoning_pause(base_url, timeout=1.5) == "Here is the proof, step by step."
    assert (await verdict(base_url))["findings"] == []


async def test_a_client_that_gives_up_on_a_hang_did_right(base_url, gateway):
    async with clients.openai_async(base_url=base_url + "/v1", api_key="sk-test", timeout=0.3, max_retries=0) as client:
        stream = await client.chat.completions.create(
            model=MODEL, messages=chat_body("x")["messages"], stream=True, extra_headers=scenario("hang")
        )
        with pytest.raises(openai.APITimeoutError):
            async for _ in stream:
                pass
    await settled(gateway)
    assert (await verdict(base_url, read_patience=0.1))["findings"] == []


# ---------------------------------------------------------------- no_read_timeout


async def test_a_client_with_no_timeout_on_a_hang_has_no_read_timeout(base_url, gateway):
    async def wait_forever():
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as session:
            await read_chat_stream(session, base_url, chat_body("x", stream=True), "hang")

    client = asyncio.ensure_future(wait_forever())
    try:
        await answering(gateway)
        await asyncio.sleep(0.8)
        answer = await verdict(base_url, read_patience=0.5)
        [finding] = answer["findings"]
        assert (finding["rule"], finding["seqs"]) == ("no_read_timeout", [1])
        assert (await verdict(base_url))["findings"] == []  # within the default patience of 630 s
    finally:
        client.cancel()


async def test_a_non_streamed_request_left_unanswered_without_a_timeout_has_no_read_timeout(base_url, gateway):
    async def wait_forever():
        async with httpx2.AsyncClient(base_url=base_url, timeout=None) as client:
            await client.post(CHAT, json=chat_body("x"), headers=scenario("hang"))

    client = asyncio.ensure_future(wait_forever())
    try:
        await answering(gateway)
        await asyncio.sleep(0.8)
        assert rules_of(await verdict(base_url, read_patience=0.5)) == ["no_read_timeout"]
    finally:
        client.cancel()


# ---------------------------------------------------------------- abandoned_stream


async def wait_for_blocked_write(gateway, seconds: float) -> None:
    for _ in range(500):
        record = gateway.journal.records[-1] if gateway.journal.records else None
        if (
            record is not None
            and record.write_began is not None
            and record.since_arrival(asyncio.get_running_loop().time()) - record.since_arrival(record.write_began)
            > seconds
        ):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("no write waited for the client")


async def test_breaking_out_of_an_sdk_stream_without_closing_it_abandons_the_stream(base_url, gateway):
    add(gateway, HUGE)
    async with clients.openai_async(base_url=base_url + "/v1", api_key="sk-test", max_retries=0) as client:
        stream = await client.chat.completions.create(
            model=MODEL, messages=chat_body("x")["messages"], stream=True, extra_headers=scenario("huge")
        )
        async for _ in stream:
            break  # and the stream is left open, unread
        await wait_for_blocked_write(gateway, 0.4)
        answer = await verdict(base_url, write_patience=0.3)
        [finding] = answer["findings"]
        assert (finding["rule"], finding["seqs"]) == ("abandoned_stream", [1]) and "is still open" in finding["message"]
        await stream.close()
    await settled(gateway)
    answer = await verdict(base_url, write_patience=0.3)
    assert rules_of(answer) == ["abandoned_stream"] and "was only then closed" in answer["findings"][0]["message"]


async def test_an_sdk_stream_closed_when_no_longer_wanted_is_clean(base_url, gateway):
    add(gateway, HUGE)
    async with clients.openai_async(base_url=base_url + "/v1", api_key="sk-test", max_retries=0) as client:
        stream = await client.chat.completions.create(
            model=MODEL, messages=chat_body("x")["messages"], stream=True, extra_headers=scenario("huge")
        )
        async with stream:
            async for _ in stream:
                break
    await settled(gateway)
    assert (await verdict(base_url, write_patience=0.3))["findings"] == []


# ---------------------------------------------------------------- the control call itself


async def test_the_verdict_lists_its_settings_and_refuses_unknown_or_bad_ones(base_url):
    answer = await verdict(base_url, backoff_floor=0.5)
    assert answer["settings"]["backoff_floor"] == 0.5 and answer["settings"]["max_attempts"] == Settings().max_attempts
    assert (answer["findings"], answer["errors"], answer["warnings"], answer["requests"], answer["session"]) == (
        [],
        0,
        0,
        0,
        None,
    )
    async with aiohttp.ClientSession() as session:
        for query, words in (
            ("patience=1", "unknown setting 'patience'"),
            ("max_attempts=1.5", "max_attempts: expected a whole number"),
            ("backoff_floor=nan", "backoff_floor: expected a number"),
        ):
            async with session.get(f"{base_url}/_fakehop/verdict?{query}") as response:
                assert response.status == 400 and words in (await response.json())["error"]


async def test_a_session_that_sent_nothing_has_an_empty_verdict(base_url):
    await post_until_ok(base_url, chat_body("now"), "rate-limited", waits=[0])
    assert rules_of(await verdict(base_url)) == ["retry_after_ignored"]
    answer = await verdict(base_url, session="someone-else")
    assert (answer["session"], answer["findings"], answer["requests"]) == ("someone-else", [], 0)


async def test_the_handle_on_the_tests_own_loop_judges_too(aiohttp_server):
    fake = Fakehop.for_server(await aiohttp_server(make_app(time_scale=0.01)))
    await post_until_ok(fake.url, chat_body("now"), "rate-limited", waits=[0])
    [finding] = fake.verdict()
    assert (finding.rule, finding.severity, len(finding.seqs)) == ("retry_after_ignored", "error", 2)
    assert fake.verdict(retry_after_slack=2) == []


def test_every_rule_the_scenario_contract_names_is_there():
    assert list(RULES) == [
        "retry_after_ignored",
        "no_backoff",
        "retry_storm",
        "retried_non_retryable",
        "resumed_partial_output",
        "truncated_stream_accepted",
        "gave_up_during_keepalive",
        "no_read_timeout",
        "abandoned_stream",
    ]
