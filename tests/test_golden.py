"""Every bundled scenario, in every protocol, streamed and not, byte for byte as checked in.

`fakehop play` prints them through main() in this process (tests/cli_runs.py), the bytes it
writes to sys.stdout.buffer as they come; tests/test_cli.py plays through a process of its own.
"""

from __future__ import annotations

import pytest

from fakehop.scenario.library import Library

from .cli_runs import fakehop_here
from .golden_files import Case, cases, play_bytes

LIBRARY = Library.load()
CASES = cases(LIBRARY)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_play_matches_golden_file(case: Case):
    assert case.path.exists(), f"missing golden file {case.path}; run `make golden` and review it"
    assert play_bytes(LIBRARY, case) == case.path.read_bytes()


def test_no_stale_golden_files():
    expected = {c.path for c in CASES}
    present = {p for p in CASES[0].path.parents[1].rglob("*") if p.is_file()}
    assert present - expected == set()


@pytest.mark.parametrize(
    "case",
    [c for c in CASES if c.scenario in ("weather-tool", "flaky-then-ok", "hello") and c.protocol == "chat"],
    ids=lambda c: c.id,
)
def test_cli_prints_the_golden_bytes(case: Case):
    printed = fakehop_here(*case.cli_args(), text=False)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == case.path.read_bytes()
