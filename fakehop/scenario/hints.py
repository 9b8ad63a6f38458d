"""What to tell a user who is stuck: the nearest of the names they could have meant, and the
base URL that a request to a path no route serves was meant to have.

Both are worked out only once something has gone wrong: nothing here runs on the answering path.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from .. import CONTROL_PREFIX

CLOSE_ENOUGH = 0.6  # difflib's ratio from which a name counts as a near miss
# difflib's work on a name grows as its length times the word's: ten thousand added scenarios
# of 128 characters would take seconds on the loop. Past this many characters compared (some
# 10 ms for names of one repeated letter, difflib's slowest), the names nearest the word in
# length are the ones looked at: hundreds of names of a usual length, and a typo keeps its length.
HINT_WORK = 100_000
MESSAGES_PATH = "/messages"  # what the Anthropic SDK adds, after /v1, to its base URL


def did_you_mean(word: object, names: Iterable[str]) -> str:
    """`; did you mean 'NAME'?` for the name nearest to `word`, or "" when none is near."""
    word = str(word)
    close = difflib.get_close_matches(word, nearest_in_length(word, names), n=1, cutoff=CLOSE_ENOUGH)
    return f"; did you mean {close[0]!r}?" if close else ""


def nearest_in_length(word: str, names: Iterable[str]) -> list[str]:
    """The `names` nearest to `word` in length, as many as HINT_WORK lets difflib compare."""
    kept: list[str] = []
    work = 0
    for name in sorted(names, key=lambda name: abs(len(name) - len(word))):
        work += len(name) * len(word)
        if work > HINT_WORK and kept:
            break
        kept.append(name)
    return kept


def base_url_hint(path: str, root: str, served: Iterable[str], anthropic_client: bool) -> str:
    """Why a request to `path` on the server at `root` found no route, when the path shows that
    the client's base URL lacks the `/v1` of a `served` path or has one too many; else "".
    `anthropic_client`: the request came from an Anthropic client (it sent `anthropic-version`)."""
    served = tuple(served)
    if path.startswith("/v1" + CONTROL_PREFIX + "/"):
        return f"; one /v1 too many: the control API is at the server's root, {root}{CONTROL_PREFIX}/"
    if path.startswith("/v1/v1/") and is_served(path[3:], served):
        if anthropic_client or path.startswith("/v1/v1" + MESSAGES_PATH):
            return (
                f"; one /v1 too many: Anthropic's base URL is the server's root, {root}, with no /v1 "
                f"(the Anthropic SDK adds /v1{MESSAGES_PATH} itself)"
            )
        return f"; one /v1 too many: the OpenAI base URL has it once, {root}/v1"
    if is_served("/v1" + path, served):
        if path.startswith(MESSAGES_PATH):
            return (
                f"; Messages is served at /v1{MESSAGES_PATH}: a client that adds {MESSAGES_PATH} to its base URL needs "
                f"one ending in /v1, {root}/v1 (the Anthropic SDK adds /v1 itself: its base URL is the server's root, {root})"
            )
        return f"; the OpenAI base URL ends in /v1: {root}/v1"
    return ""


def is_served(path: str, served: tuple[str, ...]) -> bool:
    """Whether `path` is one of the `served` paths, or under one (`/v1/responses/resp_1`)."""
    return any(path == known or path.startswith(known + "/") for known in served)
