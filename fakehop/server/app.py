"""The one place the application is put together: the protocol routes, the control API with
the console and the metrics under CONTROL_PREFIX, and what no route takes."""

from __future__ import annotations

from aiohttp import web

from .. import CONTROL_PREFIX
from ..protocols import PROTOCOLS
from . import console, control, metrics
from .front import DIRECT_ROUTES
from .gateway import Gateway, protocol_handler, start_app, stored_response, unrouted
from .intake import MAX_BODY_BYTES
from .origins import HOSTS_KEY, HostCheck
from .shared import GATEWAY_KEY, MODELS_PATH
from .side_routes import COUNT_TOKENS_PATH, INPUT_TOKENS_PATH, MODEL_PATH, count_tokens, list_models, one_model

__all__ = ["create_app", "start"]


def create_app(
    gateway: Gateway, client_max_size: int = MAX_BODY_BYTES, bound_host: str | None = None
) -> web.Application:
    """The application for `gateway`; `bound_host`, the host it is served on, is answered beside
    loopback names, addresses and `gateway.allowed_hosts`. Bodies are left compressed for
    intake.read_body to inflate within the limit."""
    app = web.Application(client_max_size=client_max_size, handler_args={"auto_decompress": False})
    app[GATEWAY_KEY] = gateway
    app[HOSTS_KEY] = hosts = HostCheck(bound_host, gateway.allowed_hosts)
    app[DIRECT_ROUTES] = direct = {}
    for protocol in PROTOCOLS.values():
        direct[protocol.PATH] = handler = protocol_handler(gateway, protocol, hosts)
        app.router.add_post(protocol.PATH, handler)
    app.router.add_get(MODELS_PATH, list_models)
    app.router.add_get(MODEL_PATH, one_model)
    app.router.add_post(COUNT_TOKENS_PATH, count_tokens("messages"))
    app.router.add_post(INPUT_TOKENS_PATH, count_tokens("responses"))
    app.router.add_get("/v1/responses/{response_id}", stored_response)
    app.router.add_delete("/v1/responses/{response_id}", stored_response)
    app.router.add_post("/v1/responses/{response_id}/cancel", stored_response)
    app.on_shutdown.append(stop_background)
    app.router.add_get("/", console.to_the_page)
    metrics.count_for(app, gateway.journal)
    if gateway.state is not None:
        metrics.publish_for(app, gateway.state)
    console.push_for(app, gateway.journal, lambda: gateway.global_session.journal_from, gateway.state)
    app.add_subapp(CONTROL_PREFIX, control.create_app(console.add_routes, metrics.add_routes))
    app.router.add_route("*", "/{path:.*}", unrouted)  # last: only what no other route takes
    return app


async def stop_background(app: web.Application) -> None:
    await app[GATEWAY_KEY].background_runs.stop()


async def start(
    gateway: Gateway, host: str = "127.0.0.1", port: int = 0, *, shutdown_timeout: float = 1.0, reuse_port: bool = False
) -> tuple[web.AppRunner, str]:
    """Start serving `gateway`; returns the runner (call `cleanup()` to stop) and the base URL.
    `reuse_port`: share the port with other processes that ask for it too (SO_REUSEPORT)."""
    app = create_app(gateway, bound_host=host)
    return await start_app(app, host, port, shutdown_timeout=shutdown_timeout, reuse_port=reuse_port)
