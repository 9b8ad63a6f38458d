"""The server's state under hostile use: scenarios added through the control API, stored
Responses answers and their `previous_response_id` chains, and the journal's sessions.

The cases that once froze the loop or grew memory without bound run against a server in a
process of its own (soak/child.py's, or `fakehop serve` when its RSS is measured), while a
thread times `GET /_fakehop/health` (soak/hostile.py's prober).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import aiohttp
import pytest

from fakehop.scenario.library import MAX_USE_CHAIN
from fakehop.state.stored import StoredResponses
from soak.hostile import HealthProber
from soak.runs import SOAK_TIME_SCALE
from soak.server import ServerProcess

pytestmark = pytest.mark.xdist_group("hostile-state")  # one xdist worker runs them all: they share one server process

HEALTH_BOUND_MS = 3000.0  # the goal is 100 ms (make soak); a 2-core machine running the whole suite holds the
# server up for 1-1.5 s now and then, where alone it answers within 200 ms
ANSWER_TIMEOUT = aiohttp.ClientTimeout(total=30)
YAML = {"Content-Type": "application/yaml"}
ADDED_HERE = "<POST /_fakehop/scenarios>"


@pytest.fixture(scope="module")
def server():
    with ServerProcess(SOAK_TIME_SCALE) as running:
        yield running


async def add_scenario(client: aiohttp.ClientSession, url: str, session: str, text: str) -> tuple[int, dict]:
    scenarios = f"{url}/_fakehop/scenarios"
    async with client.post(scenarios, params={"session": session}, data=text, headers=YAML) as response:
        return response.status, await response.json()


def problems(*lines: str) -> list[str]:
    return [f"{ADDED_HERE}:{line}" for line in lines]


# ---------------------------------------------------------------- `use` checked in linear time


async def test_a_diamond_of_uses_thirty_levels_deep_is_added_at_once(server):
    async with aiohttp.ClientSession(timeout=ANSWER_TIMEOUT) as client:
        with HealthProber(server.url) as prober:
            for name in ("a0", "b0"):
                status, body = await add_scenario(client, server.url, "diamond", f"name: {name}\nsteps: [{{text: x}}]")
                assert status == 201, body
            for level in range(1, 31):
                for name in (f"a{level}", f"b{level}"):
                    text = f"name: {name}\nsequence: [{{use: a{level - 1}}}, {{use: b{level - 1}}}]\n"
                    status, body = await add_scenario(client, server.url, "diamond", text)
                    assert status == 201, body
    assert prober.longest < HEALTH_BOUND_MS and prober.failures == [], (prober.longest, prober.failures)


async def test_a_use_that_closes_a_loop_is_still_refused_naming_each_use_of_the_loop(server):
    async with aiohttp.ClientSession(timeout=ANSWER_TIMEOUT) as client:
        for text in (
            "name: ring-c\nsteps: [{text: c}]\n",
            "name: ring-b\nsequence: [{use: ring-c}]\n",
            "name: ring-a\nsequence: [{use: ring-b}]\n",
            "name: outside\nsequence: [{use: ring-a}]\n",
        ):
            assert (await add_scenario(client, server.url, "ring", text))[0] == 201
        closing = "name: ring-c\nsequence:\n  - steps: [{text: c}]\n  - use: ring-a\n"
        status, body = await add_scenario(client, server.url, "ring", closing)
        assert (status, body["problems"]) == (
            400,
            problems(
                "4: use: 'ring-a' leads back to 'ring-c', a loop",
                "2: use: 'ring-c' leads back to 'ring-b', a loop",
                "2: use: 'ring-b' leads back to 'ring-a', a loop",
            ),
        )
        status, body = await add_scenario(client, server.url, "ring", "name: itself\nsequence: [{use: itself}]\n")
        assert (status, body["problems"]) == (400, problems("2: use: 'itself' leads back to 'itself', a loop"))


async def test_a_chain_of_a_hundred_uses_plays_and_one_more_is_refused(server):
    async with aiohttp.ClientSession(timeout=ANSWER_TIMEOUT) as client:
        assert (await add_scenario(client, server.url, "chain", "name: link0\nsteps: [{text: end of the chain}]\n"))[
            0
        ] == 201
        for level in range(1, MAX_USE_CHAIN + 1):
            text = f"name: link{level}\nsequence: [{{use: link{level - 1}}}]\n"
            assert (await add_scenario(client, server.url, "chain", text))[0] == 201
        body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}
        headers = {"X-Fakehop-Session": "chain", "X-Fakehop-Scenario": f"link{MAX_USE_CHAIN}"}
        async with client.post(f"{server.url}/v1/chat/completions", json=body, headers=headers) as response:
            assert response.status == 200
            assert (await response.json())["choices"][0]["message"]["content"] == "end of the chain"
        text = f"name: link{MAX_USE_CHAIN + 1}\nsequence: [{{use: link{MAX_USE_CHAIN}}}]\n"
        status, body = await add_scenario(client, server.url, "chain", text)
        assert (status, body["problems"]) == (
            400,
            problems(
                f"1: use: a chain of {MAX_USE_CHAIN + 1} uses, one scenario using the"
                f" next, starts here; at most {MAX_USE_CHAIN} may"
            ),
        )


async def test_a_use_of_a_missing_scenario_is_still_refused(server):
    async with aiohttp.ClientSession(timeout=ANSWER_TIMEOUT) as client:
        status, body = await add_scenario(client, server.url, "missing", "name: lost\nsequence: [{use: helo}]\n")
    assert (status, body["problems"]) == (400, problems("2: use: no scenario named 'helo'; did you mean 'hello'?"))


# ---------------------------------------------------------------- every request in its session's view


CHAT = "/v1/chat/completions"
CHAT_BODY = {"model": "gpt-5.6-sol", "messages": [{"role": "user", "content": "Hi"}]}
RESPONSES = "/v1/responses"


async def session_view(client: aiohttp.ClientSession, url: str, session: str) -> list[tuple[str, str, int]]:
    async with client.get(f"{url}/_fakehop/requests", params={"session": session}) as response:
        return [(record["method"], record["path"], record["status"]) for record in (await response.json())["requests"]]


async def status_of(client: aiohttp.ClientSession, method: str, url: str, **kwargs) -> int:
    async with client.request(method, url, **kwargs) as response:
        await response.read()
        return response.status


async def test_a_misspelled_fakehop_header_is_in_its_sessions_view(base_url):
    async with aiohttp.ClientSession() as client:
        misspelled = {"X-Fakehop-Session": "typo", "X-Fakehop-Scenaro": "hello"}
        assert await status_of(client, "POST", base_url + CHAT, json=CHAT_BODY, headers=misspelled) == 400
        assert await session_view(client, base_url, "typo") == [("POST", CHAT, 400)]


async def test_a_wrong_key_is_in_its_sessions_view(make_gateway, serve):
    url = await serve(make_gateway(api_key="sk-right"))
    async with aiohttp.ClientSession() as client:
        wrong_key = {"X-Fakehop-Session": "locked-out", "Authorization": "Bearer sk-wrong"}
        assert await status_of(client, "POST", url + CHAT, json=CHAT_BODY, headers=wrong_key) == 401
        assert await status_of(client, "GET", f"{url}{RESPONSES}/resp_1", headers=wrong_key) == 401
        viewed = await session_view(client, url, "locked-out")
        assert viewed == [("POST", CHAT, 401), ("GET", f"{RESPONSES}/resp_1", 401)]


async def test_a_stored_answer_read_and_deleted_in_a_session_is_in_its_view(base_url):
    headers = {"X-Fakehop-Session": "reader"}
    async with aiohttp.ClientSession() as client:
        path = f"{RESPONSES}/{await stored_answer(client, base_url, 'reader', {'input': 'Hi'})}"
        for method in ("GET", "DELETE", "GET"):
            await status_of(client, method, base_url + path, headers=headers)
        viewed = await session_view(client, base_url, "reader")
        assert viewed == [("POST", RESPONSES, 200), ("GET", path, 200), ("DELETE", path, 200), ("GET", path, 404)]


async def test_a_bad_session_name_on_a_stored_answer_is_a_400_in_the_global_view(gateway, base_url):
    async with aiohttp.ClientSession() as client:
        async with client.get(f"{base_url}{RESPONSES}/resp_1", headers={"X-Fakehop-Session": "no spaces"}) as response:
            body = await response.json()
            assert (response.status, body["error"]["param"]) == (400, "X-Fakehop-Session")
    journaled = [(record.path, record.status, record.session) for record in gateway.journal.records]
    assert journaled == [("/v1/responses/resp_1", 400, None)]


# ---------------------------------------------------------------- stored answers: each session's own


TWO_MIB = "i" * (2 * 2**20)


async def stored_answer(
    client: aiohttp.ClientSession, url: str, session: str, body: dict, headers: dict | None = None
) -> str:
    """The id of the answer to `body`, streamed or not, in `session`."""
    headers = {"X-Fakehop-Session": session, **(headers or {})}
    async with client.post(url + RESPONSES, json={"model": "gpt-5.6-sol", **body}, headers=headers) as response:
        assert response.status == 200
        if not body.get("stream"):
            return (await response.json())["id"]
        data = (await response.read()).split(b"\ndata: ")
        return json.loads(data[1].split(b"\n")[0])["response"]["id"]


async def stored_status(client: aiohttp.ClientSession, url: str, session: str, answer_id: str) -> int:
    return await status_of(client, "GET", f"{url}{RESPONSES}/{answer_id}", headers={"X-Fakehop-Session": session})


@pytest.mark.parametrize("how", ["reset", "dropped"])
async def test_a_session_reset_or_dropped_takes_its_stored_answers_with_it(gateway, base_url, how):
    async with aiohttp.ClientSession() as client:
        kept = await stored_answer(client, base_url, "keeper", {"input": "Hi"})
        gone = await stored_answer(client, base_url, "leaver", {"input": "Hi"})
        if how == "reset":
            assert await status_of(client, "POST", f"{base_url}/_fakehop/reset", params={"session": "leaver"}) == 200
        else:
            assert await status_of(client, "DELETE", f"{base_url}/_fakehop/sessions/leaver") == 200
        assert await stored_status(client, base_url, "leaver", gone) == 404
        assert await stored_status(client, base_url, "keeper", kept) == 200
    assert len(gateway.responses) == 1


@pytest.mark.parametrize("bound", ["bytes", "count"])
async def test_one_sessions_answers_push_out_its_own_not_another_sessions(bound, make_gateway, serve):
    store = StoredResponses(max_bytes=8 * 2**20) if bound == "bytes" else StoredResponses(capacity=6)
    url = await serve(make_gateway(responses=store))
    async with aiohttp.ClientSession() as client:
        mine = [await stored_answer(client, url, "a", {"input": f"Question {number}"}) for number in range(2)]
        theirs = [
            await stored_answer(client, url, "b", {"input": f"Question {number}", "instructions": TWO_MIB})
            for number in range(12)
        ]
        assert [await stored_status(client, url, "a", answer_id) for answer_id in mine] == [200, 200]
        assert await stored_status(client, url, "b", theirs[-1]) == 200
        assert await stored_status(client, url, "b", theirs[0]) == 404
    assert store.size <= store.max_bytes and len(store) <= store.capacity


async def test_a_seeded_id_is_looked_up_in_the_asking_sessions_answers_first(base_url):
    seed = {"X-Fakehop-Seed": "3"}
    async with aiohttp.ClientSession() as client:
        first = await stored_answer(client, base_url, "first", {"input": "Hi", "metadata": {"by": "first"}}, seed)
        second = await stored_answer(client, base_url, "second", {"input": "Hi", "metadata": {"by": "second"}}, seed)
        assert first == second
        for session, by in (("first", "first"), ("second", "second"), ("third", "second")):  # third: the newest
            async with client.get(f"{base_url}{RESPONSES}/{first}", headers={"X-Fakehop-Session": session}) as response:
                assert (await response.json())["metadata"] == {"by": by}


# ---------------------------------------------------------------- stored answers: memory within their bound


STORE_BOUND_MIB = 64  # the store's bound in bytes (fakehop.state.stored.KEPT_BYTES)
SLACK_MIB = 16  # what the allocator and the journal's few records may hold beside it
EIGHT_MIB = 8 * 2**20


class Served:
    """`fakehop serve` in a process of its own, with a journal of a few records holding 4 MB at
    most: next to nothing beside the store. glibc maps each block of 128 KiB or more on its own
    and gives it back when it is freed, so that its RSS is what the process holds."""

    def __init__(self) -> None:
        command = [
            sys.executable,
            "-m",
            "fakehop",
            "serve",
            "--port",
            "0",
            "--quiet",
            "--journal-size",
            "4",
            "--journal-bytes",
            "4M",
        ]
        environment = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=environment)
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().split()[-1]

    def rss_mib(self) -> float:
        with open(f"/proc/{self.process.pid}/status", encoding="ascii") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


@pytest.fixture
def served():
    running = Served()
    yield running
    running.stop()


async def rss_growth_mib(server: Served, send) -> float:
    """How far the server's RSS grows while `send(client)` runs, the health check timed all along."""
    before = server.rss_mib()
    async with aiohttp.ClientSession(timeout=ANSWER_TIMEOUT) as client:
        with HealthProber(server.url) as prober:
            await send(client)
    assert prober.longest < HEALTH_BOUND_MS and prober.failures == [], (prober.longest, prober.failures)
    return server.rss_mib() - before


