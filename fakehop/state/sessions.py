"""Sessions: each test's own corner of one server.

A request belongs to the session its `X-Fakehop-Session` header names; else, when its API key
(Bearer or x-api-key) is `sk-fakehop-NAME`, to session NAME; else to the global session, which
is the server as it always was. Each session has its own queue, default, sequence counters,
added scenarios (over the server's library), faults, time scale and strict flag. The journal is the
server's one; its records carry their session, and a session's view of it is a filter.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast, final

from multidict import istr

from ..play.ratelimit import RateLimits
from ..protocols.common import ParsedRequest
from ..scenario.library import Library, Pinned, SequenceCounters, UnknownScenario
from ..scenario.model import Scenario, Script
from ..scenario.reader import NAME_PATTERN
from . import journal as jr
from .faults import Fault

SESSION_HEADER = "X-Fakehop-Session"
SCENARIO_HEADER = "X-Fakehop-Scenario"
SESSION_KEY_PREFIX = "sk-fakehop-"
BEARER = "bearer "  # the scheme of an Authorization header that carries a key, in any case
# The headers looked up for every request, as multidict's case-insensitive strings: looked up
# with one, a request's headers need not fold the name's case first (half the cost of a lookup).
SESSION_HEADER_KEY, AUTHORIZATION_KEY, X_API_KEY = istr(SESSION_HEADER), istr("Authorization"), istr("x-api-key")
SCENARIO_HEADER_KEY = istr(SCENARIO_HEADER)
DEFAULT_MAX_SESSIONS = 1000
DEFAULT_SESSION_IDLE = 600.0  # seconds with no request and no control call, after which a session is dropped
# Beside each session's own caps, what all sessions hold together: a thousand sessions with
# full queues, or each with thousands of added scenarios, would hold gigabytes.
MAX_QUEUED_IN_ALL = 1_000_000  # queue entries
MAX_ADDED_IN_ALL = 10_000  # scenarios added (a replaced one counted once)


@final  # tested by `type(x) is BadSessionName`
class BadSessionName(ValueError):
    """A session name that is not 1 to 128 letters, digits, '.', '_' and '-'."""


class Unmatched(LookupError):
    """In strict mode: a request that named no scenario, found the queue empty and fit no `match`."""

    def __init__(self, session: str | None):
        where = "the global session" if session is None else f"session {session!r}"
        super().__init__(
            f"No scenario was set up for this request, and {where} of this fakehop server is strict, so it does not "
            "fall back to the default scenario. Name one with the X-Fakehop-Scenario header, queue one "
            "(POST /_fakehop/queue, `fakehop queue NAME`, or fakehop.queue(...) in a test), or add a scenario "
            "whose `match` fits this request."
        )


def checked_name(name: str) -> str:
    if not NAME_PATTERN.fullmatch(name):
        shown = name if len(name) <= 40 else name[:40] + "..."
        raise BadSessionName(
            f"Invalid session name {shown!r}: a session name is 1 to 128 letters, digits, "
            "'.', '_' and '-', starting with a letter or digit."
        )
    return name


def session_named_by(headers: Mapping[str, str]) -> str | None:
    """The session a request names, unchecked: its header, else its key's; None for the global one.

    The key is the Authorization one, or with no Authorization header the `x-api-key`. This
    runs for every request: one that names no session costs two lookups in its headers (three
    without Authorization) and one search of its key, with no further call.
    """
    name = headers.get(SESSION_HEADER_KEY)
    if name is not None:
        return name
    key = headers.get(AUTHORIZATION_KEY)
    if key is None:
        key = headers.get(X_API_KEY)
        if key is None:
            return None
    if SESSION_KEY_PREFIX not in key:
        return None
    return session_in_key(key)


def session_in_key(key: str) -> str | None:
    """ID, from a key `sk-fakehop-ID` or `Bearer sk-fakehop-ID` (the scheme in any case); None from another."""
    if key.startswith(SESSION_KEY_PREFIX):
        return key[len(SESSION_KEY_PREFIX) :]
    if key[: len(BEARER)].lower() == BEARER and key.startswith(SESSION_KEY_PREFIX, len(BEARER)):
        return key[len(BEARER) + len(SESSION_KEY_PREFIX) :]
    return None


@dataclass(frozen=True)
class SessionStart:
    """What every session starts from, and goes back to when it is reset: the server's settings."""

    library: Library
    default: str
    time_scale: float
    strict: bool = False


