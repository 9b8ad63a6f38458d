"""`fakehop serve --state redis://...`: two servers on one real redis-server act as one server:
queue entries each taken once, settings set through one read by the other, one journal with
one seq numbering, reset through either; with Redis gone, 503s that name it, and service
again once it is back, with no restart."""

from __future__ import annotations

import asyncio
import calendar
import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from typing import Any, cast

import aiohttp
import anthropic
import pytest

from fakehop.protocols import PROTOCOLS
from fakehop.testing.remote import ControlClient, ControlFailed

from . import clients
from .redis_server import fakehop_servers, redis_server, serve_process, stopped, url_in  # noqa: F401 - the fixture, by its name

CONCURRENT = 100


async def post(client: aiohttp.ClientSession, url: str, protocol: str = "chat", **headers: str) -> tuple[int, dict]:
    """One unstreamed request to `url`; its status and JSON body."""
    body = dict(PROTOCOLS[protocol].EXAMPLE_REQUEST, stream=False)
    async with client.post(url + PROTOCOLS[protocol].PATH, json=body, headers=headers) as response:
        return response.status, await response.json()


async def requests_to(urls: list[str], count: int, **headers: str) -> list[tuple[int, dict]]:
    """`count` requests at once, spread over `urls` in turn."""
    async with aiohttp.ClientSession() as client:
        return await asyncio.gather(*(post(client, urls[n % len(urls)], **headers) for n in range(count)))


def whole_journal(url: str, limit: int = 100, session: str | None = None) -> list[dict]:
    """Every record of a session's view, read a page of `limit` at a time."""
    control = ControlClient(url, session=session)
    records: list[dict] = []
    since, more = 0, True
    while more:
        page = control.call("GET", "/requests", query={"since": since, "limit": limit})
        records += page["requests"]
        since, more = page["next_since"], page["more"]
    return records


@pytest.fixture
def servers(redis_server, tmp_path):
    with fakehop_servers(tmp_path, 2, "--state", redis_server.url) as urls:
        yield urls


