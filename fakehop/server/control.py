"""The control API under /_fakehop/: change what the next requests get while the server runs,
and see what they sent. JSON in, JSON out; every error is `{"error": message}` with a 4xx."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hmac
import json
import logging
import math
import time
from collections import Counter
from pathlib import Path
from typing import Any, cast

from aiohttp import web

from .. import CONTROL_PREFIX, __version__
from ..protocols.common import BadRequest
from ..scenario import yamlsource
from ..scenario.library import UnknownScenario, is_bundled
from ..scenario.model import Scenario, Script
from ..scenario.reader import (
    MAX_FILE_BYTES,
    SCENARIOS_SOURCE,
    ScenarioError,
    free_inline_name,
    parse_document,
    parse_text,
    scenario_json,
)
from ..scenario.yamlsource import YamlProblem, with_lines
from ..state.faults import FaultProblem, added, parse_fault
from ..state.redisstate import StateDown, record_shown
from ..state.sessions import SESSION_HEADER, BadSessionName, Session, checked_name
from .intake import (
    FAKEHOP_HEADERS,
    bearer_token,
    loads,
    read_body,
    request_id_for,
    stamp_request_id,
    unknown_fakehop_header,
    unknown_header_message,
)
from .origins import HOSTS_KEY, foreign_origin, refused_host_message
from .shared import GATEWAY_KEY, allowed_methods

log = logging.getLogger("fakehop")

PREFIX = CONTROL_PREFIX
QUEUE_SOURCE = f"<POST {PREFIX}/queue>"
DEFAULT_SOURCE = f"<PUT {PREFIX}/default>"
MAX_TIMES = 10_000
MAX_QUEUE = 100_000  # entries in the queue at once
MAX_BODY_BYTES = 2 * MAX_FILE_BYTES  # a scenario file's text, or one in JSON with room for its escapes
PAGE_RECORDS = 100  # records in a page of GET /requests without ?limit=
PAGE_BYTES = 8 * 1024 * 1024  # their headers and bodies together, at most (a page has at least one record)
# What a body may come as: JSON, or YAML. Not the types a web page may send another site
# without asking it first (text/plain, forms), so no page can change what the server does.
JSON_TYPES = ("application/json",)
YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")
SESSION_PARAMETER = "session"
ROUTES = (
    "GET /health",
    "GET /scenarios",
    "GET /scenarios/NAME",
    "POST /scenarios",
    "GET /queue",
    "POST /queue",
    "DELETE /queue",
    "PUT /default",
    "GET /faults",
    "POST /faults",
    "DELETE /faults",
    "DELETE /faults/ID",
    "PUT /strict",
    "PUT /time_scale",
    "GET /requests",
    "GET /requests/SEQ",
    "DELETE /requests",
    "GET /verdict",
    "POST /reset",
    "GET /sessions",
    "DELETE /sessions/ID",
    "GET /events",
    "GET /metrics",
    "GET /ui",
    "GET /ui/token",
)


class ControlError(Exception):
    """A control call that cannot be done: answered as `{"error": message, **details}`."""

    def __init__(self, message: str, status: int = 400, **details: Any):
        super().__init__(message)
        self.message = message
        self.status = status
        self.details = details


def gateway_of(request: web.Request):
    return request.config_dict[GATEWAY_KEY]


def session_of(request: web.Request, *parameters: str) -> Session:
    """The session a call acts on (see session_named_in); a query parameter other than `session`
    and the call's own `parameters` is refused."""
    unknown = sorted(set(request.query) - {SESSION_PARAMETER, *parameters})
    if unknown:
        raise ControlError(f"unknown query parameter {unknown[0]!r}; {parameters_taken(parameters)}")
    return session_named_in(request)


def session_named_in(request: web.Request) -> Session:
    """The session named by the X-Fakehop-Session header or `?session=`, else the one of requests that name none."""
    header, query = request.headers.get(SESSION_HEADER), request.query.get(SESSION_PARAMETER)
    if header is not None and query is not None and header != query:
        raise ControlError(
            f"the {SESSION_HEADER} header names session {header!r} and ?session= names {query!r}; name one"
        )
    try:
        return gateway_of(request).session(query if header is None else header)
    except BadSessionName as exc:
        raise ControlError(str(exc)) from None


