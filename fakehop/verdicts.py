"""Verdicts: what the client did, judged against HopBase's rules.

Read from the journal when asked, never while answering. Each rule is one function over the
`Evidence` (the records of one session, grouped into requests and their retries, with the
thresholds in `Settings`), registered under its name by `@rule`; it yields (severity, seqs,
message) and `judge` makes findings of them. Adding a rule is writing one such function.
"""

from __future__ import annotations

import bisect
import email.utils
import heapq
import json
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields
from functools import cached_property
from typing import Any, NamedTuple, cast

from .play import player
from .protocols import PROTOCOLS
from .protocols.common import BadRequest, content_text
from .scenario.model import Script
from .state import journal as jr
from .state.journal import Record
from .style import Tint, plain

ScriptOf = Callable[[Record], Script | None]  # the script a record's answer played, when still known

ERROR = "error"
WARNING = "warning"
SEVERITIES = (ERROR, WARNING)
SEVERITY_TONES = {ERROR: "bad", WARNING: "warn"}  # see fakehop.style
# How an attempt may end for the next one with the same body to be its retry.
FAILURES = frozenset((jr.HTTP_ERROR, jr.FAILED, jr.DISCONNECTED, jr.CLIENT_DISCONNECTED, jr.REJECTED))
NON_RETRYABLE_STATUSES = frozenset((400, 401, 403, 404))
SDK_RETRIED_STATUSES = frozenset((408, 409, 429))  # and every 5xx
SDK_ATTEMPTS = 3  # what the SDKs make of a request at their defaults (max_retries=2)
RETRY_COUNT_HEADER = "x-stainless-retry-count"  # the official SDKs' own: 0 on a first attempt, N on the Nth retry
RETRY_COUNT_DIGITS = 9


def setting(default: float, meaning: str):
    return field(default=default, metadata={"help": meaning})


@dataclass(frozen=True)
class Settings:
    """The rules' thresholds, in real seconds (never time-scaled: they judge the client's clock)."""

    retry_after_slack: float = setting(
        0.05, "retry_after_ignored: how much sooner than Retry-After said a retry may come"
    )
    backoff_floor: float = setting(
        0.25, "no_backoff: a retry sooner than this after a failure is hasty (the SDKs wait 0.375 s or more)"
    )
    backoff_retries: int = setting(3, "no_backoff: from this many retries of one request on, their waits must grow")
    backoff_growth: float = setting(1.25, "no_backoff: a wait grows when it is at least this many times the one before")
    max_attempts: int = setting(5, "retry_storm: more attempts of one request than this is a storm (the SDKs make 3)")
    read_patience: float = setting(
        630.0, "no_read_timeout: a request still open with no output for this long (the SDKs time out at 600)"
    )
    write_patience: float = setting(10.0, "abandoned_stream: a write to a client that does not read, blocked this long")
    together_within: float = setting(
        0.25,
        "retries: an SDK's first attempt this soon after the same request failed is a copy sent "
        "with it, not a retry (unless that one's SDK had its retries turned down)",
    )

    @classmethod
    def from_strings(cls, values: Mapping[str, str]) -> Settings:
        """Settings from text (a query string, the command line); ValueError naming a bad one."""
        known = {f.name for f in fields(cls)}
        chosen: dict[str, Any] = {}
        for name, text in values.items():
            if name not in known:
                raise ValueError(f"unknown setting {name!r}; the settings are: {', '.join(known)}")
            chosen[name] = setting_value(name, text)
        return cls(**chosen)


def setting_kind(name: str) -> type:
    return int if type(Settings.__dataclass_fields__[name].default) is int else float


