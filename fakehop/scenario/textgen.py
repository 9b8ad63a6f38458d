"""Filler text made by Faker, deterministic by seed: `text: {faker: paragraph, seed: 3}`."""

from __future__ import annotations

import threading
from functools import lru_cache
from typing import Any

PROVIDERS = ("paragraph", "paragraphs", "sentence", "sentences", "text", "words", "word")
ARGUMENTS = ("nb", "nb_words", "nb_sentences", "max_nb_chars", "variable_nb_words", "variable_nb_sentences")
MAX_CHARS = 1_000_000
_FAKER_LOCK = threading.Lock()  # the one Faker is reseeded for each text; a thread server may load scenarios too


class TextgenError(ValueError):
    pass


@lru_cache(maxsize=1)
def _faker():
    """One Faker for every text: making one takes milliseconds, reseeding it next to nothing."""
    from faker import Faker  # imported on use: it takes a noticeable time to load

    return Faker("en_US")


def generate(spec: dict[str, Any]) -> str:
    """Text for a `{faker: NAME, seed: N, ...}` mapping; lists are joined (paragraphs by blank lines)."""
    provider = spec.get("faker")
    if provider not in PROVIDERS:
        raise TextgenError(f"faker: expected one of {', '.join(PROVIDERS)}, got {provider!r}")
    seed = spec.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TextgenError(f"seed: expected a whole number, got {seed!r}")
    unknown = sorted(set(spec) - {"faker", "seed"} - set(ARGUMENTS))
    if unknown:
        raise TextgenError(
            f"unknown key {unknown[0]!r} for faker text; valid keys: faker, seed, {', '.join(ARGUMENTS)}"
        )
    arguments = {key: spec[key] for key in ARGUMENTS if key in spec}
    for key, value in arguments.items():
        if key.startswith("variable_"):
            if not isinstance(value, bool):
                raise TextgenError(f"{key}: expected true or false, got {value!r}")
        elif isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 10_000:
            raise TextgenError(f"{key}: expected a whole number from 1 to 10000, got {value!r}")
    with _FAKER_LOCK:
        fake = _faker()
        fake.seed_instance(seed)
        try:
            made = getattr(fake, provider)(**arguments)
        except (TypeError, ValueError) as exc:
            raise TextgenError(f"faker {provider}: {exc}") from None
    text = ("\n\n" if provider == "paragraphs" else " ").join(made) if isinstance(made, list) else made
    if len(text) > MAX_CHARS:
        raise TextgenError(f"faker text is {len(text):,} characters, over the limit of {MAX_CHARS:,}")
    return text
