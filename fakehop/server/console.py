"""The console: a web page served by fakehop itself (GET /_fakehop/ui) where a person watches
every request arrive and makes the next answers fail with a click, fed by a server push of
the journal (GET /_fakehop/events, SSE).

The page is static (fakehop/ui: HTML, CSS and JavaScript, no build step) and holds no data, so
it loads without the admin token; it asks GET /ui/token, which needs none, whether to ask for
the token, and every call it makes then sends it. The push costs the
answering path nothing while no console is open: its journal listeners are added when the
first console connects and removed when the last one goes. While consoles are open, a request
costs an append to a deque as its record opens and as it closes; every FLUSH_INTERVAL the
records changed since are made into rows (at most MAX_ROWS) once, for every console. With
--state, the rows are those of every server, read from Redis while a console is open (SharedPush).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import time
from collections import deque
from collections.abc import Callable, Iterator
from operator import attrgetter
from pathlib import Path
from typing import cast

from aiohttp import web

from .. import CONTROL_PREFIX, __version__
from ..protocols.common import event_frame
from ..state.journal import IN_PROGRESS, Journal, Record
from ..state.redisstate import RedisState, StateDown
from .control import ROUTES, control_call, gateway_of, json_error, refused_host, refused_origin, refused_without_token
from .intake import request_id_for, stamp_request_id
from .shared import STREAM_HEADERS

PAGE_PATH = CONTROL_PREFIX + "/ui"
UI_DIRECTORY = Path(__file__).parent / "ui"
ASSET_TYPES = {"index.html": "text/html", "console.js": "text/javascript", "console.css": "text/css"}
# The page runs only its own files, in no frame of another site (a page that framed it could
# have a visitor click its buttons), and sends no Referer.
PAGE_HEADERS = {
    "Cache-Control": "no-cache",
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
FLUSH_INTERVAL = 0.2  # seconds between two pushes of rows
MAX_ROWS = 40  # new rows in one push (200 a second); the newest are sent and the rest counted as skipped
SNAPSHOT_ROWS = 500  # the newest records a console is sent when it connects, or after it fell behind
MAX_CHANGED = 4096  # records noted between two pushes; past it the oldest notes are lost and a snapshot goes instead
MAX_LIVE = 500  # streams under way whose event counts are followed between their start and their end
MAX_BACKLOG = 64  # pushes waiting for a console that does not read; past them, it gets a snapshot when it reads again
PING_EVERY = 75  # pushes (15 s): a comment when nothing else was sent, so that a console that went away is noticed
PING = b": ping\n\n"
MAX_TEXT_IN_ROW = 300  # characters of a path, model or error in a row; the whole record is one call away
COLUMNS = (
    "seq",
    "started_ms",
    "protocol",
    "model",
    "scenario",
    "stream",
    "status",
    "end",
    "events",
    "duration_us",
    "error",
    "retry_after",
    "unrouted",
    "session",
)
ROWS_JSON = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), check_circular=False
)  # rows hold no containers of their own


def shortened(text) -> str | None:
    """A text for a row: at most MAX_TEXT_IN_ROW characters; None for what is not a string."""
    return text[:MAX_TEXT_IN_ROW] if type(text) is str else None


def row(record: Record) -> list:
    """A record as the page shows it in its log, its fields in the order of COLUMNS. Every
    value costs JSON hundreds of instructions, a float several thousand: times go in whole
    milliseconds and microseconds, and the method and path only for a request no protocol took."""
    body = record.body
    model = body.get("model") if type(body) is dict else None
    duration, protocol, error = record.duration, record.protocol, record.error
    return [
        record.seq,
        int(record.started_at * 1000),
        protocol,
        shortened(model),
        record.scenario,
        record.stream,
        record.status,
        record.end,
        record.events,
        None if duration is None else int(duration * 1_000_000),
        None if error is None else error[:MAX_TEXT_IN_ROW],
        record.retry_after,
        None if protocol is not None else f"{record.method} {record.path[:MAX_TEXT_IN_ROW]}",
        record.session,
    ]


def rows_event(records: list[Record], *, reset: bool, skipped: int = 0) -> bytes:
    """One push: `rows` to add or update (`reset`: in place of every row shown), `skipped`
    the records changed meanwhile that it leaves out."""
    rows = {"rows": [row(record) for record in records], "reset": reset, "skipped": skipped}
    return b"event: rows\ndata: " + ROWS_JSON.encode(rows).encode() + b"\n\n"


class Watcher:
    """One open console: the pushes waiting to be written to it."""

    def __init__(self, push: Push):
        self.push = push
        self.waiting: deque[bytes] = deque()
        self.ready = asyncio.Event()
        self.behind = False  # pushes were dropped: its next write is a snapshot

    def offer(self, data: bytes) -> None:
        if len(self.waiting) >= MAX_BACKLOG:
            self.waiting.clear()
            self.behind = True
        else:
            self.waiting.append(data)
        self.ready.set()

    async def next_write(self) -> bytes:
        """What to write next, once there is something."""
        await self.ready.wait()
        self.ready.clear()
        if self.behind:
            self.behind = False
            self.waiting.clear()
            return await self.push.current_snapshot()
        data = b"".join(self.waiting)
        self.waiting.clear()
        return data


def from_the_start() -> int:
    return 1


class Push:
    """The journal's changes, sent in batches to every open console. `first_shown` gives the
    seq of the first record the consoles show: the global session's view of the journal,
    which begins afresh when that session is reset or its requests are deleted."""

    def __init__(self, journal: Journal, first_shown: Callable[[], int] = from_the_start):
        self.journal = journal
        self.first_shown = first_shown
        self.watchers: set[Watcher] = set()
        self.changed: deque[Record] = deque(maxlen=MAX_CHANGED)
        self.note = self.changed.append  # the journal listener: one C call per record opened or closed
        self.live: dict[int, tuple[Record, int]] = {}  # by seq: streams under way shown, with the events last sent
        self.shown_from = first_shown()
        self.flusher: asyncio.Task | None = None

    @contextlib.contextmanager
    def watching(self) -> Iterator[Watcher]:
        """A new console's Watcher, for as long as the console is open."""
        if not self.watchers:
            self.start()
        watcher = Watcher(self)
        self.watchers.add(watcher)
        try:
            yield watcher
        finally:
            self.watchers.discard(watcher)
            if not self.watchers:
                self.stop()

    def start(self) -> None:
        self.journal.opened_listeners.append(self.note)
        self.journal.listeners.append(self.note)
        self.flusher = asyncio.get_running_loop().create_task(self.flush_every())

    def stop(self) -> None:
        self.journal.opened_listeners.remove(self.note)
        self.journal.listeners.remove(self.note)
        cast(asyncio.Task, self.flusher).cancel()  # the last watcher's stop follows the first one's start
        self.flusher = None
        self.changed.clear()
        self.live.clear()

    async def flush_every(self) -> None:
        for tick in itertools.count(1):
            await asyncio.sleep(FLUSH_INTERVAL)
            data = await self.next_data()
            if data is None and tick % PING_EVERY == 0:
                data = PING
            if data is not None:
                for watcher in self.watchers:
                    watcher.offer(data)

    async def next_data(self) -> bytes | None:
        return self.next_push()

    def next_push(self) -> bytes | None:
        """The rows of the records changed since the last push, or a snapshot when notes were
        lost or the view began afresh; None when nothing changed. A row the consoles show in
        progress is always updated; of the others, the newest MAX_ROWS are sent."""
        if len(self.changed) >= MAX_CHANGED or self.shown_from != self.first_shown():
            self.changed.clear()
            self.live.clear()
            self.shown_from = self.first_shown()
            return self.snapshot()
        changed = {record.seq: record for record in self.changed}
        self.changed.clear()
        updated = self.moved_live()
        if not changed and not updated:
            return None
        fresh = [changed[seq] for seq in sorted(changed) if seq not in updated]
        sent = fresh[-MAX_ROWS:]
        if updated:
            sent = sorted([*updated.values(), *sent], key=attrgetter("seq"))
        self.keep_live(sent)
        return rows_event(sent, reset=False, skipped=len(fresh) - min(len(fresh), MAX_ROWS))

    def moved_live(self) -> dict[int, Record]:
        """The rows shown in progress whose record ended or whose event count moved since they
        were sent (nothing tells the journal of the latter); the ended ones are forgotten."""
        moved = {}
        for seq, (record, events) in list(self.live.items()):
            if record.end != IN_PROGRESS:
                del self.live[seq]
                moved[seq] = record
            elif record.events != events:
                moved[seq] = record
        return moved

    def keep_live(self, records: list[Record]) -> None:
        """Follow the streams under way among `records`, just sent."""
        for record in records:
            if record.end == IN_PROGRESS:
                self.live[record.seq] = (record, record.events)
        self.forget_oldest_live()

    def forget_oldest_live(self) -> None:
        while len(self.live) > MAX_LIVE:
            del self.live[next(iter(self.live))]

    def snapshot(self) -> bytes:
        """The newest SNAPSHOT_ROWS records in place of whatever a console shows, for one that
        opens or fell behind; the other consoles' pushes go on as they were."""
        first = self.first_shown()
        newest = itertools.takewhile(lambda record: record.seq >= first, reversed(self.journal.records))
        records = list(itertools.islice(newest, SNAPSHOT_ROWS))[::-1]
        for record in records:
            if record.end == IN_PROGRESS:
                self.live.setdefault(record.seq, (record, record.events))
        self.forget_oldest_live()
        return rows_event(records, reset=True)

    async def current_snapshot(self) -> bytes:
        return self.snapshot()


