"""Kept renderings filled for an answer nobody seeded: its ids and signatures drawn afresh, all at once."""

from __future__ import annotations

import random
import re

import pytest

from fakehop.play import player
from fakehop.protocols import PROTOCOLS
from fakehop.protocols.common import Meta
from fakehop.scenario.library import Library
from fakehop.server import prerender as pr

LIBRARY = Library.load()
MODEL = "gpt-5.6-sol"  # one whose Chat answers carry no system_fingerprint
DRAWN = re.compile(rb"[A-Za-z0-9+/]")  # what ids and base64 are written with


def fresh_bytes(protocol, meta: Meta, parsed, script) -> list[bytes]:
    events = player.timeline(script, parsed.play, 1.0)
    return [data for _, data, _, _ in pr.encoded_writes(protocol, meta, parsed, events)]


def kept_renderings(protocol):
    parsed = protocol.parse(protocol.EXAMPLE_REQUEST)
    for name in LIBRARY.names():
        for entry in LIBRARY[name].entries:
            if entry.script is None:
                continue
            rendering = pr.render(protocol, entry.script, parsed, Meta(MODEL, 1, random.Random(1)), 1.0)
            if rendering is not None:
                yield name, entry.script, parsed, rendering


@pytest.mark.parametrize("protocol_name", sorted(PROTOCOLS))
def test_a_fresh_answer_has_the_shape_of_one_encoded_afresh(protocol_name):
    protocol = PROTOCOLS[protocol_name]
    checked = 0
    for name, script, parsed, rendering in kept_renderings(protocol):
        meta = Meta(MODEL, 1_764_000_000)
        filled = [data for _, data, _, _ in rendering.writes_for(meta)]
        afresh = fresh_bytes(protocol, Meta(MODEL, 1_764_000_000), parsed, script)
        assert [DRAWN.sub(b"x", data) for data in filled] == [DRAWN.sub(b"x", data) for data in afresh], name
        checked += 1
    assert checked > 10


@pytest.mark.parametrize("protocol_name", sorted(PROTOCOLS))
def test_each_fresh_answer_draws_its_own_ids(protocol_name):
    protocol = PROTOCOLS[protocol_name]
    for name, _, _, rendering in kept_renderings(protocol):
        if any(index > pr._TIME for holes in rendering.holes for index in holes.indices):  # it writes what it asked
            first, second = ([data for _, data, _, _ in rendering.writes_for(Meta(MODEL, 1))] for _ in range(2))
            assert first != second, name
