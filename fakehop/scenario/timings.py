"""Timing profiles bundled with fakehop, for `fakehop serve --timing NAME`: a fast model and a
slow reasoning model of each protocol, from public latency benchmarks (see
docs/reference/timing.md for each figure's source and date). The benchmarks publish medians:
the p99s here are fakehop's own estimate of the tail, about three times the median."""

from __future__ import annotations

from pathlib import Path

from .model import Timing
from .reader import ScenarioError, load_timing

__all__ = ["PROFILES", "TimingNotFound", "timing_for"]

PROFILES: dict[str, Timing] = {
    "chat-fast": Timing(0.45, 1.5, 130.0, 0.3),  # GPT-4o on the OpenAI API
    "chat-reasoning": Timing(1.2, 6.0, 60.0, 0.3),  # o4-mini
    "responses-fast": Timing(0.9, 2.7, 80.0, 0.3),  # GPT-5 (minimal reasoning) on the OpenAI API
    "responses-reasoning": Timing(5.0, 15.0, 45.0, 0.3),  # o3
    "messages-fast": Timing(0.6, 1.8, 150.0, 0.3),  # Claude Haiku 4.5
    "messages-reasoning": Timing(2.0, 6.0, 45.0, 0.3),  # Claude Sonnet 4.5
}


class TimingNotFound(ValueError):
    """A timing asked for that is neither a bundled profile nor a timing file; str() is one line."""


def timing_for(given: str) -> Timing:
    """The bundled profile named `given`, or the `timing:` block of the YAML file at that path."""
    profile = PROFILES.get(given)
    if profile is not None:
        return profile
    path = Path(given)
    if not path.is_file():
        raise TimingNotFound(f"{given!r} is neither a bundled profile nor a file; the profiles: {', '.join(PROFILES)}")
    try:
        return load_timing(path)
    except ScenarioError as exc:
        raise TimingNotFound(str(exc.problems[0])) from None
