"""`fakehop import`: captured answers from files, turned into the facts a scenario is written from.

A file is either a HAR (every entry for a protocol path, or whose answer reads as one, is an
answer), or one answer as a client received it: an event stream (`curl -N`), a whole JSON
answer, either with the status line and headers in front (`curl -i`). The protocol is told by
the path a HAR entry went to, else by the events. A capture has no timing, so no pauses are
written; a stream that stops short of its protocol's terminal event was cut off.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlsplit

from ..protocols import BY_PATH, PROTOCOLS
from ..protocols.common import ANTHROPIC_ERROR_TYPES
from .capture import (
    CUT,
    FINISHED,
    AnswerReader,
    Captured,
    CaptureError,
    Request,
    Requests,
    detect,
    json_object,
    names_event_stream,
    payload_protocol,
)
from .capture.facts import object_in
from .capture.sse import FrameReader
from .writer import Origin, ScenarioFile, scenario_file, secrets_of

MAX_FILE_BYTES = 64 * 1024 * 1024
DETECTED_IN = 64 * 1024  # bytes of a stream read at a time to tell its protocol


class NotImportable(Exception):
    """A file that holds no answer fakehop can read; the message says why, in a line."""


@dataclass(frozen=True)
class Imported:
    """One answer from a file, what its scenario was written from, and the scenario file."""

    captured: Captured
    request: Request | None  # None: the capture holds no request
    origin: Origin
    file: ScenarioFile


def read_file(path: Path, redact: tuple[str, ...] = (), requests: Requests | None = None) -> list[Imported]:
    """Every answer in the file at `path`; NotImportable when it holds none. `requests` reads
    a HAR file's requests, each in the conversation of the answers read by it before."""
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise NotImportable(f"larger than the limit of {MAX_FILE_BYTES:,} bytes")
        data = path.read_bytes()
    except OSError as exc:
        raise NotImportable(f"cannot be read: {exc.strerror or exc}") from None
    har = as_har(data)
    try:
        return har_answers(har, path, redact, requests or Requests()) if har is not None else [raw_answer(data, path)]
    except CaptureError as exc:
        raise NotImportable(str(exc)) from None


def as_har(data: bytes) -> dict | None:
    if not data.lstrip().startswith(b"{"):
        return None
    try:
        value = json.loads(data)
    except RecursionError:
        raise NotImportable("JSON nested too deep to read") from None
    except ValueError:
        return None
    log = value.get("log") if isinstance(value, dict) else None
    return value if isinstance(log, dict) and isinstance(log.get("entries"), list) else None


def captured_on(path: Path) -> datetime:
    return datetime.fromtimestamp(path.stat().st_mtime, timezone.utc)


# ---------------------------------------------------------------- one answer as a client got it


def raw_answer(data: bytes, path: Path) -> Imported:
    status, headers, body = split_http(data)
    sse = is_stream(headers, body)
    if not sse and not headers:  # saved without its status line: an error body says what it was
        status = error_status(body) or status
    protocol = protocol_of(body, sse)
    if protocol is None:
        raise NotImportable("no event or answer of Chat Completions, Responses or Messages in it")
    captured = read_answer(protocol, status, headers, body, sse)
    origin = Origin(f"Imported by `fakehop import` from {path.name}", captured_on(path), timed=False)
    return Imported(captured, None, origin, scenario_file(captured, None, origin, path.stem))


def split_http(data: bytes) -> tuple[int, dict[str, str], bytes]:
    """The status, headers and body of `curl -i` output (an interim 1xx answer skipped); a
    capture without a status line is a body that came with HTTP 200."""
    status, headers = 200, {}
    while data.startswith(b"HTTP/"):
        head, data = split_head(data)
        status_line, *lines = head.decode("latin-1").splitlines()
        fields = status_line.split()
        status = int(fields[1]) if len(fields) > 1 and fields[1].isascii() and fields[1].isdigit() else 0
        headers = {name.strip(): value.strip() for name, _, value in (line.partition(":") for line in lines) if value}
        if not 100 <= status < 200:
            break
    return status, headers, data


def split_head(data: bytes) -> tuple[bytes, bytes]:
    """The head of an HTTP answer and what follows its blank line, with CRLF or LF line ends."""
    ends = [(at, len(blank)) for blank in (b"\r\n\r\n", b"\n\n") if (at := data.find(blank)) >= 0]
    if not ends:
        return data, b""
    at, length = min(ends)
    return data[:at], data[at + length :]


# The status an OpenAI error body stands for, by its code or type (as fakehop and the real API write them).
OPENAI_STATUSES = {
    "rate_limit_exceeded": 429,
    "requests": 429,
    "tokens": 429,
    "insufficient_quota": 429,
    "invalid_api_key": 401,
    "context_length_exceeded": 400,
    "invalid_request_error": 400,
    "server_error": 500,
}
ANTHROPIC_STATUSES = {error_type: status for status, error_type in ANTHROPIC_ERROR_TYPES.items()}