def setting_value(name: str, text: str) -> float | int:
    """A setting's value read from `text`; ValueError naming the setting when it is not one."""
    kind = setting_kind(name)
    try:
        value = kind(text)
    except (TypeError, ValueError):
        value = None
    if value is None or not value >= (1 if kind is int else 0) or value == float("inf"):
        what = "a whole number from 1" if kind is int else "a number from 0"
        raise ValueError(f"{name}: expected {what}, got {text!r}")
    return value


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: str
    seqs: tuple[int, ...]  # the requests it concerns, oldest first
    message: str  # what the client did and what it should do, in HopBase's terms

    def as_json(self) -> dict:
        return {"rule": self.rule, "severity": self.severity, "seqs": list(self.seqs), "message": self.message}

    @classmethod
    def from_json(cls, data: dict) -> Finding:
        return cls(data["rule"], data["severity"], tuple(data["seqs"]), data["message"])

    def __str__(self) -> str:
        return self.line()

    def line(self, tint: Tint = plain) -> str:
        """The finding in one line, its severity coloured by `tint` (see fakehop.style)."""
        return f"{tint(f'{self.severity:<7}', SEVERITY_TONES[self.severity])} {self.rule:<25} {seq_list(self.seqs):<12} {self.message}"


def seq_list(seqs) -> str:
    return ",".join(f"#{seq}" for seq in seqs)


# ---------------------------------------------------------------- what the rules read


def wall_end(record: Record) -> float:
    """When the answer ended, on the same clock as `started_at` (time.time())."""
    return record.started_at + (record.duration or 0.0)


@dataclass
class Attempts:
    """One request and its retries: attempts with the same path and body, each after the one
    before had failed, or sent by an SDK as its retry by its retry header (see `group_attempts`)."""

    records: list[Record]

    @property
    def seqs(self) -> tuple[int, ...]:
        return tuple(record.seq for record in self.records)

    def retries(self) -> Iterator[tuple[Record, Record, float]]:
        """Each attempt after the first with the one before it, and the seconds between the
        end of that one and its own arrival."""
        for before, after in zip(self.records, self.records[1:]):
            yield before, after, max(0.0, after.started_at - wall_end(before))

    def as_json(self) -> dict:
        first = self.records[0]
        return {
            "seqs": list(self.seqs),
            "path": first.path,
            "scenario": first.scenario,
            "attempts": len(self.records),
            "waits": [round(wait, 3) for _, _, wait in self.retries()],
            "ends": [record.end for record in self.records],
        }


def same_request_key(record: Record) -> tuple[str, str]:
    """What two attempts of one request share: the path and the body as JSON, key order aside.
    The SDKs change no body field on a retry (only the x-stainless-retry-count header)."""
    return record.path, json.dumps(record.body, sort_keys=True, ensure_ascii=False)


def retry_count(record: Record) -> int | None:
    """How many times the client says it had sent this request before (the SDKs' retry
    header: 0 on a first attempt), or None when it does not say: a value of anything but
    ASCII digits, or of more than RETRY_COUNT_DIGITS of them, is not the SDKs' count."""
    count = record.headers.get(RETRY_COUNT_HEADER)
    if count is None or not (count.isascii() and count.isdigit() and len(count) <= RETRY_COUNT_DIGITS):
        return None
    return int(count)


class Waiting(NamedTuple):
    ended: float  # when the chain's last attempt ended (see wall_end)
    order: int  # the chain's place among the chains, by when each began
    length: int  # its attempts when it was put to wait
    chain: Attempts


class Ended:
    """Chains of attempts (calls or requests) whose last attempt has ended, the first-ended
    first: matching an attempt to that one never makes a wait shorter than it was. Of chains
    that ended at once, the one begun first comes first; a chain that grew since it was put
    here is passed over."""

    def __init__(self) -> None:
        self.heap: list[Waiting] = []

    def put(self, chain: Attempts, order: int) -> None:
        heapq.heappush(self.heap, Waiting(wall_end(chain.records[-1]), order, len(chain.records), chain))

    def first(self, fits: Callable[[float], bool]) -> Waiting | None:
        """The chain that ended first, when its end (a time) `fits`: which must then hold for
        every earlier end too."""
        heap = self.heap
        while heap and len(heap[0].chain.records) != heap[0].length:
            heapq.heappop(heap)
        return heap[0] if heap and fits(heap[0].ended) else None


def ended_by(moment: float) -> Callable[[float], bool]:
    return lambda ended: ended <= moment


