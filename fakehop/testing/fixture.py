"""Driving a fakehop server from tests.

`Fakehop` is what the pytest fixture `fakehop` gives a test: pick scenarios, read the requests
the server got, get official SDK clients pointed at it. `make_app` builds a fakehop aiohttp
Application to serve on a test's own event loop (pytest-aiohttp's `aiohttp_server`), and
`Fakehop.for_server` gives the same handle for it. Nothing here needs pytest.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import itertools
import ssl
import time
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Union, cast

from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from ..play.player import parse_time_scale, time_scale_from_env
from ..scenario.library import DEFAULT_SCENARIO, Library, UnknownScenario
from ..scenario.model import Scenario
from ..scenario.reader import SCENARIOS_SOURCE, Problem, ScenarioError, free_inline_name, parse_document
from ..scenario.yamlsource import with_lines
from ..server.app import create_app
from ..server.gateway import Gateway
from ..server.shared import GATEWAY_KEY
from ..state import journal as jr
from ..state.faults import FaultProblem, added, parse_fault
from ..state.sessions import SESSION_HEADER, SESSION_KEY_PREFIX, Session, checked_name
from ..verdicts import ERROR, RULES, SEVERITIES, WARNING, Finding, Settings, judge, take
from .remote import ControlClient, ControlFailed
from .thread_server import ThreadServer

ScenarioSpec = Union[str, Mapping[str, Any]]
FAKE_API_KEY = "sk-fakehop"
POLL_INTERVAL = 0.005


@dataclass(frozen=True)
class RecordedRequest:
    """One request as fakehop's journal saw it: a snapshot, taken when `Fakehop.requests` was read.

    `end` says how the answer ended: "completed", "failed" (an error event in the stream, or its
    HTTP form), "http_error" (an `http_error` scenario), "disconnected" (the scenario dropped the
    connection), "client_disconnected" (the client went away first), "rejected" (a bad request,
    an unknown scenario or a path no protocol serves, answered with a 4xx), "unmatched" (strict
    mode: no scenario was set up for it, answered with a 400), or "in_progress".
    """

    seq: int  # numbers requests from 1 over the server's life
    id: str  # the request id fakehop answered with (x-request-id on the OpenAI protocols, request-id on Messages)
    method: str
    path: str
    headers: CIMultiDictProxy  # case-insensitive: headers["authorization"]
    started_at: float  # time.time() when the request arrived
    session: str | None  # the session it belonged to; None for the global one
    protocol: str | None  # "chat", "responses", "messages"; None for a path no protocol serves
    scenario: str | None  # what it got: "hello", or for a sequence "flaky-then-ok[2]"
    body: Any  # the parsed JSON body; None if it was not JSON
    stream: bool  # whether the request asked for a stream
    status: int | None  # the HTTP status sent
    end: str
    events: int  # SSE events sent before the end (keepalive comments not counted)
    error: str | None  # the error message sent, if any
    duration: float | None  # seconds from arrival to the end
    turn: int | None  # its turn in its conversation: 1 + the assistant turns it sent; None for one no protocol read
    faults: list[str]  # the kinds of the faults laid over its answer
    notes: list[str]  # what fakehop noticed of it: a scenario the real API could not give it

    @classmethod
    def from_record(cls, record: jr.Record) -> RecordedRequest:
        data = record.as_json()
        data["headers"] = CIMultiDictProxy(CIMultiDict(record.headers.items()))  # every value of a repeated header
        data["body"] = copy.deepcopy(data["body"])  # a snapshot: changing it leaves the journal's as it was
        return cls(**{f.name: data[f.name] for f in fields(cls)})

    def __str__(self) -> str:
        status = f" {self.status}" if self.status is not None else ""
        events = f" after {self.events} events" if self.stream else ""
        error = f": {self.error}" if self.error else ""
        return f"#{self.seq} {self.method} {self.path} scenario={self.scenario}: {self.end}{status}{events}{error}"


@dataclass(frozen=True)
class SetFault:
    """A fault of the session, as it was when added or listed: `left` is how many requests it
    will still break (None: until removed); `settings` holds its parameters and scope."""

    id: str
    kind: str
    left: int | None
    settings: dict[str, Any]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SetFault:
        settings = {name: value for name, value in data.items() if name not in ("id", "kind", "left")}
        return cls(data["id"], data["kind"], data["left"], settings)


def findings_report(findings: Sequence[Finding]) -> str:
    """Findings as a test failure shows them: one line each, under a line that says what they are."""
    lines = "\n".join(f"  {finding}" for finding in findings)
    count = f"{len(findings)} finding{'s' if len(findings) != 1 else ''}"
    return f"fakehop verdict: {count} against HopBase's rules (fakehop's manual, docs/guides/verdicts.md, tells each rule's fix):\n{lines}"


def inline_scenario(mapping: Mapping[str, Any], names: Library | Container[str]) -> Scenario:
    """A scenario written as a mapping in the v1 format; without `name` it gets the first
    `inline-N` not in `names`. ScenarioError names the key that is wrong."""
    default_name = free_inline_name(names)
    source = f"inline scenario {mapping.get('name', default_name)!r}"
    return parse_document(with_lines(dict(mapping)), source, default_name)


def add_inline(session: Session, mapping: Mapping[str, Any]) -> str:
    """Add a scenario written as a mapping to `session`; returns its name."""
    scenario = inline_scenario(mapping, session.library)
    session.add(scenario)
    return scenario.name


def start_afresh(
    gateway: Gateway, name: str | None, time_scale: float | None, strict: bool | None, *, unnamed: bool = False
) -> None:
    """Session `name` as the server started it (a named one is dropped and made anew), then with
    `time_scale` and `strict` where they are given; with `unnamed`, also the session of every
    request that names none."""
    if unnamed:
        gateway.unnamed_session = name
    if name is None:
        gateway.global_session.reset()
    else:
        gateway.sessions.drop(name)
    session = gateway.session(name)
    if time_scale is not None:
        session.time_scale = time_scale
    if strict is not None:
        session.strict = strict


class SameLoop:
    """A server on the caller's own event loop: functions run at once, right here."""

    def __init__(self, gateway: Gateway, url: str):
        self.gateway = gateway
        self.url = url

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)

    post = call


