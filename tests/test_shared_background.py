"""Responses' background answers under way with `--state`: two servers on one real redis-server;
an answer one of them plays is polled, cancelled and deleted through the other, through the
official openai SDK, and its stream is read again through the one that plays it."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import openai
import pytest

from fakehop.server.shared_runs import STOP_POLL
from fakehop.testing.remote import ControlClient

from . import clients
from .redis_server import fakehop_servers, redis_server  # noqa: F401 - the fixture, by its name

MODEL = "gpt-5.6-sol"
FOX = "The quick brown fox jumps over the lazy dog."  # scenarios/slow-typing.yaml


@pytest.fixture
def servers(redis_server, tmp_path):
    with fakehop_servers(tmp_path, 2, "--state", redis_server.url) as urls:
        yield urls


def client(url: str) -> openai.AsyncOpenAI:
    return clients.openai_async(base_url=url + "/v1", api_key="sk-test", max_retries=0)


async def background(url: str, scenario: str):
    async with client(url) as playing:
        return await playing.responses.create(
            model=MODEL, input="hi", background=True, extra_headers={"X-Fakehop-Scenario": scenario}
        )


async def polled_until_over(url: str, response_id: str, within: float = 10.0):
    """The response as `url` shows it, polled until it is neither queued nor in progress."""
    deadline = time.monotonic() + within
    async with client(url) as polling:
        while True:
            response = await polling.responses.retrieve(response_id)
            if response.status not in ("queued", "in_progress") or time.monotonic() > deadline:
                return response
            await asyncio.sleep(0.02)


async def test_an_answer_under_way_on_one_server_is_polled_through_the_other_until_it_completes(servers):
    playing, other = servers
    started = await background(playing, "slow-typing")
    async with client(other) as polling:
        shown = await polling.responses.retrieve(started.id)
    assert (shown.id, shown.background) == (started.id, True)
    assert shown.status in ("queued", "in_progress", "completed")
    done = await polled_until_over(other, started.id)
    assert (done.status, done.output_text) == ("completed", FOX)


async def test_an_answer_under_way_is_cancelled_through_the_other_server(servers):
    playing, other = servers
    started = await background(playing, "hang")
    async with client(other) as cancelling:
        cancelled = await cancelling.responses.cancel(started.id)
        assert (cancelled.id, cancelled.status) == (started.id, "cancelled")
        again = await cancelling.responses.cancel(started.id)  # cancelled already: the same answer
        assert again.status == "cancelled"
    for url in servers:
        assert (await polled_until_over(url, started.id)).status == "cancelled"


async def test_cancelling_through_the_other_server_an_answer_that_completed_is_a_400(servers):
    playing, other = servers
    started = await background(playing, "hello")
    assert (await polled_until_over(playing, started.id)).status == "completed"
    async with client(other) as cancelling:
        with pytest.raises(openai.BadRequestError):
            await cancelling.responses.cancel(started.id)


async def test_an_answer_under_way_is_deleted_through_the_other_server_and_found_by_neither(servers):
    playing, other = servers
    started = await background(playing, "hang")
    async with client(other) as deleting:
        await deleting.responses.delete(started.id)
    for url in servers:
        assert await found_no_more(url, started.id)


async def found_no_more(url: str, response_id: str, within: float = 10.0) -> bool:
    """Whether `url` answers a 404 for the response within `within` seconds (the playing server
    looks for a stop every STOP_POLL seconds, and may show the answer once more meanwhile)."""
    deadline = time.monotonic() + within
    async with client(url) as polling:
        while time.monotonic() < deadline:
            try:
                await polling.responses.retrieve(response_id)
            except openai.NotFoundError:
                return True
            await asyncio.sleep(STOP_POLL)
    return False


async def events_read_again(url: str, response_id: str, after: int = -1) -> list:
    """The events of the answer's stream read again through `url` (after event `after`)."""
    async with client(url) as reading:
        stream = await reading.responses.retrieve(response_id, stream=True, starting_after=after)
        return [event async for event in stream]


async def test_its_stream_is_read_again_through_either_server_as_it_plays_and_once_it_has_ended(servers):
    playing, other = servers
    started = await background(playing, "slow-typing")
    while_under_way = await events_read_again(other, started.id)  # begun before the answer ends
    afterwards = {url: await events_read_again(url, started.id) for url in servers}
    assert while_under_way[0].type == "response.created" and while_under_way[-1].type == "response.completed"
    numbers = [event.sequence_number for event in while_under_way]
    assert numbers == list(range(len(numbers)))
    assert "".join(event.delta for event in while_under_way if event.type == "response.output_text.delta") == FOX
    assert afterwards[other] == afterwards[playing] == while_under_way
    later = await events_read_again(other, started.id, after=3)
    assert later == while_under_way[4:]


async def test_a_stream_read_again_through_the_other_server_ends_as_the_cancelled_answer_does(servers):
    playing, other = servers
    started = await background(playing, "hang")
    async with client(other) as reading:
        stream = await reading.responses.retrieve(started.id, stream=True)
        async with client(playing) as cancelling:
            await cancelling.responses.cancel(started.id)
        kinds = [event.type async for event in stream]  # ends: it waits for no more
    assert kinds[0] == "response.created"


@pytest.mark.parametrize("session", [None, "bg-1"])
async def test_a_session_reset_through_the_other_server_drops_its_answers_under_way(servers, session):
    playing, other = servers
    key = "sk-test" if session is None else f"sk-fakehop-{session}"
    async with clients.openai_async(base_url=playing + "/v1", api_key=key, max_retries=0) as starting:
        started = await starting.responses.create(
            model=MODEL, input="hi", background=True, extra_headers={"X-Fakehop-Scenario": "hang"}
        )
    ControlClient(other, session=session).call("POST", "/reset")
    for url in servers:
        assert await found_no_more(url, started.id)


async def test_a_stream_read_again_through_the_other_server_is_cut_when_redis_goes(servers, redis_server):
    playing, other = servers
    started = await background(playing, "hang")
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{other}/v1/responses/{started.id}?stream=true") as reading:
            first = await reading.content.readline()
            redis_server.stop()
            try:
                with pytest.raises(aiohttp.ClientPayloadError):  # cut, not left open for ever
                    await asyncio.wait_for(reading.read(), 10)
            finally:
                redis_server.start()
    assert first == b"event: response.created\n"
    assert ControlClient(other).wait_until_up(10)["status"] == "ok"
