"""A client for a running server's control API, on the standard library's urllib."""

from __future__ import annotations

import functools
import http.client
import json
import os
import queue
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .. import CONTROL_PREFIX as PREFIX
from ..state.journal import IN_PROGRESS, Record
from ..state.sessions import SESSION_HEADER

DEFAULT_URL = "http://127.0.0.1:8080"
TIMEOUT = 10.0
RECONNECT_WAIT = 5.0  # seconds between tries to reach a server that went away, at most


def default_url() -> str:
    return os.environ.get("FAKEHOP_URL") or DEFAULT_URL


def default_admin_token() -> str | None:
    return os.environ.get("FAKEHOP_ADMIN_TOKEN") or None


class ControlFailed(Exception):
    """The server could not be reached, or refused the call; str() is one readable line.

    `status` and `answer` are the HTTP status and JSON body of fakehop's refusal; both None when
    no fakehop server answered."""

    def __init__(
        self, message: str, problems: Iterable[str] = (), status: int | None = None, answer: dict | None = None
    ):
        super().__init__(message)
        self.problems = list(problems)
        self.status = status
        self.answer = answer


class TooSlow(ControlFailed):
    """The server began an answer but did not finish it in the time given."""

    def __init__(self) -> None:
        super().__init__("its answer did not come whole in time")


def within(seconds: float, call: Callable[[], Any]) -> Any:
    """What `call` returns or raises, when it is done within `seconds`; ControlFailed when it is
    not (TooSlow). A socket's timeout bounds each of its reads alone, not a server that sends a
    byte now and then: the call runs on a thread of its own, which is left to end by itself."""
    outcome: queue.Queue = queue.Queue(1)

    def run() -> None:
        try:
            outcome.put((call(), None))
        except Exception as exc:  # raised below, in the caller's thread
            outcome.put((None, exc))

    threading.Thread(target=run, daemon=True).start()
    try:
        answer, failure = outcome.get(timeout=seconds)
    except queue.Empty:
        raise TooSlow() from None
    if failure is not None:
        raise failure
    return answer


def refusal_of(answer: dict) -> str:
    """The message of a refusal: the control API's `error`, or the protocol error's own message
    (a path no route serves, which a URL past the server's root gets)."""
    error = answer.get("error", "no message")
    return error.get("message", error) if isinstance(error, dict) else error


