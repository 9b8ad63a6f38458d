"""The shape of a JSON text read from its bytes, a slice at a time, against the value Python's parser builds."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from fakehop.server.jsonshape import shape_of

# Text that trips a reader of bytes: quotes, backslashes, brackets, commas and colons inside strings.
TRICKY = st.text(alphabet=st.sampled_from('ab"\\[]{},: é\U0001f600\n'), max_size=8)
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | TRICKY,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(TRICKY, children, max_size=4),
    max_leaves=40,
)


def depth(value) -> int:
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    return 0


def count(value) -> int:
    if isinstance(value, dict):
        return 1 + sum(map(count, value.values()))
    if isinstance(value, list):
        return 1 + sum(map(count, value))
    return 1


@settings(max_examples=500, deadline=None)
@given(value=VALUES, ascii_only=st.booleans(), indent=st.sampled_from([None, 1]), slice_bytes=st.integers(1, 64))
def test_the_shape_is_the_values_own_however_the_text_is_sliced(value, ascii_only, indent, slice_bytes):
    """Slices of a few bytes cut every text in many places: inside strings and escapes, between brackets."""
    raw = json.dumps(value, ensure_ascii=ascii_only, indent=indent).encode()
    shape = shape_of(raw, 10**9, slice_bytes)
    assert shape.depth == depth(value)
    assert count(value) - 1 <= shape.values <= 2 * count(value)


def test_reading_stops_once_the_values_pass_the_most():
    raw = json.dumps([[1] * 1000] * 1000).encode()
    assert 1000 < shape_of(raw, 1000).values < 1_000_000 // 2
