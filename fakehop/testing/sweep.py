"""A sweep: one test run once per fault, read from its `@pytest.mark.fakehop_sweep(faults=..., protocol=...)`.

Each run gets a fault spec as `Fakehop.fault` takes it, active for the whole test (`times: 0`
unless the spec says otherwise), and an id `fault-KIND` (`fault-KIND-2`, `-3`, … for the later
faults of a kind already swept). Nothing here needs pytest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..protocols import PROTOCOLS
from ..scenario.hints import did_you_mean
from ..state import faults as kinds
from ..state.faults import shown

OPTIONS = ("faults", "protocol")
# What a kind's own defaults leave out and a run needs: http_error has no default status.
SWEEP_DEFAULTS: dict[str, dict[str, Any]] = {"http_error": {"status": 400}}


class SweepProblem(ValueError):
    """Marker arguments a sweep cannot run: `option` is the one that is wrong (None: the call
    itself), the message why."""

    def __init__(self, message: str, option: str | None = None):
        super().__init__(message)
        self.option = option


@dataclass(frozen=True)
class SweptFault:
    """One run of a sweep: its id and the fault it lays, as `Fakehop.fault(**spec)` takes it."""

    id: str
    spec: dict[str, Any]


def every_kind() -> tuple[str, ...]:
    """The kinds of the faults contract, as fakehop.state.faults names them, in its order."""
    return kinds.KINDS


def swept_faults(args: Sequence[Any], options: Mapping[str, Any]) -> list[SweptFault]:
    """The runs a marker's `args` and `options` ask for; SweepProblem says what is wrong."""
    if args:
        raise SweepProblem(f"takes keywords only ({', '.join(OPTIONS)}), got {shown(tuple(args))}")
    for name in options:
        if name not in OPTIONS:
            raise SweepProblem(f"unknown option {name!r}{did_you_mean(name, OPTIONS) or '; it takes faults, protocol'}")
    protocol = protocol_of(options.get("protocol"))
    given = options.get("faults")
    entries = every_kind() if given is None else listed(given)
    specs = [spec_of(entry, protocol) for entry in entries]
    return [SweptFault(run_id, spec) for run_id, spec in zip(ids_of(specs), specs)]


def listed(given: Any) -> Sequence[Any]:
    if isinstance(given, (str, Mapping)) or not isinstance(given, Sequence):
        raise SweepProblem(f"expected a list of kind names or mappings, got {shown(given)}", "faults")
    if not given:
        raise SweepProblem("the list is empty; name a fault, or leave faults out to sweep every kind", "faults")
    return given


def protocol_of(value: Any) -> str | None:
    if value is None or value in PROTOCOLS:
        return value
    raise SweepProblem(
        f"unknown protocol {shown(value)}{did_you_mean(value, PROTOCOLS) or '; the protocols are: ' + ', '.join(PROTOCOLS)}",
        "protocol",
    )


def spec_of(entry: Any, protocol: str | None) -> dict[str, Any]:
    """A fault of the sweep as `Fakehop.fault` takes it: the entry's own keys win over the sweep's scope."""
    if isinstance(entry, str):
        entry = {"kind": entry}
    if not isinstance(entry, Mapping) or "kind" not in entry:
        raise SweepProblem(f"each is a kind name or a mapping with a 'kind', got {shown(entry)}", "faults")
    kind = known_kind(entry["kind"])
    spec = {"kind": kind, **SWEEP_DEFAULTS.get(kind, {}), "times": 0, **entry}
    if protocol is not None:
        spec.setdefault("protocol", protocol)
    try:
        kinds.parse_fault(spec)
    except kinds.FaultProblem as exc:
        raise SweepProblem(str(exc), "faults") from None
    return spec


def known_kind(kind: Any) -> str:
    known = every_kind()
    if isinstance(kind, str) and kind in known:
        return kind
    hint = did_you_mean(kind, known) if isinstance(kind, str) else ""
    raise SweepProblem(f"unknown fault kind {shown(kind)}{hint} (the kinds: {', '.join(known)})", "faults")


def ids_of(specs: list[dict[str, Any]]) -> list[str]:
    """`fault-KIND` for each, and for the later faults of a kind already seen `fault-KIND-2`, `-3`, …"""
    seen: dict[str, int] = {}
    ids = []
    for spec in specs:
        count = seen[spec["kind"]] = seen.get(spec["kind"], 0) + 1
        ids.append(f"fault-{spec['kind']}" + (f"-{count}" if count > 1 else ""))
    return ids
