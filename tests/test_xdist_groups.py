"""`make test` runs `--dist loadgroup`: the tests of a module marked with an `xdist_group` go to
one worker together, with the costly fixture they share (one Chromium, one hostile server, one
built wheel). pytest-xdist marks each such test's id with its group for its scheduler; where a
pytest and pytest-xdist pair loses that mark, the groups are spread over every worker without a
word, and each worker sets their fixtures up again."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.xdist_group("groups-check")


def test_a_grouped_test_carries_its_group_in_its_id_under_loadgroup(request):
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not run under --dist loadgroup")
    assert request.node.nodeid.endswith("@groups-check")
