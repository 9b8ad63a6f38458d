"""The `fakehop` command: serve, validate, play, list, schema; queue, default, strict, requests,
reset and sessions to drive a running server; wait for one to start; record and import to
write scenarios from real answers."""

from __future__ import annotations

import argparse
import asyncio
import errno
import functools
import gc
import itertools
import json
import os
import re
import signal
import sys
from collections.abc import Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import fields
from pathlib import Path
from urllib.parse import SplitResult, quote, urlsplit

from .. import __version__
from ..play.player import parse_time_scale, time_scale_from_env
from ..protocols import PROTOCOLS
from ..protocols.common import BadRequest
from ..record.writer import DEFAULT_MIN_GAP
from ..scenario.library import DEFAULT_SCENARIO, Library, UnknownScenario, origin
from ..scenario.model import Scenario
from ..scenario.reader import (
    FAIL_KINDS,
    SCENARIO_SUFFIXES,
    Problem,
    ScenarioError,
    load_file,
    parse_duration,
    scenario_files,
)
from ..scenario.timings import PROFILES, TimingNotFound, timing_for
from ..server.addresses import is_all_interfaces, is_loopback
from ..state.faults import KINDS as FAULT_KINDS
from ..state.faults import STALL_THEN
from ..state.journal import DEFAULT_BYTES, DEFAULT_CAPACITY, Journal, Record
from ..state.sessions import DEFAULT_MAX_SESSIONS, DEFAULT_SESSION_IDLE
from ..style import Tint, plain, tinter
from ..testing.remote import ControlClient, ControlFailed, default_admin_token, default_url
from ..verdicts import Finding, Settings, setting_value
from .loops import LOOPS, LoopUnavailable, runner_for
from .readyfile import ready_file_holding

WAIT_TIMEOUT = 30.0  # seconds `fakehop wait` waits by default
LEFT_UNDONE = {"play": "nothing was played", "list": "nothing was listed"}  # the rest start a server
OUTPUT_CLOSED = 141  # the exit status of a command that SIGPIPE ended (128 + 13), as shells report it
_BYTES = re.compile(r"^(\d+)\s*([KMG]i?B?)?$", re.IGNORECASE)
_BYTE_UNITS = {"k": 2**10, "m": 2**20, "g": 2**30}


class Parser(argparse.ArgumentParser):
    """An argument parser whose every mistake is one line on stderr (and exit 2), with no usage text."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def positive_float(text: str) -> float:
    try:
        return parse_time_scale(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def positive_int(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1, got {text}")
    return int(text)


def port_number(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"expected a port from 0 to 65535 (0 picks a free one), got {text}")
    return int(text)


def byte_count(text: str) -> int:
    """A number of bytes, with K, M or G (binary: 64M is 64 MiB) if wanted."""
    found = _BYTES.match(text.strip())
    if not found or int(found.group(1)) < 1:
        raise argparse.ArgumentTypeError(f"expected a number of bytes from 1, such as 67108864 or 64M, got {text}")
    return int(found.group(1)) * _BYTE_UNITS.get((found.group(2) or " ")[0].lower(), 1)


def server_url(text: str) -> str:
    """A server's root URL, http or https with a host, a valid port and no path ($FAKEHOP_URL too)."""
    try:
        parts = urlsplit(text)
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        parts, port_ok = None, False
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or not port_ok or has_path(parts):
        raise argparse.ArgumentTypeError(
            f"expected a server URL such as http://127.0.0.1:8080, with no path (from --url or $FAKEHOP_URL), got {text!r}"
        )
    return text


def has_path(parts: SplitResult) -> bool:
    """Whether a URL goes past its server's root: the commands add the control API's path to it."""
    return bool(parts.path.strip("/") or parts.query or parts.fragment)


def state_url(text: str) -> str:
    """A Redis URL for --state: redis://, rediss:// or unix://."""
    if urlsplit(text).scheme not in ("redis", "rediss", "unix"):
        raise argparse.ArgumentTypeError(f"expected a Redis URL such as redis://127.0.0.1:6379/0, got {text!r}")
    return text


