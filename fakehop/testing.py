"""Driving a fakehop server from tests.

`Fakehop` is what the pytest fixture `fakehop` gives a test: pick scenarios, read the requests
the server got, get official SDK clients pointed at it. `make_app` builds a fakehop aiohttp
Application to serve on a test's own event loop (pytest-aiohttp's `aiohttp_server`), and
`Fakehop.for_server` gives the same handle for it. Nothing here needs pytest.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence, Union

from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from . import journal as jr
from .control import free_inline_name, with_lines
from .library import DEFAULT_SCENARIO, Library
from .player import parse_time_scale, time_scale_from_env
from .scenario import parse_document
from .server import GATEWAY_KEY, Gateway, create_app
from .thread_server import ThreadServer
from .verdicts import ERROR, RULES, SEVERITIES, WARNING, Finding, Settings, judge, take

ScenarioSpec = Union[str, Mapping[str, Any]]
FAKE_API_KEY = "sk-fakehop"
POLL_INTERVAL = 0.005


@dataclass(frozen=True)
class RecordedRequest:
    """One request as fakehop's journal saw it: a snapshot, taken when `Fakehop.requests` was read.

    `end` says how the answer ended: "completed", "failed" (an error event in the stream, or its
    HTTP form), "http_error" (an `http_error` scenario), "disconnected" (the scenario dropped the
    connection), "client_disconnected" (the client went away first), "rejected" (a bad request,
    an unknown scenario or a path no protocol serves, answered with a 4xx), or "in_progress".
    """

    seq: int  # numbers requests from 1 over the server's life
    id: str  # the x-request-id fakehop answered with
    method: str
    path: str
    headers: CIMultiDictProxy  # case-insensitive: headers["authorization"]
    started_at: float  # time.time() when the request arrived
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

    @classmethod
    def from_record(cls, record: jr.Record) -> "RecordedRequest":
        data = record.as_json()
        data["headers"] = CIMultiDictProxy(CIMultiDict(record.headers.items()))  # every value of a repeated header
        return cls(**{f.name: data[f.name] for f in fields(cls)})

    def __str__(self) -> str:
        status = f" {self.status}" if self.status is not None else ""
        events = f" after {self.events} events" if self.stream else ""
        error = f": {self.error}" if self.error else ""
        return f"#{self.seq} {self.method} {self.path} scenario={self.scenario}: {self.end}{status}{events}{error}"


def findings_report(findings: Sequence[Finding]) -> str:
    """Findings as a test failure shows them: one line each, under a line that says what they are."""
    lines = "\n".join(f"  {finding}" for finding in findings)
    count = f"{len(findings)} finding{'s' if len(findings) != 1 else ''}"
    return f"fakehop verdict: {count} against HopBase's rules (fakehop's README, Verdicts, tells each rule's fix):\n{lines}"


def add_inline(gateway: Gateway, mapping: Mapping[str, Any]) -> str:
    """Add a scenario written as a mapping in the v1 format; without `name` it gets a free `inline-N`."""
    default_name = free_inline_name(gateway)
    source = f"inline scenario {mapping.get('name', default_name)!r}"
    scenario = parse_document(with_lines(dict(mapping)), source, default_name)
    gateway.add(scenario)
    return scenario.name


class SameLoop:
    """A server on the caller's own event loop: functions run at once, right here."""

    def __init__(self, gateway: Gateway, url: str):
        self.gateway = gateway
        self.url = url

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)

    post = call