async def test_a_seeded_answer_stored_again_and_again_frees_the_one_it_replaces(served):
    async def send(client: aiohttp.ClientSession) -> None:
        mine = await stored_answer(client, served.url, "a", {"input": "Hi"})
        for _ in range(40):
            body = {"input": "Hi", "stream": True, "instructions": TWO_MIB}
            seeded = await stored_answer(client, served.url, "b", body, {"X-Fakehop-Seed": "7"})
            assert await stored_status(client, served.url, "b", seeded) == 200
        assert await stored_status(client, served.url, "a", mine) == 200

    assert await rss_growth_mib(served, send) < 2 * SLACK_MIB  # one answer of 6 MiB kept in session b, not forty


async def answers(client: aiohttp.ClientSession, url: str, bodies) -> None:
    for body in bodies:
        await stored_answer(client, url, "memory", body)


@pytest.mark.parametrize(
    "field,stream", [("input", True), ("instructions", False)], ids=["streamed-input", "whole-instructions"]
)
async def test_answers_to_8_mib_requests_stay_within_the_stores_bound(served, field, stream):
    def bodies(store: bool, count: int) -> list[dict]:
        return [
            {"input": "Hi", "stream": stream, "store": store, field: f"{store} {number} " + "x" * EIGHT_MIB}
            for number in range(count)
        ]

    unstored = await rss_growth_mib(served, lambda client: answers(client, served.url, bodies(False, 4)))
    stored = await rss_growth_mib(served, lambda client: answers(client, served.url, bodies(True, 16)))  # 128 MiB sent
    assert unstored < SLACK_MIB and stored < STORE_BOUND_MIB + SLACK_MIB, (unstored, stored)


