"""The Responses answers fakehop gave, kept for `previous_response_id` and for
`GET`/`DELETE /v1/responses/{id}`, as the real API keeps every response unless the request
says `store: false`.

At most KEPT_RESPONSES answers, holding about KEPT_BYTES, are kept: the bytes the answer
sent and what its request left for a later one to continue (its Thread, see
responses.Thread, or the text of its one user message), each counted. Each session's
answers are kept apart: when the store is full, the session whose answers are over an equal
share goes first, oldest answer first, so that one session's traffic pushes out its own
answers before another's. An id is looked up in the asking session's answers, then in the
others' (a seeded answer's id is the same in every session).

A streamed answer is mostly filled in from a kept rendering, with no response object ever
built, so it is kept as its last write: those bytes end with the terminal event, which carries
the whole response. A whole answer is kept as the body it sent. Either is read only when a
later request names one of its session's answers, once.
"""

from __future__ import annotations

import json
from collections import OrderedDict, deque
from typing import NamedTuple, cast

from ..protocols import responses
from ..protocols.common import BadRequest, ParsedRequest, dumps
from ..scenario.model import MAX_TEXT_CHARS

KEPT_RESPONSES = 1000
KEPT_BYTES = 64 * 1024 * 1024


class Stored(NamedTuple):
    answer: bytes  # the body of a whole answer, or a stream's last write
    whole: bool
    thread: responses.Thread  # the conversation a request that continues it continues
    size: int  # the bytes it was counted for

    def body(self) -> bytes:
        """The response object, as JSON."""
        return self.answer if self.whole else dumps(terminal_response(self.answer)).encode()


class Held:
    """One session's kept answers, oldest first: the ones read into Stored by id, then the ones not read yet."""

    def __init__(self, session: str | None):
        self.session = session
        self.read: OrderedDict[str, Stored] = OrderedDict()
        # (the request's Thread or the text of its one user message, the answer, whether whole, its size): a
        # plain tuple, made for every answer kept
        self.unread: deque[tuple[responses.Thread | str, bytes, bool, int]] = deque()
        self.size = 0

    def __len__(self) -> int:
        return len(self.read) + len(self.unread)