def add_library_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scenarios",
        action="append",
        default=[],
        type=Path,
        metavar="DIR",
        help="a directory of scenario files, added to the bundled ones (repeatable; a name here wins)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="fakehop", description="A fake HopBase LLM gateway for integration tests.")
    parser.add_argument("--version", action="version", version=f"fakehop {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")  # none: the list of commands (see main)

    serve = commands.add_parser("serve", help="run the fake gateway")
    add_listen_options(serve)
    add_library_options(serve)
    serve.add_argument(
        "--default",
        default=DEFAULT_SCENARIO,
        metavar="NAME",
        help=f"scenario for requests that name none (default {DEFAULT_SCENARIO})",
    )
    serve.add_argument(
        "--time-scale",
        type=positive_float,
        default=None,
        metavar="F",
        help="multiply every scenario duration by F (default $FAKEHOP_TIME_SCALE or 1)",
    )
    serve.add_argument(
        "--timing",
        default=None,
        metavar="NAME|FILE",
        help=f"how long the model takes, for every scenario without a timing: of its own: a bundled profile "
        f"({', '.join(PROFILES)}) or a YAML file holding a timing: block",
    )
    serve.add_argument(
        "--api-key", default=None, metavar="KEY", help="accept only this key (Bearer or x-api-key); default: any"
    )
    serve.add_argument(
        "--admin-token",
        default=default_admin_token(),
        metavar="TOKEN",
        help="require this bearer token on /_fakehop/ (default $FAKEHOP_ADMIN_TOKEN; none if unset)",
    )
    serve.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="HOST",
        help="answer requests for this Host too, beside loopback names, addresses and --host (repeatable; '*' for any)",
    )
    serve.add_argument(
        "--journal-size",
        type=positive_int,
        default=DEFAULT_CAPACITY,
        metavar="N",
        help=f"keep the last N requests in the journal (default {DEFAULT_CAPACITY})",
    )
    serve.add_argument(
        "--journal-bytes",
        type=byte_count,
        default=DEFAULT_BYTES,
        metavar="BYTES",
        help=f"keep records holding at most this many bytes in all (headers, parsed bodies, frames) in the journal (default {DEFAULT_BYTES // 2**20}M)",
    )
    serve.add_argument(
        "--journal-secrets",
        action="store_true",
        help="show Authorization, x-api-key, api-key and cookie headers whole in the journal (default: redacted)",
    )
    serve.add_argument(
        "--strict",
        action="store_true",
        help="a request that names no scenario, finds the queue empty and fits no match gets a 400, not the default",
    )
    serve.add_argument(
        "--max-sessions",
        type=positive_int,
        default=DEFAULT_MAX_SESSIONS,
        metavar="N",
        help=f"keep at most N sessions; a new one drops the one idle longest (default {DEFAULT_MAX_SESSIONS})",
    )
    serve.add_argument(
        "--session-idle",
        type=positive_float,
        default=DEFAULT_SESSION_IDLE,
        metavar="SECONDS",
        help=f"drop a session after this long with no request or control call (default {DEFAULT_SESSION_IDLE:g})",
    )
    serve.add_argument(
        "--lenient-conversations",
        action="store_true",
        help="let through requests that the real APIs' conversation checks refuse (an unanswered tool call, ...)",
    )
    serve.add_argument("--quiet", action="store_true", help="do not print a line per finished request")
    serve.add_argument(
        "--ready-file",
        type=Path,
        default=None,
        metavar="PATH",
        help="once listening, write the server's URL to PATH (removed when it stops), for scripts that start it in the background",
    )
    serve.add_argument(
        "--state",
        type=state_url,
        default=None,
        metavar="URL",
        help="keep sessions, queues and the journal in Redis (redis://HOST:PORT/DB), shared by every server given it",
    )
    serve.add_argument(
        "--workers",
        type=positive_int,
        default=1,
        metavar="N",
        help="answer on the port with N processes (SO_REUSEPORT); more than 1 needs --state (default 1)",
    )
    serve.add_argument(
        "--loop",
        choices=LOOPS,
        default="auto",
        help="the event loop: uvloop, asyncio's own, or auto: uvloop where it is installed (default auto)",
    )
    serve.add_argument("--reuse-port", action="store_true", help=argparse.SUPPRESS)  # one of --workers' processes
    serve.set_defaults(run=run_serve)

    validate = commands.add_parser("validate", help="check scenario files; exit 1 listing every error")
    validate.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="scenario files or directories")
    validate.set_defaults(run=run_validate)

    play = commands.add_parser("play", help="print the exact bytes a client would get, with no server")
    play.add_argument(
        "scenario",
        metavar="NAME|FILE",
        help="a scenario name, or a .yaml file to play (beside the others, for its use:)",
    )
    play.add_argument("--protocol", choices=sorted(PROTOCOLS), default="chat")
    play.add_argument("--no-stream", action="store_true", help="the non-streaming answer instead of SSE")
    play.add_argument("--seed", type=int, default=0, help="seed for ids (default 0)")
    play.add_argument("--no-wait", action="store_true", help="do not pause; print everything at once")
    play.add_argument(
        "--request",
        type=positive_int,
        default=None,
        metavar="N",
        help="for a sequence: play the answer to request N; for a conversation: to turn N of the example request (default 1)",
    )
    play.add_argument(
        "--body", default=None, metavar="JSON", help="the request body (default: a small example request)"
    )
    play.add_argument("--time-scale", type=positive_float, default=None, metavar="F")
    add_library_options(play)
    play.set_defaults(run=run_play)

    listing = commands.add_parser("list", help="list the scenarios, or with --url a running server's")
    add_library_options(listing)
    add_server_options(listing, url_help="list this running server's scenarios (added ones too) instead of the files'")
    listing.set_defaults(run=run_list)

    schema = commands.add_parser("schema", help="print the JSON Schema of the scenario format")
    schema.set_defaults(run=run_schema)
    add_control_commands(commands)
    add_recording_commands(commands)
    return parser


