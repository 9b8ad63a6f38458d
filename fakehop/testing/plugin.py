"""The pytest plugin, loaded by the `pytest11` entry point when fakehop is installed.

`fakehop_server` is one fakehop server per test session (per worker under pytest-xdist),
started on a free port the first time a test asks for it, on its own event loop in a thread,
so sync tests, async tests and other processes can all reach it; or, given a URL, a server
that runs elsewhere. `fakehop` is a `fakehop.testing.Fakehop` handle on a session of it that
is the test's own, set up by the test's `@pytest.mark.fakehop(scenario=..., time_scale=...,
strict=..., verdicts=...)` and dropped after it. With `fakehop_verdicts` (or the marker's
`verdicts`) at `error` or `warning`, a test whose clients broke HopBase's rules fails at
teardown; so does one that made a request no scenario was set up for, in strict mode.
`fakehop_env` (or `fakehop_env = true`, `--fakehop-env`, for every test that uses `fakehop`)
points the SDK clients an app under test builds itself at the test's session.
`@pytest.mark.fakehop_sweep` runs a test once per fault (see fakehop.testing.sweep), and
`--fakehop-report PATH` reports each test's faults, requests and findings (fakehop.testing.report). Heavy
imports wait until a test asks for a fixture, so installing fakehop costs other test runs
nothing.
"""

from __future__ import annotations

import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest

MARKER = "fakehop"
MARKER_OPTIONS = ("scenario", "time_scale", "strict", "verdicts")
SWEEP_MARKER = "fakehop_sweep"
SWEEP_FIXTURE = "fakehop_sweep_fault"
VERDICT_LEVELS = ("error", "warning", "off")  # fail a test at teardown on findings of this severity or worse; or never
SETTLE_SECONDS = 1.0  # before a verdict at teardown, how long to wait for requests still in progress to end
MAX_SESSION_NAME = 128  # as session names are checked


@dataclass(frozen=True)
class PluginSettings:
    scenario_dirs: tuple[Path, ...]
    time_scale: float | None  # None: in process 1, with a URL the server's own
    verdicts: str  # one of VERDICT_LEVELS
    url: str | None  # a running server to use instead of starting one
    strict: bool | None  # None: in process not strict, with a URL as the server was started
    lenient_conversations: bool = False  # the fixture's own server only: a running server has its own setting
    app_env: bool = False  # every test that uses `fakehop` gets `fakehop_env` too
    report: Path | None = None  # where the run's report goes (--fakehop-report), from where pytest started
    timing: Any = None  # the fixture's own server only: a scenario.Timing for every scenario without its own


