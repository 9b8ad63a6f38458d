"""Rewrite the test modules' asserts once, in the xdist controller, before any worker starts.

pytest rewrites a test module's asserts when it imports it and keeps the result in
__pycache__. On a fresh clone, as CI has, every worker finds that cache empty at the same
moment and rewrites every module itself: about 3 CPU-seconds each, spent eight times over on
two cores. Filled here first, the cache is read by each worker instead. This uses pytest's own
rewriting, cache format and check of a cached copy (all 69 modules are checked in about 40 ms
when the cache is full); should a pytest release move them, the workers simply rewrite as
before.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


def fill(config: pytest.Config, modules: list[Path]) -> None:
    """Write the rewritten code of each module whose cached copy is missing or stale."""
    try:
        from _pytest.assertion.rewrite import (
            PYC_TAIL,
            _read_pyc,
            _rewrite_test,
            _write_pyc,
            assertstate_key,
            get_cache_dir,
        )
    except ImportError:
        return
    if sys.dont_write_bytecode or assertstate_key not in config.stash:
        return
    state = config.stash[assertstate_key]
    for module in modules:
        cache_dir = get_cache_dir(module)
        cached = cache_dir / (module.name[:-3] + PYC_TAIL)
        if _read_pyc(module, cached) is None:
            cache_dir.mkdir(exist_ok=True)
            source_stat, code = _rewrite_test(module, config)
            _write_pyc(state, code, source_stat, cached)
