"""A small body that has come in whole is taken at once: the server's body limit, its error and
the bytes held for answers under way are the same as for a body read as it comes."""

from __future__ import annotations

import json

import aiohttp

from fakehop.server.app import create_app

CHAT = "/v1/chat/completions"


def chat_body(padding: int) -> bytes:
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * padding}]}).encode()


async def test_a_whole_body_over_a_small_limit_is_a_413(aiohttp_server, gateway):
    server = await aiohttp_server(create_app(gateway, client_max_size=1000))
    async with aiohttp.ClientSession() as session:
        async with session.post(server.make_url(CHAT), data=chat_body(2000)) as response:
            assert response.status == 413
            message = (await response.json())["error"]["message"]
        assert message == "Request body is larger than the limit of 1,000 bytes."
        async with session.post(server.make_url(CHAT), data=chat_body(500)) as response:
            assert response.status == 200, await response.text()
    assert gateway.bodies.held == 0


async def test_whole_bodies_are_held_while_answered_and_let_go(aiohttp_server, gateway):
    server = await aiohttp_server(create_app(gateway))
    async with aiohttp.ClientSession() as session:
        for padding in (10, 100, 1000):
            async with session.post(server.make_url(CHAT), data=chat_body(padding)) as response:
                assert response.status == 200, await response.text()
                await response.read()
    assert gateway.bodies.held == 0
    assert [record.body_bytes for record in gateway.journal.records][-3:] == [
        len(chat_body(p)) for p in (10, 100, 1000)
    ]