def add_recording_commands(commands) -> None:
    """Commands that write scenarios from real answers."""
    record = commands.add_parser(
        "record", help="a proxy in front of a real gateway that writes each answer as a scenario"
    )
    record.add_argument(
        "--upstream", required=True, metavar="URL", help="the gateway's root URL (a trailing /v1 is taken off)"
    )
    record.add_argument(
        "--out",
        required=True,
        type=Path,
        metavar="DIR",
        help="the directory to write scenario files into (made if missing)",
    )
    add_listen_options(record)
    record.add_argument(
        "--upstream-key", default=None, metavar="KEY", help="send this key upstream instead of the client's"
    )
    add_redact_option(record)
    record.add_argument(
        "--min-gap",
        type=duration,
        default=DEFAULT_MIN_GAP,
        metavar="DURATION",
        help="leave out pauses shorter than this (default 5ms)",
    )
    record.add_argument("--quiet", action="store_true", help="do not print a line per recorded answer")
    record.set_defaults(run=run_record)

    importing = commands.add_parser(
        "import", help="write captured answers (raw SSE, curl -i output, HAR files) as scenarios"
    )
    importing.add_argument(
        "files", nargs="+", type=Path, metavar="FILE", help="captures: an event stream, a JSON answer or a HAR file"
    )
    importing.add_argument(
        "--out",
        required=True,
        type=Path,
        metavar="DIR",
        help="the directory to write scenario files into (made if missing)",
    )
    add_redact_option(importing)
    importing.set_defaults(run=run_import)


def add_listen_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=port_number, default=8080, help="port to listen on; 0 picks a free one (default 8080)"
    )


def add_redact_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--redact",
        action="append",
        default=[],
        metavar="HEADER",
        help="keep this request header's value out of every file, as keys and cookies are (repeatable)",
    )


def duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def unescaped(text: str) -> str:
    """A text given on the command line, with `\\n`, `\\r` and `\\t` written out (a line of SSE ends in one)."""
    return text.replace("\\n", "\n").replace("\\r", "\r").replace("\\t", "\t")


def add_control_commands(commands) -> None:
    """Commands that drive a running server through its control API."""
    queue = commands.add_parser(
        "queue", help="queue a scenario for the next requests that name none; --clear empties the queue"
    )
    queue.add_argument(
        "scenario", nargs="?", metavar="NAME|FILE", help="a scenario name, or a .yaml file to add and queue"
    )
    queue.add_argument(
        "--times", type=positive_int, default=None, metavar="N", help="for the next N such requests (default 1)"
    )
    queue.add_argument("--clear", action="store_true", help="empty the queue first (with no NAME|FILE: only that)")
    add_server_options(queue)
    queue.set_defaults(run=run_queue)

    fault = commands.add_parser("fault", help="lay a fault over the next answers; --list, --clear")
    fault.add_argument("kind", nargs="?", metavar="KIND", help=", ".join(FAULT_KINDS))
    fault.add_argument(
        "--times", type=int, default=None, metavar="N", help="how many requests it breaks; 0: until cleared"
    )
    fault.add_argument("--after", type=int, default=None, metavar="N", help="the output deltas let through first")
    fault.add_argument("--retry-after", type=float, default=None, metavar="S", help="the Retry-After it sends")
    fault.add_argument(
        "--status", type=int, default=None, metavar="N", help="the HTTP status (server_error, http_error)"
    )
    fault.add_argument("--message", default=None, help="the error's message")
    fault.add_argument("--type", default=None, help="http_error: the error body's type")
    fault.add_argument("--code", default=None, help="http_error: the error body's code")
    fault.add_argument("--error", choices=FAIL_KINDS, default=None, help="interrupt: the fail: kind of its error")
    fault.add_argument("--then", choices=STALL_THEN, default=None, help="stall: after the wait (default error)")
    fault.add_argument(
        "--timeout", type=duration, default=None, metavar="DURATION", help="stall: the wait (default stall_timeout)"
    )
    fault.add_argument(
        "--raw", type=unescaped, default=None, metavar="TEXT", help="malformed: what it writes (\\n: a newline)"
    )
    fault.add_argument(
        "--first", type=duration, default=None, metavar="DURATION", help="latency: before the first delta"
    )
    fault.add_argument(
        "--between", type=duration, default=None, metavar="DURATION", help="latency: before each later delta"
    )
    fault.add_argument("--protocol", choices=list(PROTOCOLS), default=None, help="only requests of this protocol")
    fault.add_argument("--scenario", default=None, metavar="GLOB", help="only requests for scenarios this glob names")
    fault.add_argument("--probability", type=float, default=None, metavar="P", help="the share of them it breaks")
    fault.add_argument("--seed", type=int, default=None, metavar="N", help="seeds the probability's draws")
    fault.add_argument("--list", action="store_true", help="list the faults set")
    fault.add_argument("--clear", action="store_true", help="remove every fault")
    add_server_options(fault)
    fault.set_defaults(run=run_fault)

    default = commands.add_parser(
        "default", help="set the scenario for requests that name none and find the queue empty"
    )
    default.add_argument("scenario", metavar="NAME|FILE", help="a scenario name, or a .yaml file to add and use")
    add_server_options(default)
    default.set_defaults(run=run_default)

    requests = commands.add_parser("requests", help="print the request journal, one line a request")
    requests.add_argument("--follow", "-f", action="store_true", help="keep printing requests as they finish")
    requests.add_argument("--since", type=int, default=0, metavar="SEQ", help="only requests after this seq")
    requests.add_argument("--json", action="store_true", help="print each whole record (with the request body) as JSON")
    requests.add_argument(
        "--interval", type=positive_float, default=0.5, metavar="SECONDS", help="how often --follow polls (default 0.5)"
    )
    add_server_options(requests)
    requests.set_defaults(run=run_requests)

    add_verdict_command(commands)

    reset = commands.add_parser(
        "reset",
        help="clear the queue, faults, journal, sequence counters and added scenarios, and put the default, time"
        " scale and strict mode back as the server started; drop a named session",
    )
    add_server_options(reset)
    reset.set_defaults(run=run_reset)

    strict = commands.add_parser(
        "strict", help="a 400 instead of the default for requests no scenario was set up for, or not"
    )
    strict.add_argument("setting", choices=("on", "off"))
    add_server_options(strict)
    strict.set_defaults(run=run_strict)

    sessions = commands.add_parser("sessions", help="list the sessions the server keeps")
    add_server_options(sessions, session=False)
    sessions.set_defaults(run=run_sessions)

    wait = commands.add_parser("wait", help="wait until a server answers its health check; exit 1 after the timeout")
    wait.add_argument(
        "--timeout",
        type=positive_float,
        default=WAIT_TIMEOUT,
        metavar="SECONDS",
        help=f"give up after this long (default {WAIT_TIMEOUT:g})",
    )
    add_server_options(wait, session=False)
    wait.set_defaults(run=run_wait)


