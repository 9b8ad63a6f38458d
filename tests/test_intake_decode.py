"""The request JSON's parse takes a shortcut for a text with no whitespace at either end: it
gives what json.loads gives, value or error, whatever whitespace there is."""

from __future__ import annotations

import json

import pytest

from fakehop.server import intake

TEXTS = [
    "{}",
    ' {"a": 1} ',
    '{"a": 1}\n',
    "\t[1, 2]\r\n",
    "{} x",
    "{}x",
    "1 2",
    "1\t\n 2",
    '{"a":',
    "",
    " ",
    '"text"',
    "[1, 2] ]",
]


def outcome(parse, text: str):
    try:
        return "value", parse(text)
    except json.JSONDecodeError as exc:
        return "error", exc.msg, exc.pos, exc.lineno, exc.colno


@pytest.mark.parametrize("text", TEXTS)
def test_the_shortcut_parses_as_json_loads_does(text: str) -> None:
    assert outcome(intake.loads, text) == outcome(json.loads, text)
