"""Upstreams and captures that mean harm, or are only broken: `fakehop record` relays whatever
comes as it came and writes a file that loads, `fakehop import` writes one or says in a line
what is wrong; neither lets text it read out of the comment it belongs in, nor writes a file
fakehop would refuse.

The proxy stands in front of a bare handler that answers with fixed bytes (tests/test_import.py's
`bare`), or one that streams until its client goes.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
from collections.abc import Iterable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from fakehop.protocols import PROTOCOLS
from fakehop.record.capture import CUT, AnswerReader
from fakehop.record.capture.facts import MAX_KEPT_CHARS
from fakehop.record.importer import NotImportable, read_file
from fakehop.record.writer import scenario_text
from fakehop.scenario.reader import MAX_FILE_BYTES, load_file, parse_text

from .cli_runs import fakehop_here_async
from .test_import import (  # noqa: F401 - the fixture, shared
    HAND_MADE,
    RATE_LIMITED,
    WHOLE_MESSAGE,
    bare,
    chat_chunk,
    data,
    event,
    message_item,
    messages_block,
    messages_events,
    response,
)
from .test_record import exchange, joined_texts, proxy, recorded  # noqa: F401 - the fixture, shared

STREAM = {"Content-Type": "text/event-stream"}
JSON = {"Content-Type": "application/json"}
START = chat_chunk({"role": "assistant", "content": "Hi"})
END = chat_chunk({"content": " there"}, "stop") + "data: [DONE]\n\n"
DEEP = "[" * 200_000 + "]" * 200_000
CHAT_PATH = PROTOCOLS["chat"].PATH


def chat_request(prompt: str = "Hello", stream: bool = True) -> dict:
    return {"model": "gpt-4o", "stream": stream, "messages": [{"role": "user", "content": prompt}]}


def messages_ending(stop_reason: str) -> list[dict]:
    delta = {"type": "message_delta", "delta": {"stop_reason": stop_reason}, "usage": {"output_tokens": 2}}
    return [delta, {"type": "message_stop"}]


def messages_stream(*middle: str) -> str:
    text = messages_block(0, {"type": "text", "text": ""}, [{"type": "text_delta", "text": "Hi"}])
    whole = messages_events(text, ending=messages_ending("end_turn"))
    cut = whole.index("event: message_delta")
    return whole[:cut] + "".join(middle) + whole[cut:]


REQUESTS = {
    "chat": chat_request(),
    "messages": {
        "model": "claude-x",
        "max_tokens": 9,
        "stream": True,
        "messages": [{"role": "user", "content": "Hello"}],
    },
}
CHUNK = "chat.completion.chunk"


def chunk_choosing(**choice) -> str:
    return data({"object": CHUNK, "choices": [choice]})


MALFORMED = {  # frames of events no protocol gives, each between good ones
    "choices a number": ("chat", data({"object": CHUNK, "choices": 5})),
    "tool_calls a number": ("chat", chunk_choosing(delta={"tool_calls": 3})),
    "tool_calls a number after text": ("chat", chunk_choosing(delta={"content": "again", "tool_calls": 3})),
    "a finish that is a list": ("chat", chunk_choosing(delta={"content": "again"}, finish_reason=[])),
    "a type that is a list": ("messages", data({"type": ["x"]})),
    "a block index that is a list": ("messages", event({"type": "content_block_delta", "index": [0], "delta": {}})),
    "an array 200,000 deep": ("chat", f"data: {DEEP}\n\n"),
}


def problems_logged(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]


async def validated(directory: Path) -> None:
    """`fakehop validate` on what was written: one file, loading as itself and no other scenario."""
    checked = await fakehop_here_async("validate", str(directory))
    assert (checked.returncode, checked.stdout, checked.stderr) == (0, "ok: 1 scenario\n", "")
    [path] = directory.glob("*.yaml")
    assert load_file(path).name == path.stem


def stream_with(protocol: str, frame: str) -> str:
    return START + frame + END if protocol == "chat" else messages_stream(frame)


def kept_raw(path: Path, protocol: str, frame: str) -> None:
    """The file at `path` plays `frame` as it came, and of the output around it no more than the good events gave."""
    script = load_file(path).entries[0].script
    assert script is not None
    steps = script.steps
    assert frame in [getattr(step, "data", None) for step in steps], path.read_text()[:2000]
    assert "".join(joined_texts(path)) == ("Hi there" if protocol == "chat" else "Hi")


# ---------------------------------------------------------------- the proxy relays what it cannot read


@pytest.mark.parametrize("name", list(MALFORMED))
async def test_an_event_the_proxy_cannot_read_is_relayed_as_it_came_and_recorded_raw(bare, proxy, caplog, name):
    protocol, frame = MALFORMED[name]
    stream = stream_with(protocol, frame)
    proxy_url, out = await proxy(await bare(stream.encode(), headers=STREAM))
    status, _, received, ending = await exchange(proxy_url, protocol, REQUESTS[protocol], {})
    assert (status, ending) == (200, "end") and received == stream.encode()
    [path] = await recorded(out)
    kept_raw(path, protocol, frame)
    assert not problems_logged(caplog)


def tool_inputs_nested(depths: Iterable[int]) -> str:
    """Messages tool calls whose input is nested `depths` deep, about as deep as Python reads JSON
    (written by hand: json.dumps stops short of it)."""
    start = 'event: content_block_start\ndata: {"type": "content_block_start", "index": %d, '
    call = '"content_block": {"type": "tool_use", "id": "toolu_%d", "name": "f", "input": {"a": %s}}}\n\n'
    return messages_stream(
        *(
            start % (index + 1) + call % (index, DEEP[200_000 - depth : 200_000 + depth])
            for index, depth in enumerate(depths)
        )
    )


DEEP_INPUTS = tool_inputs_nested(range(600, 1000))  # one of them read, then too deep to write, whatever the stack


async def test_tool_inputs_as_deep_as_json_reads_are_relayed_and_recorded(bare, proxy, caplog):
    proxy_url, out = await proxy(await bare(DEEP_INPUTS.encode(), headers=STREAM))
    status, _, received, ending = await exchange(proxy_url, "messages", REQUESTS["messages"], {})
    assert (status, ending) == (200, "end") and received == DEEP_INPUTS.encode()
    await recorded(out)
    await validated(out)
    assert not problems_logged(caplog)


async def test_tool_inputs_as_deep_as_json_reads_are_imported(tmp_path):
    capture = tmp_path / "capture.sse"
    capture.write_text(DEEP_INPUTS)
    imported = await fakehop_here_async("import", str(capture), "--out", str(tmp_path / "out"))
    assert imported.returncode == 0, imported.stderr
    await validated(tmp_path / "out")


async def test_a_whole_answer_the_proxy_cannot_read_is_relayed_and_said_not_recorded(bare, proxy, caplog):
    answer = json.dumps({"object": "chat.completion", "model": "gpt-4o", "choices": 5}).encode()
    lines: list[str] = []
    proxy_url, out = await proxy(await bare(answer, headers=JSON), listeners=[lines.append])
    assert await exchange(proxy_url, "chat", chat_request(stream=False), {}) == (200, "application/json", answer, "end")
    assert lines == [f"not recorded: POST {CHAT_PATH}: the answer is not a chat answer fakehop can read"]
    assert not list(out.iterdir())
    assert not problems_logged(caplog)


# ---------------------------------------------------------------- import says what is wrong, in a line


def har(*entries: dict) -> dict:
    return {"log": {"version": "1.2", "entries": list(entries)}}


def har_entry(body: str, content_type: str = "text/event-stream", path: str = CHAT_PATH, **fields) -> dict:
    """An entry of a chat request and the answer `body`; `request_headers=…` and the like set a field of either."""
    request = {
        "method": "POST",
        "url": f"https://gateway.example{path}",
        "headers": [],
        "postData": {"text": json.dumps(chat_request())},
    }
    response = {"status": 200, "headers": [{"name": "Content-Type", "value": content_type}], "content": {"text": body}}
    for name, value in fields.items():
        part, _, key = name.partition("_")
        (request if part == "request" else response)[key] = value
    return {"request": request, "response": response}


def after_a_good_entry(entry: dict) -> str:
    return json.dumps(har(har_entry(START + END), entry))


NO_ANSWER = "no event or answer of Chat Completions, Responses or Messages in it"
UNREADABLE = "entry 2: the answer is not a chat answer fakehop can read"
WHOLE_CHOICES = json.dumps({"object": "chat.completion", "choices": 5})
WHOLE_CALLS = json.dumps({"object": "chat.completion", "choices": [{"message": {"tool_calls": 3}}]})
NESTED_HAR = after_a_good_entry({})[: -len("]}}")] + ", " + DEEP[100_000:300_000] + "]}}"  # a third entry, 100,000 deep
BAD_CAPTURES = {  # the file, and what the line says of it
    "a HAR nested 100,000 deep": (NESTED_HAR, "JSON nested too deep to read"),
    "response headers a number": (
        after_a_good_entry(har_entry(START, response_headers=5)),
        "entry 2: its response headers are not a list",
    ),
    "request headers a number": (
        after_a_good_entry(har_entry(START, request_headers=7)),
        "entry 2: its request headers are not a list",
    ),
    "whole choices a number": (after_a_good_entry(har_entry(WHOLE_CHOICES, "application/json")), UNREADABLE),
    "whole tool_calls a number": (after_a_good_entry(har_entry(WHOLE_CALLS, "application/json")), UNREADABLE),
    "whole type a list": (json.dumps({"type": ["x"], "content": []}), NO_ANSWER),
    "a stream only 100,000 deep": ("data: " + "[" * 100_000 + "\n\n", NO_ANSWER),
}


@pytest.mark.parametrize("name", list(BAD_CAPTURES))
async def test_a_bad_capture_is_refused_in_one_line_naming_it_and_its_entry(tmp_path, name):
    """As with any file import cannot read, nothing is written: not even the good entries before."""
    content, says = BAD_CAPTURES[name]
    good, bad = tmp_path / "good.sse", tmp_path / "capture.har"
    good.write_text(START + END)
    bad.write_text(content)
    refused = await fakehop_here_async("import", str(good), str(bad), "--out", str(tmp_path / "out"))
    assert refused.returncode == 2 and refused.stderr == f"fakehop: {bad}: {says}\n"
    assert not (tmp_path / "out").exists()


LATE = {**har_entry(START + END), "startedDateTime": "9999-12-31T23:59:59-23:59"}  # a year past 9999 in UTC
SUPERSCRIPT_STATUS = "HTTP/1.1 \u00b2\u00b9 OK\r\nContent-Type: text/event-stream\r\n\r\n"
ODD_BUT_READABLE = {  # captures with a field import reads past, and the file name it writes
    "a start time out of range": (json.dumps(har(LATE)), "chat-hello.yaml"),
    "a status of other digits": (SUPERSCRIPT_STATUS + START + END, "chat-capture.yaml"),
}


@pytest.mark.parametrize("name", list(ODD_BUT_READABLE))
async def test_a_field_import_cannot_read_is_read_past(tmp_path, name):
    content, written = ODD_BUT_READABLE[name]
    capture = tmp_path / "capture.har"
    capture.write_text(content)
    imported = await fakehop_here_async("import", str(capture), "--out", str(tmp_path / "out"))
    assert imported.returncode == 0, imported.stderr
    assert [path.name for path in (tmp_path / "out").iterdir()] == [written]


@pytest.mark.parametrize("name", list(MALFORMED))
async def test_an_event_import_cannot_read_is_imported_raw(tmp_path, name):
    protocol, frame = MALFORMED[name]
    capture = tmp_path / "capture.sse"
    capture.write_text(stream_with(protocol, frame))
    imported = await fakehop_here_async("import", str(capture), "--out", str(tmp_path / "out"))
    assert imported.returncode == 0, imported.stderr
    [path] = (tmp_path / "out").glob("*.yaml")
    kept_raw(path, protocol, frame)


async def test_tool_arguments_nested_100000_deep_are_imported_as_text(tmp_path):
    deep = "[" * 100_000 + "]" * 100_000
    call = messages_block(
        0,
        {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}},
        [{"type": "input_json_delta", "partial_json": deep}],
    )
    capture = tmp_path / "capture.sse"
    capture.write_text(messages_events(call, ending=messages_ending("tool_use")))
    imported = await fakehop_here_async("import", str(capture), "--out", str(tmp_path / "out"))
    assert imported.returncode == 0, imported.stderr
    [path] = (tmp_path / "out").glob("*.yaml")
    [step] = load_file(path).entries[0].script.steps
    assert "".join(step.deltas) == deep


WRONG_TYPES = [5, ["x"], {"a": [1]}]  # for fields iterated, used as keys, read as strings
CHAT_MESSAGE = {"content": "x", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}"}}]}
WHOLE_ANSWERS = {
    "chat": {
        "object": "chat.completion",
        "model": "m",
        "choices": [{"message": CHAT_MESSAGE, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens_details": {"reasoning_tokens": 0}},
    },
    "responses": response("completed", [message_item(0, ["Hi"])[1]], usage={"input_tokens": 1, "output_tokens": 2}),
    "messages": WHOLE_MESSAGE,
    "chat error": RATE_LIMITED,
    "messages error": {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
}


def fields_of(value, path: tuple = ()):
    """The path of each value a JSON value holds, its own (the empty path) included."""
    yield path
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, inner in items:
        yield from fields_of(inner, (*path, key))


def with_value(value, path: tuple, new):
    if not path:
        return new
    value = json.loads(json.dumps(value))
    json_value = value
    for key in path[:-1]:
        json_value = json_value[key]
    json_value[path[-1]] = new
    return value


def of_other_shapes(value) -> list:
    """`value` with each of its fields given, in turn, each of WRONG_TYPES."""
    return [with_value(value, path, new) for path in fields_of(value) for new in WRONG_TYPES]


def streams_of_other_shapes(stream: str) -> list[str]:
    """`stream` with one event of another shape at a time (its other events as they were)."""
    frames = stream.split("\n\n")
    found = []
    for number, frame in enumerate(frames):
        head, _, payload = frame.rpartition("data: ")
        if payload.startswith("{"):
            found += [
                "\n\n".join(frames[:number] + [f"{head}data: {json.dumps(other)}"] + frames[number + 1 :])
                for other in of_other_shapes(json.loads(payload))
            ]
    return found


def imported_or_refused(capture: Path, content: str) -> None:
    """`capture` holding `content` imports to a file that loads, or is refused in a line."""
    capture.write_text(content)
    try:
        answers = read_file(capture)
    except NotImportable as exc:
        assert "\n" not in str(exc)
        return
    for answer in answers:
        parse_text(scenario_text(answer.captured, answer.request, answer.origin), "<written>", "written")


@pytest.mark.parametrize(("protocol", "name"), list(HAND_MADE))
def test_an_event_of_any_shape_is_read_or_kept_raw(tmp_path, protocol, name):
    for stream in streams_of_other_shapes(HAND_MADE[protocol, name]):
        imported_or_refused(tmp_path / "capture.sse", stream)


@pytest.mark.parametrize("name", list(WHOLE_ANSWERS))
def test_a_whole_answer_of_any_shape_is_read_or_refused_in_a_line(tmp_path, name):
    for answer in of_other_shapes(WHOLE_ANSWERS[name]):
        imported_or_refused(tmp_path / "capture.json", json.dumps(answer))


# ---------------------------------------------------------------- text read stays in its place in the file


BREAKING_OUT = "x\nname: hello\n#"
LINE_BREAKS_AND_WORSE = [BREAKING_OUT.replace("\n", end) for end in ("\n", "\r", "\u2028", "\x85")] + ["x\x00y"]


@pytest.mark.parametrize("text", LINE_BREAKS_AND_WORSE)
@pytest.mark.parametrize("protocol", ["chat", "messages"])
async def test_what_an_upstream_names_stays_in_its_comment(bare, proxy, protocol, text):
    """Chat's object and a Messages block's type, counted in the header's list of what is not kept."""
    block = {"type": "content_block_start", "index": 1, "content_block": {"type": text}}
    named = data({"object": text}) if protocol == "chat" else event(block)
    proxy_url, out = await proxy(await bare(stream_with(protocol, named).encode(), headers=STREAM))
    await exchange(proxy_url, protocol, REQUESTS[protocol], {})
    await recorded(out)
    await validated(out)


