"""Responses' background mode through real sockets: a background answer is played in the server
at its scenario's timing whether or not a client reads it, can be polled, read again as a stream
from after any event, and cancelled; faults, stalls and shutdown reach it as any answer."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import openai
import pytest

from fakehop.server import app as fakehop_app
from fakehop.server.background import Runs
from fakehop.server.gateway import Gateway

from . import clients

MODEL = "gpt-5.6-sol"
FOX = "The quick brown fox jumps over the lazy dog."  # scenarios/slow-typing.yaml
STALL_TEXT = "Let me think about"  # scenarios/stall.yaml
PATH = "/v1/responses"


def scenario(name: str) -> dict:
    return {"X-Fakehop-Scenario": name}


async def completed(client, response_id: str, within: float = 10.0):
    """The response polled with `retrieve` until it is no longer queued or in progress."""
    deadline = time.monotonic() + within
    while True:
        response = await client.responses.retrieve(response_id)
        if response.status not in ("queued", "in_progress") or time.monotonic() > deadline:
            return response
        await asyncio.sleep(0.02)


async def raw_events(base_url: str, method: str, path: str, **options) -> tuple[int, list[dict]]:
    """Status and the JSON of every `data:` line of an answer (a JSON body counts as one)."""
    async with aiohttp.ClientSession() as session:
        async with session.request(method, base_url + path, **options) as answer:
            text = await answer.text()
    if text.startswith("{"):
        return answer.status, [json.loads(text)]
    return answer.status, [json.loads(line[len("data: ") :]) for line in text.split("\n") if line.startswith("data: ")]


# ---------------------------------------------------------------- not streamed: queued, then polled


async def test_a_background_request_is_answered_queued_at_once_and_polled_until_completed(openai_client):
    response = await openai_client.responses.create(
        model=MODEL, input="hi", background=True, extra_headers=scenario("slow-typing")
    )
    assert (response.status, response.background, response.output) == ("queued", True, [])
    done = await completed(openai_client, response.id)
    assert (done.id, done.status, done.background, done.output_text) == (response.id, "completed", True, FOX)


async def test_a_background_answer_plays_at_the_scenarios_timing_with_no_client_reading(make_gateway, serve):
    # slow-typing types 44 characters 50 ms apart: about 1.1 s at time scale 0.5
    base_url = await serve(make_gateway(time_scale=0.5))
    async with clients.openai_async(base_url=base_url + "/v1", api_key="k", max_retries=0) as client:
        started = time.monotonic()
        response = await client.responses.create(
            model=MODEL, input="hi", background=True, extra_headers=scenario("slow-typing")
        )
        assert (await client.responses.retrieve(response.id)).status == "in_progress"
        done = await completed(client, response.id)
    assert done.status == "completed" and done.output_text == FOX
    assert time.monotonic() - started > 0.9


# ---------------------------------------------------------------- streamed: queued first, resumed by id


async def test_a_streamed_background_answer_opens_queued_then_in_progress(base_url):
    body = {"model": MODEL, "input": "hi", "background": True, "stream": True}
    status, events = await raw_events(base_url, "POST", PATH, json=body, headers=scenario("hello"))
    kinds = [event["type"] for event in events]
    assert status == 200
    assert kinds[:3] == ["response.created", "response.queued", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    created, queued, in_progress = (event["response"] for event in events[:3])
    assert (created["status"], created["background"], queued["status"]) == ("queued", True, "queued")
    assert in_progress["status"] == "in_progress" and events[-1]["response"]["background"] is True


async def test_a_client_that_leaves_a_background_stream_reads_it_whole_by_its_id(openai_client):
    stream = await openai_client.responses.create(
        model=MODEL, input="hi", background=True, stream=True, extra_headers=scenario("slow-typing")
    )
    seen = []
    async for event in stream:
        seen.append(event)
        if event.type == "response.output_text.delta":
            break
    await stream.close()
    response_id = seen[0].response.id
    async with openai_client.responses.stream(response_id=response_id) as resumed:
        final = await resumed.get_final_response()
    assert (final.id, final.status, final.output_text) == (response_id, "completed", FOX)


async def test_the_sdks_stream_by_id_starting_after_an_event_gives_the_events_after_it(openai_client):
    response = await openai_client.responses.create(model=MODEL, input="hi", background=True)
    async with openai_client.responses.stream(response_id=response.id, starting_after=4) as resumed:
        numbers = [event.sequence_number async for event in resumed]
        final = await resumed.get_final_response()
    assert numbers[0] == 5 and final.status == "completed"


async def test_retrieve_with_stream_starting_after_replays_from_the_next_event(openai_client):
    response = await openai_client.responses.create(
        model=MODEL, input="hi", background=True, extra_headers=scenario("slow-typing")
    )
    stream = await openai_client.responses.retrieve(response.id, stream=True, starting_after=3)
    events = [event async for event in stream]
    assert [event.sequence_number for event in events] == list(range(4, 4 + len(events)))
    assert events[-1].type == "response.completed" and events[-1].response.output_text == FOX


async def test_streaming_again_an_answer_not_made_in_background_is_refused(openai_client):
    response = await openai_client.responses.create(model=MODEL, input="hi")
    with pytest.raises(openai.BadRequestError, match="background=true"):
        await openai_client.responses.retrieve(response.id, stream=True)


async def test_a_bad_starting_after_is_a_400_naming_it(openai_client, base_url):
    response = await openai_client.responses.create(model=MODEL, input="hi", background=True)
    status, (body,) = await raw_events(
        base_url, "GET", f"{PATH}/{response.id}", params={"stream": "true", "starting_after": "x"}
    )
    assert status == 400 and body["error"]["param"] == "starting_after"


async def test_background_without_store_is_refused(openai_client):
    with pytest.raises(openai.BadRequestError, match="store") as raised:
        await openai_client.responses.create(model=MODEL, input="hi", background=True, store=False)
    assert raised.value.param == "background"


# ---------------------------------------------------------------- cancel


async def test_cancel_stops_a_background_answer_under_way(openai_client):
    response = await openai_client.responses.create(
        model=MODEL, input="hi", background=True, extra_headers=scenario("hang")
    )
    cancelled = await openai_client.responses.cancel(response.id)
    assert (cancelled.id, cancelled.status) == (response.id, "cancelled")
    assert (await openai_client.responses.retrieve(response.id)).status == "cancelled"
    assert (await openai_client.responses.cancel(response.id)).status == "cancelled"  # again: the same


async def test_a_reader_of_a_cancelled_answer_sees_its_stream_end(openai_client):
    response = await openai_client.responses.create(
        model=MODEL, input="hi", background=True, extra_headers=scenario("hang")
    )
    stream = await openai_client.responses.retrieve(response.id, stream=True)

    async def read() -> list[str]:
        return [event.type async for event in stream]

    reading = asyncio.ensure_future(read())
    await asyncio.sleep(0.2)
    await openai_client.responses.cancel(response.id)
    kinds = await asyncio.wait_for(reading, 5)
    assert kinds[:3] == ["response.created", "response.queued", "response.in_progress"]
    assert "response.completed" not in kinds


async def test_cancelling_a_finished_answer_is_a_400(openai_client):
    response = await openai_client.responses.create(model=MODEL, input="hi", background=True)
    assert (await completed(openai_client, response.id)).status == "completed"
    with pytest.raises(openai.BadRequestError, match="completed"):
        await openai_client.responses.cancel(response.id)


async def test_cancelling_an_answer_not_made_in_background_is_a_400_and_an_unknown_one_a_404(openai_client):
    response = await openai_client.responses.create(model=MODEL, input="hi")
    with pytest.raises(openai.BadRequestError, match="background=true"):
        await openai_client.responses.cancel(response.id)
    with pytest.raises(openai.NotFoundError):
        await openai_client.responses.cancel("resp_nothing")


# ---------------------------------------------------------------- faults, stalls and bounds


async def test_a_fault_header_answers_a_background_request_with_its_error(openai_client, gateway):
    with pytest.raises(openai.RateLimitError):
        await openai_client.responses.create(
            model=MODEL, input="hi", background=True, extra_headers={"X-Fakehop-Fault": "rate_limit"}
        )
    assert len(gateway.background_runs) == 0


async def test_a_stall_over_a_background_answer_fails_it_once_the_stall_is_over(openai_client):
    response = await openai_client.responses.create(
        model=MODEL, input="hi", background=True, extra_headers=scenario("stall")
    )
    done = await completed(openai_client, response.id)  # 120 s at the tests' time scale: 1.2 s
    assert done.status == "failed" and done.error.code == "server_error"
    assert done.output[0].content[0].text.startswith(STALL_TEXT)


async def test_a_stream_breaking_fault_breaks_the_background_answer_not_the_request(openai_client):
    response = await openai_client.responses.create(
        model=MODEL, input="hi", background=True, extra_headers={"X-Fakehop-Fault": "interrupt; after=2"}
    )
    assert response.status == "queued"
    done = await completed(openai_client, response.id)
    assert done.status == "failed"
    assert done.output[0].content[0].text == "Hello! How"


async def test_the_stored_background_answer_is_continued_by_previous_response_id(openai_client, gateway):
    response = await openai_client.responses.create(model=MODEL, input="hi", background=True)
    await completed(openai_client, response.id)
    following = await openai_client.responses.create(model=MODEL, input="and then?", previous_response_id=response.id)
    assert following.status == "completed"


async def test_background_answers_under_way_are_bounded_with_a_429(make_gateway, serve):
    base_url = await serve(make_gateway(background_runs=Runs(max_runs=2)))
    async with clients.openai_async(base_url=base_url + "/v1", api_key="k", max_retries=0) as client:
        for _ in range(2):
            await client.responses.create(model=MODEL, input="hi", background=True, extra_headers=scenario("hang"))
        with pytest.raises(openai.RateLimitError, match="at most 2"):
            await client.responses.create(model=MODEL, input="hi", background=True, extra_headers=scenario("hang"))


async def test_finished_background_answers_make_room_for_new_ones(make_gateway, serve):
    gateway = make_gateway(background_runs=Runs(max_runs=2))
    base_url = await serve(gateway)
    async with clients.openai_async(base_url=base_url + "/v1", api_key="k", max_retries=0) as client:
        ids = []
        for _ in range(4):
            response = await client.responses.create(model=MODEL, input="hi", background=True)
            ids.append(response.id)
            await completed(client, response.id)
    assert len(gateway.background_runs) == 2 and gateway.background_runs.find(ids[-1]) is not None


async def test_server_shutdown_stops_every_background_answer_and_ends_its_readers(library):
    gateway = Gateway(library, time_scale=1.0)
    runner, base_url = await fakehop_app.start(gateway, shutdown_timeout=5.0)
    body = {"model": MODEL, "input": "hi", "background": True}
    async with aiohttp.ClientSession() as session:
        async with session.post(base_url + PATH, json=body, headers=scenario("slow-typing")) as answer:
            response_id = (await answer.json())["id"]
        async with session.get(f"{base_url}{PATH}/{response_id}", params={"stream": "true"}) as answer:
            await answer.content.readline()
            started = time.monotonic()
            await runner.cleanup()
            rest = await answer.content.read()
    assert time.monotonic() - started < 4.0  # not the shutdown timeout: the stream ended with the run
    assert b"response.completed" not in rest
    run = gateway.background_runs.find(response_id)
    assert run is not None and run.task is not None and run.task.done()


async def test_a_reset_session_cancels_and_forgets_its_background_answers(openai_client, base_url, gateway):
    session = {"X-Fakehop-Session": "bg-reset"}
    response = await openai_client.responses.create(
        model=MODEL, input="hi", background=True, extra_headers={**session, **scenario("hang")}
    )
    other = await openai_client.responses.create(
        model=MODEL, input="hi", background=True, extra_headers=scenario("hang")
    )
    run = gateway.background_runs.find(response.id)
    async with aiohttp.ClientSession() as client:
        async with client.post(base_url + "/_fakehop/reset", headers=session) as answer:
            assert answer.status == 200
    with pytest.raises(openai.NotFoundError):
        await openai_client.responses.retrieve(response.id, extra_headers=session)
    assert run is not None and run.status == "cancelled"
    assert (await openai_client.responses.retrieve(other.id)).status == "in_progress"  # another session's goes on


async def test_a_run_finding_no_room_keeps_no_more_events_but_plays_on(make_gateway, serve):
    gateway = make_gateway(background_runs=Runs(max_bytes=8000))  # slow-typing's events hold about 15 kB
    base_url = await serve(gateway)
    async with clients.openai_async(base_url=base_url + "/v1", api_key="k", max_retries=0) as client:
        response = await client.responses.create(
            model=MODEL, input="hi", background=True, extra_headers=scenario("slow-typing")
        )
        done = await completed(client, response.id)
        stream = await client.responses.retrieve(response.id, stream=True)
        kinds = [event.type async for event in stream]
    assert (done.status, done.output_text) == ("completed", FOX)
    assert kinds[0] == "response.created" and "response.completed" not in kinds
    assert gateway.background_runs.size <= 8000


async def test_finished_runs_are_forgotten_to_make_room_for_the_events_of_new_ones(make_gateway, serve):
    gateway = make_gateway(background_runs=Runs(max_bytes=10_000))  # hello's events hold about 7 kB
    base_url = await serve(gateway)
    async with clients.openai_async(base_url=base_url + "/v1", api_key="k", max_retries=0) as client:
        first = await client.responses.create(model=MODEL, input="hi", background=True)
        await completed(client, first.id)
        second = await client.responses.create(model=MODEL, input="hi", background=True)
        await completed(client, second.id)
        stream = await client.responses.retrieve(second.id, stream=True)
        kinds = [event.type async for event in stream]
        assert (await client.responses.retrieve(first.id)).status == "completed"  # still stored
    assert kinds[-1] == "response.completed"
    assert gateway.background_runs.find(first.id) is None
    assert gateway.background_runs.size == gateway.background_runs.find(second.id).size
