"""What tests/conftest.py does to spend less CPU holds: the cache the xdist controller fills is
one pytest reads, and every test runs with the garbage collector on."""

from __future__ import annotations

import gc
import os
import sys

import pytest
from _pytest.assertion.rewrite import PYC_TAIL, _read_pyc, get_cache_dir

from . import assert_cache

MODULE = "def test_sums():\n    total = 1 + 1\n    assert total == 3\n"


def cached_copy(module):
    return get_cache_dir(module) / (module.name[:-3] + PYC_TAIL)


def test_the_filled_cache_is_read_by_pytest_and_refilled_when_the_module_changes(tmp_path, pytestconfig, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", False)  # as `make test` runs, whatever this shell says
    module = tmp_path / "test_sample.py"
    module.write_text(MODULE)
    assert_cache.fill(pytestconfig, [module])
    code = _read_pyc(module, cached_copy(module))
    assert code is not None
    namespace = {}
    exec(code, namespace)
    with pytest.raises(AssertionError, match="assert 2 == 3"):  # rewritten: the message shows the values
        namespace["test_sums"]()
    module.write_text(MODULE.replace("3", "2"))
    os.utime(module, (module.stat().st_atime, module.stat().st_mtime + 2))
    assert _read_pyc(module, cached_copy(module)) is None  # stale
    assert_cache.fill(pytestconfig, [module])
    refilled = {}
    exec(_read_pyc(module, cached_copy(module)), refilled)
    refilled["test_sums"]()  # the changed module's code: 1 + 1 == 2 passes


def test_tests_run_with_the_collector_on_and_what_collection_built_frozen():
    assert gc.isenabled()
    assert gc.get_threshold()[0] == 50_000
    assert gc.get_freeze_count() > 10_000  # modules, plugins, and the SDKs where a test module imports them
