"""The answering path of a Responses request, kept cheap: writes of several runs filled around
their spine, and the Holes that are one value as they are."""

from __future__ import annotations

import itertools

import pytest

from fakehop.server import prerender as pr

FILLED = [b"<model>", 1_764_000_000, b"<id1>", b"<id2>", b"<h4>", b"<h5>"]


def joined_in_order(runs) -> bytes:
    return b"".join(FILLED[holes].join(literals) for holes, literals in runs)


RUN_SHAPES = [(2, (b"a", b"b")), (3, (b"c", b"d", b"e", b"f")), (4, (b"g", b"h", b"i")), (5, (b"j", b"kk"))]


@pytest.mark.parametrize("count", [2, 3, 4])
def test_a_write_of_several_runs_fills_in_as_its_runs_joined_in_order(count):
    for runs in itertools.permutations(RUN_SHAPES, count):
        write = pr.Write(0.0, tuple(runs), 1, None)
        assert write.fill(FILLED) == joined_in_order(runs)
        assert write.fill(FILLED) == joined_in_order(runs)  # the kept literals stay as they were


def test_a_holes_of_one_value_fills_in_as_that_value_and_the_others_follow_the_values():
    model, time, answer = pr.Holes((0,), ()), pr.Holes((pr._TIME,), ()), pr.Holes((2,), ())
    around = pr.Holes((2, pr._TIME, 0), (b'","created":', b',"model":"'))
    assert [holes.is_value() for holes in (model, time, answer, around)] == [True, False, True, False]
    places = pr.filled_places((around, answer, time, model), 3)
    assert places == {None: -1, around: 3, answer: 2, time: 4, model: 0}
    assert around.format % around.pick(FILLED) == b'<id1>","created":1764000000,"model":"<model>'