def group_attempts(records: list[Record], settings: Settings, script_of: ScriptOf) -> list[Attempts]:
    """The records as requests and their retries, oldest first: the calls that sent them (see
    `sdk_calls`), each joined to an earlier call of the same request when it is the client's
    own retry of it (see `retried_request`). Only attempts with the same path and body can be
    one request's: under load many requests fail at once, and a retry header alone cannot tell
    whose retry an attempt is."""
    requests: list[Attempts] = []
    failed: dict[tuple[str, str], Ended] = {}  # by request key: the requests whose last attempt failed
    turned: dict[tuple[str, str], Ended] = {}  # those of them whose last call had its SDK's retries turned down
    for key, call in sdk_calls(records):
        found = retried_request(failed.get(key), turned.get(key), call, settings)
        request, order = (found.chain, found.order) if found is not None else (Attempts([]), len(requests))
        if found is None:
            requests.append(request)
        request.records.extend(call.records)
        if call.records[-1].end in FAILURES:
            failed.setdefault(key, Ended()).put(request, order)
            if turned_down(call, script_of):
                turned.setdefault(key, Ended()).put(request, order)
    return requests


def retried_request(failed: Ended | None, turned: Ended | None, call: Attempts, settings: Settings) -> Waiting | None:
    """The request (with the same path and body) that `call` is the client's own retry of, of
    those whose last attempt failed and ended before `call` began. A call from an SDK (its
    first attempt counting 0) may also be a copy of the request sent at the same time, which
    the wire cannot tell from a retry at once: it is a retry only of a request whose last call
    had the SDK's retries turned down, or one that failed `together_within` or more before."""
    first = call.records[0]
    count = retry_count(first)
    if failed is None or (count is not None and count > 0):  # > 0: an SDK's retry whose first attempts never arrived
        return None
    if count is None:
        return failed.first(ended_by(first.started_at))
    began, together = first.started_at, settings.together_within
    late = failed.first(lambda ended: ended <= began and began - ended >= together)
    copied = turned.first(ended_by(began)) if turned is not None else None
    return min(filter(None, (late, copied)), default=None)


def turned_down(call: Attempts, script_of: ScriptOf) -> bool:
    """Whether an SDK's call gave up on a failure in fewer attempts than the SDKs make at
    their defaults, when they retry that failure: its client turned the retries down."""
    return (
        retry_count(call.records[0]) == 0
        and len(call.records) < SDK_ATTEMPTS
        and sdk_retries(call.records[-1], script_of)
    )


def sdk_retries(record: Record, script_of: ScriptOf) -> bool:
    """Whether the SDKs retry an attempt that ended as `record` did: with no answer at all (the
    connection closed, their own timeout), a 408, 409, 429 or 5xx; an `x-should-retry`
    header on the answer overrules the status."""
    told = should_retry_header(record, script_of)
    if told is not None:
        return told
    return record.status is None or record.status in SDK_RETRIED_STATUSES or record.status >= 500


def should_retry_header(record: Record, script_of: ScriptOf) -> bool | None:
    """What the `x-should-retry` header of the answer said (`true` or `false`, which the SDKs
    obey whatever the status), None when it sent none."""
    script = script_of(record)
    headers = script.http_error.headers if script is not None and script.http_error is not None else ()
    said = next((value.lower() for name, value in headers if name.lower() == "x-should-retry"), None)
    return None if said is None else {"true": True, "false": False}.get(said)


def sdk_calls(records: list[Record]) -> list[tuple[tuple[str, str], Attempts]]:
    """The records as the calls that sent them, with the key of their request: an attempt
    with a retry count N from 1 on goes to the call of the same request whose last attempt had
    N-1 and ended before it began; any other begins a call (a count of N whose attempt before
    is not in the journal, too: it never reached the server)."""
    calls: list[tuple[tuple[str, str], Attempts]] = []
    ended: dict[tuple[tuple[str, str], int], Ended] = {}  # by request key and the retry count of the last attempt
    for record in records:
        key = same_request_key(record)
        count = retry_count(record)
        before = ended.get((key, count - 1)) if count else None
        found = before.first(ended_by(record.started_at)) if before is not None else None
        call, order = (found.chain, found.order) if found is not None else (Attempts([]), len(calls))
        if found is None:
            calls.append((key, call))
        call.records.append(record)
        if count is not None and record.end != jr.IN_PROGRESS:
            ended.setdefault((key, count), Ended()).put(call, order)
    return calls


