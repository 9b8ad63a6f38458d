"""Faults: small breakages laid over whatever answer a request would get, scoped and composable.

A session holds a list of faults, oldest first. A request takes the oldest one that fits it
(its protocol, the name of its scenario, a draw of its probability) of the kinds that end or
replace an answer, and every fitting `latency`; a fault's `times` counts only the requests it
took, and once spent it is gone. A fault with a probability draws once for every request in its
scope, taken or not, and its n-th draw is a function of its seed and n alone (see `draw`), so
a run repeats, and servers that share a fault's count of draws (--state) share its draws. The
HTTP kinds (`rate_limit`, `server_error`, `http_error`) replace the answer with an HTTP error;
the others break or slow its stream (play.breaks).
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from ..play.breaks import BREAK_KINDS, Break, Latency
from ..protocols import PROTOCOLS
from ..scenario.hints import did_you_mean
from ..scenario.model import HttpError
from ..scenario.reader import FAIL_KINDS, parse_duration

HTTP_KINDS = ("rate_limit", "server_error", "http_error")
KINDS = (*HTTP_KINDS, *BREAK_KINDS, "latency")
SCOPE_KEYS = ("times", "protocol", "scenario", "probability", "seed")
# Each kind's parameters and their defaults; REQUIRED: one the fault must be given.
REQUIRED = object()
PARAMETERS: dict[str, dict[str, Any]] = {
    "rate_limit": {"retry_after": 1, "message": None},
    "server_error": {"status": 500, "retry_after": None, "message": None},
    "http_error": {"status": REQUIRED, "retry_after": None, "message": None, "type": None, "code": None},
    "interrupt": {"after": 1, "error": "interrupted", "message": None},
    "truncate": {"after": 1},
    "stall": {"after": 1, "then": "error", "timeout": None},
    "hang": {"after": 0},
    "malformed": {"after": 1, "raw": "event: content_block_delta\ndata: {not json\n\n"},
    "latency": {"first": 0.0, "between": 0.0},
}
STALL_THEN = ("error", "continue")
MAX_AFTER = 1_000_000  # output deltas let through before a break
MAX_RAW = 100_000  # characters a malformed answer writes
SERVER_ERROR_STATUSES = (500, 502, 503, 529)
MAX_TIMES = 10_000  # `times` of one fault; 0 breaks requests until it is removed
MAX_RETRY_AFTER = 86_400.0  # seconds
MAX_TEXT = 10_000  # characters of a message, type, code or scenario glob
MAX_SEED = 2**63
DEFAULT_SEED = 0
MAX_FAULTS = 100  # in one session at once
_ids = itertools.count(1)


class FaultProblem(ValueError):
    """A fault that cannot be set: unknown kind or parameter, or a value out of range."""


@dataclass(eq=False)
class Fault:
    """One fault of a session; `left` is how many requests it will still break (None: until removed)."""

    kind: str
    parameters: dict[str, Any]  # the kind's, defaults filled in
    effect: HttpError | Break | Latency  # what it does to an answer
    times: int = 1
    protocol: str | None = None
    scenario: str | None = None  # a glob on the name of the scenario a request gets
    probability: float = 1.0
    seed: int = DEFAULT_SEED
    id: str = field(default_factory=lambda: f"fault_{next(_ids)}")
    left: int | None = field(init=False)
    draws: int = field(default=0, init=False, repr=False)  # made so far, on this server alone

    def __post_init__(self) -> None:
        self.left = self.times or None

    def in_scope(self, protocol: str, label: str) -> bool:
        """Whether a request of `protocol` getting scenario `label` is one it may break."""
        if self.protocol is not None and protocol != self.protocol:
            return False
        return self.scenario is None or name_fits(self.scenario, label)

    def drawn(self, number: int | None = None) -> bool:
        """Whether its probability breaks a request in its scope: its draw `number` (from 0), or
        with none its next one on this server."""
        if self.probability >= 1.0:
            return True
        if number is None:
            number, self.draws = self.draws, self.draws + 1
        return draw(self.seed, number) < self.probability

    def as_json(self) -> dict:
        return {
            "id": self.id,
            "kind": self.kind,
            **self.parameters,
            "times": self.times,
            "protocol": self.protocol,
            "scenario": self.scenario,
            "probability": self.probability,
            "seed": self.seed,
            "left": self.left,
        }


def draw(seed: int, number: int) -> float:
    """Draw `number` of a fault seeded `seed`: a float in [0, 1) that depends on the two alone,
    whichever server makes it."""
    digest = hashlib.blake2b(b"%d:%d" % (seed, number), digest_size=8).digest()
    return (int.from_bytes(digest, "big") >> 11) / (1 << 53)


def name_fits(glob: str, label: str) -> bool:
    """A journal label (`name`, `name[2]`, `name[2]->other`) fits a glob by itself or by its scenario's name."""
    return fnmatchcase(label, glob) or fnmatchcase(label.split("[", 1)[0].split("->", 1)[0], glob)


