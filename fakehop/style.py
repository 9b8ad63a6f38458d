"""Colour for the command's human output: on a terminal only, and never with NO_COLOR set
(https://no-color.org) or TERM=dumb.

A line is built with `tint(text, tone)`, the tone saying what the text means ("good", "bad",
"warn", "strong", "faint"); `tinter(stream)` gives the function that colours for `stream`,
or `plain`, which leaves text as it is."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TextIO

Tint = Callable[[str, str], str]

CODES = {"good": "32", "bad": "31", "warn": "33", "strong": "1", "faint": "2"}
RESET = "\x1b[0m"


def plain(text: str, tone: str) -> str:
    return text


def coloured(text: str, tone: str) -> str:
    code = CODES.get(tone)
    return f"\x1b[{code}m{text}{RESET}" if code and text else text


def colour_wanted(stream: TextIO) -> bool:
    """A terminal that is not dumb, with no NO_COLOR (any value but an empty one turns colour off)."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        terminal = stream.isatty()
    except (AttributeError, ValueError):  # no such method, or the stream is closed
        return False
    return terminal


def tinter(stream: TextIO) -> Tint:
    return coloured if colour_wanted(stream) else plain