class SharedPush(Push):
    """The push of the journal shared on Redis (--state): every server's requests, read from
    Redis every FLUSH_INTERVAL while a console is open here (a server with none reads nothing):
    the newest MAX_ROWS records filed since the last read (the rest counted as skipped), and
    again the rows shown in progress and the seqs passed over. A seq is taken before its record
    is filed, so a record may be filed after a newer one: the seqs missing among those read are
    looked for again for GAP_SECONDS."""

    GAP_SECONDS = 10.0

    def __init__(self, state: RedisState):
        self.state = state
        self.watchers = set()
        self.live = {}
        self.flusher = None
        self.newest_seen: int | None = None  # None: the consoles' first snapshot not read yet
        self.gaps: dict[int, float] = {}  # seqs passed over, by when they were noticed

    def start(self) -> None:
        self.flusher = asyncio.get_running_loop().create_task(self.flush_every())

    def stop(self) -> None:
        cast(asyncio.Task, self.flusher).cancel()
        self.flusher = None
        self.live.clear()
        self.gaps.clear()
        self.newest_seen = None

    async def next_data(self) -> bytes | None:
        if self.newest_seen is None:
            return None
        since, looked_for = self.newest_seen, [*self.live, *self.gaps]
        try:
            count, newest, oldest, taken, again = await self.state.journal_news(since, MAX_ROWS, looked_for)
        except StateDown:
            return None
        if since and (oldest is None or oldest > since or taken < since):
            return await self.snapshot_for_all()  # emptied, more came than it holds, or its numbering began again
        fresh = self.found_again(again) + newest
        self.note_gaps(since, newest, whole=count == len(newest))
        updated = self.moved_live()
        fresh = [record for record in fresh if record.seq not in updated]
        if not fresh and not updated:
            return None
        sent = sorted([*updated.values(), *fresh], key=attrgetter("seq"))
        self.keep_live(sent)
        return rows_event(sent, reset=False, skipped=count - len(newest))

    def found_again(self, again: list[Record]) -> list[Record]:
        """The records read again: those of rows shown in progress replace theirs (as they are
        now, with the events last sent), those of seqs passed over are new; the rest are forgotten."""
        fresh, held = [], {record.seq for record in again}
        for record in again:
            if record.seq in self.live:
                self.live[record.seq] = (record, self.live[record.seq][1])
            elif self.gaps.pop(record.seq, None) is not None:
                fresh.append(record)
        for seq in [seq for seq in self.live if seq not in held]:
            del self.live[seq]
        return fresh

    def note_gaps(self, since: int, newest: list[Record], whole: bool) -> None:
        """The seqs missing among the records just read (`whole`: every record after `since`),
        taken by requests whose records were not filed yet; those noticed too long ago forgotten."""
        now = time.monotonic()
        for seq in [seq for seq, noticed in self.gaps.items() if now - noticed > self.GAP_SECONDS]:
            del self.gaps[seq]
        if not newest:
            return
        read, last = {record.seq for record in newest}, newest[-1].seq
        first = max(since + 1 if whole else newest[0].seq, last - MAX_LIVE)
        self.gaps.update((seq, now) for seq in range(first, last) if seq not in read)
        while len(self.gaps) > MAX_LIVE:
            del self.gaps[next(iter(self.gaps))]
        self.newest_seen = last

    async def snapshot_for_all(self) -> bytes:
        """A snapshot sent to every console: what they show begins afresh from it."""
        self.live.clear()
        self.gaps.clear()
        return await self.current_snapshot(for_all=True)

    async def current_snapshot(self, for_all: bool = False) -> bytes:
        """The newest SNAPSHOT_ROWS records of every server, read from Redis."""
        try:
            records = await self.state.newest_records(SNAPSHOT_ROWS)
        except StateDown:
            records = []
        if for_all or self.newest_seen is None:
            self.newest_seen = records[-1].seq if records else 0
        for record in records:
            if record.end == IN_PROGRESS:
                self.live.setdefault(record.seq, (record, record.events))
        self.forget_oldest_live()
        return rows_event(records, reset=True)


