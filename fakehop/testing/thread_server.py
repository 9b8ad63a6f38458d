"""A fakehop server on its own event loop in a background thread.

Sync tests, async tests on any loop, and clients in other processes can all reach it. The
Gateway belongs to the server's loop: change it only through `call`, which runs a function
there and hands back its result.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

from ..server.app import start
from ..server.gateway import Gateway

T = TypeVar("T")
CALL_TIMEOUT = 10.0


class ThreadServer:
    """`start()` binds a free port and returns the base URL; `stop()` ends it. Also a context manager."""

    def __init__(self, gateway: Gateway, host: str = "127.0.0.1", port: int = 0, *, shutdown_timeout: float = 1.0):
        self.gateway = gateway
        self.host = host
        self.port = port
        self.shutdown_timeout = shutdown_timeout
        self.url: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopping: asyncio.Event | None = None

    def start(self) -> str:
        if self._thread is not None:
            raise RuntimeError("this fakehop server is already running")
        started: concurrent.futures.Future[str] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._serve, args=(started,), name="fakehop-server", daemon=True)
        self._thread.start()
        try:
            self.url = started.result()
        except BaseException as exc:
            self._thread.join()
            self._thread = self._loop = None
            if isinstance(exc, OSError):  # it could not listen (port in use, no file descriptors left, ...)
                raise exc.with_traceback(None) from None  # the thread's frames say no more than the message
            raise
        return self.url

    def _serve(self, started: concurrent.futures.Future) -> None:
        main = self._main(started)
        try:
            asyncio.run(main)
        except BaseException as exc:
            if started.done():
                raise
            main.close()  # never begun: no event loop to run it on (no file descriptors left, ...)
            started.set_exception(exc)

    async def _main(self, started: concurrent.futures.Future) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        try:
            runner, url = await start(self.gateway, self.host, self.port, shutdown_timeout=self.shutdown_timeout)
        except BaseException as exc:  # the caller of start() gets the error (port in use, ...)
            started.set_exception(exc)
            return
        started.set_result(url)
        try:
            await self._stopping.wait()
        finally:
            await runner.cleanup()

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(*args)` on the server's loop and return its result (or raise its exception)."""
        if self._loop is None or self._thread is None:
            raise RuntimeError("this fakehop server is not running")
        if threading.current_thread() is self._thread:
            return fn(*args)
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                done.set_result(fn(*args))
            except BaseException as exc:
                done.set_exception(exc)

        self._loop.call_soon_threadsafe(run)
        return done.result(CALL_TIMEOUT)

    def post(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run `fn(*args)` on the server's loop soon, without waiting for it.

        It still comes first: whatever reaches the server afterwards, a `call` or a request on
        a socket, is handled after it, because the loop runs callbacks in order and handles
        a socket's bytes only after the callbacks queued before they arrived.
        """
        if self._loop is None or self._thread is None:
            raise RuntimeError("this fakehop server is not running")
        self._loop.call_soon_threadsafe(fn, *args)

    def stop(self) -> None:
        """Stop serving: open streams get `shutdown_timeout` seconds, then are cut off."""
        if self._thread is None:
            return
        loop, stopping = (
            cast(asyncio.AbstractEventLoop, self._loop),
            cast(asyncio.Event, self._stopping),
        )  # set as it runs
        loop.call_soon_threadsafe(stopping.set)
        self._thread.join()
        self._thread = self._loop = None

    def __enter__(self) -> ThreadServer:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()