@dataclass(frozen=True)
class RemoteServer:
    """A fakehop server that runs elsewhere (`fakehop serve`), driven through its control API."""

    url: str
    admin_token: str | None = None


class LocalSession:
    """One session of a server in this process, changed on the server's event loop."""

    def __init__(self, server: ThreadServer | SameLoop, name: str | None, *, unnamed: bool = False):
        self.server = server
        self.gateway = server.gateway
        self.name = name
        self.unnamed = unnamed
        self.blocks_its_server = isinstance(server, SameLoop)

    def _on_session(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(session, *args)` on the server's loop, with its result; the session is made again if it was dropped."""
        return self.server.call(lambda: fn(self.gateway.session(self.name), *args))

    def reset(self, time_scale: float | None, strict: bool | None) -> None:
        self.server.post(
            functools.partial(start_afresh, self.gateway, self.name, time_scale, strict, unnamed=self.unnamed)
        )

    def check_name(self, name: str) -> None:
        self._on_session(Session.check_name, name)

    def add(self, mapping: Mapping[str, Any]) -> str:
        return self._on_session(add_inline, mapping)

    def set_default(self, name: str) -> None:
        self._on_session(setattr, "default", name)

    def extend_queue(self, names: list[str]) -> None:
        """Queue each name's run (a sequence's: all its entries), as POST /queue does."""
        self._on_session(lambda session: [session.enqueue(name) for name in names])

    def add_fault(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Read here (FaultProblem when it is wrong), added on the server's loop."""
        fault = parse_fault(spec)

        def add(session: Session) -> dict[str, Any]:
            added(session.faults, fault)
            return fault.as_json()

        return self._on_session(add)

    def faults(self) -> list[dict[str, Any]]:
        return self._on_session(lambda session: [fault.as_json() for fault in session.faults])

    def clear_faults(self) -> None:
        self._on_session(lambda session: session.faults.clear())

    def setting(self, name: str) -> Any:
        """A setting of the session: "time_scale" or "strict"."""
        return self._on_session(getattr, name)

    def change(self, name: str, value: Any) -> None:
        self._on_session(setattr, name, value)

    def records(self) -> list[RecordedRequest]:
        return self._on_session(lambda session: [RecordedRequest.from_record(r) for r in session.requests()])

    def streams(self) -> list[dict[str, Any]]:
        return self._on_session(lambda session: [r.as_json(frames=True) for r in session.requests()])

    def verdict(self, settings: Settings) -> list[Finding]:
        """Taken on the server's loop, judged here."""
        return judge(self._on_session(take), settings).findings

    def close(self) -> None:
        if self.name is not None:
            self.server.post(self.gateway.sessions.drop, self.name)


class RemoteSession:
    """One session of a server elsewhere, through its control API: the same calls as LocalSession."""

    blocks_its_server = False

    def __init__(self, server: RemoteServer, name: str | None):
        self.client = ControlClient(server.url, server.admin_token, session=name)
        self.name = name

    def reset(self, time_scale: float | None, strict: bool | None) -> None:
        self.client.call("POST", "/reset")
        if time_scale is not None:
            self.change("time_scale", time_scale)
        if strict is not None:
            self.change("strict", strict)

    def _names(self) -> list[str]:
        return [scenario["name"] for scenario in self.client.call("GET", "/scenarios")["scenarios"]]

    def check_name(self, name: str) -> None:
        names = self._names()
        if name not in names:
            raise UnknownScenario(name, names)

    def add(self, mapping: Mapping[str, Any]) -> str:
        """Checked here first, so that its problems read as they do in process; then sent."""
        scenario = inline_scenario(mapping, self._names())
        try:
            self.client.call("POST", "/scenarios", dict(mapping), query={"name": scenario.name})
        except ControlFailed as exc:
            if not exc.problems:
                raise
            sent_as = SCENARIOS_SOURCE + ": "
            raise ScenarioError(
                Problem(scenario.source, 0, problem.removeprefix(sent_as)) for problem in exc.problems
            ) from None
        return scenario.name

    def set_default(self, name: str) -> None:
        self.client.call("PUT", "/default", {"scenario": name})

    def extend_queue(self, names: list[str]) -> None:
        for name, run in itertools.groupby(names):
            self.client.call("POST", "/queue", {"scenario": name, "times": len(list(run))})

    def add_fault(self, spec: dict[str, Any]) -> dict[str, Any]:
        try:
            return self.client.call("POST", "/faults", spec)
        except ControlFailed as exc:
            if exc.status != 400 or exc.answer is None:
                raise
            raise FaultProblem(exc.answer["error"]) from None

    def faults(self) -> list[dict[str, Any]]:
        return self.client.call("GET", "/faults")["faults"]

    def clear_faults(self) -> None:
        self.client.call("DELETE", "/faults")

    def setting(self, name: str) -> Any:
        return self.client.call("GET", "/health")[name]

    def change(self, name: str, value: Any) -> None:
        """`PUT /time_scale` or `PUT /strict`: each setting has a call of its own name."""
        self.client.call("PUT", f"/{name}", {name: value})

    def records(self) -> list[RecordedRequest]:
        """Every page of the session's journal (a header sent more than once comes joined with ", ")."""
        return [RecordedRequest.from_record(record) for record in self.client.records(0)]

    def streams(self) -> list[dict[str, Any]]:
        """The journal, then each of its requests again, with its frames: a call each."""
        return [self.client.call("GET", f"/requests/{record.seq}")["request"] for record in self.client.records(0)]

    def verdict(self, settings: Settings) -> list[Finding]:
        """`GET /verdict` of the session, with every threshold of `settings`."""
        thresholds = {name: str(value) for name, value in asdict(settings).items()}
        return [Finding.from_json(data) for data in self.client.call("GET", "/verdict", query=thresholds)["findings"]]

    def close(self) -> None:
        if self.name is None:
            return
        try:
            self.client.call("DELETE", f"/sessions/{self.name}")
        except ControlFailed as exc:
            if exc.status != 404:  # already dropped: idle too long, or too many sessions
                raise


class Fakehop:
    """A fakehop server as a test drives it, in one session of it (`session`; None for the global one).

    `server` is a `fakehop.thread_server.ThreadServer` or a `SameLoop` (a server in this
    process, whose Gateway may change only on its event loop: `call`/`post` run a function
    there), or a `RemoteServer`, driven through its control API.
    """

    def __init__(
        self, server: ThreadServer | SameLoop | RemoteServer, session: str | None = None, *, unnamed: bool = False
    ):
        """With `unnamed` (a server in this process only), the session also takes every request
        and control call that names none, from its `reset` on. A `session` that is no session
        name raises BadSessionName, a ValueError, here rather than on the server's loop."""
        if session is not None:
            checked_name(session)
        self._driver: RemoteSession | LocalSession
        if isinstance(server, RemoteServer):
            self._driver = RemoteSession(server, session)
        else:
            self._driver = LocalSession(server, session, unnamed=unnamed)
        self.url = cast(str, server.url)  # a started server's
        self.session = session

    @classmethod
    def for_server(cls, test_server) -> Fakehop:
        """The handle for a `make_app()` app served by pytest-aiohttp's `aiohttp_server`."""
        return cls(SameLoop(test_server.app[GATEWAY_KEY], str(test_server.make_url("")).rstrip("/")))

    @property
    def openai_base_url(self) -> str:
        return self.url + "/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url

    @property
    def api_key(self) -> str:
        """The key that puts an app's requests in this handle's session: `sk-fakehop-SESSION`."""
        return FAKE_API_KEY if self.session is None else SESSION_KEY_PREFIX + self.session

    @property
    def client_env(self) -> dict[str, str]:
        """The variables the official SDKs read, pointing the clients an app builds with no
        arguments at this server and this handle's session."""
        return {
            "OPENAI_BASE_URL": self.openai_base_url,
            "OPENAI_API_KEY": self.api_key,
            "ANTHROPIC_BASE_URL": self.anthropic_base_url,
            "ANTHROPIC_API_KEY": self.api_key,
        }

    # ------------------------------------------------------------ scenarios

    def reset(self, time_scale: float | None = None, strict: bool | None = None) -> None:
        """The session as the server started it: queue and journal emptied, sequence counters at
        zero, added scenarios gone, default, time scale and strictness back; then `time_scale`
        and `strict` where given.

        In process it is posted, not awaited, so a test that never talks to the server pays
        nothing for it: the server handles it before anything the test sends afterwards.
        """
        self._driver.reset(time_scale, strict)

    def use(self, scenario: ScenarioSpec) -> str:
        """Make `scenario` (a name, or a mapping in the v1 format) the default; returns its name."""
        __tracebackhide__ = True  # a mistake in `scenario` shows at the test's own line
        name = self._known_name(scenario)
        self._driver.set_default(name)
        return name

    def queue(self, *scenarios: ScenarioSpec) -> list[str]:
        """The next requests that name no scenario get these, in order (a sequence its whole
        run, entry by entry); returns their names."""
        __tracebackhide__ = True
        names = list(map(self._known_name, scenarios))  # no frame of its own, as a comprehension has
        self._driver.extend_queue(names)
        return names

    def _known_name(self, scenario: ScenarioSpec) -> str:
        """A name the server knows (UnknownScenario otherwise); a mapping is added first.
        Either mistake is raised with no frames of fakehop's, which would only hide its message
        (in process, behind those of the server's thread)."""
        __tracebackhide__ = True
        try:
            if isinstance(scenario, str):
                self._driver.check_name(scenario)
                return scenario
            if isinstance(scenario, Mapping):
                return self._driver.add(scenario)
        except (UnknownScenario, ScenarioError) as exc:
            raise exc.with_traceback(None) from None
        raise TypeError(f"a scenario is a name or a mapping in the scenario format, got {type(scenario).__name__}")

    # ------------------------------------------------------------ faults

    def fault(self, kind: str, **parameters: Any) -> SetFault:
        """Lay a fault over this session's next answers: `fault("rate_limit", times=2,
        retry_after=0.5)`, `fault("truncate", after=3)`. ValueError names a wrong kind, parameter or value."""
        __tracebackhide__ = True
        try:
            return SetFault.from_json(self._driver.add_fault({"kind": kind, **parameters}))
        except FaultProblem as exc:
            raise exc.with_traceback(None) from None

    @property
    def faults(self) -> list[SetFault]:
        """The session's faults, oldest first, each with the requests it has `left` to break."""
        return [SetFault.from_json(data) for data in self._driver.faults()]

    def clear_faults(self) -> None:
        """Remove every fault of the session."""
        self._driver.clear_faults()

    @property
    def time_scale(self) -> float:
        return self._driver.setting("time_scale")

    @time_scale.setter
    def time_scale(self, value: float) -> None:
        try:
            scale = parse_time_scale(value)  # type: ignore[arg-type]  # it reads a number as well as its text
        except ValueError as exc:
            raise ValueError(f"time_scale: {exc}") from None
        self._driver.change("time_scale", scale)

    @property
    def strict(self) -> bool:
        """Whether a request with no scenario set up for it gets a 400 (journaled `unmatched`) instead of the default."""
        return self._driver.setting("strict")

    @strict.setter
    def strict(self, value: bool) -> None:
        self._driver.change("strict", bool(value))

    def close(self) -> None:
        """Drop this handle's session from the server; the fixture does so after each test."""
        self._driver.close()

    # ------------------------------------------------------------ what the server saw

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request of this session since the test began, oldest first."""
        return self._driver.records()

    def streams(self) -> list[dict[str, Any]]:
        """Every request of this session as the control API's `GET /requests/SEQ` shows it: its
        record, and its stream's `frames`, each `[seconds since it arrived, text]`."""
        return self._driver.streams()

    def wait_for_requests(self, count: int = 1, timeout: float = 5.0) -> list[RecordedRequest]:
        """Block until `count` requests have arrived and every one has ended; returns `requests`.

        A client that hangs up is seen by the server a moment later: wait before asserting
        `client_disconnected`. On a server that shares the test's loop, use the async form.
        """
        if self._driver.blocks_its_server:
            raise RuntimeError("this server runs on the test's own loop: use `await async_wait_for_requests()`")
        deadline = time.monotonic() + timeout
        while not self._settled(requests := self.requests, count):
            if time.monotonic() > deadline:
                raise TimeoutError(self._waited_too_long(requests, count, timeout))
            time.sleep(POLL_INTERVAL)
        return requests

    async def async_wait_for_requests(self, count: int = 1, timeout: float = 5.0) -> list[RecordedRequest]:
        """`wait_for_requests` for async tests: the test's loop keeps running while it waits."""
        deadline = time.monotonic() + timeout
        while not self._settled(requests := self.requests, count):
            if time.monotonic() > deadline:
                raise TimeoutError(self._waited_too_long(requests, count, timeout))
            await asyncio.sleep(POLL_INTERVAL)
        return requests

    @staticmethod
    def _settled(requests: Sequence[RecordedRequest], count: int) -> bool:
        return len(requests) >= count and all(r.end != jr.IN_PROGRESS for r in requests)

    @staticmethod
    def _waited_too_long(requests: Sequence[RecordedRequest], count: int, timeout: float) -> str:
        seen = "\n".join(f"  {r}" for r in requests) or "  (none)"
        return f"fakehop: waited {timeout:g}s for {count} finished request(s); the server has seen:\n{seen}"

    # ------------------------------------------------------------ verdicts

    def verdict(self, **settings: Any) -> list[Finding]:
        """What the clients did in this test, judged by HopBase's rules (see fakehop.verdicts):
        the findings, oldest first. `settings` set the rules' thresholds (`backoff_floor=0.5`, …)."""
        return self._driver.verdict(Settings(**settings))

    def assert_client_ok(self, allow: Iterable[str] = (), level: str = WARNING, **settings: Any) -> None:
        """Fail (AssertionError) on every finding of `level` or worse ("warning": all of them;
        "error": errors only) whose rule is not in `allow`."""
        allowed = set(allow)
        unknown = sorted(allowed - set(RULES))
        if unknown or level not in SEVERITIES:
            raise ValueError(
                f"allow: unknown rule {', '.join(unknown)}; the rules are: {', '.join(RULES)}"
                if unknown
                else f"level: expected one of {', '.join(SEVERITIES)}, got {level!r}"
            )
        broken = [
            finding
            for finding in self.verdict(**settings)
            if finding.rule not in allowed and (level == WARNING or finding.severity == ERROR)
        ]
        if broken:
            raise AssertionError(findings_report(broken))

    # ------------------------------------------------------------ official SDK clients

    def openai_client(self, **options: Any):
        """An `openai.OpenAI` client for this server; `options` go to the client as they are."""
        import openai

        return openai.OpenAI(**self._client_options(self.openai_base_url, options, openai.DefaultHttpxClient))

    def async_openai_client(self, **options: Any):
        import openai

        return openai.AsyncOpenAI(**self._client_options(self.openai_base_url, options, openai.DefaultAsyncHttpxClient))

    def anthropic_client(self, **options: Any):
        import anthropic

        return anthropic.Anthropic(
            **self._client_options(self.anthropic_base_url, options, anthropic.DefaultHttpxClient)
        )

    def async_anthropic_client(self, **options: Any):
        import anthropic

        return anthropic.AsyncAnthropic(
            **self._client_options(self.anthropic_base_url, options, anthropic.DefaultAsyncHttpxClient)
        )

    def _client_options(
        self, base_url: str, options: dict[str, Any], http_client_class: Callable[..., Any]
    ) -> dict[str, Any]:
        """The client's settings: this session's key, and its header, so that an `api_key` in
        `options` (for a server started with --api-key) still leaves the client in the session.
        On a plain-HTTP server, the SDK's own HTTP client with a TLS context that has no
        certificate authorities (see `plain_http_tls`) unless `options` bring an `http_client`."""
        merged = {"base_url": base_url, "api_key": self.api_key, **options}
        if self.session is not None:
            merged["default_headers"] = {SESSION_HEADER: self.session, **options.get("default_headers", {})}
        if "http_client" not in options and base_url.startswith("http://"):
            merged["http_client"] = http_client_class(verify=plain_http_tls())
        return merged


@functools.cache
def plain_http_tls() -> ssl.SSLContext:
    """A TLS context for SDK clients of a plain-HTTP server.

    The SDKs' HTTP client loads the whole CA bundle into a TLS context for every client it
    makes, some 30 ms of CPU, though a client of an http:// URL never opens TLS. This context
    is made once and trusts no one: a request sent over TLS with it anyway fails verification.
    """
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


def make_app(
    scenarios: Iterable[str | Path] = (),
    *,
    default: str = DEFAULT_SCENARIO,
    time_scale: float | None = None,
    api_key: str | None = None,
    allowed_hosts: Iterable[str] = (),
    strict: bool = False,
    lenient_conversations: bool = False,
) -> web.Application:
    """A fakehop Application for pytest-aiohttp's `aiohttp_server`, on the test's own loop.

    `scenarios` are directories added to the bundled scenarios; `time_scale` defaults to
    $FAKEHOP_TIME_SCALE or 1; `allowed_hosts` are Host names answered beside loopback names
    and IP addresses ("*": any). Drive it with `Fakehop.for_server(await aiohttp_server(app))`.
    """
    library = Library.load(map(Path, scenarios))
    gateway = Gateway(
        library,
        default=default,
        time_scale=time_scale or time_scale_from_env(),
        api_key=api_key,
        allowed_hosts=tuple(allowed_hosts),
        strict=strict,
        lenient_conversations=lenient_conversations,
    )
    return create_app(gateway)
