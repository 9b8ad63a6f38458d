"""Rate-limit headers on successful answers: what is left of a scenario's limits in the current window.

The real APIs tell a client, on every answer, its limits, what is left of them and when they
reset, so a client can slow down before it ever gets a 429. fakehop does so for the answers of
scenarios with a `rate_limit:` block (aiohttp writes a header character by character, so the
six or twelve headers would cost every other answer some 9 to 15% more instructions). Each
session keeps its own counts (requests that name none share the global session's), one
window per block whatever the protocol (a sequence's entries share their scenario's):
each answer takes one request and its tokens (the input, and the output the request allows),
and once `window` seconds have passed since the window opened, the next answer opens a new one
with everything back. Windows are real seconds: the time scale changes only fakehop's own
pauses, never what a header tells the client.

The headers that stay the same while a window lasts are made when it opens; per answer only
the remaining counts (and OpenAI's time until the reset) are formatted.

A block with `enforce: true` also refuses: once the window's requests or tokens are used up,
each further request gets the protocol's 429, with Retry-After the whole seconds until the
window opens again and the headers telling what is left (0 of what ran out).
"""

from __future__ import annotations

import math
import time
from typing import cast

from ..scenario.model import HttpError, RateLimit, Script
from .player import PlayRequest


class Window:
    """What is left of one set of limits until `ends` (the monotonic clock's seconds), and the
    headers that stay the same while it lasts."""

    __slots__ = ("ends", "fixed", "input_tokens", "limit", "output_tokens", "requests", "tokens")

    def __init__(self, limit: RateLimit, now: float):
        self.limit = limit
        self.ends = now + limit.window
        self.requests, self.input_tokens, self.output_tokens, self.tokens = (
            limit.requests,
            limit.input_tokens,
            limit.output_tokens,
            limit.tokens,
        )
        self.fixed = {family: fixed(limit) for family, fixed in FIXED.items()}

    def take(self, input_tokens: int, output_tokens: int) -> None:
        """One answer's request and tokens, never below 0."""
        requests, taken_in, taken_out = (
            self.requests - 1,
            self.input_tokens - input_tokens,
            self.output_tokens - output_tokens,
        )
        tokens = self.tokens - input_tokens - output_tokens
        self.requests = requests if requests > 0 else 0
        self.input_tokens = taken_in if taken_in > 0 else 0
        self.output_tokens = taken_out if taken_out > 0 else 0
        self.tokens = tokens if tokens > 0 else 0

    def used_up(self, family: str) -> str | None:
        """What of the window is used up for a request of `family`, as its 429 names it, or None.
        (OpenAI tells no input and output limits of their own.)"""
        if self.requests == 0:
            return "requests"
        if self.tokens == 0 or (family == "anthropic" and (self.input_tokens == 0 or self.output_tokens == 0)):
            return "tokens"
        return None


class RateLimits:
    """The open window of every set of limits a session's answers have used, whatever their protocol."""

    def __init__(self) -> None:
        self._windows: dict[
            int, Window
        ] = {}  # by the limits' identity (a Window keeps its limits, so the id stays theirs)

    def clear(self) -> None:
        self._windows.clear()

    def headers(self, protocol: str, script: Script, request: PlayRequest) -> list[tuple[str, str]]:
        """The rate-limit headers of one more answer of `script` in `protocol`: it takes one
        request, its input tokens and the output tokens the request allows; `script` has limits."""
        limit = cast(RateLimit, script.rate_limit)
        input_tokens = request.input_tokens if script.usage.input_tokens is None else script.usage.input_tokens
        output_tokens = request.max_output_tokens or 0
        now = time.monotonic()
        window = self.window(limit, now)
        window.take(input_tokens, output_tokens)
        family = FAMILIES[protocol]
        return HEADERS[family](window, window.fixed[family], now)

    def window(self, limit: RateLimit, now: float) -> Window:
        """The open window of `limit`, a new one once the last has ended."""
        window = self._windows.get(id(limit))
        if window is None or window.limit is not limit or now >= window.ends:
            window = self._windows[id(limit)] = Window(limit, now)
        return window

    def refusal(self, protocol: str, limit: RateLimit) -> HttpError | None:
        """The 429 of a request in `protocol` while `limit`'s window is used up; None while it has room."""
        now = time.monotonic()
        window = self.window(limit, now)
        family = FAMILIES[protocol]
        used_up = window.used_up(family)
        if used_up is None:
            return None
        wait = max(1, math.ceil(window.ends - now))
        return quota_refusal(family, window, used_up, wait, HEADERS[family](window, window.fixed[family], now))