SETTINGS = pytest.StashKey[PluginSettings]()
HANDLE = pytest.StashKey[Any]()  # the test's Fakehop, for its failure report
CALL_FAILED = pytest.StashKey[bool]()  # the test itself failed: its report has the findings, teardown adds no failure
GATHERED = pytest.StashKey[dict]()  # the test's record for the run's report, taken before its session is dropped


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fakehop", "fakehop fake LLM gateway")
    group.addoption(
        "--fakehop-scenarios",
        action="append",
        default=[],
        metavar="DIR",
        help="directory of scenario files for the fakehop fixture, added after fakehop_scenarios (repeatable)",
    )
    group.addoption(
        "--fakehop-time-scale",
        default=None,
        metavar="F",
        help="multiply every fakehop scenario duration by F (default: fakehop_time_scale, $FAKEHOP_TIME_SCALE or 1)",
    )
    group.addoption(
        "--fakehop-url",
        default=None,
        metavar="URL",
        help="use the fakehop server running at URL instead of starting one (default: fakehop_url, $FAKEHOP_URL)",
    )
    parser.addini(
        "fakehop_scenarios",
        type="linelist",
        default=[],
        help="directories of scenario files for the fakehop fixture, relative to the rootdir",
    )
    group.addoption(
        "--fakehop-verdicts",
        default=None,
        choices=VERDICT_LEVELS,
        help="fail a test at teardown when its clients broke HopBase's rules: on errors, on warnings too, or off (default: fakehop_verdicts, else off)",
    )
    group.addoption(
        "--fakehop-lenient-conversations",
        action="store_true",
        default=None,
        help="let through requests that the real APIs' conversation checks refuse (default: fakehop_lenient_conversations)",
    )
    group.addoption(
        "--fakehop-env",
        action="store_true",
        default=None,
        help="point the SDK clients an app builds itself at each test's fakehop session (default: fakehop_env)",
    )
    group.addoption(
        "--fakehop-report",
        default=None,
        metavar="PATH",
        help="write a report of the tests that used fakehop (outcome, faults, requests, findings) to PATH, "
        "ending in .json or .html; the terminal summary gets a short table of it",
    )
    parser.addini("fakehop_time_scale", default="", help="multiply every fakehop scenario duration by this")
    parser.addini(
        "fakehop_verdicts",
        default="off",
        help="error | warning | off: fail a test at teardown on fakehop verdict findings of that level",
    )
    parser.addini("fakehop_url", default="", help="the fakehop server to use instead of starting one")
    parser.addini(
        "fakehop_strict", default="", help="true: a request no scenario was set up for is a 400 and fails its test"
    )
    parser.addini(
        "fakehop_lenient_conversations",
        type="bool",
        default=False,
        help="let through requests that the real APIs' conversation checks refuse (an unanswered tool call, ...)",
    )
    parser.addini(
        "fakehop_timing",
        default="",
        help="how long the model takes, for every scenario without its own timing: a bundled profile "
        "(fakehop serve --timing's) or a file holding a timing: block, relative to the rootdir",
    )
    parser.addini(
        "fakehop_env",
        type="bool",
        default=False,
        help="true: every test that uses fakehop gets fakehop_env, the SDKs' variables pointed at its session",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(scenario=None, time_scale=None, strict=None, verdicts=None): the fakehop fixture's default scenario for "
        "this test (a name or a mapping in the scenario format), its time scale, whether it is strict, and whether findings "
        "of fakehop's verdict fail it (error, warning, off)",
    )
    config.addinivalue_line(
        "markers",
        f"{SWEEP_MARKER}(faults=None, protocol=None): run the test once per fault, laid over every answer of its "
        "fakehop session for the whole test (ids fault-KIND); every kind with its defaults unless faults= lists "
        "kind names or mappings; protocol= limits the faults to chat, responses or messages",
    )
    config.stash[SETTINGS] = settings = read_settings(config)
    if settings.report is not None and not hasattr(config, "workerinput"):  # an xdist worker sends its records on
        config.pluginmanager.register(
            ReportWriter(settings.report, config.getoption("fakehop_report")), "fakehop-report"
        )


def read_settings(config: pytest.Config) -> PluginSettings:
    directories = [config.rootpath / d for d in config.getini("fakehop_scenarios")]
    directories += [config.invocation_params.dir / d for d in config.getoption("fakehop_scenarios")]
    from ..play.player import parse_time_scale, time_scale_from_env

    scale_text = config.getoption("fakehop_time_scale") or config.getini("fakehop_time_scale")
    try:
        if scale_text:
            time_scale = parse_time_scale(scale_text)
        else:  # None when the environment sets none either: the fixture's own default
            time_scale = time_scale_from_env(None)  # type: ignore[arg-type]  # None stands for unset
    except ValueError as exc:
        raise pytest.UsageError(f"fakehop time scale: {exc}") from None
    verdicts = config.getoption("fakehop_verdicts") or config.getini("fakehop_verdicts").strip()
    if verdicts not in VERDICT_LEVELS:
        raise pytest.UsageError(f"fakehop_verdicts: expected one of {', '.join(VERDICT_LEVELS)}, got {verdicts!r}")
    url = config.getoption("fakehop_url") or config.getini("fakehop_url") or os.environ.get("FAKEHOP_URL") or None
    if url is not None and not url.startswith(("http://", "https://")):
        raise pytest.UsageError(f"fakehop URL: expected one such as http://127.0.0.1:8080, got {url!r}")
    strict_text = config.getini("fakehop_strict").strip().lower()
    if strict_text not in STRICT_WORDS:
        raise pytest.UsageError(f"fakehop_strict: expected true or false, got {strict_text!r}")
    lenient = config.getoption("fakehop_lenient_conversations") or ini_flag(config, "fakehop_lenient_conversations")
    app_env = config.getoption("fakehop_env") or ini_flag(config, "fakehop_env")
    return PluginSettings(
        tuple(directories),
        time_scale,
        verdicts,
        url,
        STRICT_WORDS[strict_text],
        bool(lenient),
        bool(app_env),
        report_path(config),
        ini_timing(config),
    )