def add_verdict_command(commands) -> None:
    verdict = commands.add_parser(
        "verdict", help="judge what the clients did by HopBase's rules; exit 1 on any error finding"
    )
    verdict.add_argument("--json", action="store_true", help="print the whole verdict as JSON")
    for setting in fields(Settings):
        verdict.add_argument(
            "--" + setting.name.replace("_", "-"),
            type=setting_type(setting.name),
            default=None,
            metavar="N",
            help=f"{setting.metadata['help']} (default {setting.default:g})",
        )
    add_server_options(verdict)
    verdict.set_defaults(run=run_verdict)


def setting_type(name: str):
    def read(text: str):
        try:
            return setting_value(name, text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc).partition(": ")[2]) from None

    return read


def add_server_options(parser: argparse.ArgumentParser, *, session: bool = True, url_help: str | None = None) -> None:
    """--url, --admin-token and --session; with `url_help`, --url is optional, with no default."""
    if url_help is None:
        parser.add_argument(
            "--url",
            type=server_url,
            default=default_url(),
            help="the server (default $FAKEHOP_URL or http://127.0.0.1:8080)",
        )
    else:
        parser.add_argument("--url", type=server_url, default=None, help=url_help)
    parser.add_argument(
        "--admin-token", default=default_admin_token(), metavar="TOKEN", help="default $FAKEHOP_ADMIN_TOKEN"
    )
    if session:
        parser.add_argument(
            "--session", default=None, metavar="ID", help="act on this session (default: the global one)"
        )


def tell(message: str, label: str = "fakehop:", tone: str = "bad") -> None:
    """One line on stderr, after `label` in `tone` (see fakehop.style)."""
    print(f"{tinter(sys.stderr)(label, tone)} {message}", file=sys.stderr)


def fail(message: str, code: int = 2) -> int:
    tell(message)
    return code


def warn(message: str) -> None:
    tell(message, "fakehop: warning:", "warn")


def time_scale_of(args: argparse.Namespace) -> float:
    """--time-scale, else $FAKEHOP_TIME_SCALE, else 1; a variable that is not a time scale stops the command."""
    try:
        return args.time_scale or time_scale_from_env()
    except ValueError as exc:
        sys.exit(fail(str(exc)))


def raise_open_file_limit() -> None:
    """Every stream holds a socket: let `serve` keep as many open as the hard limit allows."""
    try:
        import resource

        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):  # no such limit on this system, or no raising it
        pass


def run_serve(args: argparse.Namespace) -> int:
    from ..server.gateway import Gateway

    if args.workers > 1 and args.state is None:
        return fail(
            f"--workers {args.workers} needs --state redis://HOST:PORT/DB: each worker is a process of its own, "
            "and only state kept in Redis is shared by them"
        )
    try:
        run_loop = runner_for(args.loop)
    except LoopUnavailable as exc:
        return fail(str(exc))
    raise_open_file_limit()
    library = Library.load(args.scenarios)
    scale = time_scale_of(args)
    try:
        timing = None if args.timing is None else timing_for(args.timing)
    except TimingNotFound as exc:
        return fail(f"--timing: {exc}")
    try:
        gateway = Gateway(
            library,
            default=args.default,
            time_scale=scale,
            api_key=args.api_key,
            admin_token=args.admin_token,
            allowed_hosts=tuple(args.allow_host),
            journal=Journal(args.journal_size, args.journal_bytes, args.journal_secrets),
            strict=args.strict,
            max_sessions=args.max_sessions,
            session_idle=args.session_idle,
            lenient_conversations=args.lenient_conversations,
            timing=timing,
            state=shared_state(args) if args.workers == 1 else None,  # the workers' own, not theirs who starts them
        )
    except UnknownScenario as exc:
        return fail(f"--default: {exc}")
    for warning in [] if args.reuse_port else exposure_warnings(args):  # said once, not by each worker
        warn(warning)
    if args.workers > 1:  # everything checked: started N times over, it would fail N times
        from .workers import run_workers

        with port_in_use_said(args):
            return run_workers(args)
    if not args.quiet:
        gateway.journal.listeners.append(functools.partial(print_finished, tint=tinter(sys.stdout)))
    try:
        with port_in_use_said(args):
            run_loop(serve_until_stopped(gateway, args.host, args.port, args.ready_file, args.reuse_port))
    except KeyboardInterrupt:
        pass
    return 0