class Fakehop:
    """A fakehop server as a test drives it.

    `server` has the `gateway`, its `url`, and `call`/`post` to run a function on the server's
    event loop (the Gateway may change only there): a `fakehop.thread_server.ThreadServer`,
    or a `SameLoop` for a server on the test's own loop.
    """

    def __init__(self, server: ThreadServer | SameLoop):
        self._server = server
        self._gateway = server.gateway
        self.url = server.url

    @classmethod
    def for_server(cls, test_server) -> "Fakehop":
        """The handle for a `make_app()` app served by pytest-aiohttp's `aiohttp_server`."""
        return cls(SameLoop(test_server.app[GATEWAY_KEY], str(test_server.make_url("")).rstrip("/")))

    @property
    def openai_base_url(self) -> str:
        return self.url + "/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url

    # ------------------------------------------------------------ scenarios

    def reset(self, time_scale: float | None = None) -> None:
        """Empty queue and journal, sequence counters at zero, added scenarios gone, the default back.

        Posted, not awaited, so a test that never talks to the server pays nothing for it: the
        server handles it before anything the test sends afterwards.
        """

        def reset_gateway() -> None:
            self._gateway.reset()
            if time_scale is not None:
                self._gateway.time_scale = time_scale

        self._server.post(reset_gateway)

    def use(self, scenario: ScenarioSpec) -> str:
        """Make `scenario` (a name, or a mapping in the v1 format) the default; returns its name."""
        name = self._known_name(scenario)
        self._server.call(setattr, self._gateway, "default", name)
        return name

    def queue(self, *scenarios: ScenarioSpec) -> list[str]:
        """The next requests that name no scenario get these, in order (a sequence its whole
        run, entry by entry); returns their names."""
        names = [self._known_name(scenario) for scenario in scenarios]
        self._server.call(lambda: [self._gateway.enqueue(name) for name in names])
        return names

    def _known_name(self, scenario: ScenarioSpec) -> str:
        """A name the server knows (UnknownScenario otherwise); a mapping is added first."""
        if isinstance(scenario, str):
            self._server.call(self._gateway.check_name, scenario)
            return scenario
        if isinstance(scenario, Mapping):
            return self._server.call(add_inline, self._gateway, scenario)
        raise TypeError(f"a scenario is a name or a mapping in the scenario format, got {type(scenario).__name__}")

    @property
    def time_scale(self) -> float:
        return self._server.call(getattr, self._gateway, "time_scale")

    @time_scale.setter
    def time_scale(self, value: float) -> None:
        try:
            scale = parse_time_scale(value)
        except ValueError as exc:
            raise ValueError(f"time_scale: {exc}") from None
        self._server.call(setattr, self._gateway, "time_scale", scale)

    # ------------------------------------------------------------ what the server saw

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request since the test began, oldest first."""
        return self._server.call(lambda: [RecordedRequest.from_record(r) for r in self._gateway.journal.records])

    def wait_for_requests(self, count: int = 1, timeout: float = 5.0) -> list[RecordedRequest]:
        """Block until `count` requests have arrived and every one has ended; returns `requests`.

        A client that hangs up is seen by the server a moment later: wait before asserting
        `client_disconnected`. On a server that shares the test's loop, use the async form.
        """
        if isinstance(self._server, SameLoop):
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
        taken = self._server.call(take, self._gateway)
        return judge(taken, Settings(**settings)).findings

    def assert_client_ok(self, allow: Iterable[str] = (), level: str = WARNING, **settings: Any) -> None:
        """Fail (AssertionError) on every finding of `level` or worse ("warning": all of them;
        "error": errors only) whose rule is not in `allow`."""
        allowed = set(allow)
        unknown = sorted(allowed - set(RULES))
        if unknown or level not in SEVERITIES:
            raise ValueError(f"allow: unknown rule {', '.join(unknown)}; the rules are: {', '.join(RULES)}" if unknown
                             else f"level: expected one of {', '.join(SEVERITIES)}, got {level!r}")
        broken = [finding for finding in self.verdict(**settings)
                  if finding.rule not in allowed and (level == WARNING or finding.severity == ERROR)]
        if broken:
            raise AssertionError(findings_report(broken))

    # ------------------------------------------------------------ official SDK clients

    def openai_client(self, **options: Any):
        """An `openai.OpenAI` client for this server; `options` go to the client as they are."""
        import openai

        return openai.OpenAI(**self._client_options(self.openai_base_url, options))

    def async_openai_client(self, **options: Any):
        import openai

        return openai.AsyncOpenAI(**self._client_options(self.openai_base_url, options))

    def anthropic_client(self, **options: Any):
        import anthropic

        return anthropic.Anthropic(**self._client_options(self.anthropic_base_url, options))

    def async_anthropic_client(self, **options: Any):
        import anthropic

        return anthropic.AsyncAnthropic(**self._client_options(self.anthropic_base_url, options))

    @staticmethod
    def _client_options(base_url: str, options: dict[str, Any]) -> dict[str, Any]:
        return {"base_url": base_url, "api_key": FAKE_API_KEY, **options}


def make_app(
    scenarios: Iterable[str | Path] = (),
    *,
    default: str = DEFAULT_SCENARIO,
    time_scale: float | None = None,
    api_key: str | None = None,
    allowed_hosts: Iterable[str] = (),
    lenient_conversations: bool = False,
) -> web.Application:
    """A fakehop Application for pytest-aiohttp's `aiohttp_server`, on the test's own loop.

    `scenarios` are directories added to the bundled scenarios; `time_scale` defaults to
    $FAKEHOP_TIME_SCALE or 1; `allowed_hosts` are Host names answered beside loopback names
    and IP addresses ("*": any). Drive it with `Fakehop.for_server(await aiohttp_server(app))`.
    """
    library = Library.load(scenarios)
    gateway = Gateway(library, default=default, time_scale=time_scale or time_scale_from_env(), api_key=api_key,
                      allowed_hosts=tuple(allowed_hosts), lenient_conversations=lenient_conversations)
    return create_app(gateway)
