"""`fakehop record`: a proxy in front of a real gateway that writes one scenario per answer.

Each request to a protocol path goes upstream with its headers (hop-by-hop ones left out, and
the key replaced when `upstream_key` is set), and its answer comes back to the client byte for
byte as it arrives: an event stream, a whole answer or an HTTP error, keepalives and errors
mid-stream included; an upstream that breaks the connection has the client's broken too.
While the bytes pass, a capture.AnswerReader notes each event and when it came; when the
answer ends (or breaks, or the client goes away) writer.py turns that into a scenario file.
The requests are read for their `match` by one capture.Requests, which keeps the Responses
answers relayed, so that a request continuing one (previous_response_id) has its turn.
No request header reaches the file, and the values of the secret ones (keys, cookies, the
headers named in `redact`) are scrubbed from whatever else the file holds.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import zlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import cast
from urllib.parse import urlsplit, urlunsplit

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from ..protocols import PROTOCOLS
from ..protocols.common import BadRequest
from ..server.gateway import error_response, protocol_for_request, start_app
from ..server.intake import INFLATED, MAX_BODY_BYTES, check_shape
from .capture import (
    CUT,
    FAILED,
    FINISHED,
    HTTP_ERROR,
    LEFT,
    AnswerReader,
    Captured,
    CaptureError,
    Requests,
    json_object,
    names_event_stream,
)
from .writer import (
    DEFAULT_MIN_GAP,
    Origin,
    Retried,
    ScenarioFile,
    cut_said,
    scenario_file,
    secrets_of,
    status_said,
    write_new,
)

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
NOT_FORWARDED = HOP_BY_HOP | {"host", "content-length", "accept-encoding"}
NOT_RELAYED = HOP_BY_HOP | {"content-length"}
KEY_HEADERS = ("authorization", "x-api-key", "api-key")  # where a client sends its key
CONNECT_TIMEOUT = 30.0
MAX_MESSAGE_CHARS = 400  # of an error message that quotes the upstream's bytes
MAX_AWAITING_RETRY = 100  # requests whose last attempt failed, kept so that a retry joins its file
ENDINGS_SAID = {
    FINISHED: "finished",
    FAILED: "failed mid-stream",
    HTTP_ERROR: "an HTTP error",
    CUT: "cut off (written as disconnect)",
    LEFT: "the client went away (written as hang)",
}


@dataclass
class Recorder:
    """What `fakehop record` was told: where to forward, where to write, what to keep out."""

    upstream: str  # the gateway's root URL
    out: Path
    upstream_key: str | None = None
    redact: tuple[str, ...] = ()  # header names, any case
    min_gap: float = DEFAULT_MIN_GAP
    listeners: list[Callable[[str], None]] = field(default_factory=list)  # told a line for each answer
    requests: Requests = field(default_factory=Requests)  # the requests so far, and the Responses answers they continue
    awaiting_retry: OrderedDict[str, tuple[Path, Retried]] = field(default_factory=OrderedDict)  # by request_key

    def __post_init__(self) -> None:
        self.upstream = gateway_root(self.upstream)
        self.redact = tuple(name.lower() for name in self.redact)

    def tell(self, line: str) -> None:
        for listener in self.listeners:
            listener(line)

    def await_retry(self, key: str, path: Path, attempts: Retried) -> None:
        """Keep a failed request's attempts, so that its retry is written into their file."""
        self.awaiting_retry[key] = (path, attempts)
        if len(self.awaiting_retry) > MAX_AWAITING_RETRY:
            self.awaiting_retry.popitem(last=False)


