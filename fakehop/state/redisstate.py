"""State shared on Redis (`fakehop serve --state redis://HOST:PORT/DB`): what requests and
control calls change, kept where every worker and every server given the same URL reads it,
so that they act as one server.

Each piece is kept with Redis' own atomic operations, with no lock of fakehop's: a session's
settings in a hash (a field not set is the server's own setting), its queue in a list (LPOP
hands each entry to exactly one request), its sequences' counters in a hash (HINCRBY), the
journal's seq from INCR, and the journal's
records in sorted sets scored by seq (the global session's view holds every session's, a
named session's its own), each record as the JSON the control API gives. The `redis`
library is imported here alone, and only by a server given `--state`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import math
import os
import socket
import time
from collections.abc import Mapping, Sequence
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

from ..play.player import PlayRequest
from ..play.ratelimit import FAMILIES, HEADERS, Window, quota_refusal
from ..protocols.responses import Thread
from ..scenario.library import Pinned
from ..scenario.model import HttpError, RateLimit, Scenario, Script
from ..scenario.reader import ScenarioError, parse_document, parse_text
from ..scenario.yamlsource import with_lines
from . import journal as jr
from .faults import Fault, parse_fault
from .sessions import DEFAULT_MAX_SESSIONS, Session
from .stored import answer_id

log = logging.getLogger("fakehop")

__all__ = ["STOP_CANCEL", "STOP_DELETE", "RedisState", "ShownRun", "StateDown", "record_shown", "shown_url"]

KEY_PREFIX = "fakehop:"
GLOBAL = "~"  # the global session's name in keys: no session name can be it
CONNECT_TIMEOUT = 1.0  # seconds: an unreachable Redis is told at once, not after the client's own timeout
REPLY_TIMEOUT = 5.0
# Connections one process opens to Redis at most; a request finds them all busy waits its turn
# (at most REPLY_TIMEOUT), as each call takes one round trip.
MAX_CONNECTIONS = 64
# One answer's take of a rate-limit window, on Redis' clock: the window opened afresh once it
# has ended, then one request and the answer's tokens taken (none below 0); what is left, and
# the seconds until the window ends. KEYS[1]: the session's windows; ARGV: the limits' id, the
# window's seconds, its requests, input, output and all tokens, then the input and output taken,
# and for an enforced limit the protocol's family: then a window used up is told (what ran out, as its
# 429 names it) and nothing taken.
TAKE_FROM_WINDOW = """
local key, id = KEYS[1], ARGV[1]
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local ends = tonumber(redis.call('HGET', key, id .. ':ends') or '0')
if now >= ends then
  ends = now + tonumber(ARGV[2])
  redis.call('HSET', key, id .. ':ends', string.format('%.6f', ends), id .. ':requests', ARGV[3],
    id .. ':input', ARGV[4], id .. ':output', ARGV[5], id .. ':tokens', ARGV[6])
end
local family = ARGV[9]  -- given for an enforced limit: a window used up for it refuses, taking nothing
if family then
  local function held(name) return tonumber(redis.call('HGET', key, id .. ':' .. name)) end
  local requests, input, output, tokens = held('requests'), held('input'), held('output'), held('tokens')
  local used_up = false
  if requests == 0 then
    used_up = 'requests'
  elseif tokens == 0 or (family == 'anthropic' and (input == 0 or output == 0)) then
    used_up = 'tokens'
  end
  if used_up then
    return {string.format('%.6f', ends - now), requests, input, output, tokens, used_up}
  end
end
local function take(name, amount)
  if amount == 0 then  -- not HINCRBY by -0, which Lua writes as "-0", no integer to Redis
    return tonumber(redis.call('HGET', key, id .. ':' .. name))
  end
  local left = redis.call('HINCRBY', key, id .. ':' .. name, -amount)
  if left < 0 then
    redis.call('HSET', key, id .. ':' .. name, 0)
    left = 0
  end
  return left
end
local taken_in, taken_out = tonumber(ARGV[7]), tonumber(ARGV[8])
return {string.format('%.6f', ends - now), take('requests', 1), take('input', taken_in),
  take('output', taken_out), take('tokens', taken_in + taken_out)}
"""
# The named sessions capped at --max-sessions for every server: while more are listed, the one
# used longest ago (never the one this call uses) goes, with its keys, as a single server drops it.
# KEYS[1]: the listed sessions; ARGV: the cap, the session used, then each kind's key prefix.
DROP_OVER_CAP = """
local key, cap, used = KEYS[1], tonumber(ARGV[1]), ARGV[2]
while redis.call('ZCARD', key) > cap do
  local oldest = redis.call('ZRANGE', key, 0, 1)
  local name = oldest[1] == used and oldest[2] or oldest[1]
  redis.call('ZREM', key, name)
  for i = 3, #ARGV do
    redis.call('DEL', ARGV[i] .. name)
  end