async def synced_session(request: web.Request, *parameters: str) -> Session:
    """session_of, as the shared state holds it (with --state): its settings and added scenarios."""
    session = session_of(request, *parameters)
    state = gateway_of(request).state
    if state is not None:
        await state.synced(session)
    return session


def parameters_taken(parameters: tuple[str, ...]) -> str:
    if not parameters:
        return f"the only one is {SESSION_PARAMETER}"
    if len(parameters) == 1:
        return f"the only one is {parameters[0]}"
    return f"the parameters are {', '.join(parameters[:-1])} and {parameters[-1]}"


def json_error(status: int, message: str, **details: Any) -> web.Response:
    return web.json_response({"error": message, **details}, status=status)


def control_call(handler):
    """A handler as the control API runs it: with --admin-token, only for that token; every
    failure (aiohttp's own 413 included) as a JSON error; every answer with its request id.

    A wrapper, not middlewares: a middleware anywhere in the application makes aiohttp wrap
    every request's handler, the protocol routes' too.
    """

    @functools.wraps(handler)
    async def call(request: web.Request) -> web.StreamResponse:
        response = refused_call(request) or await answer_in_json(request, handler)
        if not response.prepared:  # a stream stamps its own before its headers go out
            stamp_request_id(response, request_id_for(request))
        return response

    return call


def refused_call(request: web.Request) -> web.Response | None:
    """The answer to a control call that may not be carried out, or None: a Host that is not
    this server's, an Origin of a page elsewhere, a missing admin token, an X-Fakehop-* header
    fakehop does not read, a body of a type a web page could send unasked."""
    return (
        refused_host(request)
        or refused_origin(request)
        or refused_without_token(request)
        or refused_header(request)
        or refused_body_type(request)
    )


def refused_host(request: web.Request) -> web.Response | None:
    """The 403 for a Host that is not this server's (a page on a name rebound to it), or None."""
    host = request.headers.get("Host")
    if request.config_dict[HOSTS_KEY].refuses(host):
        return json_error(403, refused_host_message(host))
    return None


def refused_origin(request: web.Request) -> web.Response | None:
    origin = foreign_origin(request)
    if origin is None:
        return None
    return json_error(
        403,
        f"the control API answers no page of another origin (Origin: {origin[:80]}); "
        "call it from the command line, a test or the server's own pages",
    )


def refused_without_token(request: web.Request) -> web.Response | None:
    """With --admin-token, the 401 for a control call without `Authorization: Bearer TOKEN`."""
    token = gateway_of(request).admin_token
    if token is None:
        return None
    given = bearer_token(request.headers.get("Authorization", "")) or ""
    if hmac.compare_digest(given.encode("utf-8", "surrogateescape"), token.encode()):
        return None
    return web.json_response(
        {"error": "the control API needs Authorization: Bearer <admin token>"},
        status=401,
        headers={"WWW-Authenticate": "Bearer"},
    )


def refused_header(request: web.Request) -> web.Response | None:
    """The 400 for an X-Fakehop-* header fakehop does not read (of those it does, a control call reads X-Fakehop-Session)."""
    unknown = unknown_fakehop_header(request.headers)
    if unknown is None:
        return None
    return json_error(400, unknown_header_message(unknown), known=list(FAKEHOP_HEADERS))


def refused_body_type(request: web.Request) -> web.Response | None:
    """The 415 for a body that is neither JSON nor YAML by its Content-Type."""
    if not request.body_exists or is_json(request.content_type) or is_yaml(request.content_type):
        return None
    return json_error(
        415,
        f"a body must come as application/json or application/yaml, not {request.content_type}; "
        "with curl: -H 'Content-Type: application/json'",
    )


def is_json(content_type: str) -> bool:
    return content_type in JSON_TYPES or (content_type.startswith("application/") and content_type.endswith("+json"))


def is_yaml(content_type: str) -> bool:
    return content_type in YAML_TYPES or (content_type.startswith("application/") and content_type.endswith("+yaml"))


