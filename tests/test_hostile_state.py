"""The server's state under hostile use: scenarios added through the control API, stored
Responses answers and their chains, and the journal's sessions.

The cases that once froze the loop or grew memory without bound run against a server in a
process of its own (soak/child.py, started as `fakehop serve` starts), while a thread times
`GET /_fakehop/health` (soak/hostile.py's prober) and the server reports its RSS.
"""

from __future__ import annotations

import aiohttp
import pytest

from soak.hostile import HealthProber
from soak.runs import SOAK_TIME_SCALE
from soak.server import ServerProcess

pytestmark = pytest.mark.xdist_group("hostile-state")  # one xdist worker runs them all: they share one server process

HEALTH_BOUND_MS = 1000.0  # the goal is 100 ms; a loaded 2-core machine holds processes up now and then
ANSWER_TIMEOUT = aiohttp.ClientTimeout(total=30)
YAML = {"Content-Type": "application/yaml"}


@pytest.fixture(scope="module")
def server():
    with ServerProcess(SOAK_TIME_SCALE) as running:
        yield running


async def add_scenario(client: aiohttp.ClientSession, url: str, session: str, text: str) -> tuple[int, dict]:
    async with client.post(f"{url}/_fakehop/scenarios", params={"session": session}, data=text, headers=YAML) as response:
        return response.status, await response.json()


# ---------------------------------------------------------------- `use` checked in linear time


async def test_a_diamond_of_uses_thirty_levels_deep_is_added_at_once(server):
    async with aiohttp.ClientSession(timeout=ANSWER_TIMEOUT) as client:
        with HealthProber(server.url) as prober:
            for name in ("a0", "b0"):
                assert (await add_scenario(client, server.url, "diamond", f"name: {name}\nsteps: [{{text: {name}}}]\n"))[0] == 201
            for level in range(1, 31):
                for name in (f"a{level}", f"b{level}"):
                    text = f"name: {name}\nsequence: [{{use: a{level - 1}}}, {{use: b{level - 1}}}]\n"
                    status, body = await add_scenario(client, server.url, "diamond", text)
                    assert status == 201, body
    assert prober.longest < HEALTH_BOUND_MS and prober.failures == [], (prober.longest, prober.failures)


async def test_a_use_that_closes_a_loop_is_still_refused_naming_each_use_of_the_loop(server):
    async with aiohttp.ClientSession(timeout=ANSWER_TIMEOUT) as client:
        for text in ("name: ring-c\nsteps: [{text: c}]\n", "name: ring-b\nsequence: [{use: ring-c}]\n",
                     "name: ring-a\nsequence: [{use: ring-b}]\n", "name: outside\nsequence: [{use: ring-a}]\n"):
            assert (await add_scenario(client, server.url, "ring", text))[0] == 201
        status, body = await add_scenario(client, server.url, "ring", "name: ring-c\nsequence:\n  - steps: [{text: c}]\n  - use: ring-a\n")
        assert status == 400
        assert body["problems"] == ["<POST /_fakehop/scenarios>:4: use: 'ring-a' leads back to 'ring-c', a loop",
                                    "<POST /_fakehop/scenarios>:2: use: 'ring-c' leads back to 'ring-b', a loop",
                                    "<POST /_fakehop/scenarios>:2: use: 'ring-b' leads back to 'ring-a', a loop"]
        status, body = await add_scenario(client, server.url, "ring", "name: itself\nsequence: [{use: itself}]\n")
        assert (status, body["problems"]) == (400, ["<POST /_fakehop/scenarios>:2: use: 'itself' leads back to 'itself', a loop"])


async def test_a_use_of_a_missing_scenario_is_still_refused(server):
    async with aiohttp.ClientSession(timeout=ANSWER_TIMEOUT) as client:
        status, body = await add_scenario(client, server.url, "missing", "name: lost\nsequence: [{use: helo}]\n")
    assert (status, body["problems"]) == (400, ["<POST /_fakehop/scenarios>:2: use: no scenario named 'helo'; did you mean 'hello'?"])


# ---------------------------------------------------------------- every request in its session's view


CHAT_BODY = {"model": "gpt-5.6-sol", "messages": [{"role": "user", "content": "Hi"}]}


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
        assert await status_of(client, "POST", base_url + "/v1/chat/completions", json=CHAT_BODY, headers=misspelled) == 400
        assert await session_view(client, base_url, "typo") == [("POST", "/v1/chat/completions", 400)]


async def test_a_wrong_key_is_in_its_sessions_view(make_gateway, serve):
    url = await serve(make_gateway(api_key="sk-right"))
    async with aiohttp.ClientSession() as client:
        wrong_key = {"X-Fakehop-Session": "locked-out", "Authorization": "Bearer sk-wrong"}
        assert await status_of(client, "POST", url + "/v1/chat/completions", json=CHAT_BODY, headers=wrong_key) == 401
        assert await status_of(client, "GET", url + "/v1/responses/resp_1", headers=wrong_key) == 401
        assert await session_view(client, url, "locked-out") == [("POST", "/v1/chat/completions", 401), ("GET", "/v1/responses/resp_1", 401)]


async def test_a_stored_answer_read_and_deleted_in_a_session_is_in_its_view(base_url):
    headers = {"X-Fakehop-Session": "reader"}
    async with aiohttp.ClientSession() as client:
        async with client.post(base_url + "/v1/responses", json={"model": "gpt-5.6-sol", "input": "Hi"}, headers=headers) as response:
            answer_id = (await response.json())["id"]
        assert await status_of(client, "GET", f"{base_url}/v1/responses/{answer_id}", headers=headers) == 200
        assert await status_of(client, "DELETE", f"{base_url}/v1/responses/{answer_id}", headers=headers) == 200
        assert await status_of(client, "GET", f"{base_url}/v1/responses/{answer_id}", headers=headers) == 404
        assert await session_view(client, base_url, "reader") == [("POST", "/v1/responses", 200), ("GET", f"/v1/responses/{answer_id}", 200),
                                                                   ("DELETE", f"/v1/responses/{answer_id}", 200), ("GET", f"/v1/responses/{answer_id}", 404)]


async def test_a_bad_session_name_on_a_stored_answer_is_a_400_in_the_global_view(gateway, base_url):
    async with aiohttp.ClientSession() as client:
        async with client.get(base_url + "/v1/responses/resp_1", headers={"X-Fakehop-Session": "no spaces"}) as response:
            body = await response.json()
            assert (response.status, body["error"]["param"]) == (400, "X-Fakehop-Session")
    assert [(record.path, record.status, record.session) for record in gateway.journal.records] == [("/v1/responses/resp_1", 400, None)]