@dataclass
class Evidence:
    """What the rules judge: one session's records, oldest first, grouped into requests."""

    records: list[Record]
    settings: Settings
    script_of: ScriptOf
    time_scale: float  # the server's, which the scripts' pauses were played at
    now: float = field(default_factory=time.monotonic)  # the clock of Record's own times
    requests: list[Attempts] = field(init=False)

    def __post_init__(self) -> None:
        self.requests = group_attempts(self.records, self.settings, self.script_of)

    def retries(self) -> Iterator[tuple[Record, Record, float]]:
        for request in self.requests:
            yield from request.retries()

    @cached_property
    def carried_forward(self) -> list[tuple[Record, Record, bool]]:
        return list(cut_answers_carried(self))

    def age(self, record: Record, moment: float | None = None) -> float:
        """Seconds from `moment` (the monotonic clock; the record's arrival when None) until now."""
        return record.since_arrival(self.now) if moment is None else self.now - moment


def retry_after_seconds(record: Record) -> float | None:
    """The wait `record`'s answer asked for, read as the SDKs read it: its retry-after-ms when
    that is a number, else its Retry-After, in seconds or as an HTTP date."""
    milliseconds = retry_after_ms(record)
    if milliseconds is not None:
        return milliseconds / 1000
    value = record.retry_after
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - wall_end(record))
    except (TypeError, ValueError):
        return None


def retry_after_ms(record: Record) -> float | None:
    """The retry-after-ms `record`'s answer sent, when it is a number (the SDKs pass over others)."""
    try:
        return None if record.retry_after_ms is None else max(0.0, float(record.retry_after_ms))
    except ValueError:
        return None


def is_output(frame: bytes) -> bool:
    """Whether a write held more than keepalive comments."""
    return jr.sse_events(frame) > 0


def last_output_at(record: Record) -> float | None:
    """When the last write that held more than keepalives began (the monotonic clock)."""
    return next((at for at, frame in reversed(record.frames) if is_output(frame)), None)


# ---------------------------------------------------------------- conversations


def history(record: Record) -> list[tuple[str, str]] | None:
    """The conversation a request carried, as (role, text) turns in each protocol's message
    shape; an item that is not a message (a tool call, a tool result) is kept as its JSON."""
    body = record.body
    if not isinstance(body, dict):
        return None
    items = body.get("input") if record.protocol == "responses" else body.get("messages")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list):
        return None
    return [turn(item) for item in items]


def turn(item: Any) -> tuple[str, str]:
    if isinstance(item, dict) and isinstance(item.get("role"), str) and item.get("type") in (None, "message"):
        return item["role"], squeezed(content_text(item.get("content")))
    return "item", json.dumps(item, sort_keys=True)


def squeezed(text: str) -> str:
    return " ".join(text.split())


def chat_text(event: dict) -> str:
    choices = event.get("choices") or [{}]
    return (choices[0].get("delta") or {}).get("content") or ""


def responses_text(event: dict) -> str:
    return event.get("delta", "") if event.get("type") == "response.output_text.delta" else ""


def messages_text(event: dict) -> str:
    delta = event.get("delta") or {}
    return (
        delta.get("text", "")
        if event.get("type") == "content_block_delta" and delta.get("type") == "text_delta"
        else ""
    )


TEXT_OF_EVENT: dict[str | None, Callable[[dict], str]] = {
    "chat": chat_text,
    "responses": responses_text,
    "messages": messages_text,
}


def streamed_text(record: Record) -> str:
    """The answer text a stream wrote, read back from its kept frames."""
    text_of = TEXT_OF_EVENT.get(record.protocol)
    if text_of is None:
        return ""
    pieces = []
    for line in b"".join(frame for _, frame in record.frames).split(b"\n"):
        if line.startswith(b"data: "):
            try:
                event = json.loads(line[6:])
            except ValueError:
                continue
            if isinstance(event, dict):
                pieces.append(text_of(event))
    return "".join(pieces)


def cut_answers_carried(evidence: Evidence) -> Iterator[tuple[Record, Record, bool]]:
    """Each stream cut short (failed, disconnected, or left by the client) with some text out,
    and the first later request whose history is its own followed by that partial text as the
    assistant's turn; True when more turns follow it (the conversation went on)."""
    histories = [history(record) for record in evidence.records]
    conversations = Conversations(histories)
    for number, cut in enumerate(evidence.records):
        if not (cut.stream and cut.end in (jr.FAILED, jr.DISCONNECTED, jr.CLIENT_DISCONNECTED)):
            continue
        partial, cut_history = squeezed(streamed_text(cut)), histories[number]
        if not partial or cut_history is None:
            continue
        later = conversations.first_reply(number, partial, cut.frames_cut)
        if later is not None:  # a reply's history extends the cut one's
            yield cut, evidence.records[later], len(cast(list, histories[later])) > len(cut_history) + 1


