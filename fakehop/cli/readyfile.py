"""The file `serve --ready-file` writes once the server listens, for scripts that start it in the background."""

from __future__ import annotations

import os
import secrets
from contextlib import contextmanager
from pathlib import Path

__all__ = ["ready_file_holding", "write_whole"]


@contextmanager
def ready_file_holding(url: str, path: Path | None):
    """While serving: `url` in the file at `path` (serve --ready-file), written whole or not at
    all, so that a script polling for the file never reads half a URL; removed when serving ends."""
    if path is None:
        yield
        return
    try:
        write_whole(path, url + "\n")
    except OSError as exc:
        raise OSError(f"cannot write --ready-file {path}: {exc.strerror or exc}") from None
    try:
        yield
    finally:
        path.unlink(missing_ok=True)


def write_whole(path: Path, text: str) -> None:
    """`text` in the file at `path`, written whole or not at all: into a file made afresh beside
    it under a name no one can foresee (never one planted there, nor what a link planted there
    points to), then renamed onto it."""
    partial = path.with_name(f".{path.name}.{secrets.token_hex(8)}.partial")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
    try:
        with open(descriptor, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(partial, path)
    except OSError:
        partial.unlink(missing_ok=True)
        raise