async def test_queue_entries_are_each_taken_once_by_two_servers_under_100_concurrent_requests(servers):
    first, second = servers
    ControlClient(first).call("POST", "/queue", {"scenario": "rate-limited", "times": CONCURRENT // 2})
    assert len(ControlClient(second).call("GET", "/queue")["queue"]) == CONCURRENT // 2

    answers = await requests_to(servers, CONCURRENT)

    assert Counter(status for status, _ in answers) == {429: CONCURRENT // 2, 200: CONCURRENT // 2}
    assert ControlClient(second).call("GET", "/queue")["queue"] == []
    records = whole_journal(second)
    assert sorted(record["seq"] for record in records) == list(range(1, CONCURRENT + 1))
    assert Counter(record["scenario"] for record in records) == {"rate-limited": 50, "hello": 50}


async def test_a_queued_sequence_plays_its_entries_in_order_across_servers(servers):
    first, second = servers
    ControlClient(second).call("POST", "/queue", {"scenario": "flaky-then-ok"})
    assert ControlClient(first).call("GET", "/queue")["queue"] == [
        "flaky-then-ok[1]",
        "flaky-then-ok[2]",
        "flaky-then-ok[3]",
    ]
    async with aiohttp.ClientSession() as client:
        statuses = [(await post(client, url))[0] for url in (first, second, first)]
    assert statuses == [429, 500, 200]


async def test_a_sequence_counts_its_requests_once_whichever_server_gets_them(servers):
    first, second = servers
    ControlClient(first).call("PUT", "/default", {"scenario": "flaky-then-ok"})
    async with aiohttp.ClientSession() as client:
        statuses = [(await post(client, url))[0] for url in (second, first, second, first)]
    assert statuses == [429, 500, 200, 200]
    labels = [record["scenario"] for record in whole_journal(first)]
    assert labels == ["flaky-then-ok[1]", "flaky-then-ok[2]", *["flaky-then-ok[3]->hello"] * 2]


async def test_a_scenario_added_through_one_server_is_played_by_the_other(servers):
    first, second = servers
    ControlClient(first).call("POST", "/scenarios", text="name: greeting\nsteps:\n  - text: Hi from one\n")
    ControlClient(second).call("POST", "/queue", {"scenario": "greeting"})
    ControlClient(second).call("PUT", "/default", {"scenario": {"steps": [{"text": "inline default"}]}})
    names = [scenario["name"] for scenario in ControlClient(second).call("GET", "/scenarios")["scenarios"]]
    assert "greeting" in names

    async with aiohttp.ClientSession() as client:
        texts = [(await post(client, url))[1]["choices"][0]["message"]["content"] for url in (first, second)]
    assert texts == ["Hi from one", "inline default"]
    ControlClient(second).call("POST", "/reset")
    with pytest.raises(ControlFailed):
        ControlClient(first).call("PUT", "/default", {"scenario": "greeting"})


async def respond(client: aiohttp.ClientSession, url: str, stream: bool, **fields) -> tuple[int, bytes]:
    body = {"model": "gpt-5.6-sol", "input": "Hello", "stream": stream, **fields}
    async with client.post(url + "/v1/responses", json=body) as response:
        return response.status, await response.read()


def response_id_in(answer: bytes, stream: bool) -> str:
    if not stream:
        return json.loads(answer)["id"]
    last = answer.rstrip(b"\n").rsplit(b"\ndata: ", 1)[1]
    return json.loads(last)["response"]["id"]


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
async def test_a_stored_responses_answer_is_continued_fetched_and_deleted_through_the_other_server(servers, stream):
    first, second = servers
    async with aiohttp.ClientSession() as client:
        status, answer = await respond(client, first, stream)
        response_id = response_id_in(answer, stream)
        assert status == 200
        status, follow_up = await respond(client, second, False, previous_response_id=response_id)
        assert status == 200, follow_up
        async with client.get(f"{second}/v1/responses/{response_id}") as fetched:
            assert fetched.status == 200 and (await fetched.json())["id"] == response_id
        async with client.delete(f"{second}/v1/responses/{response_id}") as deleted:
            assert deleted.status == 200
        async with client.get(f"{first}/v1/responses/{response_id}") as gone:
            assert gone.status == 404
    turns = [record["turn"] for record in whole_journal(first) if record["path"] == "/v1/responses"]
    assert turns == [1, 2]


THREADED = {"anthropic-beta": "message-threads-2026-08-12", "X-Fakehop-Scenario": "agent-weather"}
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]


async def thread_turn(url: str, thread: dict, sent: list, stream: bool = False) -> tuple[int, dict]:
    """One turn of a Messages Thread of agent-weather through `url`, as the anthropic SDK reads
    it: the status, and the message or the error body."""
    async with clients.anthropic_async(base_url=url, api_key="sk-test", max_retries=0) as client:
        asked: dict[str, Any] = {
            "model": "claude-sonnet-5",
            "max_tokens": 256,
            "messages": sent,
            "extra_headers": THREADED,
            "extra_body": {"thread": thread},
        }
        try:
            if stream:
                async with client.messages.stream(**asked) as streamed:
                    return 200, (await streamed.get_final_message()).model_dump(mode="json")
            message = await client.messages.create(**asked)
            return 200, message.model_dump(mode="json")
        except anthropic.APIStatusError as refused:
            return refused.status_code, cast(dict, refused.body)


def tool_results_for(answer: dict) -> list:
    [call] = [block for block in answer["content"] if block["type"] == "tool_use"]
    return [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": "Rain, 12 °C"}]}]


def error_code(answer: dict) -> str | None:
    return answer["error"].get("details", {}).get("error_code")


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
async def test_a_messages_thread_made_through_one_server_is_continued_through_the_other_once(servers, stream):
    first, second = servers
    made, answer = await thread_turn(first, {"type": "create"}, QUESTION, stream)
    continuing = {"type": "continue", "previous_message_id": answer["id"]}

    status, second_turn = await thread_turn(second, continuing, tool_results_for(answer), stream)
    again, refused = await thread_turn(first, continuing, tool_results_for(answer))
    unknown, missing = await thread_turn(second, {**continuing, "previous_message_id": "msg_01Never"}, QUESTION)

    assert made == 200
    assert status == 200 and second_turn["content"][0]["text"] == "The weather in Paris: Rain, 12 °C."
    assert (again, error_code(refused)) == (400, "thread_already_continued")
    assert (unknown, error_code(missing)) == (404, "thread_not_found")
    for _ in range(500):  # a streamed answer is filed in the shared journal once its last byte has gone
        turns = [record["turn"] for record in whole_journal(first) if record["status"] == 200]
        if len(turns) == 2:
            break
        await asyncio.sleep(0.01)
    assert turns == [1, 2]


async def test_a_thread_one_server_continues_is_in_flight_for_the_other_until_that_answer_ends(servers):
    first, second = servers
    _, answer = await thread_turn(first, {"type": "create"}, QUESTION)
    continuing = {"type": "continue", "previous_message_id": answer["id"]}
    body = {"model": "claude-sonnet-5", "max_tokens": 256, "messages": tool_results_for(answer), "stream": True}
    async with aiohttp.ClientSession() as client:
        hanging_headers = {**THREADED, "X-Fakehop-Scenario": "hang"}
        async with client.post(
            first + "/v1/messages", json={**body, "thread": continuing}, headers=hanging_headers
        ) as hanging:
            await hanging.content.readline()  # under way on the first server, and never ending
            in_flight, refused = await thread_turn(second, continuing, tool_results_for(answer))
    for _ in range(500):  # the hanging answer ends once its client has gone
        if [record["end"] for record in whole_journal(first) if record["scenario"] == "hang"] != ["in_progress"]:
            break
        await asyncio.sleep(0.01)
    after, _ = await thread_turn(second, continuing, tool_results_for(answer))

    assert (in_flight, error_code(refused)) == (400, "thread_continue_in_flight")
    assert after == 200


async def test_a_finished_background_answer_is_fetched_and_continued_through_the_other_server(servers):
    first, second = servers
    async with aiohttp.ClientSession() as client:
        status, answer = await respond(client, first, False, background=True)
        assert status == 200 and json.loads(answer)["status"] == "queued"
        response_id = json.loads(answer)["id"]
        fetched: dict = {}
        for _ in range(100):  # the answer plays in the first server; the second sees it once it is kept
            async with client.get(f"{second}/v1/responses/{response_id}") as reply:
                fetched = await reply.json() if reply.status == 200 else {}
            if fetched.get("status") == "completed":
                break
            await asyncio.sleep(0.05)
        assert fetched.get("status") == "completed"
        status, follow_up = await respond(client, second, False, previous_response_id=response_id)
        assert status == 200, follow_up


async def test_a_fault_breaks_its_times_requests_in_all_whichever_server_gets_them(servers):
    first, second = servers
    laid = ControlClient(first).call("POST", "/faults", {"kind": "server_error", "times": 7})
    assert [fault["id"] for fault in ControlClient(second).call("GET", "/faults")["faults"]] == [laid["id"]]

    answers = await requests_to(servers, 40)

    assert Counter(status for status, _ in answers) == {500: 7, 200: 33}
    assert ControlClient(first).call("GET", "/faults")["faults"] == []
    assert ControlClient(second).call("GET", "/faults")["faults"] == []
    ControlClient(second).call("POST", "/faults", {"kind": "rate_limit", "times": 0})
    assert (await requests_to([first], 1))[0][0] == 429
    assert ControlClient(first).call("DELETE", "/faults")["removed"] == 1
    assert [status for status, _ in await requests_to(servers, 2)] == [200, 200]


async def test_a_stream_breaking_fault_and_a_latency_are_counted_once_whichever_server_takes_them(servers):
    first, second = servers
    ControlClient(first).call("POST", "/faults", {"kind": "truncate", "after": 1, "times": 3})
    ControlClient(second).call("POST", "/faults", {"kind": "latency", "first": 0.01, "times": 5})

    async with aiohttp.ClientSession() as client:
        answers = [post(client, servers[n % 2]) for n in range(12)]
        outcomes = await asyncio.gather(*answers, return_exceptions=True)
    assert sum(isinstance(outcome, aiohttp.ServerDisconnectedError) for outcome in outcomes) == 3

    records = [record for record in whole_journal(first) if record["path"] == "/v1/chat/completions"]
    laid = Counter(kind for record in records for kind in record["faults"])
    assert laid == {"truncate": 3, "latency": 5}  # each counted once, whichever server took it
    assert Counter(record["end"] for record in records) == {"disconnected": 3, "completed": 9}


async def statuses_in_turn(urls: list[str], count: int) -> list[int]:
    """The statuses of `count` requests made one after another, to each of `urls` in turn."""
    async with aiohttp.ClientSession() as client:
        return [(await post(client, urls[n % len(urls)]))[0] for n in range(count)]


async def test_a_fault_s_probability_draws_as_one_server_does_whichever_server_gets_each_request(servers, tmp_path):
    flaky = {"kind": "server_error", "probability": 0.5, "seed": 11, "times": 0}
    ControlClient(servers[0]).call("POST", "/faults", flaky)
    shared = await statuses_in_turn(servers, 24)
    (tmp_path / "alone").mkdir()
    with fakehop_servers(tmp_path / "alone", 1) as [alone]:
        ControlClient(alone).call("POST", "/faults", flaky)
        assert await statuses_in_turn([alone], 24) == shared
    assert set(shared) == {200, 500}
    ControlClient(servers[1]).call("DELETE", "/faults")
    ControlClient(servers[1]).call("POST", "/faults", flaky)  # a new fault draws from its first draw again
    assert await statuses_in_turn(servers[::-1], 24) == shared


LIMITED = "name: limited\nrate_limit: {requests: 3, tokens: 1000, window: 1.5s}\nusage: {input_tokens: 10}\nsteps: [{text: Hi}]\n"


async def test_a_rate_limit_window_counts_down_once_for_every_server_and_opens_again(servers):
    first, second = servers
    ControlClient(first).call("POST", "/scenarios", text=LIMITED)
    body = dict(PROTOCOLS["chat"].EXAMPLE_REQUEST, stream=False)

    async def remaining(client: aiohttp.ClientSession, url: str) -> tuple[str, str]:
        async with client.post(
            url + "/v1/chat/completions", json=body, headers={"X-Fakehop-Scenario": "limited"}
        ) as answer:
            return answer.headers["x-ratelimit-remaining-requests"], answer.headers["x-ratelimit-remaining-tokens"]

    async with aiohttp.ClientSession() as client:
        counted = [await remaining(client, url) for url in (second, first, second, first)]
        await asyncio.sleep(1.6)
        reopened = await remaining(client, first)
    assert counted == [("2", "990"), ("1", "980"), ("0", "970"), ("0", "960")]
    assert reopened == ("2", "990")


async def test_anthropic_rate_limit_headers_tell_the_shared_windows_end_from_every_server(servers):
    first, second = servers
    ControlClient(first).call("POST", "/scenarios", text=LIMITED.replace("1.5s", "90s"))
    body = dict(PROTOCOLS["messages"].EXAMPLE_REQUEST, stream=False)
    resets = []
    async with aiohttp.ClientSession() as client:
        for url in (first, second):
            async with client.post(
                url + "/v1/messages", json=body, headers={"X-Fakehop-Scenario": "limited"}
            ) as answer:
                resets.append(
                    (
                        answer.headers["anthropic-ratelimit-requests-reset"],
                        answer.headers["anthropic-ratelimit-requests-remaining"],
                    )
                )
            await asyncio.sleep(2.1)  # a window of its own would end 2 s later or more
    assert [remaining for _, remaining in resets] == ["2", "1"]
    first_end, second_end = (calendar.timegm(time.strptime(reset, "%Y-%m-%dT%H:%M:%SZ")) for reset, _ in resets)
    assert abs(second_end - first_end) <= 1  # the same end, each told to the second


async def test_settings_set_through_one_server_are_the_others_and_reset_through_either(servers):
    first, second = servers
    ControlClient(first).call("PUT", "/default", {"scenario": "rate-limited"})
    ControlClient(first).call("PUT", "/time_scale", {"time_scale": 0.5})
    health = ControlClient(second).call("GET", "/health")
    assert (health["default"], health["time_scale"], health["strict"]) == ("rate-limited", 0.5, False)
    assert (await requests_to([second], 1))[0][0] == 429

    ControlClient(second).call("PUT", "/strict", {"strict": True})
    ControlClient(second).call("PUT", "/default", {"scenario": "hello"})
    [(status, body)] = await requests_to([first], 1)
    assert status == 400 and "strict" in body["error"]["message"]

    ControlClient(second).call("POST", "/queue", {"scenario": "server-error"})
    ControlClient(first).call("POST", "/reset")
    health = ControlClient(second).call("GET", "/health")
    assert (health["default"], health["time_scale"], health["strict"]) == ("hello", 0.01, False)
    assert ControlClient(second).call("GET", "/queue")["queue"] == []
    assert whole_journal(second) == []
    assert (await requests_to([second], 1))[0][0] == 200


async def test_a_named_session_is_one_across_servers_and_apart_from_the_global_one(servers):
    first, second = servers
    ControlClient(first, session="ci-7").call("POST", "/queue", {"scenario": "server-error", "times": 2})
    ControlClient(first, session="ci-7").call("PUT", "/strict", {"strict": True})
    assert ControlClient(second).call("GET", "/queue")["queue"] == []
    assert ControlClient(second, session="ci-7").call("GET", "/health")["strict"] is True

    session_answers = await requests_to(servers, 3, **{"X-Fakehop-Session": "ci-7"})
    global_answers = await requests_to(servers, 2)

    assert sorted(status for status, _ in session_answers) == [400, 500, 500]
    assert [status for status, _ in global_answers] == [200, 200]
    assert len(whole_journal(first, session="ci-7")) == 3
    assert len(whole_journal(second)) == 5  # the global session's view holds every session's requests
    ControlClient(second, session="ci-7").call("POST", "/reset")
    assert whole_journal(first, session="ci-7") == []
    assert ControlClient(first, session="ci-7").call("GET", "/health")["strict"] is False


async def test_the_sessions_any_server_used_are_listed_and_dropped_through_any(servers):
    first, second = servers
    await requests_to([first], 2, **{"X-Fakehop-Session": "from-a-request"})
    ControlClient(second, session="from-a-call").call("PUT", "/strict", {"strict": True})

    listed = ControlClient(second).call("GET", "/sessions")["sessions"]
    assert [(kept["session"], kept["strict"], kept["requests"]) for kept in listed] == [
        ("from-a-request", False, 2),
        ("from-a-call", True, 0),
    ]
    assert ControlClient(first).call("DELETE", "/sessions/from-a-call") == {"dropped": "from-a-call"}
    assert [kept["session"] for kept in ControlClient(second).call("GET", "/sessions")["sessions"]] == [
        "from-a-request"
    ]
    with pytest.raises(ControlFailed) as unknown:
        ControlClient(second).call("DELETE", "/sessions/from-a-call")
    assert unknown.value.status == 404


async def test_a_session_idle_past_session_idle_starts_afresh_on_every_server(redis_server, tmp_path):
    with fakehop_servers(tmp_path, 2, "--state", redis_server.url, "--session-idle", "1") as (first, second):
        headers = {"X-Fakehop-Session": "nightly", "X-Fakehop-Scenario": "flaky-then-ok"}
        async with aiohttp.ClientSession() as client:
            before = [(await post(client, first, **headers))[0]]
            await asyncio.sleep(2.5)
            after = [(await post(client, url, **headers))[0] for url in (second, first)]
        assert (before, after) == ([429], [429, 500])  # the sequence from its first entry, as a new session plays it
        assert [record["status"] for record in whole_journal(first, session="nightly")] == [429, 500]


async def test_turns_whose_clients_leave_at_their_last_byte_are_each_filed_in_the_shared_journal(servers):
    """A client that closes its connection as soon as a stream ends (as some SDKs do) leaves the
    server still letting go of the Thread it continued and filing the record: neither is cut
    short with the handler."""
    first, second = servers
    continuing = {"model": "claude-sonnet-5", "max_tokens": 256, "stream": True}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as client:
        for _ in range(15):
            _, answer = await thread_turn(first, {"type": "create"}, QUESTION)
            thread = {"type": "continue", "previous_message_id": answer["id"]}
            body = {**continuing, "messages": tool_results_for(answer), "thread": thread}
            async with client.post(second + "/v1/messages", json=body, headers=THREADED) as response:
                assert response.status == 200
                await response.read()
    for _ in range(300):  # each is shown in progress from its start, and filed once it has ended
        ends = [record["end"] for record in whole_journal(first) if record["turn"] == 2]
        if ends == ["completed"] * 15:
            break
        await asyncio.sleep(0.01)
    assert ends == ["completed"] * 15


async def test_the_journal_is_one_numbering_paged_from_either_server(servers):
    first, second = servers
    await requests_to(servers, 30, Authorization="Bearer sk-test-secret-1234")
    for url in servers:
        records = whole_journal(url, limit=7)
        assert [record["seq"] for record in records] == list(range(1, 31))
        assert all(record["end"] == "completed" and record["status"] == 200 for record in records)
    one = ControlClient(first).call("GET", "/requests/12")["request"]
    assert one["seq"] == 12 and one["frames"] == [] and one["headers"]["Authorization"] == "Bearer ****1234"
    page = ControlClient(second).call("GET", "/requests", query={"since": 25, "limit": 10})
    assert ([record["seq"] for record in page["requests"]], page["next_since"], page["more"]) == (
        [26, 27, 28, 29, 30],
        30,
        False,
    )
    assert ControlClient(second).call("DELETE", "/requests") == {"removed": 30}
    assert whole_journal(first) == []


async def test_a_request_under_way_on_one_server_is_in_the_journal_the_other_shows(servers):
    first, second = servers
    body = dict(PROTOCOLS["chat"].EXAMPLE_REQUEST, stream=True)
    async with aiohttp.ClientSession() as client:
        async with client.post(
            first + "/v1/chat/completions", json=body, headers={"X-Fakehop-Scenario": "hang"}
        ) as hung:
            await hung.content.readline()
            [record] = whole_journal(second)
            assert (record["end"], record["stream"]) == ("in_progress", True)
    for _ in range(100):  # the server sees the client go, then files how it ended
        [record] = whole_journal(second)
        if record["end"] != "in_progress":
            break
        await asyncio.sleep(0.05)
    assert record["end"] == "client_disconnected"


def test_the_line_a_server_prints_for_a_404_names_the_seq_the_shared_journal_has_it_under(redis_server, tmp_path):
    paths = ("/v1/no-such-path", "/v1/responses/resp_none")
    readies = [tmp_path / "first.url", tmp_path / "second.url"]
    processes = [
        serve_process("--port", "0", "--state", redis_server.url, ready=ready, quiet=False) for ready in readies
    ]
    try:
        first, second = (url_in(ready, process) for ready, process in zip(readies, processes))
        asyncio.run(requests_to([first], 1))
        for path in paths:
            with pytest.raises(urllib.error.HTTPError):
                urllib.request.urlopen(second + path)
        filed = {record["path"]: record["seq"] for record in whole_journal(first)}
    finally:
        printed = stopped(processes[1])[0]
        stopped(processes[0])
    shown = {path: int(seq) for seq, path in re.findall(r"#(\d+) +GET +(\S+)", printed)}
    assert shown == {path: filed[path] for path in paths} == {paths[0]: 2, paths[1]: 3}


async def test_the_verdict_judges_what_the_client_did_through_every_server(servers):
    first, second = servers
    verdict = ControlClient(second, session="retrying")
    verdict.call("POST", "/queue", {"scenario": "rate-limited"})
    headers = {"X-Fakehop-Session": "retrying"}
    assert [status for status, _ in await requests_to([first], 1, **headers)] == [429]
    assert [status for status, _ in await requests_to([second], 1, **headers)] == [200]  # at once: Retry-After was 2 s

    judged = verdict.call("GET", "/verdict")
    assert judged["requests"] == 1 and judged["retried"][0]["seqs"] == [1, 2]
    assert [(finding["rule"], finding["seqs"]) for finding in judged["findings"]] == [("retry_after_ignored", [1, 2])]


async def test_requests_no_route_takes_are_in_the_one_journal_and_health_says_when_the_state_began(servers):
    first, second = servers
    async with aiohttp.ClientSession() as client:
        async with client.post(first + "/chat/completions", json={}) as wrong:
            assert wrong.status == 404
        async with client.get(second + "/v1/responses/resp_none") as missing:
            assert missing.status == 404
    assert [(record["seq"], record["status"]) for record in whole_journal(second)] == [(1, 404), (2, 404)]
    began = {ControlClient(url).call("GET", "/health")["started_at"] for url in servers}
    assert len(began) == 1  # one state, one numbering: a client following the journal sees one server


async def test_with_redis_gone_requests_and_control_calls_get_503s_naming_it_and_service_resumes(servers, redis_server):
    first, second = servers
    ControlClient(first).call("POST", "/queue", {"scenario": "server-error"})
    redis_server.stop()

    async with aiohttp.ClientSession() as client:
        chat_status, chat = await post(client, first)
        messages_status, messages = await post(client, second, "messages")
    assert chat_status == messages_status == 503
    assert redis_server.url in chat["error"]["message"] and chat["error"]["code"] == "state_unavailable"
    assert messages["type"] == "error" and redis_server.url in messages["error"]["message"]
    with pytest.raises(ControlFailed) as refused:
        ControlClient(second).call("POST", "/queue", {"scenario": "hello"})
    assert refused.value.status == 503 and redis_server.url in str(refused.value)
    with pytest.raises(ControlFailed) as health:
        ControlClient(first).call("GET", "/health")
    assert health.value.status == 503 and health.value.answer["status"] == "unavailable"

    redis_server.start()  # empty: it kept nothing
    assert ControlClient(first).call("GET", "/health")["status"] == "ok"
    answers = await requests_to(servers, 4)
    assert [status for status, _ in answers] == [200] * 4
    assert [record["seq"] for record in whole_journal(second)] == [1, 2, 3, 4]


async def test_a_stream_under_way_when_redis_goes_ends_as_it_would_have(servers, redis_server):
    first, _ = servers
    ControlClient(first).call(
        "POST", "/scenarios", text="name: paused\nsteps:\n  - text: Hi\n  - delay: 150s\n  - text: there\n"
    )
    body = {"model": "gpt-5.6-sol", "input": "Hello", "stream": True}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as client:
        async with client.post(first + "/v1/responses", json=body, headers={"X-Fakehop-Scenario": "paused"}) as answer:
            await answer.content.readline()
            redis_server.stop()
            rest = await answer.read()
    assert b"event: response.completed" in rest  # stored on this server alone, said in its log


def test_a_server_without_state_never_imports_redis():
    code = (
        "import sys, fakehop.cli.main, fakehop.server.app, fakehop.server.control, fakehop.state.redisstate; "
        "print('redis' in sys.modules)"
    )
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert ran.stdout == "False\n", ran.stderr
