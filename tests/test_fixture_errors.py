"""A mistake met by the pytest fixture is said once, as the message alone: no copy of the error it
came from ("During handling of the above exception ..."), and no frames of fakehop's own, least
of all those of the server's thread. Run under pytester as users run it; `-rN` leaves out the
short summary, which repeats the first line of every failure by design."""

from __future__ import annotations

import socket

import pytest

from .test_pytest_plugin import INI

pytest_plugins = ["pytester"]

FRAMES_OF_FAKEHOP = (
    "thread_server.py",
    "concurrent/futures",
    "fakehop/testing/fixture.py",
    "fakehop/state/sessions.py",
    "fakehop/scenario/reader.py",
)


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini(INI)
    return pytester


def assert_said_once(output: str, *messages: str) -> None:
    for message in messages:
        assert output.count(message) == 1, f"{message!r} is said {output.count(message)} times in:\n{output}"
    assert "During handling of the above exception" not in output
    assert not [frame for frame in FRAMES_OF_FAKEHOP if frame in output], output


MISTAKES_IN_TESTS = """
import pytest


def test_use_names_a_scenario_near_one(fakehop):
    fakehop.use("helo")


def test_queue_is_given_a_scenario_with_a_mistake(fakehop):
    fakehop.queue("hello", {"steps": [{"txt": "hi"}]})


@pytest.mark.fakehop(scenario="stal")
class TestTheMarker:
    def test_names_a_scenario_near_one(self, fakehop):
        pass
"""


def test_a_mistake_in_the_marker_use_or_queue_is_said_once_at_the_tests_own_line(project):
    project.makepyfile(test_mistakes=MISTAKES_IN_TESTS)
    result = project.runpytest("-rN")
    result.assert_outcomes(failed=2, errors=1)
    output = result.stdout.str()
    assert_said_once(
        output,
        "@pytest.mark.fakehop(scenario=...): Unknown scenario 'stal'; did you mean 'stall'? Known scenarios: ",
        "UnknownScenario: Unknown scenario 'helo'; did you mean 'hello'? Known scenarios: ",
        "ScenarioError: inline scenario 'inline-1': unknown key 'txt' in a step; did you mean 'text'?",
    )
    result.stdout.fnmatch_lines(
        [
            '>       fakehop.use("helo")',
            "E       fakehop.scenario.library.UnknownScenario: *",
            "test_mistakes.py:5: UnknownScenario",
        ]
    )


def test_a_broken_scenario_file_is_said_once_with_its_line_column_and_tab(project):
    project.makeini(INI + "fakehop_scenarios = scenarios\n")
    project.mkdir("scenarios").joinpath("tabbed.yaml").write_text("steps:\n\t- text: hi\n")
    project.makepyfile(test_broken="def test_uses_fakehop(fakehop):\n    pass\n")
    result = project.runpytest("-rN")
    result.assert_outcomes(errors=1)
    assert_said_once(
        result.stdout.str(),
        "fakehop could not load its scenarios:",
        "tabbed.yaml:2: not valid YAML at column 1: a tab, which YAML does not take for indentation: indent with spaces",
    )


def test_a_running_server_that_does_not_answer_is_said_once(project):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    project.makepyfile(test_remote="def test_uses_fakehop(fakehop):\n    pass\n")
    result = project.runpytest("-rN", "--fakehop-url", f"http://127.0.0.1:{closed}")
    result.assert_outcomes(errors=1)
    assert_said_once(result.stdout.str(), "fakehop: the server given by --fakehop-url, fakehop_url or $FAKEHOP_URL: ")


def test_a_bad_ini_option_is_said_once(project):
    project.makeini(INI + "fakehop_verdicts = loud\n")
    project.makepyfile(test_option="def test_uses_fakehop(fakehop):\n    pass\n")
    result = project.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert_said_once(
        result.stderr.str() + result.stdout.str(), "fakehop_verdicts: expected one of error, warning, off, got 'loud'"
    )


NO_DESCRIPTORS_TO_SPARE = '''
import os
import resource

import pytest


@pytest.fixture(scope="session", autouse=True)
def three_descriptors_to_spare():
    """Before the fakehop fixture, the process may open three more files: enough to read the
    scenario files, one by one, and for the server's event loop (its selector and the two ends
    of its wake-up pipe), and none left for the socket it would listen on."""
    import fakehop.server.console, fakehop.server.control, fakehop.server.metrics, fakehop.testing.fixture  # noqa: F401 - while files may be opened
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    in_use = len(os.listdir("/proc/self/fd")) - 1  # less the one that listed them
    resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + 3, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_uses_fakehop(fakehop):
    pass
'''


def test_a_server_that_cannot_start_is_said_once(project):
    """In a process of its own: the file limit it lowers is the whole process's."""
    project.makepyfile(test_no_files=NO_DESCRIPTORS_TO_SPARE)
    result = project.runpytest_subprocess("-rN")
    result.assert_outcomes(errors=1)
    assert_said_once(
        result.stdout.str(),
        "fakehop: its server could not start: no socket could be opened to listen on 127.0.0.1 port 0",
    )
