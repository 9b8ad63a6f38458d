"""Which hosts and origins a fakehop server answers, so that a web page cannot drive it.

A page in the user's browser can send "simple" cross-origin requests to 127.0.0.1, and a page
on a name that the attacker's DNS turns into 127.0.0.1 (DNS rebinding) can even read the
answers, since to the browser they are its own origin. The Host header gives both away: it
names the page's host, not one this server was reached by. So every route refuses a Host
that is not a loopback name or address, the bound host, an IP address (rebinding needs a name
the attacker controls; a page that names an address directly is cross-origin and cannot read
the answer), or a name given with `--allow-host`; and the control API also refuses an
`Origin` that is not the server's own.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeGuard

from aiohttp import web

from .addresses import address_of, is_all_interfaces, is_loopback

ANY_HOST = "*"
KEPT_HOST_HEADERS = 64  # Host headers found allowed, kept for a set lookup; more are checked again
LONGEST_KEPT_HOST = 300  # a host name is at most 253 characters, with a port 6 more


def host_name(header: str) -> str:
    """The host part of a Host header, lowercased: `[::1]:8080` -> `[::1]`, `Example:80` -> `example`."""
    if header.startswith("["):
        return header[: header.find("]") + 1].lower()
    return header.rsplit(":", 1)[0].lower() if header.count(":") == 1 else header.lower()


class HostCheck:
    """Decides whether a request's Host header names this server.

    `refuses` costs one set lookup for a Host header seen before: the check proper runs once
    per distinct header, and up to KEPT_HOST_HEADERS of those found allowed are kept.
    """

    def __init__(self, bound_host: str | None = None, allowed: Iterable[str] = ()):
        allowed = [name.strip().lower() for name in allowed]
        self.any_host = ANY_HOST in allowed
        self.names = {host_name(name) for name in allowed if name != ANY_HOST}
        if bound_host and not is_all_interfaces(bound_host):
            self.names.add(host_name(bound_host))
        self.seen: set[str] = set()

    def refuses(self, header: str | None) -> TypeGuard[str]:
        """Whether a request with this Host header (None: it sent none) must be refused."""
        if header in self.seen or self.any_host or header is None:
            return False
        if not self.allows(host_name(header)):
            return True
        if len(self.seen) < KEPT_HOST_HEADERS and len(header) <= LONGEST_KEPT_HOST:
            self.seen.add(header)
        return False

    def allows(self, name: str) -> bool:
        return name in self.names or address_of(name) is not None or is_loopback(name)


HOSTS_KEY: web.AppKey[HostCheck] = web.AppKey("hosts", HostCheck)


def refused_host_message(header: str) -> str:
    shown = header if len(header) <= 80 else header[:79] + "…"
    return (
        f"fakehop does not answer requests for host {shown!r}: it answers loopback names and addresses, IP addresses, "
        f"the host it was started on and those given with --allow-host (or --allow-host '*' for any)"
    )


def foreign_origin(request: web.Request) -> str | None:
    """The request's Origin when it is not the server's own (a page elsewhere sent it); else None.

    Clients that are not browsers send no Origin; a page of the server's own (the console)
    sends the very scheme and host it was loaded from.
    """
    origin = request.headers.get("Origin")
    if origin is None or origin == f"{request.scheme}://{request.headers.get('Host', '')}":
        return None
    return origin
