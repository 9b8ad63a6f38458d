"""One console watching a fakehop server, as a person at the page would: its push
(GET /_fakehop/events) read for as long as a block runs, so that a measurement includes what
the push costs the server."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit

POLL = 0.2  # seconds a read waits before the reader looks whether the block has ended


@contextlib.contextmanager
def watching(url: str) -> Iterator[None]:
    """The push of the server at `url` read, and dropped, in a thread until the block ends."""
    parts = urlsplit(url)
    connection = socket.create_connection((parts.hostname, parts.port), timeout=60)
    connection.sendall(f"GET /_fakehop/events HTTP/1.1\r\nHost: {parts.netloc}\r\n\r\n".encode())
    first = connection.recv(65536)  # the headers, and maybe the greeting: the server counts this console from here on
    if not first.startswith((b"HTTP/1.1 200 ", b"HTTP/1.0 200 ")):
        connection.close()
        raise RuntimeError(f"the console's push answered {first[:40]!r}")
    done = threading.Event()

    def read() -> None:
        connection.settimeout(POLL)
        while not done.is_set():
            try:
                if not connection.recv(65536):
                    return
            except TimeoutError:
                continue

    reader = threading.Thread(target=read, name="bench-console", daemon=True)
    reader.start()
    try:
        yield
    finally:
        done.set()
        reader.join()
        connection.close()