async def answer_in_json(request: web.Request, handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ControlError as exc:
        return json_error(exc.status, exc.message, **exc.details)
    except StateDown as exc:
        return json_error(503, str(exc), state=exc.url)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return json_error(exc.status, exc.reason)
    except Exception:
        log.exception("control call %s %s failed", request.method, request.path)
        return json_error(
            500, f"fakehop failed to carry out {request.method} {request.path}; the server log has the details"
        )


async def unknown_call(request: web.Request) -> web.Response:
    """What no control route takes: a 404 naming the calls, or a 405 on a path that takes other methods."""
    allowed = allowed_methods(request.app, request.path)
    if allowed:
        return web.json_response(
            {"error": f"{request.method} is not allowed on {request.path}"},
            status=405,
            headers={"Allow": ",".join(allowed)},
        )
    return json_error(404, f"no control call {request.path}; the calls under {PREFIX} are: {', '.join(ROUTES)}")


# ---------------------------------------------------------------- reading requests


async def body_text(request: web.Request) -> str:
    try:
        return (await read_body(request, MAX_BODY_BYTES)).decode("utf-8")
    except BadRequest as exc:
        raise ControlError(exc.message, exc.status) from None
    except UnicodeDecodeError:
        raise ControlError("the body is not UTF-8 text") from None


async def json_mapping(request: web.Request, example: str) -> dict:
    """The body as a JSON object; a YAML one (by its Content-Type) as the object it writes."""
    text = await body_text(request)
    if is_yaml(request.content_type):
        return yaml_mapping(text, example)
    try:
        body = loads(text)
    except ValueError as exc:
        raise ControlError(f"the body is not valid JSON ({exc}); send an object such as {example}") from None
    if not isinstance(body, dict):
        raise ControlError(f"the body must be a JSON object such as {example}")
    return body


def yaml_mapping(text: str, example: str) -> dict:
    try:
        body = yamlsource.load(text)
    except YamlProblem as exc:
        where = f" at line {exc.line}" if exc.line else ""
        raise ControlError(
            f"the body is not valid YAML{where} ({exc.message}); send a mapping such as {example}"
        ) from None
    if not isinstance(body, dict):
        raise ControlError(f"the body must be a YAML mapping such as {example}")
    return body


async def json_object(request: web.Request, example: str, keys: tuple[str, ...]) -> dict:
    """The body as a JSON object holding only `keys`."""
    body = await json_mapping(request, example)
    unknown = sorted(set(body) - set(keys))
    if unknown:
        raise ControlError(f"unknown key {unknown[0]!r}; the keys are: {', '.join(keys)}")
    return body


def whole_number(text: str, name: str, low: int) -> int:
    """A query parameter that must be a whole number of at least `low`."""
    if not (text.isascii() and text.isdigit()) or int(text) < low:
        raise ControlError(f"{name}: expected a whole number from {low}, got {text!r}")
    return int(text)


def times_of(body: dict) -> int:
    times = body.get("times", 1)
    if isinstance(times, bool) or not isinstance(times, int) or not 1 <= times <= MAX_TIMES:
        raise ControlError(f"times: expected a whole number from 1 to {MAX_TIMES}, got {json.dumps(times)}")
    return times


def scenario_problems(exc: ScenarioError) -> ControlError:
    count = len(exc.problems)
    return ControlError(
        f"{count} problem{'s' if count != 1 else ''} in the scenario; nothing was changed",
        problems=[str(problem) for problem in exc.problems],
    )


async def add_scenario(request: web.Request, session: Session, scenario: Scenario, source: dict) -> None:
    """Add `scenario` to `session`, if the sessions together may hold one more (replacing one
    already added may); with --state, for every server, as read again from `source`."""
    gateway = gateway_of(request)
    if scenario.name not in session.added:
        added = sum(len(kept.added) for kept in gateway.every_session())
        if added >= gateway.max_added:
            raise ControlError(
                f"the sessions hold at most {gateway.max_added:,} added scenarios together, and hold {added:,}; "
                f"reset a session (POST {PREFIX}/reset) or drop one (DELETE {PREFIX}/sessions/ID) to add more"
            )
    try:
        session.add(scenario)
    except ScenarioError as exc:
        raise scenario_problems(exc) from None
    if gateway.state is not None:
        await gateway.state.add(session, scenario, source)


async def off_the_loop(parse, *args) -> Scenario:
    """`parse(*args)` in a thread: a large scenario, or Faker text, takes long to read, and the
    streams of other clients go on meanwhile. ScenarioError as the 400 listing every problem."""
    try:
        return await asyncio.to_thread(parse, *args)
    except ScenarioError as exc:
        raise scenario_problems(exc) from None


async def scenario_named_by(request: web.Request, session: Session, body: dict, source: str) -> str:
    """The name in `body["scenario"]`; an inline mapping there is first added to the library."""
    given = body.get("scenario")
    if isinstance(given, str):
        try:
            session.check_name(given)
        except UnknownScenario as exc:
            raise ControlError(str(exc), known=exc.known) from None
        return given
    if isinstance(given, dict):
        scenario = await off_the_loop(parse_document, with_lines(given), source, "inline")
        if "name" not in given:  # named once back on the loop, so that two calls at once get two names
            scenario = dataclasses.replace(scenario, name=free_inline_name(session.library))
        await add_scenario(request, session, scenario, {"document": given, "source": source})
        return scenario.name
    raise ControlError(
        'scenario: expected a scenario name such as "stall" or a scenario mapping such as {"steps": [{"text": "hi"}]}'
    )


# ---------------------------------------------------------------- health and scenarios


def loop_name() -> str:
    """The event loop this server runs on: uvloop or asyncio (see cli.loops)."""
    return "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") else "asyncio"