def request_key(path: str, body: bytes) -> str | None:
    """What the attempts of one request share, as the verdicts read it: the path and the body
    as JSON, key order aside (the SDKs change only a header when they retry), hashed; None for
    a body that is no JSON object."""
    value = json_object(body)
    if value is None:
        return None
    said = json.dumps([path, value], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(said.encode("utf-8", "surrogatepass")).hexdigest()


def succeeded(captured: Captured) -> bool:
    return captured.ending == FINISHED and captured.http_error is None


def replace_file(path: Path, text: str) -> None:
    """Write `text` over the file at `path` at once: a reader sees the old text or the new."""
    new = path.with_name(f".{path.name}.new")
    new.write_text(text, encoding="utf-8")
    os.replace(new, path)


def gateway_root(url: str) -> str:
    """The upstream's root, as the Anthropic SDK's base URL is: a trailing /v1 (the OpenAI
    SDK's base URL) taken off, and no trailing slash."""
    root = url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def shown_url(url: str) -> str:
    """A URL fit to write in a file: no user or password, no query."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    netloc += f":{parts.port}" if parts.port else ""
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


RECORDER_KEY: web.AppKey[Recorder] = web.AppKey("recorder", Recorder)
SESSION_KEY: web.AppKey[aiohttp.ClientSession] = web.AppKey("upstream_session", aiohttp.ClientSession)


# ---------------------------------------------------------------- headers


def forwarded_headers(headers, protocol_name: str, upstream_key: str | None) -> CIMultiDict:
    """The request's headers as they go upstream: no hop-by-hop ones (nor those its Connection
    header names), no compression (the bytes are read on their way), the key replaced when asked."""
    named = {name.strip().lower() for name in headers.get("connection", "").split(",")}
    forwarded = CIMultiDict(
        (name, value) for name, value in headers.items() if name.lower() not in NOT_FORWARDED | named
    )
    forwarded["Accept-Encoding"] = "identity"
    if upstream_key is not None:
        sent = [name for name in KEY_HEADERS if name in forwarded]
        for name in sent or ["x-api-key" if protocol_name == "messages" else "authorization"]:
            forwarded[name] = f"Bearer {upstream_key}" if name == "authorization" else upstream_key
    return forwarded


def relayed_headers(headers) -> CIMultiDict:
    """The answer's headers as they go to the client: all but the hop-by-hop ones."""
    return CIMultiDict((name, value) for name, value in headers.items() if name.lower() not in NOT_RELAYED)


# ---------------------------------------------------------------- one request


def readable(body: bytes, encoding: str | None) -> bytes:
    """The request body as its JSON reads: inflated when it came gzip or deflate compressed
    (it goes upstream as it came); b"" for one that does not inflate within the body limit."""
    wbits = INFLATED.get((encoding or "").strip().lower())
    if wbits is None or not body:
        return body
    if wbits == zlib.MAX_WBITS and body[0] & 0x0F != 8:  # deflate without zlib's wrapper
        wbits = -zlib.MAX_WBITS
    inflater = zlib.decompressobj(wbits)
    try:
        inflated = inflater.decompress(body, MAX_BODY_BYTES)
    except zlib.error:
        return b""
    return inflated if inflater.eof else b""


class UpstreamBroke(Exception):
    """The upstream's connection broke before its answer ended."""


async def read_upstream(upstream: aiohttp.ClientResponse) -> bytes:
    """What of the answer has arrived (b"" at its end), as soon as any has."""
    try:
        return await upstream.content.readany()
    except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as exc:
        raise UpstreamBroke from exc


