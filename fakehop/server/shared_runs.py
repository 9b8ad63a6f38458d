"""Background answers under way, for every server on one shared state (--state).

The server playing one shows its response object in the shared state each time a lifecycle
event changes it, so that a poll through any server reads it, and looks every STOP_POLL seconds
for a stop another server asked for (a cancel or a delete through that server). Once it has
ended it is in the shared store, read through any server as every stored answer is. Reading
its events again as a stream goes through the server playing it, which holds them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from aiohttp import web

from ..protocols.common import BadRequest, dumps
from ..state import journal as jr
from ..state.redisstate import STOP_CANCEL, STOP_DELETE, RedisState, StateDown
from .background import UNDER_WAY, Run, Runs, uncancellable

__all__ = ["STOP_POLL", "STOP_WAIT", "answered", "cancelled_elsewhere", "shared_run", "shown_first"]

STOP_POLL = 0.05  # seconds between the playing server's looks for a stop asked through another one
STOP_WAIT = 2.0  # seconds a cancel through another server waits for the playing one to stop the answer

log = logging.getLogger("fakehop")


async def shared_run(run: Run, runs: Runs, state: RedisState, shown: dict) -> None:
    """Show `run` (shown as `shown` so far: see `shown_first`) to every server each time its
    response object changes, until it is over; stop it when another server asks. One dropped
    (deleted, or its session reset) is shown no more."""
    try:
        while True:
            if runs.find(run.id) is not run:  # dropped here: deleted, or its session reset
                await state.forget_run(run.session, run.id)
                return
            if run.latest is not shown:
                shown = run.latest
                await state.show_run(run.session, shown, run.over)
            if run.over:
                return
            how = await state.stop_asked(run.id)
            if how == STOP_DELETE:
                runs.drop(run.id)
                continue
            if how == STOP_CANCEL:
                run.cancel()
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(run.changed.wait(), STOP_POLL)
    except StateDown as down:
        log.warning("background response %s is shown by this server alone: %s", run.id, down)


async def shown_first(run: Run, state: RedisState) -> dict:
    """`run` shown to every server as it begins, before its request is answered: a poll, cancel
    or reset through another server that follows the answer finds it."""
    await state.show_run(run.session, run.latest, run.over)
    return run.latest


async def cancelled_elsewhere(state: RedisState, server: str, response: dict) -> dict:
    """The response object of a background answer the server `server` plays, cancelled unless it
    had ended (BadRequest then): that server is asked to stop it, and its answer waited for."""
    response_id = response["id"]
    if response["status"] in UNDER_WAY:
        await state.ask_stop(response_id, STOP_CANCEL)
        deadline = time.monotonic() + STOP_WAIT
        while response["status"] in UNDER_WAY:
            if time.monotonic() > deadline:
                raise BadRequest(
                    f"The fakehop server {server} playing response '{response_id}' did not stop it within "
                    f"{STOP_WAIT:g}s; it may have stopped itself. Try again.",
                    status=503,
                )
            await asyncio.sleep(STOP_POLL / 2)
            shown = await state.shown_run(response_id)
            if shown is None:  # deleted meanwhile
                raise BadRequest(f"Response with id '{response_id}' not found.", status=404)
            response = shown[1]
    if response["status"] != "cancelled":
        raise uncancellable(response["status"])
    return response


async def answered(
    method: str, streamed: bool, state: RedisState, record: jr.Record, server: str, response: dict
) -> web.Response:
    """A request through this server for a background answer the server `server` plays, which
    last showed `response`: polled, cancelled or deleted. Its events are that server's to stream again."""
    response_id = response["id"]
    if method == "DELETE":
        await state.ask_stop(response_id, STOP_DELETE)
        await state.hide_run(response_id)
        answer = {"id": response_id, "object": "response", "deleted": True}
    elif method == "POST":
        answer = await cancelled_elsewhere(state, server, response)
    elif streamed:
        raise BadRequest(
            f"Response '{response_id}' is played by the fakehop server {server}, which holds its events: "
            "read its stream again through that server.",
            param="stream",
        )
    else:
        answer = response
    record.close(jr.COMPLETED, 200)
    return web.json_response(answer, dumps=dumps)
