"""The control API under /_fakehop/: health, the request journal, reset."""

from __future__ import annotations

import hmac

from aiohttp import web

from . import __version__

PREFIX = "/_fakehop"


def gateway_of(request: web.Request):
    from .server import GATEWAY_KEY

    return request.app[GATEWAY_KEY]


@web.middleware
async def admin_token_required(request: web.Request, handler):
    """With --admin-token, every control call needs `Authorization: Bearer TOKEN`."""
    token = gateway_of(request).admin_token
    if token is not None and request.path.startswith(PREFIX + "/"):
        given = request.headers.get("Authorization", "").removeprefix("Bearer ")
        if not hmac.compare_digest(given.encode(), token.encode()):
            return web.json_response({"error": "the control API needs Authorization: Bearer <admin token>"}, status=401)
    return await handler(request)


async def health(request: web.Request) -> web.Response:
    gateway = gateway_of(request)
    return web.json_response({"status": "ok", "version": __version__, "scenarios": len(gateway.library.names()), "default": gateway.default, "time_scale": gateway.time_scale})


async def list_requests(request: web.Request) -> web.Response:
    try:
        since = int(request.query.get("since", "0"))
    except ValueError:
        return web.json_response({"error": "since: expected a whole number (a request's seq)"}, status=400)
    records = gateway_of(request).journal.since(since)
    return web.json_response({"requests": [r.as_json() for r in records]})


async def reset(request: web.Request) -> web.Response:
    gateway_of(request).reset()
    return web.json_response({"status": "reset"})


def add_routes(app: web.Application) -> None:
    app.middlewares.append(admin_token_required)
    app.router.add_get(PREFIX + "/health", health)
    app.router.add_get(PREFIX + "/requests", list_requests)
    app.router.add_post(PREFIX + "/reset", reset)