class Exchange:
    """One request through the proxy: forwarded, its answer relayed as it comes and noted, and
    the recording written when it ends."""

    def __init__(self, request: web.Request, protocol, body: bytes):
        self.request = request
        self.protocol = protocol
        self.body = body
        self.recorder = request.app[RECORDER_KEY]
        self.session = request.app[SESSION_KEY]
        self.json_body = readable(body, request.headers.get("Content-Encoding"))
        check_shape(self.json_body)  # BadRequest for a body nested too deep to read
        self.asked = self.recorder.requests.read(protocol, self.json_body)
        self.when = datetime.now(timezone.utc)
        self.started = asyncio.get_running_loop().time()
        self.reader: AnswerReader | None = None

    def now(self) -> float:
        return asyncio.get_running_loop().time() - self.started

    async def run(self) -> web.StreamResponse:
        url = self.recorder.upstream + self.request.path_qs
        headers = forwarded_headers(self.request.headers, self.protocol.NAME, self.recorder.upstream_key)
        try:
            upstream = await self.session.request(
                self.request.method, url, data=self.body, headers=headers, allow_redirects=False
            )
        except aiohttp.ClientConnectorError as exc:
            message = f"fakehop record could not reach the upstream {shown_url(self.recorder.upstream)}: {exc.os_error.strerror or exc}"
            self.not_recorded(message)
            return error_response(self.protocol, 502, message, self.protocol.fresh_request_id())
        except aiohttp.ClientResponseError as exc:  # an answer whose head is not HTTP, or too long
            shown = shown_url(self.recorder.upstream)
            said = " ".join(str(exc.message).split())  # aiohttp's may take lines
            message = f"fakehop record could not read the answer of the upstream {shown}: {said}"[:MAX_MESSAGE_CHARS]
            self.not_recorded(message)
            return error_response(self.protocol, 502, message, self.protocol.fresh_request_id())
        except aiohttp.ClientError:  # connected, then the upstream closed without an answer
            self.record(self.unanswered(CUT))
            return self.drop_client(web.Response())
        except asyncio.CancelledError:  # the client went away while the upstream had not answered
            self.record(self.unanswered(LEFT))
            raise
        async with upstream:
            return await self.relay(upstream)

    def unanswered(self, how: str) -> Captured:
        """An answer that never came, ended `how`: read as a 200 with nothing in it, which
        its scenario plays (a disconnect or a hang), and said to have no status."""
        captured = AnswerReader(self.protocol.NAME, 200, {}, sse=self.asked.stream).end(self.now(), how)
        captured.answered = False
        return captured

    async def relay(self, upstream: aiohttp.ClientResponse) -> web.StreamResponse:
        self.reader = self.reader_for(upstream)
        response = web.StreamResponse(
            status=upstream.status, reason=upstream.reason, headers=relayed_headers(upstream.headers)
        )
        if upstream.content_length is not None:
            response.content_length = upstream.content_length
        try:
            await response.prepare(self.request)
            while data := await read_upstream(upstream):
                self.note(data)
                await response.write(data)
        except UpstreamBroke:
            self.finish(CUT)
            return self.drop_client(response)
        except ConnectionError:  # the client went away before aiohttp cancelled this handler
            self.finish(LEFT)
            return response
        except asyncio.CancelledError:  # the client went away
            self.finish(LEFT)
            raise
        self.finish(FINISHED)
        await response.write_eof()
        return response

    def reader_for(self, upstream: aiohttp.ClientResponse) -> AnswerReader | None:
        try:
            sse = names_event_stream(upstream.headers.get("content-type", ""))
            return AnswerReader(
                self.protocol.NAME,
                upstream.status,
                upstream.headers,
                self.asked.stream if sse is None else sse,
                dropped=self.recorder.redact,
            )
        except CaptureError as exc:
            self.not_recorded(str(exc))
            return None

    def note(self, data: bytes) -> None:
        if self.reader is not None:
            self.reader.feed(data, self.now())

    def finish(self, how: str) -> None:
        if self.reader is not None:
            try:
                self.record(self.reader.end(self.now(), how))
            except CaptureError as exc:
                self.not_recorded(str(exc))
            self.reader = None

    def not_recorded(self, why: str) -> None:
        self.recorder.tell(f"not recorded: {self.request.method} {self.request.path}: {why}")

    def drop_client(self, response: web.StreamResponse) -> web.StreamResponse:
        """Close the client's connection at once, as the upstream closed this one."""
        if self.request.transport is not None:
            self.request.transport.close()
        return response

    def record(self, captured: Captured) -> None:
        recorder = self.recorder
        origin = Origin(
            f"Recorded by `fakehop record` from {shown_url(recorder.upstream + self.request.path)}", self.when
        )
        secrets = secrets_of(self.request.headers, recorder.redact) + (
            [recorder.upstream_key] if recorder.upstream_key else []
        )
        if self.asked.request.unknown_chain is not None:  # the answer it continues may have ended only after it came
            self.asked = recorder.requests.read(self.protocol, self.json_body)
        recorder.requests.answered(self.asked, captured)
        try:
            path, written = self.write(captured, origin, secrets)
        except (CaptureError, OSError) as exc:
            self.not_recorded(str(exc))
            return
        ending = cast(str, captured.ending)  # read to its end
        how = f"{'streamed' if captured.streamed else 'whole'}, {status_said(captured)}, {ENDINGS_SAID[ending]}"
        held = f"; the file now holds {len(written.entries)} attempts" if isinstance(written, Retried) else ""
        recorder.tell(f"recorded {path}: {self.protocol.NAME}, {how}{held}{cut_said(written)}")

    def write(self, captured: Captured, origin: Origin, secrets: list[str]) -> tuple[Path, ScenarioFile | Retried]:
        """Write the answer: into the file of the earlier attempts of the same request when the
        last of them failed (a retry), else into a new file. An answer that failed is kept to
        be followed by its retries."""
        recorder, request = self.recorder, self.asked.request
        key = request_key(self.request.path, self.json_body)
        earlier = recorder.awaiting_retry.get(key) if key is not None else None
        written: ScenarioFile | Retried
        attempts: Retried | None
        if earlier is not None:
            path, so_far = earlier
            written = attempts = so_far.then(captured, origin, recorder.min_gap, secrets)
            replace_file(path, attempts.text())
        else:
            written = scenario_file(captured, request, origin, request.prompt, recorder.min_gap, secrets)
            path = write_new(recorder.out, written.stem, written.text)
            attempts = None if key is None or succeeded(captured) else self.first_attempt(captured, origin, secrets)
        if key is not None:
            recorder.awaiting_retry.pop(key, None)
            if attempts is not None and not succeeded(captured):
                recorder.await_retry(key, path, attempts)
        return path, written

    def first_attempt(self, captured: Captured, origin: Origin, secrets: list[str]) -> Retried | None:
        """A failed answer as the first of its request's attempts; None when it takes too much
        of a file to be followed by any (its file stands alone)."""
        try:
            return Retried.begun(captured, self.asked.request, origin, self.recorder.min_gap, secrets)
        except CaptureError:
            return None