class ControlClient:
    """Calls to one server's control API, acting on `session` (None: the global one)."""

    def __init__(self, url: str, admin_token: str | None = None, timeout: float = TIMEOUT, session: str | None = None):
        if not url.startswith(("http://", "https://")):
            raise ControlFailed(f"the server URL must look like {DEFAULT_URL}, got {url!r}")
        self.url = url.rstrip("/")
        self.admin_token = admin_token
        self.timeout = timeout
        self.session = session

    def call(
        self, method: str, path: str, payload: Any = None, *, text: str | None = None, query: dict | None = None
    ) -> dict:
        """One control call: `payload` goes as JSON, `text` as YAML; returns the JSON answer."""
        address = f"{self.url}{PREFIX}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
        headers = {"Accept": "application/json"}
        data = None
        if payload is not None:
            data, headers["Content-Type"] = json.dumps(payload).encode(), "application/json"
        elif text is not None:
            data, headers["Content-Type"] = text.encode(), "application/yaml"
        if self.admin_token:
            headers["Authorization"] = f"Bearer {self.admin_token}"
        if self.session is not None:
            headers[SESSION_HEADER] = self.session
        request = urllib.request.Request(address, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return self.answer_of(response.status, response.read())
        except urllib.error.HTTPError as exc:
            return self.answer_of(exc.code, exc.read())
        except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
            reason = getattr(exc, "reason", None) or exc
            reason = getattr(reason, "strerror", None) or reason
            raise ControlFailed(
                f"cannot reach a fakehop server at {self.url} ({reason}); start one with `fakehop serve` or pass --url"
            ) from None

    def answer_of(self, status: int, raw: bytes) -> dict:
        try:
            answer = json.loads(raw)
        except (ValueError, RecursionError):  # RecursionError: nested too deep
            answer = None
        if not isinstance(answer, dict):
            raise ControlFailed(f"{self.url} answered HTTP {status} without fakehop's JSON; is it a fakehop server?")
        if status >= 400:
            raise ControlFailed(f"HTTP {status}: {refusal_of(answer)}", answer.get("problems", []), status, answer)
        return answer

    def page(self, since: int) -> tuple[list[Record], bool]:
        """One page of the journal after `since`, and whether more follow at once."""
        answer = self.call("GET", "/requests", query={"since": since})
        return [Record.from_json(data) for data in answer["requests"]], answer["more"]

    def records(self, since: int) -> Iterator[Record]:
        """Every record in the journal after `since`, page by page."""
        more = True
        while more:
            page, more = self.page(since)
            yield from page
            since = page[-1].seq if page else since

    def wait_until_up(self, timeout: float, interval: float = 0.1) -> dict:
        """The health check's answer once the server gives one; ControlFailed with the last
        reason after `timeout` seconds (an interval more for the last try), or at once when
        fakehop answers with a refusal. A last try cut short by the deadline does not hide what
        an earlier, finished one was told: a slow machine must not turn "not fakehop" into
        "too slow"."""
        deadline = time.monotonic() + timeout
        told: ControlFailed | None = None  # the last reason from a try that finished
        while True:
            patience = max(deadline - time.monotonic(), interval)
            attempt = ControlClient(self.url, self.admin_token, patience, self.session)
            try:
                return self.healthy(within(patience, functools.partial(attempt.call, "GET", "/health")))
            except ControlFailed as exc:
                told = told if isinstance(exc, TooSlow) else exc
                left = deadline - time.monotonic()
                if exc.status is not None:
                    raise
                if left <= 0:
                    raise (told or exc) from None
            time.sleep(min(interval, left))  # the last attempt at the deadline, not an interval before it

    def healthy(self, answer: dict) -> dict:
        """`answer` when it is what fakehop's health check says: its status and version."""
        if answer.get("status") != "ok" or not isinstance(answer.get("version"), str):
            raise ControlFailed(
                f"{self.url} answered its health check without fakehop's status and version; is it a fakehop server?"
            )
        return answer

    def follow(
        self, since: int, interval: float, notice: Callable[[str], None] = lambda line: None
    ) -> Iterator[Record]:
        """Each request once it has finished, polling forever from after `since`.

        Each poll reads the journal page by page, then the next resumes just before the oldest
        request still in progress, so one that finishes after later ones is still seen; `shown`
        keeps the finished ones from repeating. When the server cannot be reached any more,
        `notice` is told, the polls wait until it answers again (see `reconnected`) and go on
        where they were; a server that restarted meanwhile numbers its requests from 1 again,
        so they are followed from its first."""
        started_at = self.call("GET", "/health").get("started_at")
        shown: set[int] = set()
        oldest_in_progress = None  # of the pages read so far in this poll
        while True:
            try:
                page, more = self.page(since)
            except ControlFailed as exc:
                if exc.status is not None:
                    raise
                restarted_at = self.reconnected(interval, notice)
                if restarted_at != started_at:
                    notice(f"the server at {self.url} restarted: its requests are numbered from #1 again")
                    started_at, since, shown, oldest_in_progress = restarted_at, 0, set(), None
                continue
            for record in page:
                if record.end != IN_PROGRESS and record.seq not in shown:
                    shown.add(record.seq)
                    yield record
            in_progress = [record.seq for record in page if record.end == IN_PROGRESS]
            oldest_in_progress = min(in_progress + ([oldest_in_progress] if oldest_in_progress else []), default=None)
            if more:
                since = page[-1].seq
                continue
            since = (
                oldest_in_progress - 1 if oldest_in_progress else max((record.seq for record in page), default=since)
            )
            oldest_in_progress = None
            shown = {seq for seq in shown if seq > since}
            time.sleep(interval)

    def reconnected(self, first_wait: float, notice: Callable[[str], None]) -> Any:
        """Once the server that went away answers its health check again, its `started_at`.
        The waits between tries double from `first_wait` up to RECONNECT_WAIT; `notice` is told
        once that the connection went, and once that it is back."""
        notice(f"lost the connection to {self.url}; reconnecting")
        wait = first_wait
        while True:
            time.sleep(wait)
            try:
                answer = self.call("GET", "/health")
            except ControlFailed as exc:
                if exc.status is not None:
                    raise
                wait = min(2 * wait, max(RECONNECT_WAIT, first_wait))
                continue
            notice(f"reconnected to {self.url}")
            return answer.get("started_at")