async def chain(client: aiohttp.ClientSession, url: str, links: int, input_of) -> None:
    """`links` answers, each continuing the one before with `input_of(link)`."""
    previous = None
    for link in range(links):
        body = {"input": input_of(link), **({"previous_response_id": previous} if previous else {})}
        previous = await stored_answer(client, url, "chain", body)


def developer_message(link: int) -> list[dict]:
    return [{"role": "developer", "content": f"{link} " + "d" * 64_000}, {"role": "user", "content": f"Step {link}"}]


def function_calls(link: int) -> list[dict]:
    return [
        {"type": "function_call", "call_id": f"call_{link}_{number}", "name": "lookup", "arguments": "{}"}
        for number in range(1000)
    ]


@pytest.mark.parametrize(
    "input_of", [developer_message, function_calls], ids=["64-kb-developer-messages", "1000-function-calls"]
)
async def test_a_chain_of_a_hundred_links_holds_memory_in_proportion_to_what_was_sent(served, input_of):
    grown = await rss_growth_mib(served, lambda client: chain(client, served.url, 100, input_of))
    assert grown < 32, grown  # sent: 6 to 9 MB; as the square of the chain's length, hundreds of MB


async def test_an_output_may_answer_a_call_two_links_back_and_not_one_the_chain_never_made(base_url):
    call = {"type": "function_call", "call_id": "call_first", "name": "lookup", "arguments": "{}"}
    async with aiohttp.ClientSession() as client:
        first = await stored_answer(client, base_url, "links", {"input": [call, {"role": "user", "content": "Why?"}]})
        second = await stored_answer(client, base_url, "links", {"input": "And then?", "previous_response_id": first})
        for call_id, status in (("call_first", 200), ("call_never", 400), (["call_first"], 400)):
            output = {"type": "function_call_output", "call_id": call_id, "output": "42"}
            body = {"model": "gpt-5.6-sol", "previous_response_id": second, "input": [output]}
            async with client.post(base_url + RESPONSES, json=body, headers={"X-Fakehop-Session": "links"}) as response:
                assert response.status == status, await response.text()
