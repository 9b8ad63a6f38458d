"""One answer rendered without a server: the bytes `fakehop play` prints and golden files hold."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from ..play import player
from ..protocols import PROTOCOLS
from ..protocols.common import Meta, ParsedRequest, default_message, dumps
from ..scenario.library import Library, resolve
from ..scenario.model import HttpError

FIXED_CREATED = 1_700_000_000


@dataclass(frozen=True)
class Rendered:
    status: int
    headers: dict[str, str]
    body: bytes | None  # None: the connection closed or hung without an answer


def seeded_meta(model: str, seed: int) -> Meta:
    """Ids and timestamps that depend on the seed alone."""
    return Meta(model=model, created=FIXED_CREATED, rng=random.Random(seed))


def seeded_request_id(seed: int) -> str:
    return f"req_{seed:024d}"


RETRY_AFTER_MS = "retry-after-ms"  # a wait in milliseconds, which the SDKs read before Retry-After


def http_error_answer(protocol, error: HttpError, request_id: str) -> tuple[int, dict[str, str], dict]:
    """Status, headers and body of a scenario's `http_error`."""
    headers = dict(error.headers)
    if error.retry_after is not None:
        headers["Retry-After"] = error.retry_after
    message = error.message or default_message(error.status, protocol.HTTP_MESSAGES)
    body = protocol.error_body(
        error.status, message, request_id, param=error.param, code=error.code, error_type=error.error_type
    )
    return error.status, headers, body


def whole_answer(
    protocol, meta: Meta, parsed: ParsedRequest, outcome: player.Outcome, request_id: str
) -> tuple[int, dict | None]:
    """Status and JSON body of a non-streamed answer; body None for disconnect and hang."""
    ending = outcome.ending
    if isinstance(ending, player.Failure):
        return protocol.failure_response(ending, request_id)
    if isinstance(ending, player.Finish):
        return 200, protocol.complete(meta, parsed, outcome)
    return 0, None


async def render(
    library: Library,
    name: str,
    protocol_name: str,
    body: dict,
    *,
    request_number: int = 1,
    seed: int = 0,
    time_scale: float = 1.0,
    clock: player.Clock | None = None,
    write: Callable[[bytes], None],
) -> Rendered:
    """Play scenario `name` for one request `body`, writing its bytes to `write` as they fall due:
    for a sequence its answer to request number `request_number`, for a conversation the one to
    the body's turn. Raises BadRequest where the server would answer with one."""
    protocol = PROTOCOLS[protocol_name]
    parsed = protocol.parse(body)
    if parsed.conversation.problem is not None:
        raise parsed.conversation.problem
    _, script = resolve(library, name, request_number, parsed)
    request_id = seeded_request_id(seed)
    if script.http_error is not None:
        status, headers, error = http_error_answer(protocol, script.http_error, request_id)
        data = dumps(error).encode()
        write(data)
        return Rendered(status, headers, data)
    meta = seeded_meta(script.model or parsed.model, seed)
    events = player.timeline(script, parsed.play, time_scale)
    clock = clock or player.InstantClock()
    if parsed.stream:
        encoder = protocol.StreamEncoder(meta, parsed)
        async for batch in player.play(events, clock):
            write(b"".join([encoder.encode(h) for h in batch]))
        return Rendered(200, {}, None)
    happenings = [h async for batch in player.play(events, clock) for h in batch]
    status, answer = whole_answer(protocol, meta, parsed, player.Outcome.gather(happenings), request_id)
    if answer is None:
        return Rendered(0, {}, None)
    data = dumps(answer).encode()
    write(data)
    return Rendered(status, {}, data)
