"""Background answers (Responses' `background: true`): each is played in the server at its
scenario's timing, whether or not a client reads it; its events are kept, so that a client
can read the stream again from the start or from after an event (`GET /v1/responses/{id}
?stream=true&starting_after=N`), poll the response object as it goes, or cancel it.

At most MAX_RUNS background answers are held, holding at most KEPT_BYTES of events in all:
when either would be passed the oldest finished ones go first. A new background request while
MAX_RUNS are still under way is refused with a 429; a run under way that finds no room left
keeps no more of its events (its readers' streams end where they stop) but plays on, its
status kept. At server shutdown every one still playing is stopped and its readers' streams end.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator

from aiohttp import web

from ..play import player
from ..protocols.common import BadRequest, dumps
from ..state import journal as jr
from .prerender import TimedWrite

__all__ = ["KEPT_BYTES", "MAX_RUNS", "UNDER_WAY", "Run", "Runs", "ended", "follow", "uncancellable", "written"]

MAX_RUNS = 1000
KEPT_BYTES = 64 * 1024 * 1024
LIFECYCLE = frozenset(
    [
        b"response.created",
        b"response.queued",
        b"response.in_progress",
        b"response.completed",
        b"response.failed",
        b"response.incomplete",
    ]
)
UNDER_WAY = ("queued", "in_progress")
# How a run ended, beside its response object's status: the scenario closed the connection, or the server stopped.
DROPPED, STOPPED = "dropped", "stopped"

# Stores a finished answer: its last write (False) or its whole body (True); what it returns, if
# anything, is the storing for every server under way (with --state).
Keep = Callable[[bytes, bool], Awaitable | None]


class Run:
    """One background answer: its events as they come, and the response object as the latest lifecycle event showed it."""

    def __init__(self, keep: Keep | None, session: str | None, room: Callable[[int], bool]):
        self.keep = keep
        self.session = session  # the session of its request (None: the global one)
        self.room = room  # whether that many more bytes of events may be kept (see Runs.room_for)
        # (the event's sequence number, or for a comment the next event's, the frame's bytes)
        self.frames: list[tuple[int, bytes]] = []
        self.events = 0
        self.size = 0
        self.cut = False  # no room was left: no more of its events are kept
        self.created: dict = {}  # the response object of `response.created`: what a request not streamed gets
        self.latest: dict = {}
        self.ending: str | None = None  # the run's own end (DROPPED, STOPPED), once the scenario gives no more
        self.changed = asyncio.Event()
        self.task: asyncio.Task | None = None
        self.keeping: Awaitable | None = None  # its storing for every server, under way once it ended (see Keep)

    @property
    def id(self) -> str:
        return self.created["id"]

    @property
    def status(self) -> str:
        return self.latest["status"]

    @property
    def over(self) -> bool:
        """Whether nothing more comes: it finished, was cancelled, dropped or stopped."""
        return self.ending is not None or self.status not in UNDER_WAY

    def add(self, data: bytes) -> None:
        """A write's frames, each with its number; bytes after the last frame's end (a scenario's `raw`) as one more."""
        *frames, rest = data.split(b"\n\n")
        for frame in [frame + b"\n\n" for frame in frames] + ([rest] if rest else []):
            number = self.events
            if not frame.startswith(b":"):
                self.events += 1
                self.lifecycle_event(frame)
            if not self.cut and self.room(len(frame)):
                self.frames.append((number, frame))
                self.size += len(frame)
            else:
                self.cut = True
        self.wake()

    def lifecycle_event(self, frame: bytes) -> None:
        name, _, data = frame.rstrip(b"\n").partition(b"\ndata: ")
        if name[len(b"event: ") :] in LIFECYCLE:
            self.latest = json.loads(data)["response"]
            if not self.created:
                self.created = self.latest

    def wake(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    def take(self, write: TimedWrite) -> bool:
        """Add a write's events; whether more writes follow."""
        _, data, _, last = write
        self.add(data)
        kind = type(last)
        if kind is player.Finish or kind is player.Failure:
            if self.keep is not None:
                self.keeping = self.keep(data, False)
            return False
        if kind is player.Disconnect:
            self.end(DROPPED)
            return False
        return kind is not player.Hang

    def end(self, ending: str) -> None:
        self.ending = ending
        self.wake()

    async def play(self, writes: Iterator[TimedWrite], started: float) -> None:
        loop = asyncio.get_running_loop()
        for write in writes:
            delay = started + write[0] - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if not self.take(write):
                return

    def cancel(self) -> None:
        """Stop playing it: its status is `cancelled` from here on."""
        if self.task is not None:
            self.task.cancel()
        self.latest = {**self.latest, "status": "cancelled"}
        if self.keep is not None:
            self.keeping = self.keep(dumps(self.latest).encode(), True)
        self.wake()


def uncancellable(status: str) -> BadRequest:
    """The refusal of a cancel of a background answer that ended otherwise (`status`)."""
    return BadRequest(f"Cannot cancel a response with status '{status}': only a queued or in_progress one.")


class Runs:
    """The background answers held, oldest first, by response id."""

    def __init__(self, max_runs: int = MAX_RUNS, max_bytes: int = KEPT_BYTES):
        self.max_runs = max_runs
        self.max_bytes = max_bytes
        self.runs: OrderedDict[str, Run] = OrderedDict()
        self.size = 0  # the bytes of events the runs hold

    def __len__(self) -> int:
        return len(self.runs)

    def start(self, writes: Iterator[TimedWrite], keep: Keep | None, session: str | None) -> Run:
        """A run of `writes`, its first write (the lifecycle events that open it) taken at once, the rest played in a task."""
        self.make_room()
        run = Run(keep, session, self.room_for)
        started = asyncio.get_running_loop().time()
        if run.take(next(writes)):
            run.task = asyncio.create_task(run.play(writes, started))
        self.drop(run.id)  # a seeded answer's id comes again: the newest wins
        self.runs[run.id] = run
        return run

    def make_room(self) -> None:
        """Room for one more run: the oldest finished ones go; a 429 when MAX_RUNS are under way."""
        self.forget_finished(lambda: len(self.runs) < self.max_runs)
        if len(self.runs) >= self.max_runs:
            raise BadRequest(
                f"Too many background responses under way: this fakehop server plays at most {self.max_runs} at once.",
                status=429,
                code="rate_limit_exceeded",
            )

    def room_for(self, size: int) -> bool:
        """Whether `size` more bytes of events may be kept (counted if so): the oldest finished runs go to make room."""
        self.forget_finished(lambda: self.size + size <= self.max_bytes)
        if self.size + size > self.max_bytes:
            return False
        self.size += size
        return True

    def forget_finished(self, enough: Callable[[], bool]) -> None:
        """Forget the oldest finished runs until `enough` holds, or none is left."""
        for response_id, run in list(self.runs.items()):
            if enough():
                return
            if run.over:
                self.forget(response_id)

    def forget(self, response_id: str) -> Run | None:
        run = self.runs.pop(response_id, None)
        if run is not None:
            self.size -= run.size
        return run

    def find(self, response_id: str) -> Run | None:
        return self.runs.get(response_id)

    def drop(self, response_id: str) -> None:
        """Forget a run, cancelled if under way (and then not stored: it is dropped with its answer)."""
        run = self.forget(response_id)
        if run is not None and run.status in UNDER_WAY:
            run.keep = None
            run.cancel()

    def drop_session(self, session: str | None) -> None:
        """Drop the runs of `session`'s requests, cancelling those under way: it was reset or dropped."""
        for response_id in [response_id for response_id, run in self.runs.items() if run.session == session]:
            self.drop(response_id)

    def clear(self) -> None:
        for response_id in list(self.runs):
            self.drop(response_id)

    async def stop(self) -> None:
        """Stop every run still playing and end its readers' streams (at server shutdown)."""
        tasks = [run.task for run in self.runs.values() if run.task is not None and not run.task.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for run in self.runs.values():
            if not run.over:
                run.end(STOPPED)


async def follow(
    run: Run, after: int, request: web.Request, response: web.StreamResponse, record: jr.Record
) -> web.StreamResponse:
    """Write `run`'s events after sequence number `after` to `response` (prepared), then each
    as it comes, until the run is over; `record` is closed as the stream ends."""
    read = 0
    while True:
        changed = run.changed
        frames = run.frames[read:]
        read += len(frames)
        await written(frames, after, response, record)
        if run.over:
            break
        await changed.wait()
    return await ended(run.ending, run.latest, request, response, record)


async def written(frames: list[tuple[int, bytes]], after: int, response: web.StreamResponse, record: jr.Record) -> None:
    """The frames numbered past `after` written to `response`, in `record`."""
    data = b"".join([frame for number, frame in frames if number > after])
    if data:
        record.sending(time.monotonic(), data)
        await response.write(data)
        record.sent(jr.sse_events(data))


async def ended(
    ending: str | None, latest: dict, request: web.Request, response: web.StreamResponse, record: jr.Record
) -> web.StreamResponse:
    """A read of a background answer ended as the answer did (`ending`, its last response object
    `latest`): the connection dropped with the answer's, else the stream ended and `record` closed."""
    if ending == DROPPED:
        record.close(jr.DISCONNECTED)
        if request.transport is not None:
            request.transport.close()
        return response
    await response.write_eof()
    if latest.get("status") == "failed":
        record.close(jr.FAILED, error=(latest.get("error") or {}).get("message"))
    else:
        record.close(jr.COMPLETED)
    return response
