"""Text that quotes the request: a script's Quote steps made into the text they play for one request.

A quoting step names what it shows (scenario.QuoteRef): the request's last user text
(`prompt`), or the text of a tool result it ends with (`tool_result`, the last one or the
last of one tool). What it shows is read from the request's Conversation, the same in every
protocol; what the request does not hold reads as "". A step's text is cut at the limit of a
scenario's own text.
"""

from __future__ import annotations

from dataclasses import replace
from typing import cast

from .model import MAX_TEXT_CHARS, Output, Quote, QuoteRef, Script
from .reader import split_deltas


def filled(script: Script, request) -> Script:
    """`script` with each Quote step made into an Output of the text it quotes from `request`
    (a ParsedRequest; None quotes nothing). The script is made anew for each request and keeps
    its `request_text`, so nothing rendered from it is kept for another request."""
    steps = tuple(quoted_output(step, request) if type(step) is Quote else step for step in script.steps)
    return replace(script, steps=steps)


def quoted_output(quote: Quote, request) -> Output:
    """The step's text, cut at MAX_TEXT_CHARS as a scenario's own text is: a request may quote a tool result of megabytes."""
    text = "".join(
        piece if type(piece) is str else quoted_text(cast(QuoteRef, piece), request) for piece in quote.pieces
    )
    return Output(
        quote.kind,
        split_deltas(text[:MAX_TEXT_CHARS], quote.chunk),
        quote.interval,
        signature=quote.signature,
        phase=quote.phase,
        paced=quote.paced,
    )


def quoted_text(reference: QuoteRef, request) -> str:
    if request is None:
        return ""
    if reference.source == "prompt":
        return request.prompt
    for result in reversed(request.conversation.tool_results):
        if reference.tool is None or result.name == reference.tool:
            return result.text
    return ""