Turn = tuple[str, str]


class Conversations:
    """The requests' histories as one tree of turns, each distinct history a node (0: none
    yet), in which the later requests that carried a history on are found at once rather
    than by comparing it with each of them, turn by turn."""

    def __init__(self, histories: list[list[Turn] | None]) -> None:
        self.node_after: dict[tuple[int, Turn], int] = {}  # a node and the turn that follows it: the node they make
        self.replies: dict[int, dict[str, int]] = {}  # a node's following assistant turns: their nodes by their text
        self.passing: dict[int, list[int]] = {}  # an assistant turn's node: the numbers of the requests through it
        self.ends = [None if turns is None else self.add(number, turns) for number, turns in enumerate(histories)]

    def add(self, number: int, turns: list[Turn]) -> int:
        """The node of the `number`th request's history, which passes every node on its way."""
        node = 0
        for turn in turns:
            after = self.node_after.get((node, turn))
            if after is None:
                after = self.node_after[node, turn] = len(self.node_after) + 1
                if turn[0] == "assistant":
                    self.replies.setdefault(node, {})[turn[1]] = after
            if turn[0] == "assistant":
                self.passing.setdefault(after, []).append(number)
            node = after
        return node

    def first_reply(self, number: int, partial: str, cut: bool) -> int | None:
        """The number of the first request after the `number`th whose history is that one's
        followed by an assistant turn of `partial` (or beginning with it, when `cut`)."""
        replies = self.replies.get(cast(int, self.ends[number]), {})  # asked only of a request with a history
        nodes = [node for text, node in replies.items() if text.startswith(partial)] if cut else [replies.get(partial)]
        later = [
            passing[bisect.bisect_right(passing, number)]
            for node in nodes
            if node is not None and (passing := self.passing[node])[-1] > number
        ]
        return min(later, default=None)


# ---------------------------------------------------------------- the rules

Rule = Callable[[Evidence], Iterator[tuple[str, tuple[int, ...], str]]]
RULES: dict[str, Rule] = {}


def rule(function: Rule) -> Rule:
    """Register a rule under its function's name, the finding's `rule`."""
    RULES[function.__name__] = function
    return function


def concerned(pairs: list[tuple[Record, Record]]) -> tuple[int, ...]:
    """The seqs of the attempts in `pairs` of (attempt, its retry), each once, oldest first."""
    return tuple(sorted({record.seq for pair in pairs for record in pair}))


def more(count: int, what: str) -> str:
    return f" ({count} more {what})" if count else ""


@rule
def retry_after_ignored(evidence: Evidence):
    slack = evidence.settings.retry_after_slack
    for request in evidence.requests:
        early = [
            (before, after, wait, asked)
            for before, after, wait in request.retries()
            if (asked := retry_after_seconds(before)) is not None and wait < asked - slack
        ]
        if early:
            before, after, wait, asked = early[0]
            yield (
                ERROR,
                concerned([(b, a) for b, a, _, _ in early]),
                (
                    f"retried #{after.seq} {wait:.2f} s after a {before.status} whose "
                    f"{'retry-after-ms' if retry_after_ms(before) is not None else 'Retry-After'} asked for {asked:g} s"
                    f"{more(len(early) - 1, 'retries as early')}; HopBase sends Retry-After with its 429s and 503s: "
                    "wait at least that long before the next attempt"
                ),
            )


