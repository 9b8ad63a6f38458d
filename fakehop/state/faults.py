"""Faults: small breakages laid over whatever answer a request would get, scoped and composable.

A session holds a list of faults, oldest first. A request takes the oldest one that fits it
(its protocol, the name of its scenario, a draw of its probability); a fault's `times` counts
only the requests it took, and once spent it is gone. This slice has the kinds that replace
the answer with an HTTP error: `rate_limit`, `server_error` and `http_error`.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from ..protocols import PROTOCOLS
from ..scenario.hints import did_you_mean
from ..scenario.model import HttpError

HTTP_KINDS = ("rate_limit", "server_error", "http_error")
LATER_KINDS = ("interrupt", "truncate", "stall", "hang", "malformed", "latency")  # not served yet
SCOPE_KEYS = ("times", "protocol", "scenario", "probability", "seed")
# Each kind's parameters and their defaults; REQUIRED: one the fault must be given.
REQUIRED = object()
PARAMETERS: dict[str, dict[str, Any]] = {
    "rate_limit": {"retry_after": 1, "message": None},
    "server_error": {"status": 500, "retry_after": None, "message": None},
    "http_error": {"status": REQUIRED, "retry_after": None, "message": None, "type": None, "code": None},
}
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
    error: HttpError
    times: int = 1
    protocol: str | None = None
    scenario: str | None = None  # a glob on the name of the scenario a request gets
    probability: float = 1.0
    seed: int = DEFAULT_SEED
    id: str = field(default_factory=lambda: f"fault_{next(_ids)}")
    left: int | None = field(init=False)
    draws: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.left = self.times or None
        self.draws = random.Random(self.seed)

    def fits(self, protocol: str, label: str) -> bool:
        """Whether it breaks a request of `protocol` getting scenario `label`; a probability is drawn last."""
        if self.protocol is not None and protocol != self.protocol:
            return False
        if self.scenario is not None and not name_fits(self.scenario, label):
            return False
        return self.probability >= 1.0 or self.draws.random() < self.probability

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


def name_fits(glob: str, label: str) -> bool:
    """A journal label (`name`, `name[2]`, `name[2]->other`) fits a glob by itself or by its scenario's name."""
    return fnmatchcase(label, glob) or fnmatchcase(label.split("[", 1)[0].split("->", 1)[0], glob)


def take(faults: list[Fault], protocol: str, label: str) -> Fault | None:
    """The oldest fault of `faults` that fits the request, counted as taken (and removed once spent)."""
    for index, fault in enumerate(faults):
        if fault.fits(protocol, label):
            if fault.left is not None:
                fault.left -= 1
                if fault.left == 0:
                    del faults[index]
            return fault
    return None


FAULT_HEADER = "X-Fakehop-Fault"


def header_faults(value: str) -> list[Fault]:
    """The faults an `X-Fakehop-Fault` header names for its request alone: a kind, then
    `name=value` parameters after semicolons (`truncate; after=3`); several separated by commas."""
    faults = []
    for part in value.split(",")[: MAX_FAULTS + 1]:
        kind, *settings = (piece.strip() for piece in part.split(";"))
        spec: dict[str, Any] = {"kind": kind}
        for setting in settings:
            name, equals, text = setting.partition("=")
            if not equals:
                raise FaultProblem(f"{kind}: {setting[:80]!r} is not a name=value parameter")
            spec[name.strip()] = header_value(text.strip())
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
        http_error_of(kind, parameters),
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
    if kind in LATER_KINDS:
        raise FaultProblem(f"fault kind {kind!r} is not supported by this server yet; it has {', '.join(HTTP_KINDS)}")
    known = [*HTTP_KINDS, *LATER_KINDS]
    raise FaultProblem(f"unknown fault kind {kind!r}{did_you_mean(kind, known)} (the kinds: {', '.join(known)})")


def checked_parameter(kind: str, name: str, value: Any) -> Any:
    if value is REQUIRED:
        raise FaultProblem(f"{kind}: needs a {name}")
    if value is None:
        return None
    if name == "status":
        return status_of(kind, value)
    if name == "retry_after":
        return number(value, "retry_after", 0.0, MAX_RETRY_AFTER)
    return text_of(value, name)


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


def text_of(value: Any, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= MAX_TEXT:
        raise FaultProblem(f"{name}: expected a text of 1 to {MAX_TEXT:,} characters, got {shown(value)}")
    return value


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