end
"""
METRICS_SECONDS = 30  # a process's published counts, after which a process that stopped is no longer counted
KEPT_RESPONSE_SECONDS = 24 * 3600  # a stored Responses answer, from the last one its session kept
THREAD_CLAIM_SECONDS = 3600  # the longest a turn continuing a Thread holds it (its server may stop first)
SHOWN_OVER_SECONDS = 3600  # a background answer that ended, shown beside its stored answer (see show_run)
STOP_CANCEL, STOP_DELETE = "cancel", "delete"  # how another server asks for a background answer to stop
ANSWERED_BY = f"{socket.gethostname()}/{os.getpid()}"  # in each record filed: which server, which process


# A session's keys, by kind: `session` its settings (a hash; a field not set is the server's
# own), `queue` its queue (a list), `journal` its view of the journal (a sorted set by seq; the
# global session's holds every record), `added` the scenarios added to it (a hash by name, each
# as the source it was added from), `faults` its faults (a hash by id, each as its spec) and
# `faults-left` what each with `times` will still break (HINCRBY -1 as one is taken),
# `faults-drawn` the draws each with a probability has made (HINCRBY 1 a request in its scope),
# `responses` its stored Responses answers (a hash by id), `rate-limits` its rate-limit windows
# (see TAKE_FROM_WINDOW), `counters` the requests each sequence has answered (HINCRBY), `runs`
# its background answers under way on any server (a set of response ids: see show_run).
SESSION_KINDS = (
    "session",
    "queue",
    "journal",
    "added",
    "faults",
    "faults-left",
    "faults-drawn",
    "responses",
    "threads",
    "threads-continued",
    "rate-limits",
    "counters",
    "runs",
)


def session_key(kind: str, session: str | None) -> str:
    return f"{KEY_PREFIX}{kind}:{session or GLOBAL}"


@dataclasses.dataclass(frozen=True)
class ShownRun:
    """A background answer as the server playing it last showed it (see RedisState.show_run)."""

    server: str  # HOST/PID
    response: dict
    ending: str | None


class StateDown(Exception):
    """Redis could not be reached (or did not answer): nothing is answered from state not read."""

    def __init__(self, url: str, reason: object):
        self.url = url
        super().__init__(
            f"fakehop's shared state at {url} cannot be reached ({reason}); "
            "the request was not answered, and service resumes once Redis answers again"
        )


def shown_url(url: str) -> str:
    """The state URL as fakehop shows it: a password in it left out."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:****@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def entry_text(entry: str | Pinned) -> str:
    """A queue entry as the list holds it: a name, or a sequence's entry as JSON `[name, number]`."""
    return json.dumps(list(entry)) if isinstance(entry, Pinned) else entry


def entry_of(text: str) -> str | Pinned:
    if text.startswith("["):
        name, number = json.loads(text)
        return Pinned(name, number)
    return text


def settings_of(fields: Mapping[str, str]) -> dict[str, Any]:
    """A session's settings as its hash holds them (the ones set), as Python values."""
    settings: dict[str, Any] = {}
    if "default" in fields:
        settings["default"] = fields["default"]
    if "time_scale" in fields:
        settings["time_scale"] = float(fields["time_scale"])
    if "strict" in fields:
        settings["strict"] = fields["strict"] == "1"
    return settings


def setting_text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return repr(value) if isinstance(value, float) else str(value)