PUSH_KEY: web.AppKey[Push] = web.AppKey("console_push", Push)


def push_for(
    app: web.Application, journal: Journal, first_shown: Callable[[], int], state: RedisState | None = None
) -> None:
    """The push of `journal` to the consoles of `app`, from the record `first_shown()` gives; with
    `state`, of the journal every server on it shares."""
    app[PUSH_KEY] = Push(journal, first_shown) if state is None else SharedPush(state)


def greeting() -> bytes:
    """What a console is sent first: the columns of its rows, and the calls this server has."""
    return event_frame(
        "hello", {"version": __version__, "columns": COLUMNS, "calls": ROUTES, "flush_interval": FLUSH_INTERVAL}
    )


async def events(request: web.Request) -> web.StreamResponse:
    """The push: a greeting, a snapshot of the newest records, then rows as they change."""
    push = request.config_dict[PUSH_KEY]
    response = web.StreamResponse(headers=STREAM_HEADERS)
    stamp_request_id(response, request_id_for(request))
    await response.prepare(request)
    with push.watching() as watcher:
        try:
            await response.write(greeting() + await push.current_snapshot())
            while True:
                await response.write(await watcher.next_write())
        except ConnectionError:  # the console went away
            pass
    return response


@functools.cache
def asset(name: str) -> bytes:
    return (UI_DIRECTORY / name).read_bytes()


