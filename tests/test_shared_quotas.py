"""Quotas of servers on one Redis (`fakehop serve --state`), kept for all of them together:
an enforced rate-limit window refuses once its requests are used up across every server, and
`--max-sessions` caps the sessions all of them hold."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from fakehop.protocols import PROTOCOLS
from fakehop.testing.remote import ControlClient

from .redis_server import fakehop_servers, redis_server  # noqa: F401 - the fixture, by its name

WINDOW = 1.5  # seconds, real: the time scale changes fakehop's pauses, never a window
ENFORCED = f"name: enforced\nrate_limit: {{requests: 3, window: {WINDOW}s, enforce: true}}\nsteps: [{{text: Hi}}]\n"


@pytest.fixture
def servers(redis_server, tmp_path):
    with fakehop_servers(tmp_path, 2, "--state", redis_server.url, "--max-sessions", "3") as urls:
        yield urls


async def limited(client: aiohttp.ClientSession, url: str, protocol: str) -> tuple[int, dict[str, str]]:
    """One unstreamed request for the enforced scenario; its status and headers."""
    body = dict(PROTOCOLS[protocol].EXAMPLE_REQUEST, stream=False)
    path = PROTOCOLS[protocol].PATH
    async with client.post(url + path, json=body, headers={"X-Fakehop-Scenario": "enforced"}) as answer:
        await answer.read()
        return answer.status, dict(answer.headers)


@pytest.mark.parametrize(
    ("protocol", "remaining"),
    [("chat", "x-ratelimit-remaining-requests"), ("messages", "anthropic-ratelimit-requests-remaining")],
)
async def test_an_enforced_window_refuses_on_every_server_once_used_up_across_them_and_opens_again(
    servers, protocol, remaining
):
    first, second = servers
    ControlClient(second).call("POST", "/scenarios", text=ENFORCED)
    async with aiohttp.ClientSession() as client:
        answered = [await limited(client, url, protocol) for url in (first, second, first)]
        opened = time.monotonic()  # the window opened a little before
        refused = [await limited(client, url, protocol) for url in (second, first, second)]
        await asyncio.sleep(max(0.0, opened + WINDOW + 0.1 - time.monotonic()))
        reopened = [await limited(client, url, protocol) for url in (second, first)]

    assert [(status, headers[remaining]) for status, headers in answered] == [(200, "2"), (200, "1"), (200, "0")]
    assert [(status, headers[remaining]) for status, headers in refused] == [(429, "0")] * 3
    assert {headers["Retry-After"] for _, headers in refused} <= {"1", "2"}  # whole seconds, rounded up
    assert [(status, headers[remaining]) for status, headers in reopened] == [(200, "2"), (200, "1")]


async def test_concurrent_requests_through_two_servers_get_exactly_the_windows_answers(servers):
    first, second = servers
    ControlClient(first).call("POST", "/scenarios", text=ENFORCED.replace(f"{WINDOW}s", "60s"))
    async with aiohttp.ClientSession() as client:
        answers = await asyncio.gather(*(limited(client, servers[n % 2], "chat") for n in range(20)))
    assert sorted(status for status, _ in answers) == [200] * 3 + [429] * 17
    refused = [headers for status, headers in answers if status == 429]
    assert all(int(headers["Retry-After"]) in range(55, 61) for headers in refused)
    # a refused request took nothing: the window still holds its three
    assert all(headers["x-ratelimit-remaining-requests"] == "0" for headers in refused)


INPUT_CAPPED = "name: enforced\nrate_limit: {input_tokens: 20, window: 60s, enforce: true}\nusage: {input_tokens: 10}\n"


async def test_a_window_whose_tokens_are_used_up_refuses_the_protocols_that_count_them_on_every_server(servers):
    first, second = servers
    ControlClient(first).call("POST", "/scenarios", text=INPUT_CAPPED + "steps: [{text: Hi}]\n")
    async with aiohttp.ClientSession() as client:
        messages = [await limited(client, url, "messages") for url in (first, second, first)]
        chat = [await limited(client, url, "chat") for url in (second, first)]
    assert [status for status, _ in messages] == [200, 200, 429]
    assert messages[2][1]["anthropic-ratelimit-input-tokens-remaining"] == "0"
    assert [status for status, _ in chat] == [200, 200]  # OpenAI tells no input limit of its own


async def test_max_sessions_caps_the_sessions_of_every_server_dropping_the_one_idle_longest(servers):
    first, second = servers
    ControlClient(second, session="s2").call("PUT", "/strict", {"strict": True})
    for url, session in ((first, "s1"), (first, "s3"), (second, "s1"), (first, "s4")):
        await requests_in(url, session)
        await asyncio.sleep(0.05)  # each used after the last, on the clock the listing orders by

    listing = ControlClient(second).call("GET", "/sessions")
    assert [kept["session"] for kept in listing["sessions"]] == ["s3", "s1", "s4"]
    assert listing["max_sessions"] == 3
    dropped = ControlClient(first, session="s2").call("GET", "/health")
    assert dropped["strict"] is False  # made again, from the server's settings
    assert [kept["session"] for kept in ControlClient(first).call("GET", "/sessions")["sessions"]] == [
        "s1",
        "s4",
        "s2",
    ]


async def requests_in(url: str, session: str) -> None:
    async with aiohttp.ClientSession() as client:
        body = dict(PROTOCOLS["chat"].EXAMPLE_REQUEST, stream=False)
        async with client.post(
            url + "/v1/chat/completions", json=body, headers={"X-Fakehop-Session": session}
        ) as answer:
            assert answer.status == 200