def shared_state(args: argparse.Namespace):
    """The Redis state --state names (the redis package imported only then), or None."""
    if args.state is None:
        return None
    try:
        from ..state.redisstate import RedisState
    except ImportError:  # pragma: no cover - the test extra installs it
        sys.exit(fail("--state needs the redis package: pip install 'fakehop[redis]'"))
    return RedisState(args.state, args.journal_size, args.session_idle, args.max_sessions)


@contextmanager
def port_in_use_said(args: argparse.Namespace):
    """A port that another server holds, as one line saying what to do about it."""
    try:
        yield
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        raise OSError(
            f"port {args.port} on {args.host} is already in use: give another --port, "
            "or --port 0 for a free one (the URL is printed once it listens)"
        ) from None


def exposure_warnings(args: argparse.Namespace) -> list[str]:
    """What to tell whoever starts a server that others than this machine's users can reach."""
    warnings = []
    if is_all_interfaces(args.host) and not (args.api_key or args.admin_token):
        warnings.append(
            "listening on all interfaces with no --api-key or --admin-token; anyone who can reach this machine can drive it"
        )
    if not is_loopback(args.host) and not args.admin_token:
        warnings.append(
            f"the control API ({args.host or 'all interfaces'}, /_fakehop/) can be reached from other machines and has no "
            "--admin-token: anyone who reaches it can change what every client gets and read the request journal"
        )
    return warnings


def print_finished(record: Record, tint: Tint = plain) -> None:
    try:
        print(record.log_line(tint), flush=True)
    except (OSError, ValueError):  # stdout was closed: the server goes on without its log
        pass


# Collector thresholds for a running server (see settle_garbage_collector).
YOUNG_THRESHOLD = 300  # net allocations between young passes; Python's default is 700
MIDDLE_THRESHOLD = 3  # young passes between middle ones; default 10
ALLOCATIONS_BETWEEN_FULL = 700_000  # at least, as with Python's defaults times ten


def settle_garbage_collector() -> None:
    """Keep collection pauses between a stream's deltas short.

    What startup built (modules, scenarios) lives as long as the server, so it is frozen out
    of every collection. Under hundreds of open streams most young objects are alive (each
    stream holds its own), so a pass costs about what it finds: with Python's thresholds a
    middle pass over 500 paced streams took 3-5 ms, and with these about 1 ms, for 5-45% more
    collector time in all. Full passes, which go over every open stream, come no more
    often than before: the server leaves little cyclic garbage (a few objects per closed
    connection).
    """
    gc.freeze()
    gc.set_threshold(
        YOUNG_THRESHOLD, MIDDLE_THRESHOLD, ALLOCATIONS_BETWEEN_FULL // (YOUNG_THRESHOLD * MIDDLE_THRESHOLD)
    )


async def serve_until_stopped(
    gateway, host: str, port: int, ready_file: Path | None = None, worker: bool = False
) -> None:
    """Serve `gateway` until stopped; a `worker` of serve --workers shares its port and says no banner."""
    from ..server.app import start

    runner, url = await start(gateway, host, port, reuse_port=worker)
    settle_garbage_collector()
    try:
        await run_until_stopped(
            runner, ready_file_holding(url, ready_file) if worker else announced(gateway, url, ready_file)
        )
    finally:
        if gateway.state is not None:
            await gateway.state.close()


@contextmanager
def announced(gateway, url: str, ready_file: Path | None):
    """While serving: the URL in the ready file, if asked for, and the banner, once it is written."""
    with ready_file_holding(url, ready_file):
        names = gateway.library.names()
        print(f"fakehop {__version__} listening on {url}", flush=True)
        strict = "strict, " if gateway.strict else ""
        print(
            f"  {len(names)} scenarios, {strict}default {gateway.default!r}, time scale {gateway.time_scale:g}; "
            f"OpenAI base URL {url}/v1, Anthropic base URL {url}; control API {url}/_fakehop/; Ctrl-C stops",
            flush=True,
        )
        for line in gateway.library.replacements():
            print(f"  {line}", flush=True)
        yield