class RedisState:
    """The state of every server on `url`, as seen from this one. Every call raises StateDown
    when Redis cannot be reached; the client connects again by itself on the next call."""

    def __init__(
        self,
        url: str,
        capacity: int = jr.DEFAULT_CAPACITY,
        session_idle: float = math.inf,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
    ):
        import redis.asyncio as aioredis

        self.url = shown_url(url)
        self.capacity = capacity  # journal records kept, as --journal-size
        self.session_idle = session_idle  # a named session's keys go after this long unused
        self.max_sessions = max_sessions  # named sessions listed at most, for every server
        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            max_connections=MAX_CONNECTIONS,
            timeout=REPLY_TIMEOUT,
            decode_responses=True,
            socket_connect_timeout=CONNECT_TIMEOUT,
            socket_timeout=REPLY_TIMEOUT,
        )
        self.client = aioredis.Redis.from_pool(pool)  # closed with the client
        self.errors: tuple[type[BaseException], ...] = (aioredis.ConnectionError, aioredis.TimeoutError, OSError)
        self.take_from_window = self.client.register_script(TAKE_FROM_WINDOW)

    async def close(self) -> None:
        await self.client.aclose()

    def down(self, exc: BaseException) -> StateDown:
        return StateDown(self.url, exc)

    # ------------------------------------------------------------ keys

    # INCR: a new version of some session's added scenarios or faults, and a new fault's id
    VERSION_KEY = KEY_PREFIX + "version"

    @staticmethod
    def response_session_key(response_id: str) -> str:
        """The session that last kept an answer of this id (as the real API, one asked for is found in any session)."""
        return f"{KEY_PREFIX}response-session:{response_id}"

    SEQ_KEY = KEY_PREFIX + "seq"
    SESSIONS_KEY = KEY_PREFIX + "sessions"  # the named sessions, each scored by when it was last used (time.time())
    STARTED_KEY = KEY_PREFIX + "started-at"
    METRICS_KEY = KEY_PREFIX + "metrics"  # the keys of the processes' published counts

    def session_keys(self, session: str | None) -> list[str]:
        return [session_key(kind, session) for kind in SESSION_KINDS]

    def capped(self, session: str) -> tuple:
        """What drops the sessions used longest ago (not `session`) while more than `max_sessions` are listed."""
        prefixes = (f"{KEY_PREFIX}{kind}:" for kind in SESSION_KINDS)
        return ("eval", DROP_OVER_CAP, 1, self.SESSIONS_KEY, self.max_sessions, session, *prefixes)

    # ------------------------------------------------------------ calls

    async def ping(self) -> None:
        try:
            await self.client.ping()
        except self.errors as exc:
            raise self.down(exc) from None

    async def run(self, *commands: tuple) -> list:
        """`commands` in one round trip, as one transaction (MULTI/EXEC): all of them or none."""
        try:
            async with self.client.pipeline(transaction=True) as pipe:
                for name, *args in commands:
                    getattr(pipe, name)(*args)
                return await pipe.execute()
        except self.errors as exc:
            raise self.down(exc) from None

    def touched(self, session: str | None) -> list[tuple]:
        """A named session's keys kept for `session_idle` more seconds from now."""
        if session is None:
            return []
        used = ("zadd", self.SESSIONS_KEY, {session: time.time()})
        return [used, self.capped(session), *self.expiring(session, *SESSION_KINDS)]

    def expiring(self, session: str | None, *kinds: str) -> list[tuple]:
        """These keys of a named session kept for `session_idle` more seconds from now: after
        each write that may make one (a key made after the session was touched has no expiry)."""
        if session is None or math.isinf(self.session_idle):
            return []
        seconds = max(1, math.ceil(self.session_idle))
        return [("expire", session_key(kind, session), seconds) for kind in kinds]

    async def synced(
        self, session: Session, take_entry: bool = False, record: jr.Record | None = None
    ) -> str | Pinned | None:
        """`session` as the shared state holds it: its settings, and its added scenarios and
        faults when they changed since it last read them; with `take_entry`, the first queue
        entry, taken off the queue (LPOP: by this request alone), or None. `record`, a request's
        under way, is filed in the journal in the same round trip."""
        name = session.name
        taking = [("lpop", session_key("queue", name))] if take_entry else []
        filing = [] if record is None else self.filing(record)
        fields, left, *rest = await self.run(
            ("hgetall", session_key("session", name)),
            ("hgetall", session_key("faults-left", name)),
            *taking,
            *self.touched(name),
            *filing,
        )
        session.apply(settings_of(fields))
        version = int(fields.get("added", 0))
        if version != session.added_version:
            (sources,) = await self.run(("hgetall", session_key("added", name)))
            scenarios = await asyncio.to_thread(added_scenarios, sources.values())
            session.take_added(scenarios, version)
        version = int(fields.get("faults", 0))
        if version != session.faults_version:
            (specs,) = await self.run(("hgetall", session_key("faults", name)))
            session.faults[:], session.faults_version = faults_of(specs.values()), version
        for fault in session.faults:
            if fault.left is not None:
                fault.left = int(left.get(fault.id, 0))
        return entry_of(rest[0]) if take_entry and rest[0] is not None else None

    async def add_fault(self, session: Session, fault: Fault, spec: Mapping[str, Any]) -> None:
        """Lay `fault` (read from `spec`) over the session's answers on every server; it gets its id here."""
        (version,) = await self.run(("incr", self.VERSION_KEY))
        fault.id = f"fault_{version}"
        kept = json.dumps({"order": version, "id": fault.id, "spec": dict(spec)})
        left = (
            [("hset", session_key("faults-left", session.name), fault.id, fault.left)] if fault.left is not None else []
        )
        await self.run(
            ("hset", session_key("faults", session.name), fault.id, kept),
            *left,
            ("hset", session_key("session", session.name), "faults", version),
            *self.touched(session.name),
        )
        session.faults_version = version

    async def take_fault(self, session: str | None, fault: Fault) -> bool:
        """Count a request `fault` breaks; False when another server took its last one first."""
        if fault.left is None:
            return True
        (left,) = await self.run(("hincrby", session_key("faults-left", session), fault.id, -1))
        if left == 0:
            await self.remove_faults(session, [fault.id])
        return left >= 0

    async def draw_numbers(self, session: str | None, faults: list[Fault]) -> dict[str, int]:
        """The number of the draw each of `faults` makes for a request, counted for every server (HINCRBY)."""
        key = session_key("faults-drawn", session)
        counts = await self.run(
            *(("hincrby", key, fault.id, 1) for fault in faults), *self.expiring(session, "faults-drawn")
        )
        return {fault.id: count - 1 for fault, count in zip(faults, counts)}

    async def remove_faults(self, session: str | None, ids: list[str] | None = None) -> int:
        """Remove the faults `ids` (None: every one) from the session; how many there were."""
        (version,) = await self.run(("incr", self.VERSION_KEY))
        keys = [session_key(kind, session) for kind in ("faults", "faults-left", "faults-drawn")]
        removing = [*(("hdel", key, *ids) for key in keys)] if ids else [("hlen", keys[0]), ("delete", *keys)]
        removed, *_ = await self.run(
            *removing, ("hset", session_key("session", session), "faults", version), *self.expiring(session, "session")
        )
        return removed

    async def add(self, session: Session, scenario: Scenario, source: dict) -> None:
        """Keep `scenario`, added to `session` from `source` (see added_scenarios), for every server."""
        (version,) = await self.run(("incr", self.VERSION_KEY))
        kept = json.dumps({"order": version, "name": scenario.name, **source})
        await self.run(
            ("hset", session_key("added", session.name), scenario.name, kept),
            ("hset", session_key("session", session.name), "added", version),
            ("hdel", session_key("counters", session.name), scenario.name),
            *self.touched(session.name),
        )
        session.added_version = version

    async def set_setting(self, session: str | None, name: str, value: Any) -> None:
        await self.run(("hset", session_key("session", session), name, setting_text(value)), *self.touched(session))

    async def enqueue(self, session: str | None, entries: list[str | Pinned]) -> int:
        """Queue `entries` at the end; the queue's length after."""
        length, *_ = await self.run(
            ("rpush", session_key("queue", session), *map(entry_text, entries)), *self.touched(session)
        )
        return length

    async def queue(self, session: str | None) -> list[str | Pinned]:
        (texts,) = await self.run(("lrange", session_key("queue", session), 0, -1))
        return [entry_of(text) for text in texts]

    async def queue_length(self, session: str | None) -> int:
        (length,) = await self.run(("llen", session_key("queue", session)))
        return length

    async def clear_queue(self, session: str | None) -> int:
        """Empty the queue; how many entries it held."""
        length, _ = await self.run(("llen", session_key("queue", session)), ("delete", session_key("queue", session)))
        return length

    async def reset(self, session: str | None) -> bool:
        """The session back to the server's settings, its queue and its view of the journal empty
        (a named one no longer listed), its background answers under way stopped and dropped
        wherever they play; whether a named one was. The global session's view is the whole
        journal: emptied, its records go for every view."""
        (runs,) = await self.run(("smembers", session_key("runs", session)))
        stopping = [("set", self.stop_key(response_id), STOP_DELETE, KEPT_RESPONSE_SECONDS) for response_id in runs]
        _, listed, *_ = await self.run(
            ("delete", *self.session_keys(session), *map(self.run_key, runs), *map(self.events_key, runs)),
            ("zrem", self.SESSIONS_KEY, session or GLOBAL),
            *stopping,
        )
        return bool(listed)

    async def sessions(self) -> list[dict[str, Any]]:
        """Every named session used within `session_idle`, the one used longest ago first: its
        idle seconds, settings (the ones set), queue length and requests in its journal view."""
        now = time.time()
        _, used = await self.run(
            ("zremrangebyscore", self.SESSIONS_KEY, "-inf", now - self.session_idle),
            ("zrange", self.SESSIONS_KEY, 0, -1, False, True),  # with scores
        )
        reads = [
            command
            for name, _ in used
            for command in (
                ("hgetall", session_key("session", name)),
                ("llen", session_key("queue", name)),
                ("zcard", session_key("journal", name)),
            )
        ]
        counts = await self.run(*reads) if reads else []
        return [
            {"session": name, "idle": round(now - last, 3), **settings_of(fields), "queue": queue, "requests": requests}
            for (name, last), fields, queue, requests in zip(used, counts[0::3], counts[1::3], counts[2::3])
        ]

    async def count(self, session: str | None, sequence: str) -> int:
        """One more request for `sequence`: its number, counted once for every server (HINCRBY)."""
        number, *_ = await self.run(
            ("hincrby", session_key("counters", session), sequence, 1), *self.expiring(session, "counters")
        )
        return number

    async def keep_response(self, session: str | None, before: Thread | str, answer: bytes, whole: bool) -> None:
        """Keep a Responses answer (see stored.StoredResponses.keep) where every server finds it by its id."""
        response_id = answer_id(answer, whole)
        kept = json.dumps({"before": thread_json(before), "answer": answer.decode(), "whole": whole})
        key = session_key("responses", session)
        await self.run(
            ("hset", key, response_id, kept),
            ("expire", key, KEPT_RESPONSE_SECONDS),
            ("setex", self.response_session_key(response_id), KEPT_RESPONSE_SECONDS, session or GLOBAL),
        )

    async def kept_response(
        self, response_id: str, session: str | None
    ) -> tuple[str | None, Thread | str, bytes, bool] | None:
        """The answer `response_id` as kept: the session holding it (the asking one first), what
        was kept of its request, the answer, whether whole; None when none is kept."""
        own, holder = await self.run(
            ("hget", session_key("responses", session), response_id), ("get", self.response_session_key(response_id))
        )
        if own is None and holder is not None:
            session = None if holder == GLOBAL else holder
            (own,) = await self.run(("hget", session_key("responses", session), response_id))
        if own is None:
            return None
        kept = json.loads(own)
        return session, thread_of(kept["before"]), kept["answer"].encode(), kept["whole"]

    async def keep_thread(self, session: str | None, thread_id: str, held: dict, previous: str | None) -> None:
        """Hold a Thread's answer (threads.Held's JSON) where every server finds it by its id,
        and the answer it continued as continued."""
        key, continued = session_key("threads", session), session_key("threads-continued", session)
        marked = (
            [] if previous is None else [("hset", continued, previous, 1), ("expire", continued, KEPT_RESPONSE_SECONDS)]
        )
        await self.run(("hset", key, thread_id, json.dumps(held)), ("expire", key, KEPT_RESPONSE_SECONDS), *marked)

    async def claimed_thread(self, session: str | None, thread_id: str) -> tuple[dict | None, bool, bool]:
        """The Thread's answer `thread_id` as held (None: none), whether an answer continuing
        it was kept, and whether this request now continues it (False: another one does); a
        claim that cannot be used is let go at once."""
        held, continued, took = await self.run(
            ("hget", session_key("threads", session), thread_id),
            ("hexists", session_key("threads-continued", session), thread_id),
            ("set", self.thread_claim_key(session, thread_id), ANSWERED_BY, THREAD_CLAIM_SECONDS, None, True),
        )
        if took and (held is None or continued):
            await self.release_thread(session, thread_id)
        return (None if held is None else json.loads(held)), bool(continued), bool(took)

    async def release_thread(self, session: str | None, thread_id: str) -> None:
        await self.run(("delete", self.thread_claim_key(session, thread_id)))

    @staticmethod
    def thread_claim_key(session: str | None, thread_id: str) -> str:
        """Held while a request continues the Thread's answer `thread_id` (see claimed_thread)."""
        return f"{KEY_PREFIX}thread-claim:{session or GLOBAL}:{thread_id}"

    async def forget_response(self, response_id: str, session: str | None) -> None:
        await self.run(("hdel", session_key("responses", session), response_id))

    # ------------------------------------------------------------ background answers under way

    @staticmethod
    def run_key(response_id: str) -> str:
        """A background answer under way, as the server playing it last showed it (see show_run)."""
        return f"{KEY_PREFIX}run:{response_id}"

    @staticmethod
    def events_key(response_id: str) -> str:
        """A background answer's events, as the server playing it keeps them (a list: see show_run)."""
        return f"{KEY_PREFIX}run-events:{response_id}"

    @staticmethod
    def stop_key(response_id: str) -> str:
        """How another server asked the one playing a background answer to stop it: STOP_CANCEL or STOP_DELETE."""
        return f"{KEY_PREFIX}run-stop:{response_id}"

    async def show_run(
        self,
        session: str | None,
        response: dict,
        ending: str | None,
        over: bool,
        frames: Sequence[tuple[int, bytes]] = (),
    ) -> None:
        """A background answer of `session`'s for every server: its response object as the latest
        lifecycle event showed it, its own `ending` (see background.Run), and `frames` more of its
        events (each with its number) for a stream read again. Once it is `over` (kept in the
        store by then) it is shown SHOWN_OVER_SECONDS more and is no longer among the session's
        runs under way."""
        response_id = response["id"]
        shown = json.dumps({"server": ANSWERED_BY, "response": response, "ending": ending})
        seconds = SHOWN_OVER_SECONDS if over else KEPT_RESPONSE_SECONDS
        events = self.events_key(response_id)
        pushed = [("rpush", events, *(b"%d %b" % frame for frame in frames))] if frames else []
        await self.run(
            ("set", self.run_key(response_id), shown, seconds),
            ("srem" if over else "sadd", session_key("runs", session), response_id),
            *pushed,
            ("expire", events, seconds),
        )

    async def shown_run(self, response_id: str) -> ShownRun | None:
        """A background answer as the server playing it last showed it; None for no such answer."""
        (shown,) = await self.run(("get", self.run_key(response_id)))
        return None if shown is None else ShownRun(**json.loads(shown))

    async def shown_events(self, response_id: str, start: int) -> list[tuple[int, bytes]]:
        """A background answer's events shown so far, from the `start`-th on, each with its number."""
        (events,) = await self.run(("lrange", self.events_key(response_id), start, -1))
        numbered = [event.encode().split(b" ", 1) for event in events]
        return [(int(number), frame) for number, frame in numbered]

    async def hide_run(self, response_id: str) -> None:
        """A background answer deleted through a server that does not play it: no longer shown."""
        await self.run(("delete", self.run_key(response_id), self.events_key(response_id)))

    async def forget_run(self, session: str | None, response_id: str) -> None:
        """A background answer of `session`'s dropped by the server playing it: no longer shown,
        under way or asked to stop."""
        await self.run(
            ("delete", self.run_key(response_id), self.stop_key(response_id), self.events_key(response_id)),
            ("srem", session_key("runs", session), response_id),
        )

    async def ask_stop(self, response_id: str, how: str) -> None:
        await self.run(("set", self.stop_key(response_id), how, KEPT_RESPONSE_SECONDS))

    async def stop_asked(self, response_id: str) -> str | None:
        """How a server asked this one to stop a background answer it plays, taken (once); None: not asked."""
        (how,) = await self.run(("getdel", self.stop_key(response_id)))
        return how

    async def started_at(self) -> float:
        """When the shared state began (time.time()): a new value means the journal's seq starts again at 1."""
        _, started = await self.run(
            ("set", self.STARTED_KEY, repr(time.time()), None, None, True), ("get", self.STARTED_KEY)
        )
        return float(started)

    async def rate_limit_headers(
        self, session: str | None, protocol: str, script: Script, request: PlayRequest
    ) -> list[tuple[str, str]]:
        """RateLimits.headers, its window one for every server: one more answer of `script` takes
        one request, its input tokens and the output tokens the request allows."""
        left, *counts = await self.taken_from_window(session, script, request)
        return shared_headers(cast(RateLimit, script.rate_limit), FAMILIES[protocol], float(left), counts)[1]

    async def enforced_rate_limit(
        self, session: str | None, protocol: str, script: Script, request: PlayRequest
    ) -> tuple[HttpError | None, list[tuple[str, str]]]:
        """RateLimits.refusal and then headers, as one step for every server (one Lua script, so
        that two servers refuse together): the 429 while the shared window is used up (the request
        takes nothing from it, Retry-After the whole seconds until it opens on Redis' clock), else
        None and the headers of the answer, which takes its share as rate_limit_headers does."""
        limit, family = cast(RateLimit, script.rate_limit), FAMILIES[protocol]
        left, *counts = await self.taken_from_window(session, script, request, family)
        if len(counts) == 4:
            return None, shared_headers(limit, family, float(left), counts)[1]
        *counts, used_up = counts
        window, headers = shared_headers(limit, family, float(left), counts)
        return quota_refusal(family, window, used_up, max(1, math.ceil(float(left))), headers), headers

    async def taken_from_window(
        self, session: str | None, script: Script, request: PlayRequest, family: str | None = None
    ) -> list:
        """TAKE_FROM_WINDOW's answer for one more answer of `script` (refusing for `family`'s enforced limit)."""
        limit = cast(RateLimit, script.rate_limit)
        input_tokens = request.input_tokens if script.usage.input_tokens is None else script.usage.input_tokens
        output_tokens = request.max_output_tokens or 0
        limits = (limit.window, limit.requests, limit.input_tokens, limit.output_tokens, limit.tokens)
        enforcing = [] if family is None else [family]
        try:
            return await self.take_from_window(
                keys=[session_key("rate-limits", session)],
                args=[limits_id(limit), *limits, input_tokens, output_tokens, *enforcing],
            )
        except self.errors as exc:
            raise self.down(exc) from None

    async def publish_metrics(self, snapshot: dict) -> None:
        """This process's counts (see metrics.Counts.snapshot), read by every server's GET /metrics until they expire."""
        key = f"{KEY_PREFIX}metrics:{ANSWERED_BY}"
        await self.run(("setex", key, METRICS_SECONDS, json.dumps(snapshot)), ("sadd", self.METRICS_KEY, key))

    async def metrics_snapshots(self) -> list[dict]:
        """The counts every live process published; those that expired go from the set."""
        (keys,) = await self.run(("smembers", self.METRICS_KEY))
        keys = sorted(keys)
        (texts,) = await self.run(("mget", *keys)) if keys else ([],)
        gone = [key for key, text in zip(keys, texts) if text is None]
        if gone:
            await self.run(("srem", self.METRICS_KEY, *gone))
        return [json.loads(text) for text in texts if text is not None]

    async def next_seq(self) -> int:
        """The journal's next seq, one numbering for every server (INCR)."""
        (seq,) = await self.run(("incr", self.SEQ_KEY))
        return seq

    async def file(self, record: jr.Record) -> None:
        await self.run(*self.filing(record))

    def filing(self, record: jr.Record) -> list[tuple]:
        """What writes `record` (as it is now) into the journal: in the global view and its
        session's, replacing what an earlier write of it held; the oldest go past the journal's capacity."""
        text = json.dumps({**record.as_json(secrets=True, frames=True), "answered_by": ANSWERED_BY})
        commands: list[tuple] = []
        for key in {session_key("journal", None), session_key("journal", record.session)}:
            commands += [
                ("zremrangebyscore", key, record.seq, record.seq),
                ("zadd", key, {text: record.seq}),
                ("zremrangebyrank", key, 0, -self.capacity - 1),
            ]
        return [*commands, *self.expiring(record.session, "journal")]

    async def page(self, session: str | None, since: int, limit: float, max_bytes: float) -> tuple[list[dict], bool]:
        """At most `limit` records of the session's view after `since`, holding at most
        `max_bytes` of JSON together (but at least one), and whether more follow."""
        count = -1 if math.isinf(limit) else int(limit) + 1
        (texts,) = await self.run(("zrangebyscore", session_key("journal", session), f"({since}", "+inf", 0, count))
        page: list[dict] = []
        size = 0
        for text in texts:
            if len(page) >= limit or (page and size + len(text) > max_bytes):
                return page, True
            page.append(json.loads(text))
            size += len(text)
        return page, False

    async def records(self, session: str | None) -> list[jr.Record]:
        """The session's whole view of the journal, as records (see record_of)."""
        return [record_of(data) for data in (await self.page(session, 0, math.inf, math.inf))[0]]

    async def record(self, session: str | None, seq: int) -> dict | None:
        (texts,) = await self.run(("zrangebyscore", session_key("journal", session), seq, seq))
        return json.loads(texts[0]) if texts else None

    async def journal_news(
        self, since: int, newest: int, seqs: list[int]
    ) -> tuple[int, list[jr.Record], int | None, int, list[jr.Record]]:
        """What a console's push reads of the whole journal, in one round trip: how many records
        it holds after `since`, the newest `newest` of them (oldest first), the seq of the oldest
        it holds (None when it is empty), the newest seq taken (lower than `since` once the
        numbering began again), and the records of `seqs` it still holds, as they are now."""
        key = session_key("journal", None)
        count, texts, oldest, taken, *held = await self.run(
            ("zcount", key, f"({since}", "+inf"),
            ("zrevrangebyscore", key, "+inf", f"({since}", 0, newest),
            ("zrange", key, 0, 0, False, True),
            ("get", self.SEQ_KEY),
            *(("zrangebyscore", key, seq, seq) for seq in seqs),
        )
        records = [record_of(json.loads(text)) for text in reversed(texts)]
        again = [record_of(json.loads(found[0])) for found in held if found]
        return count, records, int(oldest[0][1]) if oldest else None, int(taken or 0), again

    async def newest_records(self, count: int) -> list[jr.Record]:
        """The whole journal's newest `count` records, oldest first."""
        (texts,) = await self.run(("zrevrange", session_key("journal", None), 0, count - 1))
        return [record_of(json.loads(text)) for text in reversed(texts)]

    async def clear_journal(self, session: str | None) -> int:
        """Empty the session's view; how many records it held."""
        held, _ = await self.run(
            ("zcard", session_key("journal", session)), ("delete", session_key("journal", session))
        )
        return held