async def health(request: web.Request) -> web.Response:
    session, gateway = session_of(request), gateway_of(request)
    shared: dict[str, Any] = {}
    if gateway.state is not None:
        shared["state"] = gateway.state.url
        try:
            await gateway.state.synced(session)
            shared["started_at"] = await gateway.state.started_at()
        except StateDown as down:
            body = {"status": "unavailable", "error": str(down), "state": down.url, "started_at": gateway.started_at}
            return web.json_response(body, status=503)
    return web.json_response(
        {
            "status": "ok",
            "version": __version__,
            "scenarios": len(session.library.names()),
            "default": session.default,
            "time_scale": session.time_scale,
            "strict": session.strict,
            "session": session.name,
            "lenient_conversations": gateway.lenient_conversations,
            "started_at": gateway.started_at,
            "loop": loop_name(),
            **shared,
        }
    )


def origin_of(session: Session, scenario: Scenario) -> str:
    """Where a scenario came from: "bundled", the directory of its file, or "api" when added by a call."""
    if session.start.library.scenarios.get(scenario.name) is not scenario:
        return "api"
    return "bundled" if is_bundled(scenario) else str(Path(scenario.source).parent)


def kind_of(scenario: Scenario) -> str:
    if scenario.is_sequence:
        return "sequence"
    if scenario.is_conversation:
        return "conversation"
    script = cast(Script, scenario.entries[0].script)  # a scenario of steps is one entry with its script
    return "http_error" if script.http_error is not None else "steps"


def summary(session: Session, scenario: Scenario) -> dict:
    return {
        "name": scenario.name,
        "description": scenario.description,
        "kind": kind_of(scenario),
        "origin": origin_of(session, scenario),
        "source": scenario.source,
    }


async def list_scenarios(request: web.Request) -> web.Response:
    session = await synced_session(request)
    scenarios = [summary(session, session.library[name]) for name in session.library.names()]
    return web.json_response({"default": session.default, "scenarios": scenarios})


async def one_scenario(request: web.Request) -> web.Response:
    """One scenario: its summary, what it plays (`definition`) and, for one from a file, the file's text."""
    session = await synced_session(request)
    name = request.match_info["name"]
    if name not in session.library:
        exc = UnknownScenario(name, session.library.names())
        raise ControlError(str(exc), status=404, known=exc.known)
    scenario = session.library[name]
    origin = origin_of(session, scenario)
    text = None if origin == "api" else file_text(Path(scenario.source))
    return web.json_response(
        {"scenario": {**summary(session, scenario), "definition": scenario_json(scenario), "text": text}}
    )