async def run_until_stopped(runner, while_serving: AbstractContextManager = nullcontext()) -> None:  # noqa: B008 - holds nothing
    """Serve until SIGINT or SIGTERM, inside `while_serving`, then stop `runner`."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signal_number in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signal_number, stop.set)
    try:
        with while_serving:
            await stop.wait()
    finally:
        await runner.cleanup()


def output_directory(path: Path) -> Path:
    """The directory scenario files go into, made if missing; OSError saying why it cannot be."""
    if path.exists() and not path.is_dir():
        raise OSError(f"--out {path} is not a directory")
    path.mkdir(parents=True, exist_ok=True)
    return path


def run_record(args: argparse.Namespace) -> int:
    from ..record.proxy import Recorder, shown_url, start

    parts = urlsplit(args.upstream)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return fail(f"--upstream must be an http:// or https:// URL, got {args.upstream!r}")
    recorder = Recorder(args.upstream, output_directory(args.out), args.upstream_key, tuple(args.redact), args.min_gap)
    if not args.quiet:
        recorder.listeners.append(lambda line: print(line, flush=True))
    if not is_loopback(args.host):
        key = "with --upstream-key, on your key" if args.upstream_key else "on whatever key they send"
        warn(f"recording on {args.host or 'all interfaces'}: anyone who can reach it can send requests upstream, {key}")

    async def go() -> None:
        runner, url = await start(recorder, args.host, args.port)
        print(
            f"fakehop {__version__} recording on {url}: forwarding to {shown_url(recorder.upstream)}, writing to {args.out}",
            flush=True,
        )
        print(f"  OpenAI base URL {url}/v1, Anthropic base URL {url}; Ctrl-C stops", flush=True)
        await run_until_stopped(runner)

    try:
        with port_in_use_said(args):
            asyncio.run(go())
    except KeyboardInterrupt:
        pass
    return 0


def run_import(args: argparse.Namespace) -> int:
    """Every file is read before any is written: a file that holds no answer writes nothing.
    The HAR files' requests are read in order, each after the answers before it, in this file or the ones before."""
    from ..record.capture import Requests
    from ..record.importer import Imported, NotImportable, read_file
    from ..record.writer import cut_said, write_new

    answers: list[tuple[Path, Imported]] = []
    requests = Requests()
    for path in args.files:
        try:
            answers.extend((path, answer) for answer in read_file(path, tuple(args.redact), requests))
        except NotImportable as exc:
            return fail(f"{path}: {exc}")
    out = output_directory(args.out)
    for path, answer in answers:
        captured = answer.captured
        written = write_new(out, answer.file.stem, answer.file.text)
        how = f"{'streamed' if captured.streamed else 'whole'}, HTTP {captured.status}"
        print(f"imported {path} -> {written}: {captured.protocol}, {how}{cut_said(answer.file)}")
    return 0


def run_validate(args: argparse.Namespace) -> int:
    """The paths loaded as `serve` loads its directories, over the bundled scenarios, so that
    a `use` passes here exactly when it would there."""
    directories = [path for path in args.paths if path.is_dir()]
    files = [path for path in args.paths if not path.is_dir()]
    problems: Sequence[Problem] = ()
    try:
        for line in Library.load(directories, files=files).replacements():
            print(line)
    except ScenarioError as exc:
        problems = exc.problems
    count = len(files) + sum(len(scenario_files(directory)) for directory in directories)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"{len(problems)} problem{'s' if len(problems) != 1 else ''} found", file=sys.stderr)
        return 1
    print(f"ok: {count} scenario{'s' if count != 1 else ''}")
    return 0


def run_play(args: argparse.Namespace) -> int:
    from ..play import player
    from ..server.render import render

    library, name = playable(Library.load(args.scenarios), args.scenario)
    if name not in library:
        raise UnknownScenario(name, library.names())
    protocol = PROTOCOLS[args.protocol]
    conversation = library[name].is_conversation
    if conversation and args.body and args.request:
        return fail("--request: a conversation answers the turn its request is at; give --body or --request, not both")
    try:
        body = (
            json.loads(args.body) if args.body else protocol.example_request((args.request or 1) if conversation else 1)
        )
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
    scale = time_scale_of(args)

    async def go():
        return await render(
            library,
            name,
            args.protocol,
            body,
            request_number=args.request or 1,
            seed=args.seed,
            time_scale=scale,
            clock=clock_factory(),
            write=write,
        )

    try:
        rendered = asyncio.run(go())
    except BadRequest as exc:
        return fail(f"the request body would get HTTP {exc.status}: {exc.message}")
    if rendered.status not in (0, 200):
        print(f"(HTTP {rendered.status}{''.join(f'; {k}: {v}' for k, v in rendered.headers.items())})", file=sys.stderr)
    return 0


def playable(library: Library, target: str) -> tuple[Library, str]:
    """The library to play `target` from, and its name: a file's scenario is added to it."""
    scenario = scenario_in_file(target, "played")
    if scenario is None:
        return library, target
    try:
        return library.with_scenario(scenario), scenario.name
    except ScenarioError as exc:  # its `use` names no scenario the library has
        raise FileProblems(target, exc.problems, "played") from None


def run_list(args: argparse.Namespace) -> int:
    if args.url is None:
        if args.session is not None:
            return fail("--session: a session belongs to a running server; give its --url too")
        library = Library.load(args.scenarios)
        print_scenarios([(name, origin(library[name]), library[name].description) for name in library.names()])
        return 0
    if args.scenarios:
        return fail("--scenarios: with --url the server's own scenarios are listed; give one or the other")
    listed = client_of(args).call("GET", "/scenarios")["scenarios"]
    print_scenarios([(scenario["name"], listed_origin(scenario), scenario["description"]) for scenario in listed])
    return 0


def listed_origin(summary: dict) -> str:
    """A running server's scenario's origin as `list` shows it: bundled, api (added by a call), or its file."""
    return summary["origin"] if summary["origin"] in ("bundled", "api") else summary["source"]


def print_scenarios(rows: list[tuple[str, str, str]]) -> None:
    """One line a scenario: its name, where it came from, then its description."""
    tint = tinter(sys.stdout)
    width = max((len(name) for name, _, _ in rows), default=0)
    origin_width = max((len(where) for _, where, _ in rows), default=0)
    for name, where, description in rows:
        print(f"{tint(f'{name:<{width}}', 'strong')}  {where:<{origin_width}}  {description}".rstrip())


def run_schema(args: argparse.Namespace) -> int:
    from ..scenario.schema import scenario_schema

    print(json.dumps(scenario_schema(), indent=2))
    return 0