@pytest.mark.parametrize("where", ["method", "file name", "error header"])
async def test_what_a_capture_names_stays_in_its_comment(tmp_path, where):
    entry = har_entry(START + END)
    if where == "method":
        entry["request"]["method"] = f"POST){BREAKING_OUT}"
    elif where == "error header":
        entry["response"].update(
            status=429,
            headers=[{"name": f"x-ratelimit-a{BREAKING_OUT}", "value": "1"}],
            content={"text": json.dumps({"error": {"message": "slow down"}})},
        )
    capture = tmp_path / (f"capture{BREAKING_OUT}.har" if where == "file name" else "capture.har")
    capture.write_text(json.dumps(har(entry)))
    imported = await fakehop_here_async("import", str(capture), "--out", str(tmp_path / "out"))
    assert imported.returncode == 0, imported.stderr
    await validated(tmp_path / "out")


# ---------------------------------------------------------------- every file written loads


def numbered_piece(number: int) -> str:
    """A piece of text no `chunk` splits a run of them into."""
    return f"{number} " + "x" * (number * 7 % 900)


@pytest.fixture
async def endless(aiohttp_server):
    """The URL of an upstream whose chat stream goes on until its client goes."""

    async def answer(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers=STREAM)
        await response.prepare(request)
        try:
            for number in itertools.count():
                await response.write(chat_chunk({"content": numbered_piece(number)}).encode())
        except ConnectionError:
            pass
        return response

    app = web.Application()
    app.router.add_post("/{path:.*}", answer)
    server = await aiohttp_server(app)
    return str(server.make_url("")).rstrip("/")


