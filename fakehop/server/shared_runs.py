"""Background answers under way, for every server on one shared state (--state).

The server playing one shows it in the shared state each time it changes (its response object,
how it ended, the events it kept), so that any server can answer a poll or read its stream
again, and looks every STOP_POLL seconds for a stop asked through another server (a cancel, a
delete, or a reset of its session). Once it has ended it is in the shared store too, read
through any server as every stored answer is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from aiohttp import web

from ..protocols.common import BadRequest
from ..state import journal as jr
from ..state.redisstate import STOP_CANCEL, STOP_DELETE, RedisState, ShownRun, StateDown
from .background import UNDER_WAY, Run, Runs, ended, uncancellable, written

__all__ = [
    "STOP_POLL",
    "STOP_WAIT",
    "cancelled_elsewhere",
    "deleted_elsewhere",
    "follow_shown",
    "shared_run",
    "shown_first",
]

STOP_POLL = 0.05  # seconds between the playing server's looks for a stop, and a reader's for more events
STOP_WAIT = 2.0  # seconds a cancel through another server waits for the playing one to stop the answer

log = logging.getLogger("fakehop")


async def shown_first(run: Run, state: RedisState) -> tuple[dict, int]:
    """`run` shown to every server as it begins, before its request is answered, so that a poll,
    cancel or reset through another server that follows the answer finds it; what was shown
    (its response object, its frames so far), for shared_run to go on from."""
    shown, frames = run.latest, run.frames[:]  # taken before the await: the run plays on meanwhile
    await state.show_run(run.session, shown, run.ending, run.over, frames)
    return shown, len(frames)


async def shared_run(run: Run, runs: Runs, state: RedisState, shown: dict, pushed: int) -> None:
    """Show `run` to every server each time it changes (`shown` and `pushed` frames were),
    until it is over; stop it when another server asks. One dropped (deleted, or its session
    reset) is shown no more."""
    ending = run.ending
    try:
        while True:
            if runs.find(run.id) is not run:  # dropped here: deleted, or its session reset
                await state.forget_run(run.session, run.id)
                return
            frames, over = run.frames[pushed:], run.over  # as they are before an await: the run plays on meanwhile
            if frames or run.latest is not shown or run.ending != ending:
                shown, pushed, ending = run.latest, pushed + len(frames), run.ending
                if over and run.keeping is not None:  # stored for every server before any is shown it is over
                    await run.keeping
                await state.show_run(run.session, shown, ending, over, frames)
            if over:
                return
            how = await state.stop_asked(run.id)
            if how == STOP_DELETE:
                runs.drop(run.id)
            elif how == STOP_CANCEL:
                run.cancel()
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(run.changed.wait(), STOP_POLL)
    except StateDown as down:
        log.warning("background response %s is shown by this server alone: %s", run.id, down)


def over(shown: ShownRun) -> bool:
    """Whether nothing more comes of a background answer shown: as Run.over."""
    return shown.ending is not None or shown.response["status"] not in UNDER_WAY


async def cancelled_elsewhere(state: RedisState, shown: ShownRun) -> dict:
    """The response object of a background answer another server plays (or played), cancelled
    unless it had ended (BadRequest then): the playing server is asked to stop it, and waited for."""
    response_id = shown.response["id"]
    if not over(shown):
        await state.ask_stop(response_id, STOP_CANCEL)
        deadline = time.monotonic() + STOP_WAIT
        while not over(shown):
            if time.monotonic() > deadline:
                raise BadRequest(
                    f"The fakehop server {shown.server} playing response '{response_id}' did not stop it within "
                    f"{STOP_WAIT:g}s; it may have stopped itself. Try again.",
                    status=503,
                )
            await asyncio.sleep(STOP_POLL / 2)
            found = await state.shown_run(response_id)
            if found is None:  # deleted meanwhile
                raise BadRequest(f"Response with id '{response_id}' not found.", status=404)
            shown = found
    status = shown.response["status"]
    if status != "cancelled":
        raise uncancellable(status)
    return shown.response


async def deleted_elsewhere(state: RedisState, response_id: str) -> None:
    """A background answer another server plays, deleted: shown no more, and that server asked to drop it."""
    await state.ask_stop(response_id, STOP_DELETE)
    await state.hide_run(response_id)


async def follow_shown(
    state: RedisState,
    shown: ShownRun,
    after: int,
    request: web.Request,
    response: web.StreamResponse,
    record: jr.Record,
) -> web.StreamResponse:
    """background.follow for an answer another server plays: its events after `after` as that
    server shows them, read every STOP_POLL seconds until it is over (or deleted)."""
    response_id, read, last = shown.response["id"], 0, shown
    try:
        while True:
            found = await state.shown_run(response_id)  # first: the events shown with it are all there
            frames = await state.shown_events(response_id, read)
            read += len(frames)
            await written(frames, after, response, record)
            last = found or last
            if found is None or over(found):
                break
            await asyncio.sleep(STOP_POLL)
    except StateDown as down:  # the stream is under way: it can only be cut short
        log.warning("a stream of background response %s read again was cut: %s", response_id, down)
        record.close(jr.FAILED, error=str(down))
        if request.transport is not None:
            request.transport.close()
        return response
    return await ended(last.ending, last.response, request, response, record)