class FileProblems(Exception):
    """A scenario file given on the command line has problems; str() is the line after them."""

    def __init__(self, target: str, problems: Sequence[Problem], left_undone: str):
        count = len(problems)
        super().__init__(f"{count} problem{'s' if count != 1 else ''} in {target}; nothing was {left_undone}")
        self.problems = [str(problem) for problem in problems]


def scenario_in_file(target: str, left_undone: str) -> Scenario | None:
    """None for a scenario name; for a .yaml/.yml file (or any path with a slash), its scenario,
    checked here. FileProblems, saying that nothing was `left_undone`, lists what is wrong."""
    path = Path(target)
    if path.suffix not in SCENARIO_SUFFIXES and "/" not in target:
        return None
    try:
        return load_file(path)
    except ScenarioError as exc:
        raise FileProblems(target, exc.problems, left_undone) from None


def scenario_name_for(client: ControlClient, target: str) -> str:
    """A name as given; a file's scenario is checked here, then added to the server."""
    scenario = scenario_in_file(target, "sent")
    if scenario is None:
        return target
    path = Path(target)
    client.call("POST", "/scenarios", text=path.read_text(encoding="utf-8"), query={"name": path.stem})
    return scenario.name


def client_of(args: argparse.Namespace) -> ControlClient:
    return ControlClient(args.url, args.admin_token, session=getattr(args, "session", None))


def run_queue(args: argparse.Namespace) -> int:
    if args.scenario is None and not args.clear:
        return fail("queue: give a scenario NAME or FILE to queue, or --clear to empty the queue")
    if args.scenario is None and args.times is not None:
        return fail("--times: says how often to queue a scenario; give its NAME or FILE")
    client = client_of(args)
    name = None if args.scenario is None else scenario_name_for(client, args.scenario)
    if args.clear:
        if name is not None:  # a name the server does not know stops the command before the queue is emptied
            client.call("GET", f"/scenarios/{quote(name, safe='')}")
        removed = client.call("DELETE", "/queue")["removed"]
        print(f"{queue_of(args)} cleared: {removed} entr{'y' if removed == 1 else 'ies'} removed")
    if name is not None:
        count = client.call("POST", "/queue", {"scenario": name, "times": args.times or 1})["requests"]
        requests = "the next request that names" if count == 1 else f"the next {count} requests that name"
        queued = runs(client.call("GET", "/queue")["queue"])
        print(f"queued {name} for {requests} no scenario{in_session(args)}; {queue_of(args)} now: {queued}")
    return 0


FAULT_OPTIONS = (
    "times",
    "after",
    "retry_after",
    "status",
    "message",
    "type",
    "code",
    "error",
    "then",
    "timeout",
    "raw",
    "first",
    "between",
    "protocol",
    "scenario",
    "probability",
    "seed",
)


def run_fault(args: argparse.Namespace) -> int:
    """Add a fault, or list or clear them, in the server's global session or `--session`'s."""
    if args.list or args.clear:
        if args.kind is not None:
            return fail("fault: --list and --clear take no KIND")
        client = client_of(args)
        if args.clear:
            answer = client.call("DELETE", "/faults")
            print(f"faults cleared: {answer.get('removed', 0)} removed" + in_session(args))
        for fault in client.call("GET", "/faults")["faults"] if args.list else ():
            print(fault_line(fault))
        return 0
    if args.kind is None:
        return fail(f"fault: give a KIND ({', '.join(FAULT_KINDS)}), or --list or --clear")
    if args.kind in ("list", "clear"):
        return fail(f"fault: {args.kind} is not a KIND; did you mean `fakehop fault --{args.kind}`?")
    body = {
        "kind": args.kind,
        **{name: getattr(args, name) for name in FAULT_OPTIONS if getattr(args, name) is not None},
    }
    print(f"fault set: {fault_line(client_of(args).call('POST', '/faults', body))}" + in_session(args))
    return 0


def fault_line(fault: dict) -> str:
    """One fault as `fakehop fault --list` shows it: its id, kind, settings and what it has left."""
    shown = [
        f"{name}={value if not isinstance(value, str) or value.isprintable() else json.dumps(value)}"
        for name, value in fault.items()
        if name not in ("id", "kind", "left") and value is not None
    ]
    left = "until cleared" if fault.get("left") is None else f"{fault['left']} left"
    return " ".join([fault["id"], fault["kind"], *shown, f"({left})"])


def in_session(args: argparse.Namespace) -> str:
    return f" in session {args.session}" if args.session else ""


def queue_of(args: argparse.Namespace) -> str:
    return f"session {args.session}'s queue" if args.session else "queue"


def runs(names: list[str]) -> str:
    """A queue written short: `stall x3, hello`."""
    grouped = [(name, len(list(group))) for name, group in itertools.groupby(names)]
    return ", ".join(name if count == 1 else f"{name} x{count}" for name, count in grouped) or "(empty)"


def run_default(args: argparse.Namespace) -> int:
    client = client_of(args)
    answer = client.call("PUT", "/default", {"scenario": scenario_name_for(client, args.scenario)})
    print(f"default scenario: {answer['default']}")
    return 0


def run_requests(args: argparse.Namespace) -> int:
    client = client_of(args)
    tint = tinter(sys.stdout)
    show = (lambda record: json.dumps(record.as_json())) if args.json else (lambda record: record.log_line(tint))
    if args.follow:
        records = client.follow(args.since, args.interval, notice=lambda line: tell(line, tone="warn"))
    else:
        records = client.records(args.since)
    for record in records:
        print(show(record), flush=True)
    return 0