async def test_an_endless_stream_is_recorded_as_far_as_a_file_holds(endless, proxy):
    lines: list[str] = []
    proxy_url, out = await proxy(endless, listeners=[lines.append])
    received = bytearray()
    async with aiohttp.ClientSession() as session:
        async with session.post(proxy_url + CHAT_PATH, json=chat_request()) as response:
            async for chunk in response.content.iter_any():
                received += chunk
                if len(received) > 3 * MAX_FILE_BYTES:
                    break
    [path] = await recorded(out)
    assert path.stat().st_size <= MAX_FILE_BYTES
    await validated(out)
    text = "".join(joined_texts(path))
    assert "".join(map(numbered_piece, range(20_000))).startswith(text) and len(text) > MAX_FILE_BYTES / 2
    [line] = lines
    said = f"recorded {path}: chat, streamed, HTTP 200, the client went away (written as hang); cut "
    cut = re.fullmatch(re.escape(said) + r"(after [\d,]+ characters of output, [\d.]+m?s into the answer) to .*", line)
    assert cut, line
    assert f"  # Cut here, {cut.group(1)}: " in path.read_text()


async def test_a_capture_of_150000_deltas_is_imported_as_far_as_a_file_holds(tmp_path):
    capture = tmp_path / "long.sse"
    capture.write_text(START + "".join(chat_chunk({"content": f"{number},"}) for number in range(150_000)) + END)
    imported = await fakehop_here_async("import", str(capture), "--out", str(tmp_path / "out"))
    assert imported.returncode == 0, imported.stderr
    [path] = (tmp_path / "out").glob("*.yaml")
    assert path.stat().st_size <= MAX_FILE_BYTES
    await validated(tmp_path / "out")
    text = "".join(joined_texts(path))
    assert ("Hi" + "".join(f"{number}," for number in range(150_000))).startswith(text) and len(text) > 100_000
    assert imported.stdout.startswith(f"imported {capture} -> {path}: chat, streamed, HTTP 200; cut after ")
    assert "  # Cut here, after " in path.read_text()


