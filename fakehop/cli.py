"""The `fakehop` command: serve, validate, play, list, schema."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from . import __version__
from .library import Library
from .protocols import PROTOCOLS
from .protocols.common import BadRequest
from .scenario import ScenarioError, load_file, scenario_files
from .server import DEFAULT_SCENARIO, Gateway, UnknownScenario, start, time_scale_from_env


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return value


def add_library_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenarios", action="append", default=[], type=Path, metavar="DIR",
                        help="a directory of scenario files, added to the bundled ones (repeatable; a name here wins)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fakehop", description="A fake HopBase LLM gateway for integration tests.")
    parser.add_argument("--version", action="version", version=f"fakehop {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="run the fake gateway")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8080, help="port to listen on; 0 picks a free one (default 8080)")
    add_library_options(serve)
    serve.add_argument("--default", default=DEFAULT_SCENARIO, metavar="NAME", help=f"scenario for requests that name none (default {DEFAULT_SCENARIO})")
    serve.add_argument("--time-scale", type=positive_float, default=None, metavar="F",
                       help="multiply every scenario duration by F (default $FAKEHOP_TIME_SCALE or 1)")
    serve.add_argument("--api-key", default=None, metavar="KEY", help="accept only this key (Bearer or x-api-key); default: any")
    serve.add_argument("--admin-token", default=None, metavar="TOKEN", help="require this bearer token on /_fakehop/")
    serve.set_defaults(run=run_serve)

    validate = commands.add_parser("validate", help="check scenario files; exit 1 listing every error")
    validate.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="scenario files or directories")
    validate.set_defaults(run=run_validate)

    play = commands.add_parser("play", help="print the exact bytes a client would get, with no server")
    play.add_argument("name", metavar="NAME", help="scenario name")
    play.add_argument("--protocol", choices=sorted(PROTOCOLS), default="chat")
    play.add_argument("--no-stream", action="store_true", help="the non-streaming answer instead of SSE")
    play.add_argument("--seed", type=int, default=0, help="seed for ids (default 0)")
    play.add_argument("--no-wait", action="store_true", help="do not pause; print everything at once")
    play.add_argument("--request", type=int, default=1, metavar="N", help="for a sequence: play the answer to request N (default 1)")
    play.add_argument("--body", default=None, metavar="JSON", help="the request body (default: a small example request)")
    play.add_argument("--time-scale", type=positive_float, default=None, metavar="F")
    add_library_options(play)
    play.set_defaults(run=run_play)

    listing = commands.add_parser("list", help="list the scenarios")
    add_library_options(listing)
    listing.set_defaults(run=run_list)

    schema = commands.add_parser("schema", help="print the JSON Schema of the scenario format")
    schema.set_defaults(run=run_schema)
    return parser


def fail(message: str, code: int = 2) -> int:
    print(f"fakehop: {message}", file=sys.stderr)
    return code


def run_serve(args: argparse.Namespace) -> int:
    library = Library.load(args.scenarios)
    scale = args.time_scale or time_scale_from_env()
    gateway = Gateway(library, default=args.default, time_scale=scale, api_key=args.api_key, admin_token=args.admin_token)
    if args.host in ("0.0.0.0", "::", "") and not (args.api_key or args.admin_token):
        print("fakehop: warning: listening on all interfaces with no --api-key or --admin-token; "
              "anyone who can reach this machine can drive it", file=sys.stderr)
    try:
        asyncio.run(serve_until_stopped(gateway, args.host, args.port))
    except KeyboardInterrupt:
        pass
    return 0


async def serve_until_stopped(gateway: Gateway, host: str, port: int) -> None:
    runner, url = await start(gateway, host, port)
    names = gateway.library.names()
    print(f"fakehop {__version__} listening on {url}", flush=True)
    print(f"  {len(names)} scenarios, default {gateway.default!r}, time scale {gateway.time_scale:g}; "
          f"OpenAI base URL {url}/v1, Anthropic base URL {url}; Ctrl-C stops", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def run_validate(args: argparse.Namespace) -> int:
    problems = []
    count = 0
    for path in args.paths:
        try:
            if path.is_dir():
                count += len(Library.load([path], bundled=False).names())
            else:
                load_file(path)
                count += 1
        except ScenarioError as exc:
            problems.extend(exc.problems)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"{len(problems)} problem{'s' if len(problems) != 1 else ''} found", file=sys.stderr)
        return 1
    print(f"ok: {count} scenario{'s' if count != 1 else ''}")
    return 0


def run_play(args: argparse.Namespace) -> int:
    from . import player
    from .render import render

    library = Library.load(args.scenarios)
    if args.name not in library:
        return fail(str(UnknownScenario(args.name, library.names())))
    protocol = PROTOCOLS[args.protocol]
    try:
        body = json.loads(args.body) if args.body else dict(protocol.EXAMPLE_REQUEST)
    except ValueError as exc:
        return fail(f"--body is not valid JSON: {exc}")
    if not isinstance(body, dict):
        return fail("--body must be a JSON object")
    if args.no_stream:
        body["stream"] = False
    out = sys.stdout.buffer

    def write(data: bytes) -> None:
        out.write(data)
        out.flush()

    clock_factory = player.InstantClock if args.no_wait else player.LoopClock
    scale = args.time_scale or time_scale_from_env()

    async def go():
        return await render(library, args.name, args.protocol, body, request_number=args.request, seed=args.seed,
                            time_scale=scale, clock=clock_factory(), write=write)

    try:
        rendered = asyncio.run(go())
    except BadRequest as exc:
        return fail(f"the request body would get HTTP {exc.status}: {exc.message}")
    if rendered.status not in (0, 200):
        print(f"(HTTP {rendered.status}{''.join(f'; {k}: {v}' for k, v in rendered.headers.items())})", file=sys.stderr)
    return 0


def run_list(args: argparse.Namespace) -> int:
    library = Library.load(args.scenarios)
    width = max(len(name) for name in library.names())
    for name in library.names():
        print(f"{name:<{width}}  {library[name].description}")
    return 0


def run_schema(args: argparse.Namespace) -> int:
    from .schema import scenario_schema

    print(json.dumps(scenario_schema(), indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except ScenarioError as exc:
        print(exc, file=sys.stderr)
        return fail(f"{len(exc.problems)} scenario problem{'s' if len(exc.problems) != 1 else ''}; nothing was started", 1)
    except UnknownScenario as exc:
        return fail(str(exc))
    except OSError as exc:
        return fail(str(exc))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