def thread_json(before: Thread | str) -> Any:
    """What was kept of a request, as JSON: its text, or its Thread with the calls of the whole chain it continues."""
    if isinstance(before, str):
        return before
    chain: list[Thread] = []
    thread: Thread | None = before
    while thread is not None:
        chain.append(thread)
        thread = thread.continued()
    calls = {call_id: name for link in reversed(chain) for call_id, name in link.calls.items()}  # the newest wins
    return {"turns": before.turns, "calls": calls, "system": before.system, "prompt": before.prompt}


def thread_of(kept: Any) -> Thread | str:
    if isinstance(kept, str):
        return kept
    return Thread(kept["turns"], kept["calls"], kept["system"], kept["prompt"])


def shared_headers(
    limit: RateLimit, family: str, left: float, counts: list[int]
) -> tuple[Window, list[tuple[str, str]]]:
    """A shared window, `left` seconds before it ends with `counts` left (requests, input, output
    and all tokens), and its rate-limit headers in `family`'s names."""
    now = time.monotonic()
    window = Window(limit, now)
    window.ends = now + left
    window.requests, window.input_tokens, window.output_tokens, window.tokens = counts
    ends = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + left))  # the shared window's end
    fixed = tuple((name, ends) if name.endswith("-reset") else (name, value) for name, value in window.fixed[family])
    return window, HEADERS[family](window, fixed, now)