async def test_the_output_kept_while_an_answer_comes_is_bounded(endless):
    """What could never be written is not kept: the reader of an endless stream holds no more than a file could."""
    reader = AnswerReader("chat", 200, STREAM, sse=True)
    async with aiohttp.ClientSession() as session:
        async with session.post(endless + CHAT_PATH, json=chat_request()) as response:
            async for chunk in response.content.iter_any():
                reader.feed(chunk, None)
                if reader.reader.captured.events > 10_000:
                    break
    [block] = reader.end(None, CUT).parts
    assert MAX_KEPT_CHARS <= len(block.text()) < MAX_KEPT_CHARS + 1000


async def test_a_prompt_longer_than_a_match_reads_is_matched_as_far_as_it_reads(bare, proxy):
    prompt = "Why? " * 300_000
    proxy_url, out = await proxy(await bare((START + END).encode(), headers=STREAM))
    await exchange(proxy_url, "chat", chat_request(prompt), {})
    [path] = await recorded(out)
    await validated(out)
    match = load_file(path).match
    assert match.prompt.fits(prompt) and match.prompt.fits(prompt[:200_000]) and not match.prompt.fits("How? " + prompt)


async def test_kinds_of_what_is_not_kept_are_named_as_far_as_a_header_holds(tmp_path):
    capture = tmp_path / "kinds.sse"
    kinds = [data({"object": f"kind {number} " + "k" * 1000}) for number in range(3000)]
    capture.write_text(START + "".join(kinds) + END)
    imported = await fakehop_here_async("import", str(capture), "--out", str(tmp_path / "out"))
    assert imported.returncode == 0, imported.stderr
    await validated(tmp_path / "out")
    [path] = (tmp_path / "out").glob("*.yaml")
    assert "; 2980 of 2980 other kinds.\n" in path.read_text()


async def test_an_answer_whose_file_would_be_too_large_even_cut_is_said_not_written(bare, proxy, tmp_path):
    answer = json.dumps({"object": "chat.completion", "model": "m" * MAX_FILE_BYTES, "choices": []}).encode()
    lines: list[str] = []
    proxy_url, out = await proxy(await bare(answer, headers=JSON), listeners=[lines.append])
    await exchange(proxy_url, "chat", chat_request(stream=False), {})
    [line] = lines
    assert re.fullmatch(rf"not recorded: POST {CHAT_PATH}: its scenario would take 1,000,\d\d\d bytes, .*", line)
    assert not list(out.iterdir())
    capture = tmp_path / "capture.har"
    capture.write_text(after_a_good_entry(har_entry(answer.decode(), "application/json")))
    refused = await fakehop_here_async("import", str(capture), "--out", str(tmp_path / "out"))
    assert refused.returncode == 2
    assert refused.stderr.startswith(f"fakehop: {capture}: entry 2: its scenario would take 1,000,")
    assert refused.stderr.count("\n") == 1 and not (tmp_path / "out").exists()
