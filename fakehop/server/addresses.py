"""What a host name or address stands for: an IP address, loopback, every interface.

Kept apart from the Host checks (origins), which need aiohttp, so that the CLI's commands
that only talk to a running server start without importing it.
"""

from __future__ import annotations

import ipaddress
import socket

LOOPBACK_NAMES = ("localhost", "localhost.", "ip6-localhost", "ip6-loopback")


def address_of(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The IP address `host` spells (`127.1` and `0` as the C library reads them), or None for a name."""
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        return ipaddress.ip_address(bare.split("%", 1)[0])
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(bare))
    except (OSError, ValueError):
        return None


def is_all_interfaces(host: str) -> bool:
    """Whether binding `host` listens on every interface: `0.0.0.0`, `::`, `0`, or nothing."""
    address = address_of(host)
    return host == "" or (address is not None and address.is_unspecified)


def is_loopback(host: str) -> bool:
    """Whether `host` can only be reached from this machine."""
    address = address_of(host)
    if address is not None:
        mapped = getattr(address, "ipv4_mapped", None)
        return (mapped or address).is_loopback
    name = host.lower().rstrip(".")
    return name in LOOPBACK_NAMES or name.endswith(".localhost")