def error_status(body: bytes) -> int | None:
    """The HTTP status a JSON error body saved without its status line stands for; None for a body that is no error."""
    value = json_object(body) or {}
    error = value.get("error")
    if not isinstance(error, dict):
        return None
    code, error_type = (given if isinstance(given, str) else "" for given in (error.get("code"), error.get("type")))
    if value.get("type") == "error":
        return ANTHROPIC_STATUSES.get(error_type, 500)
    return OPENAI_STATUSES.get(code) or OPENAI_STATUSES.get(error_type, 500)


def is_stream(headers: dict[str, str], body: bytes) -> bool:
    """Whether an answer is an event stream: as its Content-Type says, else as its body looks."""
    sse = names_event_stream(next((value for name, value in headers.items() if name.lower() == "content-type"), ""))
    return not body.lstrip().startswith(b"{") if sse is None else sse


def protocol_of(body: bytes, sse: bool) -> str | None:
    if sse:
        return stream_protocol(body)
    value = json_object(body)
    return payload_protocol(value) if value is not None else None


def stream_protocol(body: bytes) -> str | None:
    """The protocol of a stream's body, from its first event that tells, read DETECTED_IN bytes
    at a time: the first event mostly tells, and a long stream's frames are not all made for it."""
    reader = FrameReader()
    for start in range(0, len(body), DETECTED_IN):
        protocol = detect(reader.feed(body[start : start + DETECTED_IN], None))
        if protocol is not None:
            return protocol
    return detect(reader.end(None, keep_unfinished=True))


def read_answer(protocol: str, status: int, headers: dict[str, str], body: bytes, sse: bool) -> Captured:
    """The facts of an answer that came whole, or (status 0) broke off before it was done."""
    answer = AnswerReader(protocol, status or 200, headers, sse)
    answer.feed(body, None)
    cut = status == 0 or sse  # a stream that did not reach its terminal event did not end well
    return answer.end(None, CUT if cut else FINISHED, keep_unfinished=True)


# ---------------------------------------------------------------- HAR files


def har_answers(har: dict, path: Path, redact: tuple[str, ...], requests: Requests) -> list[Imported]:
    found = []
    for number, entry in enumerate(har["log"]["entries"], 1):
        try:
            answer = har_entry(entry if isinstance(entry, dict) else {}, number, path, redact, requests)
        except (CaptureError, NotImportable) as exc:
            raise NotImportable(f"entry {number}: {exc}") from None
        if answer is not None:
            found.append(answer)
    if not found:
        raise NotImportable("a HAR file with no request to /v1/chat/completions, /v1/responses or /v1/messages")
    return found


def har_entry(entry: dict, number: int, path: Path, redact: tuple[str, ...], requests: Requests) -> Imported | None:
    request, response = (object_in(entry, key) for key in ("request", "response"))
    headers = har_headers(response, "response")
    body = har_body(response.get("content"))
    sse = is_stream(headers, body)
    url_path = urlsplit(str(request.get("url", ""))).path
    protocol = next(
        (module.NAME for known, module in BY_PATH.items() if url_path.endswith(known)), None
    ) or protocol_of(body, sse)
    if protocol is None:
        return None
    status = response.get("status")
    if not isinstance(status, int):
        status = 0
    if 200 <= status < 300 and not body.strip():  # a HAR may leave bodies out (a browser often does an event stream's)
        raise NotImportable(f"its HTTP {status} answer has no body in the file: nothing of it was kept")
    post = object_in(request, "postData")
    asked = requests.read(PROTOCOLS[protocol], str(post.get("text", "")).encode())
    captured = read_answer(protocol, status, headers, body, sse)
    requests.answered(asked, captured)
    where = f"{request.get('method', 'POST')} {url_path}"
    origin = Origin(
        f"Imported by `fakehop import` from {path.name}, entry {number} ({where})", har_time(entry, path), timed=False
    )
    secrets = secrets_of(har_headers(request, "request"), redact)
    name_from = asked.request.prompt or f"{path.stem} {number}"
    scenario = scenario_file(captured, asked.request, origin, name_from, secrets=secrets)
    return Imported(captured, asked.request, origin, scenario)


def har_headers(part: dict, which: str) -> dict[str, str]:
    """A HAR request's or response's headers (`which` says), a name given twice with its values joined."""
    headers = part.get("headers") or []
    if not isinstance(headers, list):
        raise NotImportable(f"its {which} headers are not a list")
    joined: dict[str, str] = {}
    for header in headers:
        if isinstance(header, dict) and isinstance(header.get("name"), str):
            name, value = header["name"], str(header.get("value", ""))
            joined[name] = f"{joined[name]}, {value}" if name in joined else value
    return joined


def har_body(content) -> bytes:
    content = content if isinstance(content, dict) else {}
    text = str(content.get("text", ""))
    if content.get("encoding") == "base64":
        try:
            return base64.b64decode(text)
        except (binascii.Error, ValueError):
            raise NotImportable("its base64 content is not base64") from None
    return text.encode("utf-8", "surrogatepass")


def har_time(entry: dict, path: Path) -> datetime:
    try:
        return datetime.fromisoformat(str(entry.get("startedDateTime", "")).replace("Z", "+00:00")).astimezone(
            timezone.utc
        )
    except (ValueError, OverflowError):  # no time, or one out of datetime's range once in UTC
        return captured_on(path)
