"""What the application's parts share without importing one another: the key its gateway is
kept under, the headers of an event stream, the models' path, and the methods a path's routes take."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

if TYPE_CHECKING:
    from .gateway import Gateway

__all__ = ["GATEWAY_KEY", "MODELS_PATH", "STREAM_HEADERS", "allowed_methods"]

MODELS_PATH = "/v1/models"

GATEWAY_KEY: web.AppKey[Gateway] = web.AppKey(
    "gateway", cast("type[Gateway]", object)
)  # the class is imported for typing only
# Read-only and case-insensitive already: a response copies these faster than a dict's.
STREAM_HEADERS = CIMultiDictProxy(
    CIMultiDict(
        {
            "Content-Type": "text/event-stream; charset=utf-8",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
        }
    )
)


def allowed_methods(app: web.Application, path: str) -> list[str]:
    """The methods the routes of `path` take; none for a path with no route but the catch-all ones."""
    return sorted(
        {
            route.method
            for resource in app.router.resources()
            if resource.get_info().get("path") == path
            for route in resource
            if route.method != "*"
        }
    )
