"""The protocol routes answered ahead of aiohttp's router (server/front.py): what the router
did for them still holds, on a server started as `fakehop serve` starts one."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from fakehop.protocols import PROTOCOLS
from fakehop.server.app import create_app, start

BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()


@pytest.fixture
async def address(gateway):
    runner, url = await start(gateway)
    host, port = url.removeprefix("http://").split(":")
    yield host, int(port)
    await runner.cleanup()


async def exchange(address, head: str, body: bytes = BODY, wait_for_continue: bool = False) -> bytes:
    """What the server sends back for a request of `head` and `body` on a fresh connection; with
    `wait_for_continue`, the body is sent only once the server has said 100 Continue."""
    reader, writer = await asyncio.open_connection(*address)
    try:
        writer.write(f"{head}Host: 127.0.0.1\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode())
        if wait_for_continue:
            interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            assert interim.startswith(b"HTTP/1.1 100 Continue\r\n"), interim
        writer.write(body)
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
async def test_each_protocol_route_answers_on_a_started_server(address, gateway, protocol):
    path = PROTOCOLS[protocol].PATH
    body = json.dumps(PROTOCOLS[protocol].EXAMPLE_REQUEST).encode()
    answer = await exchange(address, f"POST {path} HTTP/1.1\r\nContent-Type: application/json\r\n", body)
    assert status_of(answer) == 200, answer
    assert gateway.journal.records[-1].protocol == protocol


async def test_a_body_sent_after_100_continue_is_answered(address, gateway):
    """A client that sends `Expect: 100-continue` (curl does, for a body over 1 KiB) waits for
    the interim answer before it sends the body."""
    head = "POST /v1/chat/completions HTTP/1.1\r\nContent-Type: application/json\r\nExpect: 100-continue\r\n"
    answer = await exchange(address, head, wait_for_continue=True)
    final = answer.split(b"\r\n\r\n", 1)[1] if answer.startswith(b"HTTP/1.1 100") else answer
    assert status_of(final) == 200, answer
    assert gateway.journal.records[-1].body["messages"][0]["content"] == "hi"


async def test_an_expectation_other_than_continue_is_refused_as_before(address):
    head = "POST /v1/chat/completions HTTP/1.1\r\nContent-Type: application/json\r\nExpect: something-else\r\n"
    assert status_of(await exchange(address, head)) == 417


async def test_a_route_path_with_a_query_string_is_answered_by_its_route(address, gateway):
    head = "POST /v1/chat/completions?api-version=1 HTTP/1.1\r\nContent-Type: application/json\r\n"
    assert status_of(await exchange(address, head)) == 200
    assert gateway.journal.records[-1].protocol == "chat"


@pytest.mark.parametrize("method", ["GET", "PUT"])
async def test_another_method_on_a_route_path_is_refused_by_the_router(address, method):
    head = f"{method} /v1/chat/completions HTTP/1.1\r\nContent-Type: application/json\r\n"
    assert status_of(await exchange(address, head)) == 405


async def test_a_path_the_routes_do_not_hold_is_unrouted(address):
    head = "POST /v1/chat/completions/ HTTP/1.1\r\nContent-Type: application/json\r\n"
    assert status_of(await exchange(address, head)) == 404


async def test_an_application_with_signals_keeps_its_router_for_the_protocol_routes(aiohttp_server, gateway):
    """What runs as a response is prepared (here, a header added) runs for the protocol routes too."""
    app = create_app(gateway)

    async def stamped(request, response) -> None:
        response.headers["X-Stamped"] = "yes"

    app.on_response_prepare.append(stamped)
    server = await aiohttp_server(app)
    async with aiohttp.ClientSession() as session:
        async with session.post(server.make_url("/v1/chat/completions"), data=BODY) as response:
            assert response.status == 200
            assert response.headers["X-Stamped"] == "yes"
