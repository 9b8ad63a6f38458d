"""The pytest plugin, loaded by the `pytest11` entry point when fakehop is installed.

`fakehop_server` is one fakehop server per test session (per worker under pytest-xdist),
started on a free port the first time a test asks for it, on its own event loop in a thread,
so sync tests, async tests and other processes can all reach it. `fakehop` is a
`fakehop.testing.Fakehop` handle on it, reset before each test and set up by the test's
`@pytest.mark.fakehop(scenario=..., time_scale=..., verdicts=...)`. With `fakehop_verdicts`
(or the marker's `verdicts`) at `error` or `warning`, a test whose clients broke HopBase's rules
fails at teardown. Heavy imports wait until a test asks for a fixture, so installing fakehop
costs other test runs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

MARKER = "fakehop"
MARKER_OPTIONS = ("scenario", "time_scale", "verdicts")
VERDICT_LEVELS = ("error", "warning", "off")  # fail a test at teardown on findings of this severity or worse; or never
SETTLE_SECONDS = 1.0  # before a verdict at teardown, how long to wait for requests still in progress to end


@dataclass(frozen=True)
class Settings:
    scenario_dirs: tuple[Path, ...]
    time_scale: float | None  # None: $FAKEHOP_TIME_SCALE, else 1
    verdicts: str  # one of VERDICT_LEVELS
    lenient_conversations: bool = False


SETTINGS = pytest.StashKey[Settings]()
HANDLE = pytest.StashKey[Any]()  # the test's Fakehop, for its failure report
CALL_FAILED = pytest.StashKey[bool]()  # the test itself failed: its report has the findings, teardown adds no failure


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fakehop", "fakehop fake LLM gateway")
    group.addoption("--fakehop-scenarios", action="append", default=[], metavar="DIR",
                    help="directory of scenario files for the fakehop fixture, added after fakehop_scenarios (repeatable)")
    group.addoption("--fakehop-time-scale", default=None, metavar="F",
                    help="multiply every fakehop scenario duration by F (default: fakehop_time_scale, $FAKEHOP_TIME_SCALE or 1)")
    parser.addini("fakehop_scenarios", type="linelist", default=[],
                  help="directories of scenario files for the fakehop fixture, relative to the rootdir")
    group.addoption("--fakehop-verdicts", default=None, choices=VERDICT_LEVELS,
                    help="fail a test at teardown when its clients broke HopBase's rules: on errors, on warnings too, or off (default: fakehop_verdicts, else off)")
    group.addoption("--fakehop-lenient-conversations", action="store_true", default=None,
                    help="let through requests that the real APIs' conversation checks refuse (default: fakehop_lenient_conversations)")
    parser.addini("fakehop_time_scale", default="", help="multiply every fakehop scenario duration by this")
    parser.addini("fakehop_verdicts", default="off", help="error | warning | off: fail a test at teardown on fakehop verdict findings of that level")
    parser.addini("fakehop_lenient_conversations", type="bool", default=False,
                  help="let through requests that the real APIs' conversation checks refuse (an unanswered tool call, ...)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(scenario=None, time_scale=None, verdicts=None): the fakehop fixture's default scenario for this test "
        "(a name or a mapping in the scenario format), its time scale, and whether findings of fakehop's verdict fail it "
        "(error, warning, off)",
    )
    config.stash[SETTINGS] = read_settings(config)


def read_settings(config: pytest.Config) -> Settings:
    directories = [config.rootpath / d for d in config.getini("fakehop_scenarios")]
    directories += [config.invocation_params.dir / d for d in config.getoption("fakehop_scenarios")]
    scale_text = config.getoption("fakehop_time_scale") or config.getini("fakehop_time_scale")
    try:
        time_scale = positive_float(scale_text) if scale_text else None
    except ValueError as exc:
        raise pytest.UsageError(f"fakehop time scale: {exc}") from None
    verdicts = config.getoption("fakehop_verdicts") or config.getini("fakehop_verdicts").strip()
    if verdicts not in VERDICT_LEVELS:
        raise pytest.UsageError(f"fakehop_verdicts: expected one of {', '.join(VERDICT_LEVELS)}, got {verdicts!r}")
    lenient = config.getoption("fakehop_lenient_conversations") or config.getini("fakehop_lenient_conversations")
    return Settings(tuple(directories), time_scale, verdicts, bool(lenient))


def positive_float(value: Any) -> float:
    from .player import parse_time_scale

    return parse_time_scale(value)


def session_time_scale(config: pytest.Config) -> float:
    from .player import time_scale_from_env

    try:
        return config.stash[SETTINGS].time_scale or time_scale_from_env()
    except ValueError as exc:
        raise pytest.UsageError(f"fakehop time scale: {exc}") from None


@pytest.fixture(scope="session")
def fakehop_server(pytestconfig: pytest.Config):
    """The session's fakehop server: a `fakehop.thread_server.ThreadServer` with `.url`."""
    from .library import Library
    from .scenario import ScenarioError
    from .server import Gateway
    from .thread_server import ThreadServer

    try:
        library = Library.load(pytestconfig.stash[SETTINGS].scenario_dirs)
    except ScenarioError as exc:
        pytest.fail(f"fakehop could not load its scenarios:\n{exc}", pytrace=False)
    settings = pytestconfig.stash[SETTINGS]
    server = ThreadServer(Gateway(library, time_scale=session_time_scale(pytestconfig), lenient_conversations=settings.lenient_conversations))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def fakehop(fakehop_server, request: pytest.FixtureRequest):
    """The session's fakehop server, reset for this test: a `fakehop.testing.Fakehop`."""
    from .library import UnknownScenario
    from .scenario import ScenarioError
    from .testing import Fakehop

    handle = Fakehop(fakehop_server)
    options = marker_options(request.node)
    handle.reset(time_scale=options.get("time_scale", session_time_scale(request.config)))
    if "scenario" in options:
        try:
            handle.use(options["scenario"])
        except (UnknownScenario, ScenarioError, TypeError) as exc:
            pytest.fail(f"@pytest.mark.{MARKER}(scenario=...): {exc}", pytrace=False)
    request.node.stash[HANDLE] = handle
    yield handle
    level = options.get("verdicts", request.config.stash[SETTINGS].verdicts)
    if level != "off" and not request.node.stash.get(CALL_FAILED, False):
        fail_on_findings(handle, level)


