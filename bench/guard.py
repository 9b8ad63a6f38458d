"""Guard on the answering path's cost: fakehop's instructions per request against bench/baseline.json.

Counts instructions per request under callgrind (bench/instructions.py) for fakehop and the
ceiling, and compares fakehop's count *normalised by the ceiling's from the same run* with the
same ratio in the committed baseline: the ceiling's own count moves with the Python and aiohttp
versions, the ratio much less. A cell whose ratio grew by more than 3% fails the guard (exit 1)
and the table names it; a cost that is meant is recorded by rewriting the baseline with
`--update` and committing it with the change.

    python -m bench.guard [--update] [--protocols chat,...] [--scenarios bench-short,...] [--requests N]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform
import sys
from dataclasses import dataclass
from pathlib import Path

from fakehop.protocols import PROTOCOLS

from . import instructions
from .run import add_loop_option, loop_in_use

BASELINE = Path(__file__).parent / "baseline.json"
TOLERANCE_PERCENT = 3.0


@dataclass(frozen=True)
class Cell:
    """One protocol and scenario: fakehop / ceiling now and in the baseline."""

    protocol: str
    scenario: str
    fakehop: int
    ceiling: int
    baseline_ratio: float | None  # None: the baseline has no such cell

    @property
    def ratio(self) -> float:
        return self.fakehop / self.ceiling

    @property
    def growth_percent(self) -> float | None:
        return None if self.baseline_ratio is None else 100 * (self.ratio / self.baseline_ratio - 1)

    def failed(self, tolerance_percent: float = TOLERANCE_PERCENT) -> bool:
        return self.growth_percent is None or self.growth_percent > tolerance_percent

    @property
    def name(self) -> str:
        return f"{self.protocol} {self.scenario}"


def versions() -> dict:
    return {"python": platform.python_version(), "aiohttp": importlib.metadata.version("aiohttp")}


def other_loop(baseline: dict) -> str | None:
    """The loop the baseline was counted on when it is not this run's: ratios on two loops do not compare."""
    counted_on = baseline.get("loop", "asyncio")
    return counted_on if counted_on != loop_in_use() else None


def compare(baseline: dict, counts: dict) -> list[Cell]:
    """A cell for every protocol and scenario counted; the baseline's cells not counted are left out."""
    known = baseline.get("per_request", {})
    cells = []
    for protocol, by_scenario in counts.items():
        for scenario, figures in by_scenario.items():
            before = known.get(protocol, {}).get(scenario)
            baseline_ratio = before["fakehop"] / before["ceiling"] if before else None
            cells.append(Cell(protocol, scenario, figures["fakehop"], figures["ceiling"], baseline_ratio))
    return cells


def verdict(cell: Cell, tolerance_percent: float) -> str:
    if cell.growth_percent is None:
        return "NO BASELINE"
    if cell.failed(tolerance_percent):
        return f"GREW {cell.growth_percent:+.1f}% (over {tolerance_percent:g}%)"
    return "ok"


def table(cells: list[Cell], tolerance_percent: float = TOLERANCE_PERCENT) -> str:
    rows = [("protocol", "scenario", "fakehop", "ceiling", "ratio", "baseline ratio", "change", "verdict")]
    for cell in cells:
        rows.append(
            (
                cell.protocol,
                cell.scenario,
                f"{cell.fakehop / 1000:,.1f}k",
                f"{cell.ceiling / 1000:,.1f}k",
                f"{cell.ratio:.3f}",
                "-" if cell.baseline_ratio is None else f"{cell.baseline_ratio:.3f}",
                "-" if cell.growth_percent is None else f"{cell.growth_percent:+.1f}%",
                verdict(cell, tolerance_percent),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(text.ljust(width) for text, width in zip(row, widths)).rstrip() for row in rows)


def summary(cells: list[Cell], baseline: dict, tolerance_percent: float = TOLERANCE_PERCENT) -> str:
    """The table and a last line saying whether the guard passed, and what to do when it did not."""
    heading = (
        "instructions per request, fakehop / ceiling against bench/baseline.json "
        f"(a cell fails when its ratio grew by more than {tolerance_percent:g}%):"
    )
    lines = [heading, table(cells, tolerance_percent)]
    taken_with = {name: baseline.get(name) for name in versions()}
    if taken_with != versions():
        lines.append(f"baseline taken with {taken_with}, this run with {versions()}: the ratios still compare")
    failed = [cell.name for cell in cells if cell.failed(tolerance_percent)]
    if failed:
        lines.append(
            f"guard FAILED: {', '.join(failed)}. If that cost is meant, run `python -m bench.guard --update` "
            "and commit bench/baseline.json with the change."
        )
    else:
        lines.append("guard passed")
    return "\n".join(lines)


def load(path: Path = BASELINE) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def write(counts: dict, requests: int, path: Path = BASELINE) -> None:
    baseline = {
        **versions(),
        "loop": loop_in_use(),
        "requests": requests,
        "per_request": counts,
    }
    path.write_text(json.dumps(baseline, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.guard", description=__doc__.splitlines()[0])
    parser.add_argument("--protocols", default=",".join(PROTOCOLS))
    parser.add_argument("--scenarios", default=",".join(instructions.SCENARIOS))
    parser.add_argument("--requests", type=int, help="requests counted per server and cell (default: the baseline's)")
    parser.add_argument("--update", action="store_true", help="rewrite bench/baseline.json with this run's counts")
    parser.add_argument("--baseline", type=Path, default=BASELINE, help=argparse.SUPPRESS)
    add_loop_option(parser)
    args = parser.parse_args(argv)
    protocols, scenarios = args.protocols.split(","), args.scenarios.split(",")
    for option, chosen, known in (
        ("protocols", protocols, PROTOCOLS),
        ("scenarios", scenarios, instructions.SCENARIOS),
    ):
        unknown = [name for name in chosen if name not in known]
        if unknown:
            parser.error(f"--{option}: unknown {', '.join(unknown)}; choose from {', '.join(known)}")
    baseline = load(args.baseline)
    if not args.update and (counted_on := other_loop(baseline)) is not None:
        print(
            f"python -m bench.guard: the baseline was counted on {counted_on}, this run's servers use {loop_in_use()}: "
            f"give --loop {counted_on}",
            file=sys.stderr,
        )
        return 2
    if not instructions.available():
        print("python -m bench.guard: valgrind (with callgrind_control) is not installed", file=sys.stderr)
        return 2
    requests = args.requests or baseline.get("requests", 200)
    counts = instructions.measure(protocols, scenarios, requests)
    if args.update:
        write(counts, requests, args.baseline)
        print(f"{args.baseline} rewritten: {json.dumps(counts)}")
        return 0
    cells = compare(baseline, counts)
    print(summary(cells, baseline))
    return 1 if any(cell.failed() for cell in cells) else 0


if __name__ == "__main__":
    sys.exit(main())