def file_text(path: Path) -> str | None:
    """A scenario file's text as it is now; None when it cannot be read any more."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


async def add_scenario_call(request: web.Request) -> web.Response:
    """Add or replace one scenario, sent as YAML or JSON; `?name=` names one whose text does not.
    `?check=true` only checks it: every problem with its line, and nothing added."""
    session = await synced_session(request, "name", "check")
    default_name = request.query.get("name")
    text = await body_text(request)
    if checking_only(request):
        return await check_scenario(session, text, request.content_type, default_name)
    scenario = await off_the_loop(parse_scenario_body, text, request.content_type, default_name)
    replaced = scenario.name in session.library
    source = {"document": loads(text)} if is_json(request.content_type) else {"text": text}
    await add_scenario(request, session, scenario, {**source, "source": SCENARIOS_SOURCE})
    return web.json_response(
        {"scenario": summary(session, scenario), "replaced": replaced}, status=200 if replaced else 201
    )


def checking_only(request: web.Request) -> bool:
    check = request.query.get("check", "false")
    if check not in ("true", "false"):
        raise ControlError(f"check: expected true or false, got {check[:40]!r}")
    return check == "true"


async def check_scenario(session: Session, text: str, content_type: str, default_name: str | None) -> web.Response:
    """What adding this scenario would find wrong, as `{"valid": false, "problems": [{"line", "message"}]}`
    (line 0: the whole text), or `{"valid": true, "scenario": {"name", "kind", "description"}}`."""
    try:
        scenario = await asyncio.to_thread(parse_scenario_body, text, content_type, default_name)
        session.library.with_scenario(scenario)  # its `use` must name scenarios the session has
    except ScenarioError as exc:
        problems = [{"line": problem.line, "message": problem.message} for problem in exc.problems]
        return web.json_response({"valid": False, "problems": problems})
    return web.json_response(
        {
            "valid": True,
            "scenario": {"name": scenario.name, "kind": kind_of(scenario), "description": scenario.description},
        }
    )


def parse_scenario_body(text: str, content_type: str, default_name: str | None) -> Scenario:
    """A JSON body (by its Content-Type) is read as JSON; any other as YAML, whose errors carry lines."""
    if is_json(content_type):
        try:
            document = loads(text)
        except ValueError as exc:
            raise ControlError(f"the body is not valid JSON ({exc})") from None
        return parse_document(with_lines(document), SCENARIOS_SOURCE, default_name)
    return parse_text(text, SCENARIOS_SOURCE, default_name)


# ---------------------------------------------------------------- queue and default


QUEUE_EXAMPLE = '{"scenario": "stall", "times": 2}'


async def queue_json(request: web.Request, session: Session) -> dict:
    """The queue, oldest first: names, and a queued sequence's entries as `name[N]`."""
    state = gateway_of(request).state
    queue = session.queue if state is None else await state.queue(session.name)
    return {"queue": [str(queued) for queued in queue]}


async def queue_length(request: web.Request, session: Session) -> int:
    state = gateway_of(request).state
    return len(session.queue) if state is None else await state.queue_length(session.name)


async def queue_scenario(request: web.Request) -> web.Response:
    """Queue a scenario; the answer gives the queue's length, not the queue (GET /queue has it)."""
    session = await synced_session(request)
    body = await json_object(request, QUEUE_EXAMPLE, ("scenario", "times"))
    times = times_of(body)
    name = await scenario_named_by(request, session, body, QUEUE_SOURCE)
    requests = len(session.library.queued(name)) * times
    length = await queue_length(request, session)
    if length + requests > MAX_QUEUE:
        raise ControlError(
            f"the queue holds at most {MAX_QUEUE:,} entries and has {length:,}; "
            f"{name} {times:,} times is {requests:,} more, which would not fit (DELETE {PREFIX}/queue empties it)"
        )
    gateway = gateway_of(request)
    if gateway.state is not None:
        length = await gateway.state.enqueue(session.name, session.library.queued(name) * times)
        return web.json_response({"queued": name, "times": times, "requests": requests, "length": length})
    queued = sum(len(kept.queue) for kept in gateway.every_session())
    if queued + requests > gateway.max_queued:
        raise ControlError(
            f"the sessions' queues hold at most {gateway.max_queued:,} entries together, and hold {queued:,}; "
            f"{name} {times:,} times is {requests:,} more, which would not fit (DELETE {PREFIX}/queue empties a session's)"
        )
    session.enqueue(name, times)
    return web.json_response({"queued": name, "times": times, "requests": requests, "length": len(session.queue)})


