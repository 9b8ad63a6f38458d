"""Routes answered ahead of aiohttp's router.

An aiohttp application resolves every request through its router: the URL parsed, a match
info built and frozen, the middlewares looked up. The POSTs to the protocol routes' paths are
almost every request a server answers, and their handlers need none of that: an application
names them as its direct routes, and once its runner is set up (`put_in_front`) a request
whose method and raw path are one of them goes straight to its handler. That saves some
15,000 instructions a request, about 5% (callgrind, bench.instructions). Anything else goes
through the router as ever, and so does a POST that sends `Expect`, which the router answers
(HTTP/1.1's 100 Continue). A handler reached directly has no `request.app` or
`request.match_info`; an application with middlewares or `on_response_prepare` signals keeps
its router for every request, so that they run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import cast

from aiohttp import hdrs, web

__all__ = ["DIRECT_ROUTES", "put_in_front"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# An application's direct routes: the handler of each POST route by its path, as its router has them too.
DIRECT_ROUTES: web.AppKey[dict[str, Handler]] = web.AppKey("direct_routes", dict)


def put_in_front(runner: web.AppRunner) -> None:
    """Answer the direct routes of `runner`'s application ahead of its router (`runner` is set
    up and serves no site yet: a connection takes the server's handler as it opens)."""
    app, server = runner.app, runner.server
    direct = app.get(DIRECT_ROUTES)
    if not direct or server is None or app.middlewares or app.on_response_prepare:
        return
    routed = server.request_handler

    async def handle(request: web.Request) -> web.StreamResponse:
        handler = direct.get(request.raw_path) if request.method == hdrs.METH_POST else None
        if handler is None or hdrs.EXPECT in request.headers:
            return await routed(request)
        return await handler(request)

    # The application's server makes each request a web.Request, as its router's handlers take.
    server.request_handler = cast("Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]", handle)