def asset_response(name: str) -> web.Response:
    return web.Response(body=asset(name), content_type=ASSET_TYPES[name], charset="utf-8", headers=PAGE_HEADERS)


async def page(request: web.Request) -> web.Response:
    """The console's page: answered without the admin token, since it holds no data."""
    return refused_host(request) or asset_response("index.html")


async def page_file(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    if name not in ASSET_TYPES:
        return json_error(404, f"the console has no file {name[:80]!r}; its page is {PAGE_PATH}")
    return refused_host(request) or asset_response(name)


async def token_state(request: web.Request) -> web.Response:
    """`GET /ui/token`: whether this server needs the admin token, and whether the request sent
    it. Answered without the token (a wrong one is told by a 401 to any call as well), so that
    the page knows before its first call whether to ask for it, and no call of its is refused."""
    refused = refused_host(request) or refused_origin(request)
    if refused is not None:
        return refused
    state = {
        "admin_token": gateway_of(request).admin_token is not None,
        "accepted": refused_without_token(request) is None,
    }
    return web.json_response(state, headers={"Cache-Control": "no-store"})


async def to_the_page(request: web.Request) -> web.Response:
    """`GET /`, which no protocol serves: to the console."""
    refused = refused_host(request)
    if refused is not None:
        return refused
    raise web.HTTPFound(PAGE_PATH)


def add_routes(control_app: web.Application) -> None:
    control_app.router.add_get("/ui", page)
    control_app.router.add_get("/ui/token", token_state)  # before the files' route, which would take it
    control_app.router.add_get("/ui/{name}", page_file)
    control_app.router.add_get("/events", control_call(events))