def limits_id(limit: RateLimit) -> str:
    """The same limits' id on every server: a scenario's `rate_limit:` block by what it says."""
    return hashlib.sha1(repr(limit).encode()).hexdigest()[:16]


def faults_of(kept: Any) -> list[Fault]:
    """A session's faults as the shared state keeps them, oldest first (`left` read apart)."""
    faults = []
    for text in sorted(kept, key=lambda text: json.loads(text)["order"]):
        entry = json.loads(text)
        fault = parse_fault(entry["spec"])
        fault.id = entry["id"]
        faults.append(fault)
    return faults


def added_scenarios(kept: Any) -> list[Scenario]:
    """The scenarios added to a session, in the order they were added, each read again from
    its source: `{"text": YAML}` or `{"document": JSON}`, named `name`."""
    scenarios = []
    for text in sorted(kept, key=lambda text: json.loads(text)["order"]):
        source = json.loads(text)
        try:
            if "text" in source:
                scenario = parse_text(source["text"], source["source"], source["name"])
            else:
                scenario = parse_document(with_lines(source["document"]), source["source"], source["name"])
        except ScenarioError as exc:  # written by a server of another version
            log.warning("scenario %r in the shared state cannot be read here: %s", source["name"], exc)
            continue
        scenarios.append(dataclasses.replace(scenario, name=source["name"]))
    return scenarios


def record_of(data: dict) -> jr.Record:
    """A record filed by any server, on the clock all of them share (time.time()): its arrival,
    its frames' and its write's times counted from `started_at`."""
    record = jr.Record.from_json({key: value for key, value in data.items() if key != "frames"})
    arrived = record._started = record.started_at
    record.frames = [(arrived + at, text.encode()) for at, text in data["frames"]]
    if record.write_began is not None:
        record.write_began += arrived
    return record


def record_shown(data: dict, secrets: bool, frames: bool = False) -> dict:
    """A record read back from Redis (kept with its secrets and frames) as the control API shows it."""
    shown = dict(data)
    if not secrets:
        shown["headers"] = dict(jr.shown_headers(data["headers"], False))
    if not frames:
        shown.pop("frames", None)
    return shown