@dataclass
class Laid:
    """The faults laid over one request: the one that ends or replaces its answer, and its latencies."""

    ending: Fault | None = None
    latencies: list[Fault] = field(default_factory=list)

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(fault.kind for fault in ([self.ending] if self.ending else []) + self.latencies)

    def take(
        self,
        faults: list[Fault],
        protocol: str,
        label: str,
        counted: bool = True,
        draws: Mapping[str, int] | None = None,
    ) -> None:
        """Add the oldest fault of `faults` that fits the request and ends or replaces its answer
        (unless one is laid already) and every fitting latency; `counted`: each one taken counts
        against its `times`, and is removed once spent. `draws`: the number of the draw each
        fault (by id) makes for this request, where the shared state counts them."""
        spent = False
        for fault in faults:
            if not fault.in_scope(protocol, label) or not fault.drawn(draws.get(fault.id) if draws else None):
                continue
            latency = fault.kind == "latency"
            if latency or self.ending is None:
                if latency:
                    self.latencies.append(fault)
                else:
                    self.ending = fault
                if counted and fault.left is not None:
                    fault.left -= 1
                    spent = spent or fault.left == 0
        if spent:
            faults[:] = [fault for fault in faults if fault.left != 0]


FAULT_HEADER = "X-Fakehop-Fault"


def header_faults(value: str) -> list[Fault]:
    """The faults an `X-Fakehop-Fault` header names for its request alone: a kind, then
    `name=value` parameters after semicolons (`truncate; after=3`); several separated by commas."""
    faults = []
    for part in value.split(",")[: MAX_FAULTS + 1]:
        kind, *settings = (piece.strip() for piece in part.split(";"))
        if not kind:
            raise FaultProblem("each fault starts with its kind, such as 'truncate; after=3'")
        spec: dict[str, Any] = {"kind": kind}
        for setting in settings:
            name, equals, text = setting.partition("=")
            name = name.strip()
            if not equals:
                raise FaultProblem(f"{kind}: {setting[:80]!r} is not a name=value parameter")
            if name in spec:
                raise FaultProblem(f"{kind}: {name} is given twice")
            if name == "times":
                raise FaultProblem(
                    f"{kind}: times has no place here: the header lays the fault on its own request alone"
                )
            spec[name] = header_value(text.strip())
        faults.append(parse_fault(spec))
    if len(faults) > MAX_FAULTS:
        raise FaultProblem(f"a request names at most {MAX_FAULTS} faults")
    return faults


def header_value(text: str) -> Any:
    """A parameter's value as a header writes it: a whole number, a number, or text."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def added(faults: list[Fault], fault: Fault) -> None:
    """Append `fault` to a session's `faults`, when there is room."""
    if len(faults) >= MAX_FAULTS:
        raise FaultProblem(f"a session holds at most {MAX_FAULTS} faults at once; remove some first")
    faults.append(fault)


# ---------------------------------------------------------------- reading a fault


def parse_fault(spec: Mapping[str, Any]) -> Fault:
    """A fault from its JSON form (`{"kind": "rate_limit", "times": 2, ...}`); FaultProblem says what is wrong."""
    kind = kind_of(spec.get("kind"))
    defaults = PARAMETERS[kind]
    for key in spec:
        if key != "kind" and key not in defaults and key not in SCOPE_KEYS:
            valid = sorted([*defaults, *SCOPE_KEYS])
            raise FaultProblem(
                f"{kind}: unknown parameter {key!r}"
                + (did_you_mean(key, valid) or f"; the parameters are: {', '.join(valid)}")
            )
    parameters = {name: checked_parameter(kind, name, spec.get(name, default)) for name, default in defaults.items()}
    return Fault(
        kind,
        parameters,
        effect_of(kind, parameters),
        times=whole(spec.get("times", 1), "times", 0, MAX_TIMES),
        protocol=protocol_of(spec.get("protocol")),
        scenario=text_of(spec.get("scenario"), "scenario"),
        probability=probability_of(spec.get("probability", 1.0)),
        seed=whole(spec.get("seed", DEFAULT_SEED), "seed", -MAX_SEED, MAX_SEED),
    )