@rule
def no_backoff(evidence: Evidence):
    settings = evidence.settings
    for request in evidence.requests:
        waits = [(after, wait) for before, after, wait in request.retries() if not retry_after_seconds(before)]
        steady = (
            len(waits) >= settings.backoff_retries
            and not any(  # a wait under the floor is no backoff, however it compares
                later >= max(earlier * settings.backoff_growth, settings.backoff_floor)
                for (_, earlier), (_, later) in zip(waits, waits[1:])
            )
        )
        hasty = [after.seq for after, wait in waits if wait < settings.backoff_floor]
        shown = ", ".join(f"{wait:.2f}" for _, wait in waits)
        if steady:
            yield (
                ERROR,
                request.seqs,
                (
                    f"retried one request {len(waits)} times with waits of {shown} s that never grew; back off "
                    "exponentially between attempts (the SDKs wait about 0.5 s, then 1 s, 2 s, up to 8 s)"
                ),
            )
        elif hasty:
            yield (
                WARNING,
                request.seqs,
                (
                    f"retried {seq_list(hasty)} less than {settings.backoff_floor:g} s after the attempt before failed "
                    f"(waits {shown} s); wait before reissuing the request, longer each time"
                ),
            )


@rule
def retry_storm(evidence: Evidence):
    limit = evidence.settings.max_attempts
    for request in evidence.requests:
        if len(request.records) > limit:
            yield (
                ERROR,
                request.seqs,
                (
                    f"sent one request {len(request.records)} times, more than {limit}; give up after a few attempts "
                    "(the SDKs make 3) and report the failure instead of adding load to a gateway that is failing"
                ),
            )


def non_retryable(record: Record) -> str | None:
    """Why an answer says not to retry the request as it is, or None."""
    if record.status in NON_RETRYABLE_STATUSES:
        return f"a {record.status}"
    if record.end == jr.FAILED and (record.error or "").startswith("invalid_prompt:"):
        return "an invalid_prompt failure"
    return None


@rule
def retried_non_retryable(evidence: Evidence):
    for request in evidence.requests:
        resent = [
            (before, after, reason)
            for before, after, _ in request.retries()
            if (reason := non_retryable(before)) is not None and not should_retry_header(before, evidence.script_of)
        ]
        if resent:
            _, after, reason = resent[0]
            yield (
                ERROR,
                concerned([(b, a) for b, a, _ in resent]),
                (
                    f"resent the same request as #{after.seq} after {reason}{more(len(resent) - 1, 'times')}, which it "
                    "will only get again; change the request (or its key, or what it asks for) instead of retrying it"
                ),
            )


@rule
def resumed_partial_output(evidence: Evidence):
    for cut, later, went_on in evidence.carried_forward:
        if not went_on:
            yield (
                ERROR,
                (cut.seq, later.seq),
                (
                    f"continued the answer cut short at #{cut.seq} ({cut.end}) by sending its partial text back as the "
                    "assistant's turn; HopBase cannot resume partial output: reissue the whole request"
                ),
            )


@rule
def truncated_stream_accepted(evidence: Evidence):
    for cut, later, went_on in evidence.carried_forward:
        if went_on:
            yield (
                ERROR,
                (cut.seq, later.seq),
                (
                    f"took the answer of #{cut.seq}, cut short with no terminator ({cut.end}), as complete and carried it "
                    "into the next turn; an answer is whole only when its stream ends with the protocol's terminal event "
                    "([DONE], response.completed, message_stop): reissue the request instead"
                ),
            )


def silence_at_hang_up(evidence: Evidence, record: Record) -> tuple[float, float] | None:
    """When the client left a stream during a silence the gateway fills with keepalives: how
    long the silence had lasted, and how long it was to last (until the next output, or the
    stall's error). None when it left at another time, or the script is no longer known."""
    script = evidence.script_of(record)
    if script is None or record.duration is None:
        return None
    try:
        request = PROTOCOLS[record.protocol].parse(record.body).play
    except (BadRequest, KeyError, AttributeError, TypeError):
        return None
    left = record.duration
    began, keepalives = 0.0, False
    for offset, happening in player.timeline(script, request, evidence.time_scale):
        if type(happening) is player.Keepalive:
            keepalives = keepalives or offset > began
        elif offset > left:
            return (left - began, offset - began) if keepalives and type(happening) is not player.Hang else None
        else:
            began, keepalives = offset, False
    return None