class Session:
    """One session's state. It belongs to the server's event loop: change it only there."""

    def __init__(self, name: str | None, start: SessionStart, journal: jr.Journal, first_seq: int | None = None):
        """`first_seq`: the journal's first record that may be this session's; by default the next one."""
        self.name = name  # None for the global session
        self.start = start
        self.journal = journal
        self.queue: deque[str | Pinned] = deque()  # scenario names, and the entries of queued sequences
        self.counters = SequenceCounters()
        self.rate_limits = RateLimits()  # the windows of its answers' rate-limit headers
        self.faults: list[Fault] = []  # laid over its answers, oldest first (see faults)
        self.last_used = time.monotonic()
        self.reset()
        if first_seq is not None:
            self.journal_from = first_seq

    def reset(self) -> None:
        """Back to the start: no queue, no faults, counters at zero, rate limits full, no added
        scenarios, an empty journal view."""
        self.queue.clear()
        self.faults.clear()
        self.counters.clear()
        self.rate_limits.clear()
        self.added: set[str] = set()  # the names of the scenarios added to it
        self.added_version = 0  # with shared state: the version of them this session holds
        self.faults_version = 0  # and of its faults
        self.library = self.start.library
        self.default = self.start.default
        self.time_scale = self.start.time_scale
        self.strict = self.start.strict
        self.journal_from = self.journal.next_seq

    def apply(self, settings: Mapping[str, object]) -> None:
        """The settings kept for it elsewhere (shared state): default, time scale and strict flag, the server's where unset."""
        start = self.start
        self.default = cast(str, settings.get("default", start.default))
        self.time_scale = cast(float, settings.get("time_scale", start.time_scale))
        self.strict = cast(bool, settings.get("strict", start.strict))

    def take_added(self, scenarios: list[Scenario], version: int) -> None:
        """The session's added scenarios as the shared state holds them (version `version`), in the order added."""
        library = self.start.library
        for scenario in scenarios:
            library = library.with_scenario(scenario)
            self.counters.forget(scenario.name)
        self.library, self.added, self.added_version = library, {scenario.name for scenario in scenarios}, version

    def check_name(self, name: str) -> None:
        if name not in self.library.scenarios:
            raise UnknownScenario(name, self.library.names())

    def add(self, scenario: Scenario) -> None:
        """Add or replace a scenario (ScenarioError if its `use` does not resolve); a replaced one starts over."""
        self.library = self.library.with_scenario(scenario)
        self.added.add(scenario.name)
        self.counters.forget(scenario.name)

    def enqueue(self, name: str, times: int = 1) -> int:
        """Queue `name` for the next `times` runs (a sequence's run is all its entries); returns how many requests that is."""
        queued = self.library.queued(name) * times
        self.queue.extend(queued)
        return len(queued)

    def select(self, protocol: str, request: ParsedRequest, headers: Mapping[str, str]) -> str | Pinned:
        """The scenario a request gets: header, then queue, then `match`, then the default (Unmatched when strict)."""
        header = headers.get(SCENARIO_HEADER_KEY)
        if header is not None:
            self.check_name(header)
            return header
        if self.queue:
            return self.queue.popleft()
        matched = self.library.first_match(protocol, request, headers)
        if matched is not None:
            return matched.name
        if self.strict:
            raise Unmatched(self.name)
        return self.default

    def script_for(self, choice: str | Pinned, request: ParsedRequest | None = None) -> tuple[str, Script]:
        # Most requests: their scenario plays alike for every request, found with no further call.
        alike = self.library.alike.get(choice)
        return alike if alike is not None else self.counters.next_script(self.library, choice, request)

    def page(self, since: int, limit: float, max_bytes: float) -> tuple[list[jr.Record], bool]:
        """A page of this session's view of the journal after `since`, as `Journal.page` gives
        one. The global session's view is the whole journal, every session's requests with their
        `session`, so that one watching the server sees all of it; a named session's holds only
        its own. Either starts where the session was made or last emptied its view."""
        return self.journal.page(max(since, self.journal_from - 1), limit, max_bytes, self.name)

    def requests(self, since: int = 0) -> list[jr.Record]:
        """The whole of this session's view after `since`, oldest first."""
        return self.page(since, math.inf, math.inf)[0]

    def record(self, seq: int) -> jr.Record | None:
        """Record `seq`, when it is in this session's view."""
        page, _ = self.page(seq - 1, 1, math.inf)
        return page[0] if page and page[0].seq == seq else None

    def clear_requests(self) -> int:
        """Empty this session's view (the records stay for the other sessions' views); how many it held."""
        held = len(self.requests())
        self.journal_from = self.journal.next_seq
        return held


class Sessions:
    """The named sessions, made on first use. One idle for `idle_timeout` seconds is dropped,
    and when a new one would make more than `limit`, the one idle longest goes first."""

    def __init__(
        self,
        start: SessionStart,
        journal: jr.Journal,
        limit: int = DEFAULT_MAX_SESSIONS,
        idle_timeout: float = DEFAULT_SESSION_IDLE,
    ):
        self.start = start
        self.journal = journal
        self.limit = limit
        self.idle_timeout = idle_timeout
        self._by_name: OrderedDict[str, Session] = OrderedDict()  # the one used longest ago first

    def get(self, name: str, first_seq: int | None = None) -> Session:
        """Session `name` (a checked name), made now if it is new or was idle too long; a request
        that makes it gives its own record's seq as `first_seq`, so that the record is in its view."""
        session = self._by_name.get(name)
        now = time.monotonic()
        if session is None or now - session.last_used > self.idle_timeout:
            return self._make(name, first_seq)
        session.last_used = now
        self._by_name.move_to_end(name)
        return session

    def _make(self, name: str, first_seq: int | None) -> Session:
        self._by_name.pop(name, None)
        self.drop_idle()
        while len(self._by_name) >= self.limit:
            self._by_name.popitem(last=False)
        session = self._by_name[name] = Session(name, self.start, self.journal, first_seq)
        return session

    def drop(self, name: str) -> bool:
        """Forget session `name`; False when there was none."""
        return self._by_name.pop(name, None) is not None

    def drop_idle(self) -> None:
        cutoff = time.monotonic() - self.idle_timeout
        while self._by_name and next(iter(self._by_name.values())).last_used < cutoff:
            self._by_name.popitem(last=False)

    def listed(self) -> list[Session]:
        """Every session still kept, the one used longest ago (the next to go) first."""
        self.drop_idle()
        return list(self._by_name.values())
