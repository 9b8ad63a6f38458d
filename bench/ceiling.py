"""The ceiling: a minimal hand-written aiohttp handler streaming the same bytes as fakehop.

No scenario machinery: for each request it reads and parses the JSON body, then writes the
pre-encoded bytes of the scenario named in `X-Fakehop-Scenario`, sleeping until each group
of frames is due on an absolute schedule. Each group is one `write`, as fakehop writes the
frames that fall due together, and the last goes out with the end of the body, as fakehop's
does; so the two differ in everything but the write pattern: this is what an aiohttp server
on this machine can do at best with the same wire bytes.

    python -m bench.ceiling PLAN.json [--port 0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource

from aiohttp import web

from fakehop.cli.loops import LOOPS, runner_for

STREAM_HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}
BACKLOG = 1024  # the same listen backlog as fakehop's


def raise_open_file_limit() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def stream_handler(scenarios: dict[str, list[tuple[float, bytes]]]):
    async def handle(request: web.Request) -> web.StreamResponse:
        json.loads(await request.read())
        groups = scenarios[request.headers["X-Fakehop-Scenario"]]
        response = web.StreamResponse(headers=STREAM_HEADERS)
        await response.prepare(request)
        loop = asyncio.get_running_loop()
        start = loop.time()
        last = len(groups) - 1
        for number, (offset, data) in enumerate(groups):
            delay = start + offset - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if number == last:
                await response.write_eof(data)
            else:
                await response.write(data)
        return response

    return handle


def create_app(plan: dict) -> web.Application:
    app = web.Application()
    for protocol in plan.values():
        scenarios = {
            name: [(offset, "".join(frames).encode()) for offset, frames in groups]
            for name, groups in protocol["scenarios"].items()
        }
        app.router.add_post(protocol["path"], stream_handler(scenarios))
    return app


async def serve(plan: dict, port: int) -> None:
    runner = web.AppRunner(create_app(plan), access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, backlog=BACKLOG)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1]
    print(f"ceiling listening on http://127.0.0.1:{bound}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description="Stream a bench plan's bytes with a bare aiohttp handler.")
    parser.add_argument("plan", help="the plan JSON written by the bench")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--loop", choices=LOOPS, default="auto", help="the event loop, as fakehop serve's --loop")
    args = parser.parse_args()
    raise_open_file_limit()
    with open(args.plan) as file:
        plan = json.load(file)
    try:
        runner_for(args.loop)(serve(plan, args.port))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
