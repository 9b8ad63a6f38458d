"""How deep a JSON text nests and about how many values it holds, read from its bytes without parsing it.

Python's parser builds every value before anything can look at them, and holds the
interpreter all the while: a body of millions of tiny values keeps every other client waiting
for seconds, and a walk over what it built takes longer still. The shape is read instead a
slice at a time with bytes operations, each of them a C loop over at most SLICE_BYTES: escapes
masked, what is inside strings left out by splitting at the quotes, and the brackets that are
left turned into +1 and -1 and summed with itertools.accumulate.

For a text that is not JSON the shape means nothing; the parser refuses the text anyway.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

SLICE_BYTES = 256 * 1024
BACKSLASH = 0x5C
OPEN, CLOSE = 0x01, 0xFF  # a bracket as a signed byte: +1, -1
_SIGNS = bytes(OPEN if byte in b"[{" else CLOSE if byte in b"]}" else byte for byte in range(256))
_NOT_BRACKETS = bytes(byte for byte in range(256) if byte not in b"[]{}")


@dataclass(frozen=True)
class Shape:
    values: int  # commas and opening brackets outside strings: at least the values less one, at most twice as many
    depth: int  # how deep arrays and objects nest; 0 for a text with none


def shape_of(raw: bytes, most_values: int, slice_bytes: int = SLICE_BYTES) -> Shape:
    """The shape of the JSON text `raw`, read `slice_bytes` at a time until its values pass
    `most_values` (then its `values` say so, and its `depth` is as deep as the slices read so
    far go)."""
    values = depth = deepest = 0
    in_string = False  # whether the slice begins inside a string
    start = 0
    while start < len(raw) and values <= most_values:
        end = slice_end(raw, start, slice_bytes)
        outside, in_string = outside_strings(raw[start:end], in_string)
        brackets = outside.translate(_SIGNS, _NOT_BRACKETS)
        opened = brackets.count(OPEN)
        values += outside.count(b",") + opened
        if brackets:
            deepest = max(deepest, max(accumulate(memoryview(brackets).cast("b"), initial=depth)))
            depth += opened - (len(brackets) - opened)
        start = end
    return Shape(values, deepest)


def slice_end(raw: bytes, start: int, slice_bytes: int) -> int:
    """Where the slice from `start` ends: `slice_bytes` on, moved past any backslash, so that
    no escape is cut in two."""
    end = min(start + slice_bytes, len(raw))
    while end < len(raw) and raw[end - 1] == BACKSLASH:
        end += 1
    return end


def outside_strings(piece: bytes, in_string: bool) -> tuple[bytes, bool]:
    """The bytes of `piece` that are not inside a string (its quotes go too), and whether the
    next piece begins inside one. Escaped backslashes and quotes are masked first: every quote
    left begins or ends a string."""
    if BACKSLASH in piece:
        piece = piece.replace(b"\\\\", b"__").replace(b'\\"', b"__")
    parts = piece.split(b'"')
    outside = b"".join(parts[1::2] if in_string else parts[::2])
    return outside, in_string != (len(parts) % 2 == 0)
