"""Rewrite the test modules' asserts once, in the xdist controller, before any worker starts.

pytest rewrites a test module's asserts when it imports it and keeps the result in
__pycache__. On a fresh clone, as CI has, every worker finds that cache empty at the same
moment and rewrites every module itself: about 3 CPU-seconds each, spent eight times over on
two cores. Filled here first, the cache is read by each worker instead. This uses pytest's own
rewriting and cache format; should a pytest release move them, the workers simply rewrite as
before.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest


def fill(config: pytest.Config, modules: list[Path]) -> None:
    """Write the rewritten code of each module whose cached copy is missing or stale."""
    try:
        from _pytest.assertion.rewrite import PYC_TAIL, _rewrite_test, _write_pyc, assertstate_key, get_cache_dir
    except ImportError:
        return
    if sys.dont_write_bytecode or assertstate_key not in config.stash:
        return
    state = config.stash[assertstate_key]
    for module in modules:
        cache_dir = get_cache_dir(module)
        cached = cache_dir / (module.name[:-3] + PYC_TAIL)
        if not is_current(module, cached):
            cache_dir.mkdir(exist_ok=True)
            source_stat, code = _rewrite_test(module, config)
            _write_pyc(state, code, source_stat, cached)


def is_current(module: Path, cached: Path) -> bool:
    """Whether `cached` is a rewritten copy of `module` as it is now, by the header pytest
    checks: the magic number, no flags, the source's mtime and size."""
    try:
        with cached.open("rb") as file:
            header = file.read(16)
    except OSError:
        return False
    source = os.stat(module)
    expected = importlib.util.MAGIC_NUMBER + b"\0\0\0\0" + (int(source.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little") + (
        source.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    return header == expected