async def show_queue(request: web.Request) -> web.Response:
    return web.json_response(await queue_json(request, session_of(request)))


async def clear_queue(request: web.Request) -> web.Response:
    session, state = session_of(request), gateway_of(request).state
    if state is None:
        removed = len(session.queue)
        session.queue.clear()
    else:
        removed = await state.clear_queue(session.name)
    return web.json_response({"removed": removed, **await queue_json(request, session)})


async def shared_setting(request: web.Request, session: Session, name: str) -> None:
    """With --state, the session's setting `name`, as just set, written where every server reads it."""
    state = gateway_of(request).state
    if state is not None:
        await state.set_setting(session.name, name, getattr(session, name))


async def set_default(request: web.Request) -> web.Response:
    session = await synced_session(request)
    body = await json_object(request, '{"scenario": "slow-typing"}', ("scenario",))
    session.default = await scenario_named_by(request, session, body, DEFAULT_SOURCE)
    await shared_setting(request, session, "default")
    return web.json_response({"default": session.default})


async def set_strict(request: web.Request) -> web.Response:
    """Strict or not: a strict session answers a request it has no scenario for with a 400, never the default."""
    session = session_of(request)
    body = await json_object(request, '{"strict": true}', ("strict",))
    strict = body.get("strict")
    if not isinstance(strict, bool):
        raise ControlError(f"strict: expected true or false, got {json.dumps(strict)}")
    session.strict = strict
    await shared_setting(request, session, "strict")
    return web.json_response({"strict": strict})


async def set_time_scale(request: web.Request) -> web.Response:
    session = session_of(request)
    body = await json_object(request, '{"time_scale": 0.01}', ("time_scale",))
    scale = body.get("time_scale")
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not (scale > 0 and math.isfinite(scale)):
        raise ControlError(f"time_scale: expected a number more than 0, got {json.dumps(scale)}")
    session.time_scale = float(scale)
    await shared_setting(request, session, "time_scale")
    return web.json_response({"time_scale": session.time_scale})


# ---------------------------------------------------------------- faults


FAULT_EXAMPLE = '{"kind": "rate_limit", "times": 2, "retry_after": 0.5}'


def faults_json(session: Session) -> dict:
    return {"faults": [fault.as_json() for fault in session.faults]}


async def add_fault(request: web.Request) -> web.Response:
    """Lay a fault over the session's next answers (see state.faults): 201 with the fault and its id."""
    session = await synced_session(request)
    body = await json_mapping(request, FAULT_EXAMPLE)
    try:
        fault = parse_fault(body)
        added(session.faults, fault)
    except FaultProblem as exc:
        raise ControlError(str(exc)) from None
    state = gateway_of(request).state
    if state is not None:
        await state.add_fault(session, fault, body)
    return web.json_response(fault.as_json(), status=201)


async def show_faults(request: web.Request) -> web.Response:
    return web.json_response(faults_json(await synced_session(request)))


async def remove_fault(request: web.Request) -> web.Response:
    session, fault_id = await synced_session(request), request.match_info["fault_id"]
    kept = [fault for fault in session.faults if fault.id != fault_id]
    if len(kept) == len(session.faults):
        raise ControlError(f"no fault {fault_id[:80]!r} in this session; GET {PREFIX}/faults lists them", status=404)
    session.faults[:] = kept
    state = gateway_of(request).state
    if state is not None:
        await state.remove_faults(session.name, [fault_id])
    return web.json_response({"removed": fault_id, **faults_json(session)})