def fail_on_findings(handle, level: str) -> None:
    """Fail the test (at teardown) on the findings of `level` or worse, once its requests have ended."""
    from .testing import findings_report

    try:
        handle.wait_for_requests(count=0, timeout=SETTLE_SECONDS)
    except TimeoutError:
        pass  # still open: judged as they are (no_read_timeout and abandoned_stream look at those)
    findings = [finding for finding in handle.verdict() if level == "warning" or finding.severity == "error"]
    if findings:
        pytest.fail(findings_report(findings), pytrace=False)


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
    return report


def marker_options(node: pytest.Item) -> dict[str, Any]:
    """The test's fakehop marker options; a marker closer to the test wins, option by option."""
    options: dict[str, Any] = {}
    for mark in reversed(list(node.iter_markers(MARKER))):
        if mark.args:
            pytest.fail(f"@pytest.mark.{MARKER} takes keywords only ({', '.join(MARKER_OPTIONS)}), got {mark.args!r}", pytrace=False)
        unknown = sorted(set(mark.kwargs) - set(MARKER_OPTIONS))
        if unknown:
            pytest.fail(f"@pytest.mark.{MARKER}: unknown option {', '.join(unknown)}; it takes {', '.join(MARKER_OPTIONS)}", pytrace=False)
        options.update(mark.kwargs)
    if "time_scale" in options:
        try:
            options["time_scale"] = positive_float(options["time_scale"])
        except ValueError as exc:
            pytest.fail(f"@pytest.mark.{MARKER}(time_scale=...): {exc}", pytrace=False)
    if options.get("verdicts", "off") not in VERDICT_LEVELS:
        pytest.fail(f"@pytest.mark.{MARKER}(verdicts=...): expected one of {', '.join(VERDICT_LEVELS)}, got {options['verdicts']!r}", pytrace=False)
    return options
