"""The console: a web page served by fakehop itself (GET /_fakehop/ui) where a person watches
every request arrive and makes the next answers fail with a click, fed by a server push of
the journal (GET /_fakehop/events, SSE).

The page is static (fakehop/ui: HTML, CSS and JavaScript, no build step) and holds no data, so
it loads without the admin token; it asks GET /ui/token, which needs none, whether to ask for
the token, and every call it makes then sends it. The push costs the
answering path nothing while no console is open: its journal listeners are added when the
first console connects and removed when the last one goes. While consoles are open, a request
costs an append to a deque as its record opens and as it closes; every FLUSH_INTERVAL the
records changed since are made into rows (at most MAX_ROWS) once, for every console.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
from collections import deque
from collections.abc import Callable, Iterator
from operator import attrgetter
from pathlib import Path
from typing import cast

from aiohttp import web

from .. import CONTROL_PREFIX, __version__
from ..protocols.common import event_frame
from ..state.journal import IN_PROGRESS, Journal, Record
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
            return self.push.snapshot()
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
            data = self.next_push()
            if data is None and tick % PING_EVERY == 0:
                data = PING
            if data is not None:
                for watcher in self.watchers:
                    watcher.offer(data)

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


PUSH_KEY: web.AppKey[Push] = web.AppKey("console_push", Push)


def push_for(app: web.Application, journal: Journal, first_shown: Callable[[], int]) -> None:
    """The push of `journal` to the consoles of `app`, from the record `first_shown()` gives."""
    app[PUSH_KEY] = Push(journal, first_shown)


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
            await response.write(greeting() + push.snapshot())
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
