"""The Messages Threads fakehop holds (the `message-threads-2026-08-12` beta): for each answer
given to a request with `thread`, the conversation it answered and the answer itself, kept
under the answer's message id for the one later request that continues from it.

A turn that continues sends only its new messages: the conversation is the held one, the
reply (read back from the answer's bytes only then) and those messages, with the Thread's
system and tools, and it is parsed whole, so it passes the same checks and counts the same
turns as one that sent it all. Each answer may be continued once: while a continuing answer
is under way a second one is refused as in flight, and once one has been kept, as already
continued; one that ended otherwise (an error, a cut stream) leaves it to continue again.

At most KEPT_TURNS answers, holding about KEPT_BYTES, are held, the oldest going first; each
session's apart, and dropped with it. With --state each answer is also held on Redis, and a
turn that continues one takes it from there (see gateway.SharedAnswer.adopt_thread), so that
every server answers it.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from ..protocols import messages
from ..protocols.common import BadRequest, ParsedRequest
from . import journal as jr

__all__ = ["KEPT_BYTES", "KEPT_TURNS", "Held", "Threads", "already_continued", "id_of", "in_flight", "not_found"]

KEPT_TURNS = 1000
KEPT_BYTES = 64 * 1024 * 1024


class Held:
    """One answer of a Thread: the conversation it answered (messages, system, tools), the
    answer (its body, or its stream's bytes), and who continues it."""

    __slots__ = ("answer", "continued", "continuing", "messages", "size", "system", "tools", "whole")

    def __init__(self, body: dict, answer: bytes, whole: bool, size: int) -> None:
        self.messages: list = body["messages"]
        self.system: Any = body.get("system")
        self.tools: Any = body.get("tools")
        self.answer = answer
        self.whole = whole
        self.size = size
        self.continued = False  # an answer continuing it was kept
        self.continuing: jr.Record | None = None  # the request that last began to continue it

    def as_json(self) -> dict:
        return {
            "messages": self.messages,
            "system": self.system,
            "tools": self.tools,
            "answer": self.answer.decode(),
            "whole": self.whole,
            "size": self.size,
        }

    @classmethod
    def from_json(cls, held: dict) -> Held:
        body = {"messages": held["messages"], "system": held["system"], "tools": held["tools"]}
        return cls(body, held["answer"].encode(), held["whole"], held["size"])

    def conversation_with(self, body: dict) -> dict:
        """`body`, a turn that continues this answer, with the whole conversation and the Thread's system and tools."""
        whole = {key: value for key, value in body.items() if key != "thread"}
        whole["messages"] = [*self.messages, messages.reply_of(self.answer, self.whole), *body["messages"]]
        own = {"system": self.system, "tools": self.tools}
        return {**whole, **{field: value for field, value in own.items() if value is not None}}


class Threads:
    def __init__(self, capacity: int = KEPT_TURNS, max_bytes: int = KEPT_BYTES):
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.size = 0
        self._held: OrderedDict[tuple[str | None, str], Held] = OrderedDict()

    def __len__(self) -> int:
        return len(self._held)

    def keep(self, request: ParsedRequest, session: str | None, answer: bytes, whole: bool, body_bytes: int) -> None:
        """Hold the answer to `request`, a turn of a Thread, for the next turn; the answer it
        continued is continued. An answer whose message id cannot be read (a scenario's raw
        frame where its message_start would be) is held for none."""
        ask: messages.ThreadAsk = request.options[messages.THREAD]
        thread_id = id_of(answer, whole)
        if thread_id is None:
            return
        self.adopt(session, thread_id, Held(ask.body, answer, whole, len(answer) + body_bytes))
        if ask.previous is not None and (before := self._held.get((session, ask.previous))) is not None:
            before.continued = True

    def adopt(self, session: str | None, thread_id: str, held: Held) -> None:
        """Hold `held` as the answer `thread_id` (in place of any held by that id)."""
        key = (session, thread_id)
        self._drop(key)
        self._held[key] = held
        self.size += held.size
        while len(self._held) > self.capacity or self.size > self.max_bytes:
            self._drop(next(iter(self._held)))

    def forget(self, session: str | None, thread_id: str) -> None:
        self._drop((session, thread_id))

    def continued(self, request: ParsedRequest, session: str | None, record: jr.Record) -> ParsedRequest:
        """`request`, a turn that continues a Thread, parsed with the whole conversation (the
        real API's 404 or 400 when its previous_message_id cannot be continued now); `record`'s
        request continues it until it ends."""
        ask: messages.ThreadAsk = request.options[messages.THREAD]
        held = self.claimed(ask.previous or "", session)
        whole = held.conversation_with(ask.body)
        parsed = messages.in_thread(messages.parse(whole), messages.ThreadAsk(ask.previous, whole))
        held.continuing = record
        return parsed

    def claimed(self, previous: str, session: str | None) -> Held:
        held = self._held.get((session, previous))
        if held is None:
            raise not_found(previous)
        if held.continued:
            raise already_continued(previous)
        if held.continuing is not None and held.continuing.end == jr.IN_PROGRESS:
            raise in_flight(previous)
        return held

    def drop_session(self, session: str) -> None:
        for key in [key for key in self._held if key[0] == session]:
            self._drop(key)

    def clear(self) -> None:
        self._held.clear()
        self.size = 0

    def _drop(self, key: tuple[str | None, str]) -> None:
        held = self._held.pop(key, None)
        if held is not None:
            self.size -= held.size


def id_of(answer: bytes, whole: bool) -> str | None:
    """The message id of a Thread's answer; None when it cannot be read (a scenario's raw
    frame where the message_start would be)."""
    try:
        return messages.answer_id(answer, whole)
    except (ValueError, LookupError, TypeError):
        return None


def not_found(previous: str) -> BadRequest:
    return messages.thread_error(
        f"No Thread state was found for previous_message_id '{previous}'. Send the whole conversation"
        ' with `thread: {"type": "create"}` to start a new Thread.',
        "thread_not_found",
        status=404,
    )


def already_continued(previous: str) -> BadRequest:
    return messages.thread_error(
        f"The response '{previous}' has already been continued, and each response can be continued only"
        " once. Continue from the Thread's most recent response id.",
        "thread_already_continued",
    )


def in_flight(previous: str) -> BadRequest:
    return messages.thread_error(
        f"Another request is still continuing from '{previous}'. Wait for it to complete and continue"
        " from its response id.",
        "thread_continue_in_flight",
    )
