"""Helpers for tests that add scenarios of their own to a server and read its raw answers."""

from __future__ import annotations

import json

import aiohttp
import pytest

from fakehop.scenario import reader as sc


def add(gateway, name: str, text: str) -> dict:
    """Add the scenario `text` to `gateway` as `name`; the headers of a request that asks for it."""
    gateway.global_session.add(sc.parse_text(text, "test", name))
    return {"X-Fakehop-Scenario": name}


async def data_events(base_url: str, path: str, body: dict, headers: dict) -> list[dict]:
    """The JSON of every `data:` line of the answer (an SSE stream, or a JSON body on one line)."""
    async with aiohttp.ClientSession() as session:
        async with session.post(base_url + path, json=body, headers=headers) as answer:
            text = await answer.text()
    if text.startswith("{"):
        return [json.loads(text)]
    return [json.loads(line.removeprefix("data: ")) for line in text.split("\n") if line.startswith("data: {")]


def problems_of(text: str) -> str:
    """What loading the scenario `text` complains of, every problem a line."""
    with pytest.raises(sc.ScenarioError) as raised:
        sc.parse_text(text, "t.yaml", "t")
    return str(raised.value)


async def post(base_url: str, path: str, body: dict, headers: dict) -> tuple[int, dict]:
    """One request with a JSON body; its status and JSON answer."""
    async with aiohttp.ClientSession() as session:
        async with session.post(base_url + path, json=body, headers=headers) as answer:
            return answer.status, await answer.json()


async def last_record(base_url: str) -> dict:
    """The journal's newest record, as the control API shows it."""
    async with aiohttp.ClientSession() as session:
        async with session.get(base_url + "/_fakehop/requests") as answer:
            return (await answer.json())["requests"][-1]