# ---------------------------------------------------------------- the application


def recording_handler(protocol):
    async def handle(request: web.Request) -> web.StreamResponse:
        try:
            exchange = Exchange(request, protocol, await request.read())
        except BadRequest as exc:
            return error_response(protocol, exc.status, exc.message, protocol.fresh_request_id())
        return await exchange.run()

    return handle


async def forward_models(request: web.Request) -> web.StreamResponse:
    """`GET /v1/models`, forwarded and relayed, not recorded."""
    recorder = request.app[RECORDER_KEY]
    headers = forwarded_headers(request.headers, "chat", recorder.upstream_key)
    try:
        async with request.app[SESSION_KEY].get(
            recorder.upstream + request.path_qs, headers=headers, allow_redirects=False
        ) as upstream:
            return await passed_on(request, upstream)
    except aiohttp.ClientError as exc:
        protocol = protocol_for_request(request)
        message = f"fakehop record could not reach the upstream: {exc}"
        return error_response(protocol, 502, message, protocol.fresh_request_id())


async def passed_on(request: web.Request, upstream: aiohttp.ClientResponse) -> web.StreamResponse:
    """The upstream's answer passed on to the client as it comes, whatever its size; the
    client's connection closed when the upstream's breaks."""
    headers = relayed_headers(upstream.headers)
    response = web.StreamResponse(status=upstream.status, reason=upstream.reason, headers=headers)
    response.content_length = upstream.content_length
    await response.prepare(request)
    try:
        while data := await read_upstream(upstream):
            await response.write(data)
    except UpstreamBroke:
        if request.transport is not None:
            request.transport.close()
        return response
    except ConnectionError:  # the client went away
        return response
    await response.write_eof()
    return response


async def unrouted(request: web.Request) -> web.Response:
    paths = ", ".join([protocol.PATH for protocol in PROTOCOLS.values()] + ["/v1/models"])
    protocol = protocol_for_request(request)
    message = f"fakehop record forwards only {paths}; not {request.path}"
    return error_response(protocol, 404, message, protocol.fresh_request_id())


async def upstream_session(app: web.Application):
    """The client the proxy forwards with: it never decompresses (bytes go on as they came),
    keeps no cookies of its own, and waits as long as an answer takes."""
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT)
    async with aiohttp.ClientSession(
        auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar(), timeout=timeout
    ) as session:
        app[SESSION_KEY] = session
        yield


def create_app(recorder: Recorder) -> web.Application:
    app = web.Application(
        client_max_size=MAX_BODY_BYTES, handler_args={"auto_decompress": False}
    )  # bodies go upstream as they came
    app[RECORDER_KEY] = recorder
    app.cleanup_ctx.append(upstream_session)
    for protocol in PROTOCOLS.values():
        app.router.add_post(protocol.PATH, recording_handler(protocol))
    app.router.add_get("/v1/models", forward_models)
    app.router.add_route("*", "/{path:.*}", unrouted)
    return app


async def start(recorder: Recorder, host: str = "127.0.0.1", port: int = 0) -> tuple[web.AppRunner, str]:
    """Start the proxy; returns the runner (call `cleanup()` to stop) and its base URL."""
    return await start_app(create_app(recorder), host, port)