def report_path(config: pytest.Config) -> Path | None:
    text = config.getoption("fakehop_report")
    if text is None:
        return None
    from .report import ReportProblem, checked_path

    try:
        return config.invocation_params.dir / checked_path(text)
    except ReportProblem as exc:
        raise pytest.UsageError(str(exc)) from None


def ini_timing(config: pytest.Config) -> Any:
    """fakehop_timing's profile, or its file's timing: block; None when it is not set."""
    given = config.getini("fakehop_timing").strip()
    if not given:
        return None
    from ..scenario.timings import PROFILES, TimingNotFound, timing_for

    path = config.rootpath / given  # a file's path is relative to the rootdir, as fakehop_scenarios' are
    try:
        return timing_for(str(path) if given not in PROFILES and path.is_file() else given)
    except TimingNotFound as exc:
        raise pytest.UsageError(f"fakehop_timing: {exc}") from None


def ini_flag(config: pytest.Config, name: str) -> bool:
    try:
        return config.getini(name)
    except ValueError as exc:  # pytest's own message names the value but not the option
        raise pytest.UsageError(f"{name}: {exc}, expected true or false") from None


STRICT_WORDS = {
    "": None,
    "true": True,
    "yes": True,
    "on": True,
    "1": True,
    "false": False,
    "no": False,
    "off": False,
    "0": False,
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test marked `fakehop_sweep` runs once per fault of the marker (see fakehop.testing.sweep)."""
    mark = metafunc.definition.get_closest_marker(SWEEP_MARKER)
    if mark is None:
        return
    from .sweep import SweepProblem, swept_faults

    where = f"{metafunc.definition.nodeid}: @pytest.mark.{SWEEP_MARKER}"
    try:
        runs = swept_faults(mark.args, mark.kwargs)
    except SweepProblem as exc:
        fail(f"{where}{'' if exc.option is None else f'({exc.option}=...)'}: {exc}")
    if SWEEP_FIXTURE not in metafunc.fixturenames:
        fail(f"{where}: the test uses no fakehop fixture (fakehop or fakehop_env), so no fault would reach it")
    runs_as_params = [{"id": run.id, "fault": run.spec} for run in runs]
    metafunc.parametrize(SWEEP_FIXTURE, runs_as_params, ids=[run.id for run in runs], indirect=True)


@pytest.fixture
def fakehop_sweep_fault(request: pytest.FixtureRequest) -> dict[str, Any] | None:
    """The fault a test marked `fakehop_sweep` runs under, as `fakehop.fault` takes it; None for any other test."""
    return request.param["fault"] if hasattr(request, "param") else None


def sweep_id(item: pytest.Item) -> str | None:
    """The id of the sweep's run `item` is (`fault-truncate`), None when it is none."""
    callspec = getattr(item, "callspec", None)
    run = callspec.params.get(SWEEP_FIXTURE) if callspec is not None else None
    return None if run is None else run["id"]


@pytest.fixture(scope="session")
def fakehop_server(pytestconfig: pytest.Config):
    """The session's fakehop server: a `fakehop.thread_server.ThreadServer`, or with a URL a
    `fakehop.testing.RemoteServer`; either has `.url`."""
    from ..scenario.library import Library
    from ..scenario.reader import ScenarioError

    settings = pytestconfig.stash[SETTINGS]
    try:
        library = Library.load(settings.scenario_dirs)
    except ScenarioError as exc:
        fail(f"fakehop could not load its scenarios:\n{exc}")
    if settings.url is not None:
        yield running_server(settings.url, library)
        return
    from ..server.gateway import Gateway
    from .thread_server import ThreadServer

    server = ThreadServer(
        Gateway(
            library,
            time_scale=settings.time_scale or 1.0,
            strict=bool(settings.strict),
            lenient_conversations=settings.lenient_conversations,
            timing=settings.timing,
        )
    )
    try:
        server.start()
    except OSError as exc:
        fail(f"fakehop: its server could not start: {exc}")
    yield server
    server.stop()


def running_server(url: str, library) -> Any:
    """The server at `url`, once it has answered and is known to have the scenarios of the
    fixture's directories (the fixture cannot add them to a server it did not start)."""
    from .fixture import RemoteServer
    from .remote import ControlClient, ControlFailed, default_admin_token

    server = RemoteServer(url.rstrip("/"), default_admin_token())
    try:
        names = {
            s["name"] for s in ControlClient(server.url, server.admin_token).call("GET", "/scenarios")["scenarios"]
        }
    except ControlFailed as exc:
        fail(f"fakehop: the server given by --fakehop-url, fakehop_url or $FAKEHOP_URL: {exc}")
    missing = sorted(set(library.names()) - names)
    if missing:
        fail(
            f"fakehop: the server at {url} does not have the scenarios {', '.join(missing)}; "
            "start it with the same --scenarios directories as fakehop_scenarios"
        )
    return server


def fail(message: str) -> NoReturn:
    """Fail the test with `message` alone: no traceback, and, raised while another error is
    handled, not that error again above it ("During handling of the above exception ...")."""
    raise pytest.fail.Exception(message, pytrace=False) from None


def session_name(node: pytest.Item) -> str:
    """A session that is the test's own: its worker, a random part (two runs at once never
    share one) and its node id, spelt as session names must be."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    prefix = f"{worker}-{secrets.token_hex(4)}-"
    test = re.sub(r"[^A-Za-z0-9._-]+", "-", node.nodeid).strip("-")
    return prefix + test[-(MAX_SESSION_NAME - len(prefix)) :]


@pytest.fixture
def fakehop(fakehop_server, fakehop_sweep_fault, request: pytest.FixtureRequest):
    """A session of the fakehop server that is this test's own: a `fakehop.testing.Fakehop`.
    After the test, a request no scenario was set up for (strict mode) fails it, and so do the
    verdict's findings at the level `fakehop_verdicts` or the marker asks for."""
    from ..scenario.library import UnknownScenario
    from ..scenario.reader import ScenarioError
    from .fixture import Fakehop

    # The server the fixture started is this worker's alone, its tests one at a time: there the
    # test's session also takes the requests that name none, from an app configured with any key.
    handle = Fakehop(fakehop_server, session_name(request.node), unnamed=request.config.stash[SETTINGS].url is None)
    options = marker_options(request.node)
    settings = request.config.stash[SETTINGS]
    handle.reset(
        time_scale=options.get("time_scale", settings.time_scale), strict=options.get("strict", settings.strict)
    )
    if "scenario" in options:
        try:
            handle.use(options["scenario"])
        except (UnknownScenario, ScenarioError, TypeError) as exc:
            handle.close()
            fail(f"@pytest.mark.{MARKER}(scenario=...): {exc}")
    if fakehop_sweep_fault is not None:
        try:
            handle.fault(**fakehop_sweep_fault)
        except ValueError as exc:  # a remote server of an older version may refuse a kind or parameter
            handle.close()
            fail(f"@pytest.mark.{SWEEP_MARKER}: {exc}")
    request.node.stash[HANDLE] = handle
    if settings.app_env:
        set_app_env(handle, request.getfixturevalue("monkeypatch"))
    yield handle
    level = options.get("verdicts", settings.verdicts)
    try:
        if settings.report is not None:
            request.node.stash[GATHERED] = gather(handle, request.node)
        if not request.node.stash.get(CALL_FAILED, False):  # a failed test's report has its requests and findings
            fail_on_unmatched(handle)
            if level != "off":
                fail_on_findings(handle, level)
    finally:
        handle.close()


@pytest.fixture
def fakehop_env(fakehop, monkeypatch: pytest.MonkeyPatch):
    """`fakehop`, with the variables the official SDKs read set for the test's length, so that
    the clients an app builds itself (`openai.OpenAI()`, `anthropic.Anthropic()`) talk to the
    test's session; pytest's `monkeypatch` puts back what was there after it."""
    set_app_env(fakehop, monkeypatch)
    return fakehop


def set_app_env(handle, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in handle.client_env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)  # a bearer token the SDK would send beside the key


def fail_on_unmatched(handle) -> None:
    """Fail the test (at teardown) when it made a request no scenario was set up for (strict mode)."""
    unmatched = [str(recorded) for recorded in handle.requests if recorded.end == "unmatched"]
    if unmatched:
        fail("fakehop: no scenario was set up for these requests (strict mode):\n" + "\n".join(unmatched))


def settle(handle) -> None:
    """Wait a moment for the test's requests still in progress to end."""
    try:
        handle.wait_for_requests(count=0, timeout=SETTLE_SECONDS)
    except TimeoutError:
        pass  # still open: judged as they are (no_read_timeout and abandoned_stream look at those)


def gather(handle, item: pytest.Item) -> dict[str, Any]:
    """The test's record for the run's report, once its requests have ended."""
    from .report import gathered

    settle(handle)
    return gathered(handle.streams(), handle.verdict(), sweep_id(item))


def fail_on_findings(handle, level: str) -> None:
    """Fail the test (at teardown) on the findings of `level` or worse, once its requests have ended."""
    from .fixture import findings_report

    settle(handle)
    findings = [finding for finding in handle.verdict() if level == "warning" or finding.severity == "error"]
    if findings:
        fail(findings_report(findings))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failed test that used `fakehop` reports what the server saw, one line a request."""
    report = yield
    handle = item.stash.get(HANDLE, None)
    if handle is not None and report.when == "call" and report.failed:
        item.stash[CALL_FAILED] = True
        seen = [str(request) for request in handle.requests]
        findings = handle.verdict()
        if findings:
            seen += ["verdict:"] + [f"  {finding}" for finding in findings]
        report.sections.append(("fakehop requests", "\n".join(seen) or "(none)"))
    if report.when == "teardown" and item.config.stash[SETTINGS].report is not None:
        attach_record(item, report)
    return report


def attach_record(item: pytest.Item, report: pytest.TestReport) -> None:
    """The test's record rides on its teardown report, which xdist carries from a worker to the
    controller (a report's extra attributes travel with it); a test that asked for fakehop and
    was skipped before getting it has one too."""
    record = item.stash.get(GATHERED, None)
    if record is None and "fakehop" in getattr(item, "fixturenames", ()):
        from .report import unrun

        record = unrun(sweep_id(item))
    if record is not None:
        report.fakehop_report = record  # type: ignore[attr-defined]  # an extra attribute, serialized with it


def marker_options(node: pytest.Item) -> dict[str, Any]:
    """The test's fakehop marker options; a marker closer to the test wins, option by option."""
    options: dict[str, Any] = {}
    for mark in reversed(list(node.iter_markers(MARKER))):
        if mark.args:
            fail(f"@pytest.mark.{MARKER} takes keywords only ({', '.join(MARKER_OPTIONS)}), got {mark.args!r}")
        unknown = sorted(set(mark.kwargs) - set(MARKER_OPTIONS))
        if unknown:
            fail(f"@pytest.mark.{MARKER}: unknown option {', '.join(unknown)}; it takes {', '.join(MARKER_OPTIONS)}")
        options.update(mark.kwargs)
    if "time_scale" in options:
        from ..play.player import parse_time_scale

        try:
            options["time_scale"] = parse_time_scale(options["time_scale"])
        except ValueError as exc:
            fail(f"@pytest.mark.{MARKER}(time_scale=...): {exc}")
    if not isinstance(options.get("strict", False), bool):
        fail(f"@pytest.mark.{MARKER}(strict=...): expected True or False, got {options['strict']!r}")
    if options.get("verdicts", "off") not in VERDICT_LEVELS:
        fail(
            f"@pytest.mark.{MARKER}(verdicts=...): expected one of {', '.join(VERDICT_LEVELS)}, got {options['verdicts']!r}"
        )
    return options


class ReportWriter:
    """Where the run is reported (the controller under xdist): each test's record, from its
    teardown report, with its outcome; written at the end of the run and summed up last in the
    terminal summary."""

    def __init__(self, path: Path, given: str):
        self.path = path
        self.given = given  # the path as the command line gave it, to show
        self.phases: dict[str, list[str]] = {}
        self.records: dict[str, dict[str, Any]] = {}
        self.problem: str | None = None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.phases.setdefault(report.nodeid, []).append(report.outcome)
        record = getattr(report, "fakehop_report", None)
        if record is not None:
            self.records[report.nodeid] = record

    def tests(self) -> list[dict[str, Any]]:
        from .report import outcome_of

        return [
            {"nodeid": nodeid, "outcome": outcome_of(self.phases[nodeid]), **record}
            for nodeid, record in self.records.items()
        ]

    def pytest_sessionfinish(self) -> None:
        from .report import write

        try:
            write(self.path, self.tests())
        except OSError as exc:
            self.problem = f"could not write {self.path}: {exc.strerror or exc}"

    @pytest.hookimpl(wrapper=True, tryfirst=True)  # the outermost: its part after `yield` comes last
    def pytest_terminal_summary(self, terminalreporter):
        from .report import summary

        result = yield
        terminalreporter.write_sep("=", "fakehop report")
        for line in summary(self.tests()):
            terminalreporter.write_line(line)
        terminalreporter.write_line(f"fakehop report: {self.problem or f'written to {self.given}'}")
        return result
