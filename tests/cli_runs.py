"""The `fakehop` command run from a test: through `fakehop.cli.main` in the test's own process,
or as `python -m fakehop` in a process of its own; either way, what comes back is a
`subprocess.CompletedProcess` (exit code, stdout, stderr).

A process costs 0.3-0.7 s of CPU before the command does anything (the interpreter and its
imports); main() costs the command's own work alone. A test runs the process where the
boundary is what it is about: the entry point and its exit status, signals, a server that
keeps running, a terminal. In this process, an exception main() lets out is raised in the
test, which fails as a traceback on the process's stderr would have made it fail.
"""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import cast

from fakehop.cli.main import main

Environment = Mapping[str, str | None]  # variables laid over os.environ; None takes one out


def fakehop_here(*args: str, env: Environment | None = None, text: bool = True) -> subprocess.CompletedProcess:
    """`fakehop ARGS` through main(), on a thread of its own: there `asyncio.run` finds no loop
    running, and a `serve` or `record` that should have refused but starts fails on its signal
    handlers (only the main thread may set them) instead of serving until the run is killed.
    stdout and stderr as text, or as bytes with text=False."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run_main, args, env or {}, text).result()


async def fakehop_here_async(
    *args: str, env: Environment | None = None, text: bool = True
) -> subprocess.CompletedProcess:
    """fakehop_here() for an async test: its loop goes on (serving what the command may talk to) while the command runs."""
    return await asyncio.to_thread(run_main, args, env or {}, text)


def fakehop_process(
    *args: str,
    env: Environment | None = None,
    text: bool = True,
    timeout: float = 60,
    cwd: str | os.PathLike | None = None,
) -> subprocess.CompletedProcess:
    """`python -m fakehop ARGS` as a process of its own, its output through pipes."""
    environment = {name: value for name, value in {**os.environ, **(env or {})}.items() if value is not None}
    return subprocess.run(
        [sys.executable, "-m", "fakehop", *args],
        capture_output=True,
        text=text,
        timeout=timeout,
        env=environment,
        cwd=cwd,
    )


def run_main(args: tuple[str, ...], env: Environment, text: bool) -> subprocess.CompletedProcess:
    """main(args) with `env` in os.environ and sys.stdout and sys.stderr written to memory,
    all three put back however it ends; argparse's exit (SystemExit) is an exit code."""
    stdout, stderr = memory_stream(), memory_stream()
    with variables(env), streams(stdout, stderr):
        try:
            code = main(list(args))
        except SystemExit as exit:
            assert not isinstance(exit.code, str), exit.code  # argparse and main exit with a number
            code = exit.code or 0
    return subprocess.CompletedProcess(["fakehop", *args], code, written(stdout, text), written(stderr, text))


def memory_stream() -> io.TextIOWrapper:
    """A text stream with a `.buffer` beneath, as sys.stdout has (`play` writes its bytes there)."""
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)


def written(stream: io.TextIOWrapper, text: bool) -> str | bytes:
    data = cast(io.BytesIO, stream.buffer).getvalue()  # memory_stream's
    return data.decode("utf-8") if text else data


@contextmanager
def streams(stdout: io.TextIOWrapper, stderr: io.TextIOWrapper) -> Iterator[None]:
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = stdout, stderr
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


@contextmanager
def variables(env: Environment) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in env}
    set_variables(env)
    try:
        yield
    finally:
        set_variables(saved)


def set_variables(values: Environment) -> None:
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
