"""The official openai SDK, pointed at a real fakehop server, gets every chat scenario right."""

from __future__ import annotations

import openai
import pytest

MESSAGES = [{"role": "user", "content": "Hello"}]


def scenario_header(name: str) -> dict:
    return {"X-Fakehop-Scenario": name}


async def test_stream_plain_text(openai_client):
    stream = await openai_client.chat.completions.create(
        model="gpt-5.6-sol", messages=MESSAGES, stream=True, stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello! How can I help you today?"
    assert chunks[-1].usage.completion_tokens > 0
