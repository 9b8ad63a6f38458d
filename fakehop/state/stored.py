"""The Responses answers fakehop gave, kept for `previous_response_id` and for
`GET`/`DELETE /v1/responses/{id}`, as the real API keeps every response unless the request
says `store: false`.

At most KEPT_RESPONSES answers, and about KEPT_BYTES of them, are kept; the oldest go first.
A streamed answer is mostly filled in from a kept rendering, with no response object ever
built, so it is kept as its last write: those bytes end with the terminal event, which carries
the whole response. Its response object is read out of them only when a later request names
one, once. A whole answer is kept as the object it sent.
"""

from __future__ import annotations

import json
from collections import OrderedDict, deque
from typing import NamedTuple

from ..protocols import responses
from ..protocols.common import BadRequest, ParsedRequest

KEPT_RESPONSES = 1000
KEPT_BYTES = 64 * 1024 * 1024


class Stored(NamedTuple):
    response: dict  # as the answer carried it
    thread: responses.Thread  # the conversation a request that continues it continues
    size: int


class StoredResponses:
    """The kept answers, oldest first: the ones read into Stored by id, then the ones not read yet."""

    def __init__(self, capacity: int = KEPT_RESPONSES, max_bytes: int = KEPT_BYTES):
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.size = 0
        self._read: OrderedDict[str, Stored] = OrderedDict()
        self._unread: deque[tuple[responses.Thread | str, bytes | dict, int]] = deque()

    def __len__(self) -> int:
        return len(self._read) + len(self._unread)

    def keep(self, request: ParsedRequest, answer: bytes | dict, size: int) -> None:
        """Keep the answer to `request`: the bytes of its stream's last write, or the object of a
        whole answer; `size` is about how many bytes it holds. Of the request only what a
        later one continues is kept (its Thread, or the text of its one user message): kept
        whole, the requests of a load test would be so many more objects for the collector."""
        self._unread.append((request.options.get("thread") or request.prompt, answer, size))
        self.size += size
        if self.size > self.max_bytes or len(self._unread) + len(self._read) > self.capacity:
            self._make_room()

    def _make_room(self) -> None:
        while len(self) > self.capacity or self.size > self.max_bytes:
            self.size -= self._read.popitem(last=False)[1].size if self._read else self._unread.popleft()[2]

    def find(self, response_id: str) -> Stored | None:
        self._read_unread()
        return self._read.get(response_id)

    def delete(self, response_id: str) -> bool:
        stored = self.find(response_id)
        if stored is not None:
            del self._read[response_id]
            self.size -= stored.size
        return stored is not None

    def clear(self) -> None:
        self._read.clear()
        self._unread.clear()
        self.size = 0

    def continued(self, request: ParsedRequest) -> ParsedRequest:
        """`request` with the conversation of the stored response it continues; the real API's
        400 when there is none by that id."""
        response_id = request.conversation.continues
        stored = self.find(response_id)
        if stored is None:
            raise BadRequest(f"Previous response with id '{response_id}' not found.", param="previous_response_id", code="previous_response_not_found")
        return responses.chained(request, stored.thread)

    def _read_unread(self) -> None:
        while self._unread:
            before, answer, size = self._unread.popleft()
            response = answer if type(answer) is dict else terminal_response(answer)
            self._read.pop(response["id"], None)  # a seeded answer's id comes again: the newest wins
            self._read[response["id"]] = Stored(response, responses.thread_after(before, response), size)


def terminal_response(last_write: bytes) -> dict:
    """The response object in the terminal event that ends a stream's last write."""
    data = last_write[last_write.rindex(b"\ndata: ") + len(b"\ndata: "):]
    return json.loads(data)["response"]