def quota_refusal(family: str, window: Window, used_up: str, wait: int, headers: list[tuple[str, str]]) -> HttpError:
    """The 429 of a request in `family` while `window` has `used_up` (requests or tokens) used up,
    `wait` whole seconds before it opens again; `headers` tell what is left."""
    limit = window.limit
    count = limit.requests if used_up == "requests" else limit.tokens
    return HttpError(
        429,
        QUOTA_MESSAGES[family].format(what=used_up, count=count, window=duration(limit.window), wait=wait),
        retry_after=str(wait),
        headers=tuple(headers),
        error_type=used_up if family == "openai" else None,  # OpenAI's type says which limit; Anthropic's is its own
    )


def duration(seconds: float) -> str:
    """A duration as OpenAI writes its resets, Go's way: `17ms`, `59.5s`, `6m0s`."""
    milliseconds = round(seconds * 1000)
    if milliseconds < 1000:
        return f"{milliseconds}ms"
    minutes, rest = divmod(milliseconds, 60_000)
    second_text = f"{rest / 1000:.3f}".rstrip("0").rstrip(".")
    return f"{minutes}m{second_text}s" if minutes else f"{second_text}s"


_RESETS: dict[int, str] = {}  # duration() of a number of hundredths of a second, as answers ask for it
KEPT_RESETS = 10_000


def reset_after(seconds: float) -> str:
    """duration(), to the hundredth of a second: answers close in time share one formatting."""
    hundredths = int(seconds * 100)
    text = _RESETS.get(hundredths)
    if text is None:
        if len(_RESETS) >= KEPT_RESETS:
            _RESETS.clear()
        text = _RESETS[hundredths] = duration(hundredths / 100)
    return text


def openai_fixed(limit: RateLimit) -> tuple[tuple[str, str], ...]:
    return ("x-ratelimit-limit-requests", str(limit.requests)), ("x-ratelimit-limit-tokens", str(limit.tokens))


def openai_headers(window: Window, fixed: tuple, now: float) -> list[tuple[str, str]]:
    """OpenAI's six: the request and token limits, what is left, and how long until each resets."""
    reset = reset_after(window.ends - now)
    limit_requests, limit_tokens = fixed
    return [
        limit_requests,
        limit_tokens,
        ("x-ratelimit-remaining-requests", str(window.requests)),
        ("x-ratelimit-remaining-tokens", str(window.tokens)),
        ("x-ratelimit-reset-requests", reset),
        ("x-ratelimit-reset-tokens", reset),
    ]


def anthropic_fixed(limit: RateLimit) -> tuple[tuple[str, str], ...]:
    """The limit and reset headers of each kind (requests, input, output and all tokens): the
    reset is when the window ends, in RFC 3339 to the second."""
    reset = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + limit.window))
    counts = (limit.requests, limit.input_tokens, limit.output_tokens, limit.tokens)
    return tuple(
        pair
        for kind, count in zip(ANTHROPIC_KINDS, counts)
        for pair in ((f"anthropic-ratelimit-{kind}-limit", str(count)), (f"anthropic-ratelimit-{kind}-reset", reset))
    )


ANTHROPIC_KINDS = ("requests", "input-tokens", "output-tokens", "tokens")
ANTHROPIC_REMAINING = tuple(f"anthropic-ratelimit-{kind}-remaining" for kind in ANTHROPIC_KINDS)


def anthropic_headers(window: Window, fixed: tuple, now: float) -> list[tuple[str, str]]:
    """Anthropic's limit, remaining and reset of requests, input tokens, output tokens and all tokens."""
    requests_limit, requests_reset, input_limit, input_reset, output_limit, output_reset, tokens_limit, tokens_reset = (
        fixed
    )
    requests, input_tokens, output_tokens, tokens = ANTHROPIC_REMAINING
    return [
        requests_limit,
        (requests, str(window.requests)),
        requests_reset,
        input_limit,
        (input_tokens, str(window.input_tokens)),
        input_reset,
        output_limit,
        (output_tokens, str(window.output_tokens)),
        output_reset,
        tokens_limit,
        (tokens, str(window.tokens)),
        tokens_reset,
    ]


QUOTA_MESSAGES = {
    "openai": "Rate limit reached on {what} per {window}: Limit {count}, Used {count}. Please try again in {wait}s.",
    "anthropic": "This request would exceed your rate limit of {count} {what} per {window}. Please try again in {wait}s.",
}
FAMILIES = {"chat": "openai", "responses": "openai", "messages": "anthropic"}
FIXED = {"openai": openai_fixed, "anthropic": anthropic_fixed}
HEADERS = {"openai": openai_headers, "anthropic": anthropic_headers}