class StoredResponses:
    """The kept answers of every session (None: the global one)."""

    def __init__(self, capacity: int = KEPT_RESPONSES, max_bytes: int = KEPT_BYTES):
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.size = 0
        self.count = 0
        self._held: dict[str | None, Held] = {}
        self._sessions_of: dict[str, list[str | None]] = {}  # answer id -> the sessions holding one, newest last

    def __len__(self) -> int:
        return self.count

    def keep(self, request: ParsedRequest, answer: bytes, whole: bool, session: str | None = None) -> None:
        """Keep the answer to `request` in `session`: the bytes of its stream's last write, or the
        body of a whole answer. Of the request only what a later one continues is kept (its
        Thread, or the text of its one user message): kept whole, the requests of a load test
        would be so many more objects for the collector."""
        self.keep_before(before_of(request), answer, whole, session)

    def keep_before(self, before: responses.Thread | str, answer: bytes, whole: bool, session: str | None) -> None:
        """Keep an answer given to a request of which `before` is kept (see before_of)."""
        size = len(answer) + (len(before) if type(before) is str else cast(responses.Thread, before).own_bytes())
        held = self._held.get(session)
        if held is None:
            held = self._held[session] = Held(session)
        held.unread.append((before, answer, whole, size))
        held.size += size
        self.size += size
        self.count += 1
        if self.size > self.max_bytes or self.count > self.capacity:
            self._make_room(held)

    def _make_room(self, newcomer: Held) -> None:
        while self.count > self.capacity or self.size > self.max_bytes:
            self._drop_oldest(self._first_to_go(newcomer))

    def _first_to_go(self, newcomer: Held) -> Held:
        """The session whose oldest answer goes: the one that just kept one when it holds more
        than an equal share, else the one holding the most."""
        by_count = self.count > self.capacity
        sessions = len(self._held)
        over_share = len(newcomer) * sessions > self.capacity if by_count else newcomer.size * sessions > self.max_bytes
        if over_share and len(newcomer):
            return newcomer
        return max(self._held.values(), key=len if by_count else lambda held: held.size)

    def _drop_oldest(self, held: Held) -> None:
        if held.read:
            response_id, stored = held.read.popitem(last=False)
            self._forget_id(response_id, held.session)
            self._uncount(held, stored.size)
        else:
            self._uncount(held, held.unread.popleft()[-1])

    def _uncount(self, held: Held, size: int) -> None:
        held.size -= size
        self.size -= size
        self.count -= 1
        if not len(held):
            del self._held[held.session]

    def _forget_id(self, response_id: str, session: str | None) -> None:
        sessions = self._sessions_of[response_id]
        sessions.remove(session)
        if not sessions:
            del self._sessions_of[response_id]

    def _holder(self, response_id: str, session: str | None) -> Held | None:
        """The session holding answer `response_id`: `session` when it does, else the one that kept one last."""
        self._read_unread()
        held = self._held.get(session)
        if held is not None and response_id in held.read:
            return held
        sessions = self._sessions_of.get(response_id)
        return self._held[sessions[-1]] if sessions else None

    def find(self, response_id: str, session: str | None = None) -> Stored | None:
        held = self._holder(response_id, session)
        return None if held is None else held.read[response_id]

    def delete(self, response_id: str, session: str | None = None) -> bool:
        held = self._holder(response_id, session)
        if held is not None:
            stored = held.read.pop(response_id)
            self._forget_id(response_id, held.session)
            self._uncount(held, stored.size)
        return held is not None

    def drop_session(self, session: str) -> None:
        """Forget every answer `session` kept: it was dropped, or reset."""
        held = self._held.get(session)
        while held is not None and session in self._held:
            self._drop_oldest(held)

    def clear(self) -> None:
        self._held.clear()
        self._sessions_of.clear()
        self.size = self.count = 0

    def continued(self, request: ParsedRequest, session: str | None = None) -> ParsedRequest:
        """`request` with the conversation of the stored response it continues; the real API's
        400 when there is none by that id (callers pass only a request that continues one)."""
        response_id = cast(str, request.conversation.continues)
        stored = self.find(response_id, session)
        if stored is None:
            raise BadRequest(
                f"Previous response with id '{response_id}' not found.",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        return responses.chained(request, stored.thread)

    def _read_unread(self) -> None:
        for held in list(self._held.values()):
            while held.unread:
                self._read_one(held, held.unread.popleft())

    def _read_one(self, held: Held, unread: tuple[responses.Thread | str, bytes, bool, int]) -> None:
        before, answer, whole, size = unread
        response = json.loads(answer) if whole else terminal_response(answer)
        response_id = response["id"]
        replaced = held.read.pop(response_id, None)  # a seeded answer's id comes again: the newest wins
        if replaced is not None:
            self._forget_id(response_id, held.session)
            held.size -= replaced.size
            self.size -= replaced.size
            self.count -= 1
        self._sessions_of.setdefault(response_id, []).append(held.session)
        held.read[response_id] = Stored(answer, whole, responses.thread_after(before, response), size)


def before_of(request: ParsedRequest) -> responses.Thread | str:
    """What is kept of a request whose answer is kept: its Thread, or the text of its one user message."""
    thread = request.options.get("thread")
    # as much of the text as a quote reads; the same string when shorter
    return request.prompt[:MAX_TEXT_CHARS] if thread is None else thread


def answer_id(answer: bytes, whole: bool) -> str:
    """The id of a kept answer (see Stored.answer)."""
    return (json.loads(answer) if whole else terminal_response(answer))["id"]


def terminal_response(last_write: bytes) -> dict:
    """The response object in the terminal event that ends a stream's last write."""
    data = last_write[last_write.rindex(b"\ndata: ") + len(b"\ndata: ") :]
    return json.loads(data)["response"]
