"""The aiohttp server: protocol routes, scenario selection, auth and the request journal."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, cast

from aiohttp import hdrs, web
from multidict import istr

from ..play import breaks, player
from ..play.breaks import Break, Latency
from ..protocols import BY_PATH, PROTOCOLS, messages
from ..protocols.common import BadRequest, Meta, ParsedRequest, dumps, unmet_json_output, unmet_tool_choice
from ..scenario.hints import base_url_hint
from ..scenario.library import DEFAULT_SCENARIO, Library, Pinned, UnknownScenario
from ..scenario.model import HttpError, RateLimit, Script, Timing
from ..state import journal as jr
from ..state import threads
from ..state.faults import FAULT_HEADER, Fault, FaultProblem, Laid, header_faults
from ..state.redisstate import ShownRun, StateDown
from ..state.sessions import (
    DEFAULT_MAX_SESSIONS,
    DEFAULT_SESSION_IDLE,
    MAX_ADDED_IN_ALL,
    MAX_QUEUED_IN_ALL,
    SCENARIO_HEADER,
    SCENARIO_HEADER_KEY,
    SESSION_HEADER,
    X_API_KEY,
    BadSessionName,
    Session,
    Sessions,
    SessionStart,
    Unmatched,
    checked_name,
    session_named_by,
)
from ..state.stored import Stored, StoredResponses, before_of
from ..state.threads import Threads
from . import background, prerender, shared_runs
from .front import put_in_front
from .intake import (
    LARGE_BODY_BYTES,
    MAX_HEADER_BYTES,
    MAX_MODEL_CHARS,
    PARSER_ERRORS_AS_WARNINGS,
    SEED_KEY,
    HeldBodies,
    bearer_token,
    in_body_thread,
    json_body,
    read_body,
    request_id_for,
    seed_of,
    unknown_fakehop_header,
    unknown_header_message,
    whole_body,
)
from .origins import HOSTS_KEY, HostCheck, refused_host_message
from .render import RETRY_AFTER_MS, http_error_answer, seeded_meta, whole_answer
from .shared import GATEWAY_KEY, MODELS_PATH, STREAM_HEADERS, allowed_methods

if TYPE_CHECKING:
    from ..state.redisstate import RedisState

log = logging.getLogger("fakehop")

DEFAULT_MODELS = ("gpt-5.6-sol", "claude-sonnet-5")
LISTEN_BACKLOG = 1024  # connections waiting to be accepted; a test suite may open hundreds at once
# Bytes a stream writes in a row with no pause before it lets other clients have the loop: a
# write that does not fill the socket's buffer does not wait, so a fast reader would otherwise
# have the loop to itself for as long as the answer lasts.
YIELD_AFTER_BYTES = 256 * 1024


@dataclass
class Gateway:
    """A running fakehop: its scenarios and settings, which every session starts from; its keys;
    the one journal; and its sessions, the global one and the named ones."""

    library: Library
    default: str = DEFAULT_SCENARIO
    time_scale: float = 1.0
    api_key: str | None = None
    admin_token: str | None = None
    # Host names answered beside loopback ones, addresses and the bound host; "*": any
    allowed_hosts: tuple[str, ...] = ()
    journal: jr.Journal = field(default_factory=jr.Journal)
    strict: bool = False
    max_sessions: int = DEFAULT_MAX_SESSIONS
    session_idle: float = DEFAULT_SESSION_IDLE
    lenient_conversations: bool = False  # let through what the real API's conversation checks refuse
    responses: StoredResponses = field(default_factory=StoredResponses)  # the server's own, whatever the session
    threads: Threads = field(default_factory=Threads)  # the Messages Threads it holds, this server's alone
    background_runs: background.Runs = field(default_factory=background.Runs)  # background answers, played or under way
    # When this gateway was made (time.time()): a client that lost the server tells by it
    # whether the one it reaches again is the same, or a new one whose seq starts again at 1.
    started_at: float = field(default_factory=time.time, init=False)
    bodies: HeldBodies = field(default_factory=HeldBodies)  # the request bodies its answers under way hold
    max_queued: int = MAX_QUEUED_IN_ALL  # queue entries in all sessions together
    max_added: int = MAX_ADDED_IN_ALL  # scenarios added to all sessions together
    timing: Timing | None = None  # the timing of every scenario without its own (`serve --timing`)
    state: RedisState | None = None  # --state: sessions, queues and the journal shared on Redis

    def __post_init__(self) -> None:
        start = SessionStart(self.library, self.default, self.time_scale, self.strict)
        self.global_session = Session(None, start, self.journal)
        self.global_session.check_name(self.default)
        self.sessions = Sessions(start, self.journal, self.max_sessions, self.session_idle)
        # The session of requests and control calls that name none; None: the global one. The
        # pytest fixture's own server (one per worker, its tests one at a time) sets it to the
        # running test's session, so that an app under test needs no key to be in it.
        self.unnamed_session: str | None = None
        self._timed = player.KeptPerScript(KEPT_TIMED_SCRIPTS)

    def timed(self, script: Script) -> Script:
        """`script` with the server's timing when it has none of its own: the same copy for
        every answer of one script, so that what is kept of its answers is kept for the copy."""
        if script.timing is not None:
            return script
        if script.request_text:  # made for this request alone
            return replace(script, timing=self.timing)
        copy = self._timed.get(script, ())
        if copy is player.KeptPerScript.MISSING:
            copy = replace(script, timing=self.timing)
            self._timed.put(script, (), copy)
        return cast(Script, copy)

    def session(self, name: str | None, first_seq: int | None = None) -> Session:
        """Session `name` (checked), made on first use; for None, the one `unnamed_session` names."""
        if name is None:
            name = self.unnamed_session
            if name is None:
                return self.global_session
        return self.sessions.get(checked_name(name), first_seq)

    def every_session(self) -> list[Session]:
        """The global session and each named one kept."""
        return [self.global_session, *self.sessions.listed()]

    def session_for(self, headers: Mapping[str, str], seq: int | None = None) -> Session:
        """The session of a request to a protocol route, whose journal record is `seq` (BadSessionName for a bad name)."""
        name = session_named_by(headers)
        if name is None and self.unnamed_session is None:  # most requests: no further call
            return self.global_session
        return self.session(name, seq)

    def settled(
        self, request: ParsedRequest, session: str | None = None, record: jr.Record | None = None
    ) -> ParsedRequest:
        """`request` with the stored history it continues (Responses' previous_response_id, looked
        up first among `session`'s answers; a Messages Thread's previous_message_id, `record`'s
        request continuing it until it ends), once it has passed the real API's conversation
        checks (unless lenient)."""
        if request.conversation.continues is not None:
            if messages.THREAD in request.options:
                request = self.threads.continued(request, session, cast(jr.Record, record))
            else:
                request = self.responses.continued(request, session)
        problem = request.conversation.problem
        if problem is not None and not self.lenient_conversations:
            raise problem
        return request


KEPT_TIMED_SCRIPTS = 1024  # scripts given the server's timing (Gateway.timed)

# ---------------------------------------------------------------- answering one request


def error_response(
    protocol, status: int, message: str, request_id: str, *, param=None, code=None, headers=None, details=None
) -> web.Response:
    body = protocol.error_body(status, message, request_id, param=param, code=code)
    if details is not None:  # Anthropic's `error.details`: its error_code and what goes with it
        body["error"]["details"] = dict(details)
    return web.json_response(body, status=status, headers=headers, dumps=dumps)


def stamp_answer(
    response: web.StreamResponse, request_id: str, protocol, success_headers: Sequence[tuple[str, str]] = ()
) -> None:
    """A protocol's answer's own headers: the request id where its SDK reads it; on a success
    `success_headers` (its rate-limit headers), on an error the protocol's error headers,
    unless the scenario set them."""
    headers = response.headers
    headers[protocol.REQUEST_ID_HEADER] = request_id
    if response.status < 400:
        if success_headers:
            headers.extend(success_headers)
        return
    for name, value in protocol.error_headers(response.status):
        headers.setdefault(name, value)


def stream_response(request_id: str, protocol, success_headers: Sequence[tuple[str, str]] = ()) -> web.StreamResponse:
    """A stream's response, stamped as stamp_answer stamps a success: written out for the status a stream
    always has, it costs about 1k instructions a request less."""
    response = web.StreamResponse(status=200, headers=STREAM_HEADERS)
    headers = response.headers
    headers[protocol.REQUEST_ID_HEADER] = request_id
    if success_headers:
        headers.extend(success_headers)
    return response


def body_message(body: dict) -> str:
    error = body.get("error")
    return error.get("message", "") if isinstance(error, dict) else ""


def authorized(request: web.Request, api_key: str | None) -> bool:
    if api_key is None:
        return True
    headers = request.headers
    return headers.get(X_API_KEY) == api_key or bearer_token(headers.get(hdrs.AUTHORIZATION, "")) == api_key


def refusal(request: web.Request, hosts: HostCheck, api_key: str | None) -> BadRequest | None:
    """Why a request may not be answered at all: a Host that is not this server's, a wrong API
    key, or an X-Fakehop-* header fakehop does not read."""
    headers = request.headers
    host = headers.get(hdrs.HOST)
    if host not in hosts.seen and hosts.refuses(host):  # a Host seen before: no call
        return BadRequest(refused_host_message(host), status=403, code="host_not_allowed")
    if api_key is not None and not authorized(request, api_key):
        return BadRequest(
            "Invalid API key: this fakehop server was started with --api-key and the request did not send that key.",
            status=401,
            code="invalid_api_key",
        )
    unknown = unknown_fakehop_header(headers)
    if unknown is not None:
        return BadRequest(unknown_header_message(unknown), param=unknown)
    return None


def session_in_record(gateway: Gateway, headers: Mapping[str, str], record: jr.Record) -> Session | BadSessionName:
    """The session a request names, made on first use, written in its journal record before
    anything else is looked at, so that the session's view shows the request however it is
    refused; for a bad name, the error (the record stays in the global session)."""
    try:
        session = gateway.session_for(headers, record.seq)
    except BadSessionName as exc:
        return exc
    record.session = session.name
    return session


class Answer:
    """One request to a protocol route, from auth to the last byte, with its journal record."""

    shared = False  # whether its state is on Redis (see SharedAnswer)
    kept: ParsedRequest | None = None  # a request whose answer is stored once it ends (Responses' store)
    kept_in: str | None = None  # the session it is stored in
    held_bytes = 0  # of its body, held in the gateway's HeldBodies until the answer ends
    malformed: bytes | None = None  # a malformed fault's raw text, the body of a non-streamed answer
    thread_writes: list[bytes] | None = None  # a Messages Thread's turn: its stream's writes, kept together

    success_headers: Sequence[tuple[str, str]] = ()  # its rate-limit headers, set once the answer is played

    def __init__(self, gateway: Gateway, protocol, request: web.Request, request_id: str, hosts: HostCheck):
        self.gateway = gateway
        self.protocol = protocol
        self.request = request
        self.request_id = request_id
        self.hosts = hosts
        # The route's own method and path: the request's are the same, and cost a look-up each.
        self.record = gateway.journal.open(request_id, "POST", protocol.PATH, request.headers, protocol.NAME)

    async def run(self) -> web.StreamResponse:
        try:
            return await self.answer()
        except BadRequest as exc:
            self.record.close(jr.REJECTED, exc.status, exc.message)
            return error_response(
                self.protocol,
                exc.status,
                exc.message,
                self.request_id,
                param=exc.param,
                code=exc.code,
                headers=exc.headers,
                details=exc.details,
            )
        except UnknownScenario as exc:
            self.record.close(jr.REJECTED, 400, str(exc))
            return error_response(self.protocol, 400, str(exc), self.request_id, param=SCENARIO_HEADER)
        except Unmatched as exc:
            self.record.close(jr.UNMATCHED, 400, str(exc))
            return error_response(self.protocol, 400, str(exc), self.request_id, code=jr.UNMATCHED)
        except BadSessionName as exc:
            self.record.close(jr.REJECTED, 400, str(exc))
            return error_response(self.protocol, 400, str(exc), self.request_id, param=SESSION_HEADER)
        except asyncio.CancelledError:
            self.record.close(jr.CLIENT_DISCONNECTED)
            raise
        except ConnectionError:
            # The client went away before aiohttp cancelled this handler. Raised, this would be
            # logged as an error in the handler; returned, aiohttp finds the connection gone.
            self.record.close(jr.CLIENT_DISCONNECTED)
            return web.Response()
        finally:
            if self.record.end == jr.IN_PROGRESS:
                self.record.close(jr.FAILED, 500, "fakehop could not finish this answer")
            self.gateway.journal.closed(self.record)
            self.gateway.bodies.held -= self.held_bytes

    async def answer(self) -> web.StreamResponse:
        gateway, protocol, headers = self.gateway, self.protocol, self.request.headers
        session: Session | BadSessionName
        try:  # session_in_record, inline: this runs for every request
            session = gateway.session_for(headers, self.record.seq)
            self.record.session = session.name
        except BadSessionName as bad_name:
            session = bad_name
        refused = refusal(self.request, self.hosts, gateway.api_key)
        if refused is not None:
            raise refused
        if type(session) is BadSessionName:
            raise session
        seed = seed_of(self.request) if SEED_KEY in headers else None  # most requests: no call
        raw = whole_body(self.request, gateway.bodies)
        if raw is None:
            raw = await read_body(self.request, self.request.client_max_size, gateway.bodies)
        self.held_bytes = len(raw)
        large = len(raw) > LARGE_BODY_BYTES
        body = await in_body_thread(json_body, self.request, raw) if large else json_body(self.request, raw)
        gateway.journal.keep_body(self.record, raw, body, parsed=self.shared)  # shared: filed in Redis as it ends
        del raw  # as large as the body limit: not to be held for as long as the stream lasts
        parsed = await in_body_thread(protocol.parse, body) if large else protocol.parse(body)
        if len(parsed.model) > MAX_MODEL_CHARS:
            raise BadRequest(
                f"Invalid 'model': string too long. Expected a string with maximum length {MAX_MODEL_CHARS}, "
                f"but got a string with length {len(parsed.model)} instead.",
                param="model",
            )
        self.record.stream = parsed.stream
        conversation = parsed.conversation
        if conversation.problem is not None or conversation.continues is not None:
            if self.shared and conversation.continues is not None:
                await self.adopt_continued(conversation.continues, session.name)
            parsed = gateway.settled(parsed, session.name, self.record)
        self.record.turn = parsed.conversation.turn
        if self.shared:
            choice = await self.shared_choice(session, parsed)
        else:
            choice = session.select(protocol.NAME, parsed, headers)
        label, script = session.script_for(choice, parsed)
        self.record.scenario = label
        if gateway.timing is not None:
            script = gateway.timed(script)
        options = parsed.options
        if parsed.variant and ("required_tool" in options or "json_output" in options):  # most requests: no look-up
            self.check_asked(options, script, label, session.strict)
        asked = headers.get(FAULT_KEY)
        if asked is not None or session.faults:  # a request with neither pays for this test alone
            if self.shared:
                laid = await self.shared_laid(asked, session, label)
            else:
                laid = laid_faults(asked, session.faults, protocol.NAME, label)
            if laid.kinds:
                return await self.faulted(laid, session, parsed, script, seed)
        thread_writes = None  # read as a local: self's, a class attribute, costs a lookup a request
        if conversation.keep:  # keep_for_later, inline: most Responses requests are kept
            self.kept, self.kept_in = parsed, session.name
            if protocol is messages:
                thread_writes = self.thread_writes = []
        if script.http_error is not None:
            return self.http_error(script.http_error)
        if script.rate_limit is not None and (used_up := await self.rate_limited(session, script, parsed)) is not None:
            return self.http_error(used_up)
        meta = self.answer_meta(parsed, script, seed)
        if parsed.variant and parsed.options.get("background"):  # most requests: no dict lookup
            writes = prerender.stream_writes(protocol, script, parsed, meta, session.time_scale)
            return await self.in_background(writes, parsed, session)
        if parsed.stream:
            writes = prerender.stream_writes(protocol, script, parsed, meta, session.time_scale)
            return await self.stream(writes if thread_writes is None else collected(writes, thread_writes))
        return await self.whole(meta, parsed, player.timeline(script, parsed.play, session.time_scale))

    async def faulted(
        self, laid: Laid, session: Session, parsed: ParsedRequest, script: Script, seed: int | None
    ) -> web.StreamResponse:
        """The answer with the faults `laid` over it: an HTTP kind's error in its place, or its
        stream broken or slowed (encoded afresh: a kept rendering is the unbroken answer's)."""
        self.record.faults = laid.kinds
        scale = session.time_scale
        effect = laid.ending.effect if laid.ending is not None else None
        latencies = [cast(Latency, fault.effect) for fault in laid.latencies]
        if isinstance(effect, HttpError) or script.http_error is not None:
            await asyncio.sleep(sum(latency.first for latency in latencies) * scale)
            return self.http_error(effect if isinstance(effect, HttpError) else cast(HttpError, script.http_error))
        ending = cast("Break | None", effect)
        if parsed.conversation.keep:
            self.keep_for_later(parsed, session)
        if script.rate_limit is not None and (used_up := await self.rate_limited(session, script, parsed)) is not None:
            return self.http_error(used_up)
        meta = self.answer_meta(parsed, script, seed)
        events = breaks.broken(player.timeline(script, parsed.play, scale), script, scale, ending, latencies)
        if parsed.variant and parsed.options.get("background"):
            return await self.in_background(
                prerender.encoded_writes(self.protocol, meta, parsed, events), parsed, session
            )
        if parsed.stream:
            writes = prerender.encoded_writes(self.protocol, meta, parsed, events)
            return await self.stream(writes if self.thread_writes is None else collected(writes, self.thread_writes))
        if isinstance(ending, Break) and ending.kind == "malformed":
            self.malformed = ending.raw
        return await self.whole(meta, parsed, events)

    def keep_for_later(self, parsed: ParsedRequest, session: Session) -> None:
        """The answer is kept once it ends for a later request to continue: Responses' store,
        or a Messages Thread (whose stream's writes are then kept together)."""
        self.kept, self.kept_in = parsed, session.name
        if self.protocol is messages:
            self.thread_writes = []

    def keep_turn(self, data: bytes, whole: bool) -> None:
        """Keep a Thread's turn that finished: its body, or its whole stream (its last write `data`)."""
        answer = data if whole else b"".join(cast(list, self.thread_writes))
        self.gateway.threads.keep(cast(ParsedRequest, self.kept), self.kept_in, answer, whole, self.held_bytes)

    async def rate_limited(self, session: Session, script: Script, parsed: ParsedRequest) -> HttpError | None:
        """The answer counted in its rate-limit window: the 429 of an enforced limit whose window is
        used up (the request takes nothing from it), else None with the headers the answer sends."""
        limit = cast(RateLimit, script.rate_limit)
        if limit.enforce and (used_up := session.rate_limits.refusal(self.protocol.NAME, limit)) is not None:
            return used_up
        self.success_headers = session.rate_limits.headers(self.protocol.NAME, script, parsed.play)
        return None

    def answer_meta(self, parsed: ParsedRequest, script: Script, seed: int | None) -> Meta:
        model = script.model or parsed.model
        return Meta(model, int(time.time())) if seed is None else seeded_meta(model, seed)

    def check_asked(self, options: dict, script: Script, label: str, strict: bool) -> None:
        """A scenario the real API cannot give to a request whose tool_choice requires a call, or
        which asks for JSON output: a 400 naming the mismatch in strict mode, else a note in the
        journal record."""
        if "required_tool" in options:
            self.unmet(unmet_tool_choice(options["required_tool"], script, label), "tool_choice", strict)
        if "json_output" in options:
            field = options["json_output"]
            self.unmet(unmet_json_output(field, script, label), field, strict)

    def unmet(self, unmet: str | None, param: str, strict: bool) -> None:
        if unmet is None:
            return
        if strict:
            raise BadRequest(f"{unmet} (this fakehop session is strict)", param=param)
        self.record.notes = (*self.record.notes, unmet)

    async def in_background(
        self, writes: Iterator[prerender.TimedWrite], parsed: ParsedRequest, session: Session
    ) -> web.StreamResponse:
        """A background answer: played in the server whatever the client does; a request not
        streamed gets the queued response object at once, a streamed one reads the events as they come."""
        keep = self.background_keep(parsed, session.name) if parsed.conversation.keep else None
        run = self.gateway.background_runs.start(writes, keep, session.name)
        await self.playing(run)
        if not parsed.stream:
            self.record.close(jr.COMPLETED, 200)
            return web.json_response(run.created, dumps=dumps)
        response = stream_response(self.request_id, self.protocol, self.success_headers)
        await response.prepare(self.request)
        self.record.status = 200
        return await background.follow(run, -1, self.request, response, self.record)

    async def playing(self, run: background.Run) -> None:
        """A background answer began playing (see SharedAnswer's)."""

    def background_keep(self, parsed: ParsedRequest, session_name: str | None) -> background.Keep:
        """How a background answer is stored once it ends: in this server's store."""
        responses = self.gateway.responses
        return lambda data, whole: responses.keep(parsed, data, whole, session_name)

    async def shared_choice(self, session: Session, parsed: ParsedRequest) -> str | Pinned:
        raise NotImplementedError  # pragma: no cover - SharedAnswer's

    async def adopt_continued(self, continued_id: str, session_name: str | None) -> None:
        raise NotImplementedError  # pragma: no cover - SharedAnswer's

    async def shared_laid(self, asked: str | None, session: Session, label: str) -> Laid:
        raise NotImplementedError  # pragma: no cover - SharedAnswer's

    def http_error(self, error: HttpError) -> web.Response:
        status, headers, body = http_error_answer(self.protocol, error, self.request_id)
        self.record.retry_after = headers.get("Retry-After")
        self.record.retry_after_ms = next(
            (value for name, value in headers.items() if name.lower() == RETRY_AFTER_MS), None
        )
        self.record.close(jr.HTTP_ERROR, status, body_message(body))
        return web.json_response(body, status=status, headers=headers, dumps=dumps)

    async def stream(self, writes: Iterator[prerender.TimedWrite]) -> web.StreamResponse:
        """Each write sent when it is due; offsets count from the stream's start, so pauses never drift.

        The pacing is player.play's, written out here: a stream paced by play itself (writes
        batched by an async generator) cost 8-12% more instructions per request on the bench."""
        response = stream_response(self.request_id, self.protocol, self.success_headers)
        await response.prepare(self.request)
        record = self.record
        record.status = 200
        clock = time.monotonic  # the journal's: uvloop's loop.time() is in whole milliseconds, read once a turn
        start = now = clock()
        unpaused = 0  # bytes written since the loop last went to other clients
        for offset, data, events, last in writes:
            due = start + offset
            if due > now and due > (now := clock()):  # the clock is read only when `now` is not late enough
                await asyncio.sleep(due - now)
                now, unpaused = clock(), 0
            if type(last) in player.ENDINGS:
                return await self.end_stream(response, data, events, last)
            if data:
                record.sending(now, data)
                await response.write(data)
                record.sent(events)
                unpaused += len(data)
                if unpaused > YIELD_AFTER_BYTES:
                    await asyncio.sleep(0)
                    unpaused = 0
        raise RuntimeError("a timeline always ends with an ending")  # pragma: no cover

    async def end_stream(
        self, response: web.StreamResponse, data: bytes, events: int, ending: player.Happening
    ) -> web.StreamResponse:
        """The last write and how the stream ends. A stream that ends well sends its last frames
        and the end of the chunked body in one write (`write_eof(data)`)."""
        kind = type(ending)
        self.record.sending(time.monotonic(), data)
        if kind is player.Finish or kind is player.Failure:
            await response.write_eof(data)
            if self.kept is not None:
                if self.protocol is not messages:  # Responses' store, which keeps a failed answer too
                    self.gateway.responses.keep(self.kept, data, False, self.kept_in)
                elif kind is player.Finish:
                    self.keep_turn(data, False)
        elif data:
            await response.write(data)
        self.record.sent(events)
        if kind is player.Finish:
            self.record.close(jr.COMPLETED)
        elif kind is player.Failure:
            failure = cast(player.Failure, ending)
            self.record.close(jr.FAILED, error=f"{failure.kind}: {failure.message}")
        elif kind is player.Disconnect:
            self.record.close(jr.DISCONNECTED)
            self.drop_connection()
        else:  # a Hang: open until the client goes
            await asyncio.Event().wait()
        return response

    async def whole(self, meta: Meta, parsed: ParsedRequest, events) -> web.StreamResponse:
        outcome = player.Outcome()
        async for batch in player.play(events, player.LoopClock()):
            outcome.add(batch)
            if len(batch) >= player.MAX_BATCH:  # a long answer with no pauses: let other clients have the loop
                await asyncio.sleep(0)
        ending = outcome.ending
        if isinstance(ending, player.Disconnect):
            if self.malformed is not None:  # a malformed fault's answer: its raw text as a 200's body
                self.record.close(jr.COMPLETED, 200)
                return web.Response(body=self.malformed, content_type="application/json")
            self.record.close(jr.DISCONNECTED)
            self.drop_connection()
            return web.Response(status=204)
        if isinstance(ending, player.Hang):
            await asyncio.Event().wait()
        status, body = whole_answer(self.protocol, meta, parsed, outcome, self.request_id)
        response = web.json_response(body, status=status, dumps=dumps)
        if isinstance(ending, player.Failure):
            self.record.close(jr.FAILED, status, f"{ending.kind}: {ending.message}")
        else:
            self.record.close(jr.COMPLETED, status)
            if self.kept is not None:
                if self.protocol is not messages:
                    self.gateway.responses.keep(self.kept, cast(bytes, response.body), True, self.kept_in)
                else:
                    self.keep_turn(cast(bytes, response.body), True)
        return response

    def drop_connection(self) -> None:
        """Close the socket at once: whatever was written goes out, then the peer sees EOF."""
        transport = self.request.transport
        if transport is not None:
            transport.close()


def collected(writes: Iterator[prerender.TimedWrite], sink: list[bytes]) -> Iterator[prerender.TimedWrite]:
    """`writes` as they come, the bytes of each added to `sink`."""
    for write in writes:
        sink.append(write[1])
        yield write


SHARING: set[asyncio.Future] = set()  # background answers being kept in, or shown through, the shared state


def held(work) -> asyncio.Future:
    """`work` run in a task held in SHARING until done: the loop keeps only a weak reference to a task."""
    task = asyncio.ensure_future(work)
    SHARING.add(task)
    task.add_done_callback(SHARING.discard)
    return task


class SharedAnswer(Answer):
    """An answer whose state is on Redis (`--state`): its seq from the one numbering, its
    session's settings read and its queue entry taken (LPOP) where the scenario is chosen, its
    record filed in the shared journal once it ends. With Redis out of reach it is a 503 in
    its protocol's error shape, answered from nothing half read."""

    shared = True
    # the session and id of the Thread's answer this one continues, claimed on Redis until it ends
    thread_claim: tuple[str | None, str] | None = None

    async def run(self) -> web.StreamResponse:
        state = cast("RedisState", self.gateway.state)
        try:
            self.record.seq = await state.next_seq()
        except StateDown as down:
            closed_record(self.gateway.journal, self.record, jr.HTTP_ERROR, 503, str(down))
            return self.unavailable(down)
        try:
            return await super().run()
        finally:
            # shielded: a client that leaves at the answer's last byte has its handler cancelled here
            await asyncio.shield(held(self.filed_for_all(state)))

    async def filed_for_all(self, state: RedisState) -> None:
        """The answer's record in the shared journal, once the Thread it continued is let go."""
        try:
            if self.thread_claim is not None:
                await state.release_thread(*self.thread_claim)
            await state.file(self.record)
        except StateDown as down:
            log.warning("request #%s is not in the shared journal: %s", self.record.seq, down)

    async def adopt_continued(self, continued_id: str, session_name: str | None) -> None:
        """The answer a request continues, as the shared state holds it, held here too: a
        Responses answer (see adopted), or a Thread's, which this request then continues for
        every server until it ends."""
        if self.protocol is not messages:
            await adopted(self.gateway, continued_id, session_name)
            return
        held, continued, took = await cast("RedisState", self.gateway.state).claimed_thread(session_name, continued_id)
        if held is None:
            self.gateway.threads.forget(session_name, continued_id)
            raise threads.not_found(continued_id)
        if continued:
            raise threads.already_continued(continued_id)
        if not took:
            raise threads.in_flight(continued_id)
        self.thread_claim = session_name, continued_id
        self.gateway.threads.adopt(session_name, continued_id, threads.Held.from_json(held))

    async def answer(self) -> web.StreamResponse:
        try:
            return await super().answer()
        except StateDown as down:
            self.record.close(jr.HTTP_ERROR, 503, str(down))
            return self.unavailable(down)

    async def end_stream(
        self, response: web.StreamResponse, data: bytes, events: int, ending: player.Happening
    ) -> web.StreamResponse:
        """As Answer's, a Responses answer kept in the shared state before its last write goes
        out, so that a request continuing it finds it whichever server it reaches."""
        if self.kept is not None and type(ending) in (player.Finish, player.Failure):
            await self.share_kept(data, False, type(ending) is player.Finish)
        return await super().end_stream(response, data, events, ending)

    async def whole(self, meta: Meta, parsed: ParsedRequest, events) -> web.StreamResponse:
        response = await super().whole(meta, parsed, events)
        if self.kept is not None and self.record.end == jr.COMPLETED:
            await self.share_kept(cast(bytes, cast(web.Response, response).body), True)
        return response

    async def share_kept(self, answer: bytes, whole: bool, finished: bool = True) -> None:
        if self.protocol is messages:
            if finished:
                await self.share_thread(answer if whole else b"".join(cast(list, self.thread_writes)), whole)
            return
        await self.share_answer(cast(ParsedRequest, self.kept), self.kept_in, answer, whole)

    async def share_thread(self, answer: bytes, whole: bool) -> None:
        """Hold a Thread's answer for every server; with Redis gone meanwhile, held by this one alone."""
        ask: messages.ThreadAsk = cast(ParsedRequest, self.kept).options[messages.THREAD]
        thread_id = threads.id_of(answer, whole)
        if thread_id is None:
            return
        held = threads.Held(ask.body, answer, whole, len(answer) + self.held_bytes)
        state = cast("RedisState", self.gateway.state)
        try:
            await state.keep_thread(self.kept_in, thread_id, held.as_json(), ask.previous)
        except StateDown as down:
            log.warning("the Thread's answer of request #%s is held on this server alone: %s", self.record.seq, down)

    async def share_answer(self, parsed: ParsedRequest, session_name: str | None, answer: bytes, whole: bool) -> None:
        """Keep the answer for every server; with Redis gone meanwhile, it goes out kept by this one alone."""
        state = cast("RedisState", self.gateway.state)
        try:
            await state.keep_response(session_name, before_of(parsed), answer, whole)
        except StateDown as down:
            log.warning("response of request #%s is stored on this server alone: %s", self.record.seq, down)

    def background_keep(self, parsed: ParsedRequest, session_name: str | None) -> background.Keep:
        """As Answer's, and then kept for every server, so that a finished background answer is
        fetched and continued through any of them: the run is shown over only once that is done
        (see shared_runs.shared_run)."""
        keep_here = super().background_keep(parsed, session_name)

        def keep(data: bytes, whole: bool) -> asyncio.Future:
            keep_here(data, whole)
            return held(self.share_answer(parsed, session_name, data, whole))

        return keep

    async def playing(self, run: background.Run) -> None:
        """Shown to every server while it plays, and stopped when one asks (see shared_runs)."""
        state, runs = cast("RedisState", self.gateway.state), self.gateway.background_runs
        try:
            shown, pushed = await shared_runs.shown_first(run, state)
        except StateDown:
            runs.drop(run.id)  # the request is a 503: nothing of it plays on
            raise
        held(shared_runs.shared_run(run, runs, state, shown, pushed))

    async def shared_laid(self, asked: str | None, session: Session, label: str) -> Laid:
        """The faults laid_faults lays, each of the session's counted once for every server
        (HINCRBY): one whose last request another server took meanwhile is passed over. A
        fault's draws are numbered for every server too, so they are the draws one server makes."""
        state = cast("RedisState", self.gateway.state)
        own = list(session.faults)
        drawing = [fault for fault in own if fault.probability < 1.0 and fault.in_scope(self.protocol.NAME, label)]
        draws = await state.draw_numbers(session.name, drawing) if drawing else None
        laid = laid_faults(asked, session.faults, self.protocol.NAME, label, draws)
        if laid.ending in own and not await state.take_fault(session.name, laid.ending):
            laid.ending = None
        laid.latencies = [
            fault for fault in laid.latencies if fault not in own or await state.take_fault(session.name, fault)
        ]
        return laid

    async def rate_limited(self, session: Session, script: Script, parsed: ParsedRequest) -> HttpError | None:
        """As Answer's, the window counted down on Redis for every server; an enforced limit's
        refusal decided there too, in the same step, so that every server refuses together."""
        state = cast("RedisState", self.gateway.state)
        if cast(RateLimit, script.rate_limit).enforce:
            refusal, headers = await state.enforced_rate_limit(session.name, self.protocol.NAME, script, parsed.play)
            if refusal is None:
                self.success_headers = headers
            return refusal
        self.success_headers = await state.rate_limit_headers(session.name, self.protocol.NAME, script, parsed.play)
        return None

    def unavailable(self, down: StateDown) -> web.Response:
        return error_response(self.protocol, 503, str(down), self.request_id, code="state_unavailable")

    async def shared_choice(self, session: Session, parsed: ParsedRequest) -> str | Pinned:
        """The scenario, as Session.select chooses it, with the session's settings and queue read from Redis."""
        state, headers = cast("RedisState", self.gateway.state), self.request.headers
        entry = await state.synced(session, headers.get(SCENARIO_HEADER_KEY) is None, self.record)
        if entry is None:
            choice = session.select(self.protocol.NAME, parsed, headers)
        else:  # queued through another server, maybe one that has scenarios this one has not
            session.check_name(entry.name if isinstance(entry, Pinned) else entry)
            choice = entry
        if type(choice) is str and session.library[choice].is_sequence:  # its next entry, by the one counter
            return Pinned(choice, await state.count(session.name, choice))
        return choice


async def adopted(gateway: Gateway, response_id: str, session: str | None) -> None:
    """With --state: the Responses answer `response_id` as the shared state keeps it, kept in
    this server's store too (where the answer's lookups find it), or gone from it."""
    kept = await cast("RedisState", gateway.state).kept_response(response_id, session)
    if kept is None:
        gateway.responses.delete(response_id, session)
    else:
        holder, before, answer, whole = kept
        gateway.responses.keep_before(before, answer, whole, holder)


# ---------------------------------------------------------------- the application


FAULT_KEY = istr(FAULT_HEADER)  # looked up for every request: see sessions.SESSION_HEADER_KEY


def laid_faults(
    asked: str | None, faults: list[Fault], protocol: str, label: str, draws: Mapping[str, int] | None = None
) -> Laid:
    """The faults laid over a request: those its X-Fakehop-Fault header names come before the
    session's (BadRequest naming the header when it is wrong); `draws` numbers the session's
    faults' draws where the shared state counts them."""
    laid = Laid()
    if asked is not None:
        try:
            laid.take(header_faults(asked), protocol, label, counted=False)
        except FaultProblem as exc:
            raise BadRequest(f"{FAULT_HEADER}: {exc}", param=FAULT_HEADER) from None
    if faults:
        laid.take(faults, protocol, label, draws=draws)
    return laid


def opened_record(journal: jr.Journal, request: web.Request, request_id: str, protocol: str | None = None) -> jr.Record:
    """The journal's record of `request`, opened as it comes in (on a protocol's route, `protocol`'s)."""
    return journal.open(request_id, request.method, request.path, request.headers, protocol)


def closed_record(journal: jr.Journal, record: jr.Record, end: str, status: int, message: str | None = None) -> None:
    """`record` ended as `end`, and filed: the journal counts what it holds from here on."""
    record.close(end, status, message)
    journal.closed(record)


def protocol_handler(gateway: Gateway, protocol, hosts: HostCheck):
    """The handler of `protocol`'s route for `gateway`; SharedAnswer when its state is on Redis."""
    answering = Answer if gateway.state is None else SharedAnswer

    async def handle(request: web.Request) -> web.StreamResponse:
        request_id = request_id_for(request, protocol.fresh_request_id)
        answer = answering(gateway, protocol, request, request_id, hosts)
        response = await answer.run()
        if not response.prepared:  # a stream stamps its own before its headers go out
            stamp_answer(response, request_id, protocol, answer.success_headers)
        return response

    return handle


async def stored_response(request: web.Request) -> web.StreamResponse:
    """`GET` or `DELETE /v1/responses/{id}`, and `POST /v1/responses/{id}/cancel`: a stored
    Responses answer (see stored) or a background one (see background), in the journal like any
    request; `GET ...?stream=true` reads a background answer's events again."""
    gateway, request_id = request.app[GATEWAY_KEY], request_id_for(request)
    protocol = PROTOCOLS["responses"]
    record = opened_record(gateway.journal, request, request_id, protocol.NAME)
    try:
        if gateway.state is not None:
            await shared_stored(request, gateway, request.match_info["response_id"])
        response = await stored_answer(request, gateway, record, request_id)
    except StateDown as down:
        record.close(jr.HTTP_ERROR, 503, str(down))
        response = error_response(protocol, 503, str(down), request_id, code="state_unavailable")
    except BadRequest as refused:
        record.close(jr.REJECTED, refused.status, refused.message)
        response = error_response(
            protocol, refused.status, refused.message, request_id, param=refused.param, code=refused.code
        )
    except asyncio.CancelledError:
        record.close(jr.CLIENT_DISCONNECTED)
        gateway.journal.closed(record)
        raise
    except ConnectionError:  # the client left a replay before aiohttp cancelled this handler: see Answer.run
        record.close(jr.CLIENT_DISCONNECTED)
        gateway.journal.closed(record)
        return web.Response()
    await filed(gateway, record)
    if not response.prepared:
        stamp_answer(response, request_id, protocol)
    return response


async def filed(gateway: Gateway, record: jr.Record) -> None:
    """`record`, ended, told to the journal (its listeners print its line, count it, ...); with
    --state, first filed in the shared journal, so that they tell the seq it is filed under."""
    try:
        if gateway.state is not None:
            await shared_filed(gateway, record)
    finally:
        gateway.journal.closed(record)


async def shared_filed(gateway: Gateway, record: jr.Record) -> None:
    """With --state: `record`, ended, in the shared journal under a seq of the one numbering
    (with Redis out of reach, in this server's memory alone: its answer needed no state)."""
    state = cast("RedisState", gateway.state)
    try:
        record.seq = await state.next_seq()
        await state.file(record)
    except StateDown as down:
        log.warning("a request to %s is not in the shared journal: %s", record.path, down)


async def shared_stored(request: web.Request, gateway: Gateway, response_id: str) -> None:
    """With --state, before a stored answer is looked up: the shared state's, adopted (for a
    session named wrong, nothing: the lookup refuses it)."""
    name = session_named_by(request.headers)
    try:
        session = gateway.session(name).name
    except BadSessionName:
        return
    await adopted(gateway, response_id, session)


async def stored_answer(
    request: web.Request, gateway: Gateway, record: jr.Record, request_id: str
) -> web.StreamResponse:
    """The answer to a request for a stored or background answer (see stored_response); BadRequest when it is refused."""
    response_id = request.match_info["response_id"]
    session = session_in_record(gateway, request.headers, record)
    refused = refusal(request, request.app[HOSTS_KEY], gateway.api_key)
    if refused is not None:
        raise refused
    if type(session) is BadSessionName:
        raise BadRequest(str(session), param=SESSION_HEADER)
    run = gateway.background_runs.find(response_id)
    stored = gateway.responses.find(response_id, session.name) if run is None else None
    state = gateway.state
    shown = await state.shown_run(response_id) if run is None and state is not None else None  # played elsewhere
    if run is None and stored is None and shown is None:
        raise BadRequest(f"Response with id '{response_id}' not found.", status=404)
    if request.method == "DELETE":
        if state is not None:
            await state.forget_response(response_id, session.name)
            if shown is not None:
                await shared_runs.deleted_elsewhere(state, response_id)
        gateway.responses.delete(response_id, session.name)
        gateway.background_runs.drop(response_id)
        record.close(jr.COMPLETED, 200)
        return web.json_response({"id": response_id, "object": "response", "deleted": True}, dumps=dumps)
    if request.method == "POST":
        if shown is not None:
            answer = await shared_runs.cancelled_elsewhere(cast("RedisState", state), shown)
        else:
            answer = cancelled(run, stored)
        record.close(jr.COMPLETED, 200)
        return web.json_response(answer, dumps=dumps)
    if stream_asked(request.query):
        return await replay(request, record, request_id, run, shown)
    record.close(jr.COMPLETED, 200)
    if run is not None or shown is not None:
        return web.json_response(run.latest if run is not None else cast(ShownRun, shown).response, dumps=dumps)
    return web.json_response(body=cast(Stored, stored).body())


def cancelled(run: background.Run | None, stored: Stored | None) -> dict:
    """The response object of a background answer, cancelled unless it had finished (BadRequest
    then); one no longer played here is its stored answer (one cancelled stays cancelled)."""
    if run is None:
        response = json.loads(cast(Stored, stored).body())
        if not response.get("background"):
            raise BadRequest("Only responses created with background=true can be cancelled.")
        if response["status"] != "cancelled":
            raise background.uncancellable(response["status"])
        return response
    if run.status in background.UNDER_WAY:
        run.cancel()
    elif run.status != "cancelled":
        raise background.uncancellable(run.status)
    return run.latest


def stream_asked(query: Mapping[str, str]) -> bool:
    value = query.get("stream", "false")
    if value not in ("true", "false"):
        raise BadRequest(f"Invalid value for 'stream': expected true or false, got {value!r}.", param="stream")
    return value == "true"


async def replay(
    request: web.Request, record: jr.Record, request_id: str, run: background.Run | None, shown: ShownRun | None
) -> web.StreamResponse:
    """`GET /v1/responses/{id}?stream=true`: a background answer's events after `starting_after`,
    then each as it comes: one this server plays (`run`), or one shown by the server playing it."""
    if run is None and shown is None:
        raise BadRequest("Only responses created with background=true can be streamed again.", param="stream")
    given = request.query.get("starting_after", "-1")
    try:
        after = int(given)
    except ValueError:
        raise BadRequest(
            f"Invalid 'starting_after': expected an integer, got {given!r}.", param="starting_after"
        ) from None
    protocol = PROTOCOLS["responses"]
    record.stream = True
    response = stream_response(request_id, protocol)
    await response.prepare(request)
    record.status = 200
    if run is not None:
        return await background.follow(run, after, request, response, record)
    state = cast("RedisState", request.app[GATEWAY_KEY].state)
    return await shared_runs.follow_shown(state, cast(ShownRun, shown), after, request, response, record)


def protocol_for_request(request: web.Request):
    """The protocol whose error shape suits a request to no known route."""
    if request.path in BY_PATH:
        return BY_PATH[request.path]
    return PROTOCOLS.get("messages") if is_anthropic_client(request) and "messages" in PROTOCOLS else PROTOCOLS["chat"]


def is_anthropic_client(request: web.Request) -> bool:
    return "anthropic-version" in request.headers or "x-api-key" in request.headers


def wrong_base_url(request: web.Request) -> str:
    """What a 404's path says of the client's base URL (see hints.base_url_hint)."""
    return base_url_hint(
        request.path, f"{request.scheme}://{request.host}", (*BY_PATH, MODELS_PATH), is_anthropic_client(request)
    )


async def unrouted(request: web.Request) -> web.Response:
    """Every request that no route takes: a 404, or a 405 on a path that takes other methods,
    in the error shape of the protocol the client speaks, and in the journal, so a test can
    see where it went. (The control API answers its own, in JSON.)"""
    protocol = protocol_for_request(request)
    request_id = request_id_for(request, protocol.fresh_request_id)
    allowed = allowed_methods(request.app, request.path)
    refused = refusal(request, request.app[HOSTS_KEY], None)
    if refused is not None:
        status, message, headers = refused.status, refused.message, None
    elif allowed:
        status, message, headers = (
            405,
            f"Method {request.method} is not allowed on {request.path}",
            {"Allow": ",".join(allowed)},
        )
    else:
        status, message, headers = 404, f"Unknown path {request.path}{wrong_base_url(request)}", None
    gateway = request.app[GATEWAY_KEY]
    record = opened_record(gateway.journal, request, request_id)
    session_in_record(gateway, request.headers, record)  # a bad name leaves it in the global session
    record.close(jr.REJECTED, status, message)
    await filed(gateway, record)
    response = error_response(protocol, status, message, request_id, headers=headers)
    stamp_answer(response, request_id, protocol)
    return response


async def start_app(
    app: web.Application, host: str, port: int, *, shutdown_timeout: float = 1.0, reuse_port: bool = False
) -> tuple[web.AppRunner, str]:
    """Serve `app` as fakehop serves: handlers cancelled when their client goes, long header
    lines taken, parser errors logged as warnings. Returns the runner and the base URL."""
    logging.getLogger("aiohttp.server").addFilter(PARSER_ERRORS_AS_WARNINGS)
    runner = web.AppRunner(
        app,
        handler_cancellation=True,
        access_log=None,
        shutdown_timeout=shutdown_timeout,
        max_line_size=MAX_HEADER_BYTES,
        max_field_size=MAX_HEADER_BYTES,
    )
    await runner.setup()
    put_in_front(runner)
    site = web.TCPSite(runner, host, port, backlog=LISTEN_BACKLOG, reuse_port=reuse_port or None)
    await site.start()
    server = cast(asyncio.Server, site._server)
    if not server.sockets:  # asyncio passes over an address it cannot open a socket for (no file descriptors left, ...)
        await runner.cleanup()
        raise OSError(f"no socket could be opened to listen on {host} port {port}")
    bound_port = server.sockets[0].getsockname()[1]
    shown_host = f"[{host}]" if ":" in host else host
    return runner, f"http://{shown_host}:{bound_port}"
