"""Read an SSE stream off a real socket and note when each frame arrived."""

from __future__ import annotations

import time

import aiohttp


async def timed_frames(url: str, body: dict, headers: dict | None = None) -> list[tuple[float, str]]:
    """(seconds since the request was sent, frame text) for every SSE frame of the answer."""
    frames = []
    buffer = b""
    async with aiohttp.ClientSession() as session:
        started = time.monotonic()
        async with session.post(url, json=body, headers=headers or {}) as response:
            assert response.status == 200, await response.text()
            async for data in response.content.iter_any():
                arrived = time.monotonic() - started
                buffer += data
                while b"\n\n" in buffer:
                    frame, buffer = buffer.split(b"\n\n", 1)
                    frames.append((arrived, frame.decode()))
    return frames