async def clear_faults(request: web.Request) -> web.Response:
    session = await synced_session(request)
    removed = len(session.faults)
    session.faults.clear()
    state = gateway_of(request).state
    if state is not None:
        await state.remove_faults(session.name)
    return web.json_response({"removed": removed, **faults_json(session)})


# ---------------------------------------------------------------- journal and reset


async def list_requests(request: web.Request) -> web.Response:
    """The session's view of the journal after `since`, oldest first, a page at a time: at most
    `limit` records (PAGE_RECORDS by default) whose headers and bodies come to at most
    PAGE_BYTES; `next_since` is the next call's `since`, and `more` says whether there is a next
    page already. The records are copied here and written as JSON in a thread, one at a time:
    a page of megabytes takes a while, and the streams of other clients go on meanwhile."""
    session = session_of(request, "since", "limit")
    since = whole_number(request.query.get("since", "0"), "since", 0)
    limit = whole_number(request.query["limit"], "limit", 1) if "limit" in request.query else PAGE_RECORDS
    state = gateway_of(request).state
    if state is not None:
        shared, more = await state.page(session.name, since, limit, PAGE_BYTES)
        secrets = session.journal.secrets
        return web.json_response(
            {
                "requests": [record_shown(data, secrets) for data in shared],
                "next_since": shared[-1]["seq"] if shared else since,
                "more": more,
            }
        )
    page, more = session.page(since, limit, PAGE_BYTES)
    next_since = page[-1].seq if page else since
    snapshots = [record.snapshot() for record in page]
    text = await asyncio.to_thread(page_json, snapshots, session.journal.secrets, next_since, more)
    return web.Response(body=text, content_type="application/json", charset="utf-8")


def page_json(records: list, secrets: bool, next_since: int, more: bool) -> bytes:
    """A page of GET /requests as JSON, each record written on its own (so that no one call
    holds the interpreter for the whole page)."""
    written = ", ".join(json.dumps(record.as_json(secrets)) for record in records)
    return f'{{"requests": [{written}], "next_since": {next_since}, "more": {json.dumps(more)}}}'.encode()


async def one_request(request: web.Request) -> web.Response:
    """One record of the session's view of the journal, with the frames its stream wrote."""
    session = session_of(request)
    seq = whole_number(request.match_info["seq"], "seq", 1)
    journal, state = session.journal, gateway_of(request).state
    if state is not None:
        data = await state.record(session.name, seq)
        if data is not None:
            return web.json_response({"request": record_shown(data, journal.secrets, frames=True)})
    record = None if state is not None else session.record(seq)
    if record is None:
        raise ControlError(f"no request #{seq} in the journal; it keeps the last {journal.capacity:,}", status=404)
    return web.json_response({"request": record.as_json(journal.secrets, frames=True)})


async def clear_requests(request: web.Request) -> web.Response:
    session, state = session_of(request), gateway_of(request).state
    removed = session.clear_requests()
    if state is not None:
        removed = await state.clear_journal(session.name)
    return web.json_response({"removed": removed})


async def verdict(request: web.Request) -> web.Response:
    """What the client did, judged by every rule: `?session=` picks the session, any other
    parameter sets a rule's threshold. The records are copied here and judged in a thread."""
    from ..verdicts import Settings, Taken, judge, script_finder, take

    session, state = session_named_in(request), gateway_of(request).state
    query = dict(request.query)
    query.pop(SESSION_PARAMETER, None)
    try:
        settings = Settings.from_strings(query)
    except ValueError as exc:
        raise ControlError(str(exc)) from None
    if state is None:
        taken = take(session)
    else:  # every server's records of the session, on the clock they share: time.time()
        await state.synced(session)
        records = [record for record in await state.records(session.name) if record.session == session.name]
        taken = Taken(records, script_finder(session.library), session.time_scale, session.name, time.time())
    return web.json_response((await asyncio.to_thread(judge, taken, settings)).as_json())


