"""Every bundled scenario, in every protocol, streamed and not, byte for byte as checked in."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fakehop.library import Library

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


@pytest.mark.parametrize("case", [c for c in CASES if c.scenario in ("weather-tool", "flaky-then-ok", "hello") and c.protocol == "chat"], ids=lambda c: c.id)
def test_cli_prints_the_golden_bytes(case: Case):
    printed = subprocess.run([sys.executable, "-m", "fakehop", *case.cli_args()], capture_output=True, check=True, timeout=60)
    assert printed.stdout == case.path.read_bytes()