def kind_of(kind: Any) -> str:
    if not isinstance(kind, str):
        raise FaultProblem(f"kind: expected a fault kind such as 'rate_limit', got {shown(kind)}")
    if kind in PARAMETERS:
        return kind
    raise FaultProblem(f"unknown fault kind {kind!r}{did_you_mean(kind, KINDS)} (the kinds: {', '.join(KINDS)})")


def checked_parameter(kind: str, name: str, value: Any) -> Any:
    if value is REQUIRED:
        raise FaultProblem(f"{kind}: needs a {name}")
    if value is None:
        return None
    if name == "status":
        return status_of(kind, value)
    if name == "retry_after":
        return number(value, "retry_after", 0.0, MAX_RETRY_AFTER)
    if name == "after":
        return whole(value, "after", 0, MAX_AFTER)
    if name in ("timeout", "first", "between"):
        return duration_of(value, name)
    if name in ("error", "then"):
        return one_of(value, name, FAIL_KINDS if name == "error" else STALL_THEN)
    return text_of(value, name, MAX_RAW if name == "raw" else MAX_TEXT)


def status_of(kind: str, value: Any) -> int:
    if kind == "server_error":
        if value not in SERVER_ERROR_STATUSES or isinstance(value, bool):
            raise FaultProblem(
                f"status: a server_error is one of {', '.join(map(str, SERVER_ERROR_STATUSES))}, got {value!r}"
            )
        return int(value)
    return whole(value, "status", 400, 599)


def whole(value: Any, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise FaultProblem(f"{name}: expected a whole number from {low} to {high}, got {value!r}")
    return value


def number(value: Any, name: str, low: float, high: float) -> float | int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (low <= value <= high):
        raise FaultProblem(f"{name}: expected a number from {low:g} to {high:g}, got {value!r}")
    return value


def probability_of(value: Any) -> float:
    return float(number(value, "probability", 0.0, 1.0))


def text_of(value: Any, name: str, longest: int = MAX_TEXT) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= longest:
        raise FaultProblem(f"{name}: expected a text of 1 to {longest:,} characters, got {shown(value)}")
    return value


def duration_of(value: Any, name: str) -> float:
    """Seconds, as a number or a scenario's duration (`250ms`, `2s`, `1.5m`)."""
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise FaultProblem(f"{name}: {exc}") from None


def one_of(value: Any, name: str, choices: tuple[str, ...]) -> str:
    if isinstance(value, str) and value in choices:
        return value
    hint = did_you_mean(value, choices) if isinstance(value, str) else ""
    raise FaultProblem(f"{name}: expected one of {', '.join(choices)}, got {shown(value)}{hint}")


def protocol_of(value: Any) -> str | None:
    if value is None or (isinstance(value, str) and value in PROTOCOLS):
        return value
    raise FaultProblem(
        f"protocol: unknown protocol {shown(value)}{did_you_mean(value, PROTOCOLS) or ''}; "
        f"the protocols are: {', '.join(PROTOCOLS)}"
    )


def shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def seconds_text(seconds: float | int) -> str:
    """A wait as Retry-After says it: `1`, `0.5`."""
    if isinstance(seconds, float) and seconds.is_integer() and math.isfinite(seconds):
        return str(int(seconds))
    return str(seconds)


def effect_of(kind: str, parameters: dict[str, Any]) -> HttpError | Break | Latency:
    if kind in HTTP_KINDS:
        return http_error_of(kind, parameters)
    if kind == "latency":
        return Latency(parameters["first"], parameters["between"])
    return Break(
        kind,
        parameters["after"],
        error=parameters.get("error") or "interrupted",
        message=parameters.get("message"),
        timeout=parameters.get("timeout"),
        resume=parameters.get("then") == "continue",
        raw=(parameters.get("raw") or "").encode("utf-8"),
    )


def http_error_of(kind: str, parameters: dict[str, Any]) -> HttpError:
    """The HTTP error a fault of the HTTP kinds answers with, as an `http_error:` scenario would."""
    retry_after = parameters["retry_after"]
    return HttpError(
        status=429 if kind == "rate_limit" else parameters["status"],
        message=parameters["message"],
        retry_after=None if retry_after is None else seconds_text(retry_after),
        error_type=parameters.get("type"),
        code=parameters.get("code"),
    )