@rule
def gave_up_during_keepalive(evidence: Evidence):
    hung_up = [
        record
        for record in evidence.records
        if record.end == jr.CLIENT_DISCONNECTED and record.stream and record.write_began is None
    ]
    for record, silence in ((record, silence_at_hang_up(evidence, record)) for record in hung_up):
        if silence is not None:
            yield (
                ERROR,
                (record.seq,),
                (
                    f"hung up {silence[0]:.2f} s into a silence kept alive by ': hopbase-keepalive' comments, which was to "
                    f"last {silence[1]:.2f} s; HopBase keeps a stream of a model that is thinking alive for up to its stall "
                    "timeout (about 2 minutes): make the read timeout longer than the keepalive interval and let the "
                    "gateway end a stalled stream"
                ),
            )


@rule
def no_read_timeout(evidence: Evidence):
    waiting = {
        record.seq: evidence.age(record, last_output_at(record))
        for record in evidence.records
        if record.end == jr.IN_PROGRESS and record.write_began is None
    }  # a blocked write is abandoned_stream's
    for seq, silent in waiting.items():
        if silent > evidence.settings.read_patience:
            yield (
                ERROR,
                (seq,),
                (
                    f"is still waiting after {silent:.0f} s in which the gateway wrote no output; HopBase ends a stalled "
                    "stream after about 2 minutes, so give every request a read timeout (and a stream an overall "
                    "deadline) and hang up when it passes"
                ),
            )


@rule
def abandoned_stream(evidence: Evidence):
    patience = evidence.settings.write_patience
    for record in evidence.records:
        if record.write_began is None:
            continue
        until = evidence.age(record) if record.end == jr.IN_PROGRESS else cast(float, record.duration)  # closed
        blocked = until - record.since_arrival(record.write_began)
        if blocked > patience:
            left = "is still open" if record.end == jr.IN_PROGRESS else "was only then closed"
            yield (
                ERROR,
                (record.seq,),
                (
                    f"stopped reading the stream for {blocked:.1f} s while the gateway waited to write, and {left}; "
                    "read a stream to its end, or close it (a `with` block, stream.close()) as soon as it is no longer wanted"
                ),
            )


# ---------------------------------------------------------------- judging


@dataclass
class Verdict:
    findings: list[Finding]
    requests: list[Attempts]
    settings: Settings
    session: str | None = None

    def count(self, severity: str) -> int:
        return sum(finding.severity == severity for finding in self.findings)

    def as_json(self) -> dict:
        retried = [request.as_json() for request in self.requests if len(request.records) > 1]
        return {
            "session": self.session,
            "findings": [finding.as_json() for finding in self.findings],
            "errors": self.count(ERROR),
            "warnings": self.count(WARNING),
            "requests": len(self.requests),
            "retried": retried,
            "settings": asdict(self.settings),
        }


@dataclass(frozen=True)
class Taken:
    """What a verdict judges, taken from a gateway on its own loop: copies of one session's
    records (which nobody changes while the rules read them), and what played them."""

    records: list[Record]
    script_of: ScriptOf
    time_scale: float
    session: str | None
    now: float


def take(session) -> Taken:
    """The records of `session` (a `fakehop.sessions.Session`) as they are now, the global one's
    own only; on the server's loop."""
    copies = [record.snapshot() for record in session.requests() if record.session == session.name]
    return Taken(copies, script_finder(session.library), session.time_scale, session.name, time.monotonic())


def judge(taken: Taken, settings: Settings = Settings()) -> Verdict:
    """Every rule over what was taken; findings in the order of their first seq. Off the
    server's loop if wanted: it reads only the copies."""
    evidence = Evidence(taken.records, settings, taken.script_of, taken.time_scale, taken.now)
    findings = [
        Finding(name, severity, seqs, message)
        for name, check in RULES.items()
        for severity, seqs, message in check(evidence)
    ]
    findings.sort(key=lambda finding: (finding.seqs, finding.rule))
    return Verdict(findings, evidence.requests, settings, taken.session)


def script_finder(library) -> ScriptOf:
    """The script each record's answer played, found again by its journal label in `library`
    (None when the scenario is gone or was replaced since)."""
    from .scenario.library import resolve

    def script_of(record: Record) -> Script | None:
        label = record.scenario or ""
        name, _, number = label.split("->", 1)[0].partition("[")
        if name not in library:
            return None
        number = number.rstrip("]")
        found_label, script = resolve(library, name, int(number) if number.isdigit() else 1)
        return script if found_label == label else None

    return script_of
