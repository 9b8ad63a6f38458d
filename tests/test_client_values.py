"""Whatever a client sends is only ever data: no value of its own can touch the templates and
markers the encoders fill in, however it is spelt."""

from __future__ import annotations

import itertools
import json

import aiohttp
import pytest

from fakehop.play import player
from fakehop.scenario.reader import parse_text

SLOT_LIKE = [
    "\u0000slot\u0000",
    'x"\u0000slot\u0000',
    "\u0000number\u0000",
    "\u0000fakehop:m\u0000",
    "\u0000fakehop:abc\u0000",
    "\u0000fakehop:99\u0000",
    "7391062845173",
]
LONG = {
    "name": "long-live",
    "steps": [{"text": "x" * (player.KEPT_HAPPENINGS + 10), "chunk": "char"}],
}  # encoded as it plays


async def stream(session: aiohttp.ClientSession, url: str, path: str, body: dict) -> bytes:
    async with session.post(url + path, json=body, headers={"X-Fakehop-Scenario": "long-live"}) as response:
        assert response.status == 200, await response.text()
        return await response.read()


@pytest.mark.parametrize("value", SLOT_LIKE)
async def test_a_model_or_echoed_field_that_looks_like_a_marker_is_written_as_it_is(serve, make_gateway, value):
    gateway = make_gateway()
    url = await serve(gateway)
    async with aiohttp.ClientSession() as session:
        async with session.post(url + "/_fakehop/scenarios", json=LONG) as response:
            assert response.status == 201
        for hello in (False, True):  # the kept rendering of hello, and the long one encoded live
            headers = {"X-Fakehop-Scenario": "hello"} if hello else {}
            chat = (
                await stream(
                    session,
                    url,
                    "/v1/chat/completions",
                    {"model": value, "messages": [{"role": "user", "content": "hi"}], "stream": True},
                )
                if not hello
                else None
            )
            async with session.post(
                url + "/v1/responses",
                json={"model": value, "input": "hi", "stream": True, "instructions": value, "metadata": {"k": value}},
                headers=headers,
            ) as response:
                assert response.status == 200
                responses = await response.read()
            frames = [json.loads(line[6:]) for line in responses.split(b"\n") if line.startswith(b"data: ")]
            assert frames[0]["response"]["model"] == value and frames[0]["response"]["instructions"] == value
            assert frames[-1]["response"]["metadata"] == {"k": value}
            if chat is not None:
                chunks = [json.loads(line[6:]) for line in chat.split(b"\n") if line.startswith(b"data: {")]
                assert {chunk["model"] for chunk in chunks} == {value}
                assert (
                    "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
                    == LONG["steps"][0]["text"]
                )


def test_keepalives_are_played_at_least_a_millisecond_apart_whatever_the_scale():
    """A millisecond at a scale of 1e-6 would be a nanosecond: keepalives would come in their millions."""
    script = parse_text("keepalive: 1ms\nsteps: [{delay: 1h}, {text: a}]", "t", "t").entries[0].script
    happenings = list(itertools.islice(player.timeline(script, time_scale=1e-6), 10_000))
    keepalives = [offset for offset, happening in happenings if happening is player.KEEPALIVE]
    assert len(keepalives) == 3  # 3.6 ms of delay at that scale
    assert all(b - a >= player.MIN_PLAYED_KEEPALIVE - 1e-12 for a, b in zip(keepalives, keepalives[1:]))
