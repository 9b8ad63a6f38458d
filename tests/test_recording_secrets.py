"""No part of a request's key reaches what `fakehop record` and `fakehop import` write: not a
step (a key split across frames the protocol cannot read included), a description, a match, a
file's name, nor the line saying the file was written.

The proxy stands in front of a bare handler that answers with fixed bytes (tests/test_import.py's
`bare`); the imports are HAR files whose request carries the key.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from fakehop.record import proxy as record
from fakehop.scenario.reader import load_file

from .cli_runs import fakehop_here_async
from .test_import import bare, chat_chunk  # noqa: F401 - the fixture, shared
from .test_record import exchange, proxy, recorded  # noqa: F401 - the fixture, shared

KEY = "sk-live-Zq8xW3vT6pL1mN4bR7cY0dK5"
WINDOW = 5  # characters: no run of the key this long may be written anywhere
CHAT_PATH = "/v1/chat/completions"
STREAM = "text/event-stream"
ENDING = chat_chunk({"content": "ok"}, "stop") + "data: [DONE]\n\n"
SPLIT_STREAMS = {  # a key in frames that are no JSON, split where SSE lets an upstream split it
    "two frames": f"data: {{oops {KEY[:14]}\n\ndata: {KEY[14:]} oops}}\n\n",
    "three frames": f"data: {{oops {KEY[:3]}\n\ndata: {KEY[3:20]}\n\ndata: {KEY[20:]} oops}}\n\n",
    "two data lines": f"data: {{oops {KEY[:14]}\ndata: {KEY[14:]} oops}}\n\n",
    "CRLF and an event line": f"event: x{KEY[:10]}\r\ndata: {KEY[10:25]}\r\n\r\ndata: {KEY[25:]}\r\n\r\n",
}
PROMPTS = {  # a prompt holding the key, and where it would show
    "file name": f"{KEY} is my key",
    "description": f"please check this key for me right now: {KEY}",
}


def no_part_of_the_key(*texts: str) -> None:
    runs = [KEY[at : at + WINDOW].lower() for at in range(len(KEY) - WINDOW + 1)]  # any case: file names are lowercase
    for text in texts:
        found = [run for run in runs if run in text.lower()]
        assert not found, f"{found} in:\n{text}"


def chat_request(prompt: str = "Hello") -> dict:
    return {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": prompt}]}


def har_of(prompt: str, status: int, content_type: str, body: str) -> dict:
    authorization = {"name": "Authorization", "value": f"Bearer {KEY}"}
    request = {
        "method": "POST",
        "url": f"https://gateway.example{CHAT_PATH}",
        "headers": [authorization],
        "postData": {"text": json.dumps(chat_request(prompt))},
    }
    response = {"status": status, "content": {"text": body}}
    response["headers"] = [{"name": "Content-Type", "value": content_type}]
    return {"log": {"entries": [{"request": request, "response": response}]}}


async def record_one(bare, proxy, body: str, prompt: str = "Hello", status: int = 200, content_type: str = STREAM):
    """The recording of one chat request with the key, its client's bytes and the recorder's lines."""
    lines: list[str] = []
    upstream_url = await bare(body.encode(), status, {"Content-Type": content_type})
    proxy_url, out = await proxy(upstream_url, listeners=[lines.append])
    _, _, received, _ = await exchange(proxy_url, "chat", chat_request(prompt), {"Authorization": f"Bearer {KEY}"})
    [path] = await recorded(out)
    return path, received, lines


async def import_one(
    tmp_path: Path, prompt: str = "Hello", status: int = 200, content_type: str = STREAM, body: str = ENDING
) -> tuple[Path, str]:
    har = tmp_path / "capture.har"
    har.write_text(json.dumps(har_of(prompt, status, content_type, body)))
    imported = await fakehop_here_async("import", str(har), "--out", str(tmp_path / "out"))
    assert imported.returncode == 0, imported.stderr
    [path] = (tmp_path / "out").glob("*.yaml")
    return path, imported.stdout


@pytest.mark.parametrize("split", list(SPLIT_STREAMS))
async def test_a_key_split_across_frames_is_not_recorded(bare, proxy, split):
    stream = SPLIT_STREAMS[split] + ENDING
    path, received, _ = await record_one(bare, proxy, stream)
    assert received == stream.encode()  # the client gets them as they came
    no_part_of_the_key(path.read_text())
    steps = load_file(path).entries[0].script.steps
    assert any("[redacted]" in getattr(step, "data", "") for step in steps), path.read_text()


@pytest.mark.parametrize("split", list(SPLIT_STREAMS))
async def test_a_key_split_across_frames_is_not_imported(tmp_path, split):
    path, _ = await import_one(tmp_path, body=SPLIT_STREAMS[split] + ENDING)
    no_part_of_the_key(path.read_text())
    assert "[redacted]" in path.read_text()


@pytest.mark.parametrize("where", list(PROMPTS))
async def test_a_key_in_the_prompt_is_in_no_name_line_or_description_of_a_recording(bare, proxy, where):
    path, _, lines = await record_one(bare, proxy, ENDING, PROMPTS[where])
    no_part_of_the_key(path.name, path.read_text(), *lines)
    assert load_file(path).description.startswith("A chat answer to ")


@pytest.mark.parametrize("where", list(PROMPTS))
async def test_a_key_in_the_prompt_is_in_no_name_line_or_description_of_an_import(tmp_path, where):
    path, printed = await import_one(tmp_path, PROMPTS[where])
    no_part_of_the_key(path.name, path.read_text(), printed)
    assert load_file(path).description.startswith("A chat answer to ")


async def test_a_key_at_the_end_of_a_long_error_body_is_not_recorded_in_part(bare, proxy, tmp_path):
    """An error body that is no JSON is kept as the error's message, cut to 500 characters: cut
    after the key is taken out, not before."""
    body = "x" * 480 + f" your key {KEY} is not valid"
    recording, _, _ = await record_one(bare, proxy, body, status=401, content_type="text/plain")
    imported, _ = await import_one(tmp_path, status=401, content_type="text/plain", body=body)
    for path in (recording, imported):
        no_part_of_the_key(path.read_text())
        assert "[redacted]" in load_file(path).entries[0].script.http_error.message


async def test_a_secret_in_the_model_is_taken_out_before_the_model_is_escaped(bare, proxy):
    """A cookie's value holds `[`, which the model's glob escapes: the value is taken out first."""
    cookie = "ab[c]d*ef?gh-0123456789"
    proxy_url, out = await proxy(await bare(ENDING.encode()))
    await exchange(proxy_url, "chat", {**chat_request(), "model": f"model-{cookie}"}, {"Cookie": f"session={cookie}"})
    [path] = await recorded(out)
    text = path.read_text()
    assert "0123456789" not in text and "redacted" in text.split("  model: ")[1].splitlines()[0], text


UNPARSED = [
    f"Authorization: Bearer {KEY}\x01",
    f"Authorization Bearer {KEY}",
    f"Authorization: Bearer {KEY}{'x' * 70_000}",
]


@pytest.mark.parametrize("header", UNPARSED, ids=["a control character", "no colon", "over the limit"])
async def test_a_request_the_recorder_cannot_parse_is_logged_without_its_key(bare, tmp_path, caplog, header):
    """aiohttp refuses it before the proxy sees it, and its reason quotes the line it stopped at: not logged.
    The proxy started as `fakehop record` starts it, with fakehop's handling of aiohttp's log."""
    runner, proxy_url = await record.start(record.Recorder(await bare(ENDING.encode()), tmp_path))
    try:
        address = urlsplit(proxy_url)
        reader, writer = await asyncio.open_connection(address.hostname, address.port)
        writer.write(f"POST {CHAT_PATH} HTTP/1.1\r\nHost: x\r\n{header}\r\nContent-Length: 2\r\n\r\n{{}}".encode())
        answer = await asyncio.wait_for(reader.read(), 10)
        writer.close()
    finally:
        await runner.cleanup()
    assert answer.startswith(b"HTTP/1.0 400 ") and not list(tmp_path.iterdir())
    [logged] = [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]
    assert logged.startswith("refused a request from 127.0.0.1 that is not valid HTTP (400 ")
    no_part_of_the_key(logged)
