"""The pytest plugin, loaded by the `pytest11` entry point when fakehop is installed.

`fakehop_server` is one fakehop server per test session (per worker under pytest-xdist),
started on a free port the first time a test asks for it, on its own event loop in a thread,
so sync tests, async tests and other processes can all reach it. `fakehop` is a
`fakehop.testing.Fakehop` handle on it, reset before each test and set up by the test's
`@pytest.mark.fakehop(scenario=..., time_scale=...)`. Heavy imports wait until a test asks
for a fixture, so installing fakehop costs other test runs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

MARKER = "fakehop"
MARKER_OPTIONS = ("scenario", "time_scale")


@dataclass(frozen=True)
class Settings:
    scenario_dirs: tuple[Path, ...]
    time_scale: float | None  # None: $FAKEHOP_TIME_SCALE, else 1


SETTINGS = pytest.StashKey[Settings]()
HANDLE = pytest.StashKey[Any]()  # the test's Fakehop, for its failure report


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fakehop", "fakehop fake LLM gateway")
    group.addoption("--fakehop-scenarios", action="append", default=[], metavar="DIR",
                    help="directory of scenario files for the fakehop fixture, added after fakehop_scenarios (repeatable)")
    group.addoption("--fakehop-time-scale", default=None, metavar="F",
                    help="multiply every fakehop scenario duration by F (default: fakehop_time_scale, $FAKEHOP_TIME_SCALE or 1)")
    parser.addini("fakehop_scenarios", type="linelist", default=[],
                  help="directories of scenario files for the fakehop fixture, relative to the rootdir")
    parser.addini("fakehop_time_scale", default="", help="multiply every fakehop scenario duration by this")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(scenario=None, time_scale=None): the fakehop fixture's default scenario for this test "
        "(a name or a mapping in the scenario format) and its time scale",
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
    return Settings(tuple(directories), time_scale)


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
    server = ThreadServer(Gateway(library, time_scale=session_time_scale(pytestconfig)))
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
    return handle


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failed test that used `fakehop` reports what the server saw, one line a request."""
    report = yield
    handle = item.stash.get(HANDLE, None)
    if handle is not None and report.when == "call" and report.failed:
        seen = "\n".join(str(request) for request in handle.requests)
        report.sections.append(("fakehop requests", seen or "(none)"))
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
    return options