async def reset(request: web.Request) -> web.Response:
    """The global session back to how the server started, the server's stored responses
    gone; a named one dropped, to start afresh when next used."""
    session, state = session_of(request), gateway_of(request).state
    if state is not None:
        await state.reset(session.name)
    if session.name is None:
        session.reset()
        gateway_of(request).responses.clear()
        gateway_of(request).threads.clear()
        gateway_of(request).background_runs.clear()
    else:
        gateway_of(request).sessions.drop(session.name)
        gateway_of(request).responses.drop_session(session.name)
        gateway_of(request).threads.drop_session(session.name)
        gateway_of(request).background_runs.drop_session(session.name)
    return web.json_response({"status": "reset", "default": session.start.default})


# ---------------------------------------------------------------- sessions


async def list_sessions(request: web.Request) -> web.Response:
    """Every named session kept, the one used longest ago (the next to be dropped) first."""
    gateway = gateway_of(request)
    sessions = gateway.sessions
    if gateway.state is not None:
        start = gateway.global_session.start
        settings = {"default": start.default, "time_scale": start.time_scale, "strict": start.strict}
        shared = [{"session": kept["session"], **settings, **kept} for kept in await gateway.state.sessions()]
        return web.json_response(
            {"sessions": shared, "max_sessions": sessions.limit, "idle_timeout": sessions.idle_timeout}
        )
    requests = Counter(record.session for record in gateway.journal.records)
    now = time.monotonic()
    listed = [
        {
            "session": session.name,
            "idle": round(now - session.last_used, 3),
            "default": session.default,
            "time_scale": session.time_scale,
            "strict": session.strict,
            "queue": len(session.queue),
            "requests": requests[session.name],
        }
        for session in sessions.listed()
    ]
    return web.json_response(
        {"sessions": listed, "max_sessions": sessions.limit, "idle_timeout": sessions.idle_timeout}
    )


async def drop_session(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    try:
        checked_name(name)
    except BadSessionName as exc:
        raise ControlError(str(exc)) from None
    state = gateway_of(request).state
    found = gateway_of(request).sessions.drop(name)  # with --state, this server's copy alone
    if state is not None:
        found = await state.reset(name)
    if not found:
        raise ControlError(f"no session {name!r}; GET {PREFIX}/sessions lists them", status=404)
    gateway_of(request).responses.drop_session(name)
    gateway_of(request).threads.drop_session(name)
    gateway_of(request).background_runs.drop_session(name)
    return web.json_response({"dropped": name})


def create_app(*extensions) -> web.Application:
    """The control API, to mount under PREFIX; each of `extensions` adds its own routes to it
    (before the routes that answer what no call takes)."""
    app = web.Application()
    app.router.add_get("/health", control_call(health))
    app.router.add_get("/scenarios", control_call(list_scenarios))
    app.router.add_get("/scenarios/{name}", control_call(one_scenario))
    app.router.add_post("/scenarios", control_call(add_scenario_call))
    app.router.add_get("/queue", control_call(show_queue))
    app.router.add_post("/queue", control_call(queue_scenario))
    app.router.add_delete("/queue", control_call(clear_queue))
    app.router.add_put("/default", control_call(set_default))
    app.router.add_get("/faults", control_call(show_faults))
    app.router.add_post("/faults", control_call(add_fault))
    app.router.add_delete("/faults", control_call(clear_faults))
    app.router.add_delete("/faults/{fault_id}", control_call(remove_fault))
    app.router.add_put("/strict", control_call(set_strict))
    app.router.add_put("/time_scale", control_call(set_time_scale))
    app.router.add_get("/requests", control_call(list_requests))
    app.router.add_get("/requests/{seq}", control_call(one_request))
    app.router.add_delete("/requests", control_call(clear_requests))
    app.router.add_get("/verdict", control_call(verdict))
    app.router.add_post("/reset", control_call(reset))
    app.router.add_get("/sessions", control_call(list_sessions))
    app.router.add_delete("/sessions/{name}", control_call(drop_session))
    for extend in extensions:
        extend(app)
    app.router.add_route("*", "", control_call(unknown_call))  # the prefix itself, without its slash
    app.router.add_route("*", "/{path:.*}", control_call(unknown_call))  # last: only what no other route takes
    return app