def run_verdict(args: argparse.Namespace) -> int:
    query = {
        setting.name: str(getattr(args, setting.name))
        for setting in fields(Settings)
        if getattr(args, setting.name) is not None
    }
    client = client_of(args)
    answer = client.call("GET", "/verdict", query=query)  # the client names the session
    if args.json:
        print(json.dumps(answer, indent=2))
    else:
        tint = tinter(sys.stdout)
        for finding in answer["findings"]:
            print(Finding.from_json(finding).line(tint))
        left = (
            []
            if args.session
            else [s["requests"] for s in client.call("GET", "/sessions")["sessions"] if s["requests"]]
        )
        print(
            tint(verdict_summary(answer, left), "bad" if answer["errors"] else "warn" if answer["warnings"] else "good")
        )
    return 1 if answer["errors"] else 0


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def verdict_summary(answer: dict, left_to_sessions: list[int]) -> str:
    """The last line of `fakehop verdict`: what was judged and what came of it, and what was left
    to the sessions' own verdicts (`left_to_sessions`: how many requests each session with any
    made), which the pytest fixture gives each test of its own."""
    judged = f"{plural(answer['requests'], 'request')} ({len(answer['retried'])} retried)"
    if left_to_sessions:
        judged += " made in no session"
    if answer["findings"]:
        summary = f"{plural(answer['errors'], 'error')}, {plural(answer['warnings'], 'warning')} over {judged}"
    elif answer["requests"]:
        summary = f"no findings over {judged}: the client kept HopBase's rules"
    else:
        summary = f"no findings over {judged}: nothing was judged"
    if left_to_sessions:
        summary += (
            f"; {plural(sum(left_to_sessions), 'request')} in {plural(len(left_to_sessions), 'session')} are left to"
            " each session's own verdict (fakehop verdict --session NAME; the pytest fixture judges its tests')"
        )
    return summary


def run_reset(args: argparse.Namespace) -> int:
    answer = client_of(args).call("POST", "/reset")
    if args.session is None:
        print(
            "reset: queue, faults, journal, sequence counters and added scenarios cleared; time scale and strict mode"
            f" as the server started; default scenario: {answer['default']}"
        )
    else:
        print(
            f"reset: session {args.session} dropped; its next use starts it as the server started; default scenario: {answer['default']}"
        )
    return 0


def run_strict(args: argparse.Namespace) -> int:
    answer = client_of(args).call("PUT", "/strict", {"strict": args.setting == "on"})
    print(
        "strict: requests no scenario was set up for get a 400"
        if answer["strict"]
        else "not strict: requests no scenario was set up for get the default"
    )
    return 0


def run_sessions(args: argparse.Namespace) -> int:
    """One line a session, the one used longest ago (the next to be dropped) first."""
    answer = client_of(args).call("GET", "/sessions")
    for session in answer["sessions"]:
        strict = "strict" if session["strict"] else "-"
        print(
            f"{session['session']:<40} idle {session['idle']:>8.1f}s  {session['requests']:>4} request{' ' if session['requests'] == 1 else 's'} queue {session['queue']:>3}  "
            f"default {session['default']:<18} time scale {session['time_scale']:<6g} {strict}"
        )
    print(
        f"{plural(len(answer['sessions']), 'session')} (at most {answer['max_sessions']}, each dropped after {answer['idle_timeout']:g}s idle)"
    )
    return 0


def run_wait(args: argparse.Namespace) -> int:
    try:
        answer = client_of(args).wait_until_up(args.timeout)
    except ControlFailed as exc:
        if exc.status is not None:
            raise
        return fail(f"no fakehop server answered at {args.url} within {args.timeout:g}s: {exc}", 1)
    print(f"fakehop {answer['version']} is up at {args.url}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Exit 0 when done; 1 when what was asked found problems (a verdict's errors, a file's
    problems, a server that refused or is not there); 2 for a mistake in the command itself,
    an unknown scenario name included (a bare `fakehop` lists the commands, and exits 2 too)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else list(argv)  # as given: serve --workers gives it to each worker
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return args.run(args)
    except ScenarioError as exc:
        print(exc, file=sys.stderr)
        undone = LEFT_UNDONE.get(args.command, "nothing was started")
        return fail(f"{len(exc.problems)} scenario problem{'s' if len(exc.problems) != 1 else ''}; {undone}", 1)
    except UnknownScenario as exc:
        return fail(str(exc))
    except (ControlFailed, FileProblems) as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return fail(str(exc), 2 if names_unknown_scenario(exc) else 1)
    except BrokenPipeError:
        return output_closed()
    except OSError as exc:
        return fail(str(exc))
    except KeyboardInterrupt:
        return 130


def output_closed() -> int:
    """The reader of the output went (`fakehop schema | head -1`): the rest goes nowhere, so
    that the output left in the buffer is not flushed into the closed pipe on the way out."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return OUTPUT_CLOSED


def names_unknown_scenario(exc: Exception) -> bool:
    """Whether the server refused a scenario name it does not know (its error lists the `known` ones)."""
    return isinstance(exc, ControlFailed) and exc.answer is not None and "known" in exc.answer


if __name__ == "__main__":
    sys.exit(main())
