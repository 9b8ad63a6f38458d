"""The Dockerfile, .dockerignore and the CI examples under docs/ci: linted where a linter can be
had here (hadolint, shellcheck, both from the test extra), and checked for what each is for.
No Docker engine runs here, so the image's build step, command and health check are run as the
container would run them: on this machine, on a free port."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import pytest
import yaml

from fakehop.cli.main import build_parser

ROOT = Path(__file__).resolve().parent.parent
CI = ROOT / "docs" / "ci"
BIN = Path(sys.executable).parent  # hadolint and shellcheck come with the test extra, beside this Python
WAIT = 60.0  # seconds: generous, for a loaded machine
IMAGE_PORT = "8080"  # the port the image serves on and its health check asks


def instructions() -> list[tuple[str, str]]:
    """The Dockerfile's instructions as (INSTRUCTION, arguments), continuation lines joined and
    comments left out."""
    found, pending = [], ""
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        text = line.strip()
        if not pending and (not text or text.startswith("#")):
            continue
        if text.endswith("\\"):
            pending += text[:-1]
            continue
        keyword, _, arguments = (pending + text).partition(" ")
        found.append((keyword.upper(), arguments.strip()))
        pending = ""
    return found


def final_stage() -> list[tuple[str, str]]:
    every = instructions()
    last_from = max(index for index, (keyword, _) in enumerate(every) if keyword == "FROM")
    return every[last_from:]


def argument(keyword: str) -> str:
    [value] = [arguments for name, arguments in final_stage() if name == keyword]
    return value


def exec_form(keyword: str) -> list[str]:
    """ENTRYPOINT, CMD or HEALTHCHECK's command in the exec (JSON) form, which a signal reaches."""
    value = argument(keyword)
    return json.loads(value[value.index("CMD ") + 4 :] if keyword == "HEALTHCHECK" else value)


def serve_options(argv: list[str]):
    """`fakehop serve` options as the fakehop command reads them (a wrong one exits 2 here)."""
    return build_parser().parse_args(argv)


def test_hadolint_finds_nothing_in_the_dockerfile():
    linted = subprocess.run([BIN / "hadolint", ROOT / "Dockerfile"], capture_output=True, text=True, timeout=WAIT)
    assert (linted.returncode, linted.stdout, linted.stderr) == (0, "", "")


def test_shellcheck_finds_nothing_in_the_recipe():
    checked = subprocess.run(
        [BIN / "shellcheck", CI / "run-with-fakehop.sh"], capture_output=True, text=True, timeout=WAIT
    )
    assert (checked.returncode, checked.stdout) == (0, ""), checked.stderr


def test_the_image_is_a_slim_python_run_by_a_user_that_is_not_root_serving_on_all_interfaces():
    bases = [arguments.split()[0] for keyword, arguments in instructions() if keyword == "FROM"]
    assert bases and all(base.startswith("python:3.") and base.endswith("-slim") for base in bases), bases
    user = argument("USER")
    assert user.isdigit() and int(user) != 0
    assert f"--uid {user}" in argument("RUN")
    assert argument("EXPOSE") == IMAGE_PORT
    assert exec_form("ENTRYPOINT") == ["fakehop"]
    options = serve_options(exec_form("CMD"))
    assert (options.command, options.host, options.port, options.allow_host) == (
        "serve",
        "0.0.0.0",
        int(IMAGE_PORT),
        ["fakehop"],
    )
    assert f"http://127.0.0.1:{IMAGE_PORT}/_fakehop/health" in " ".join(exec_form("HEALTHCHECK"))
    assert [keyword for keyword, _ in final_stage()][-3:] == ["HEALTHCHECK", "ENTRYPOINT", "CMD"]


def copied_sources() -> list[str]:
    """What the build stage copies from the build context (COPY without --from)."""
    sources = []
    for keyword, arguments in instructions():
        if keyword == "COPY" and not arguments.startswith("--from"):
            sources += arguments.split()[:-1]
    return sources


def test_dockerignore_lets_through_exactly_what_the_dockerfile_copies():
    patterns = [line for line in (ROOT / ".dockerignore").read_text().splitlines() if line and not line.startswith("#")]
    assert patterns[0] == "*"
    assert sorted(pattern[1:].rstrip("/") for pattern in patterns if pattern.startswith("!")) == sorted(
        copied_sources()
    )


def test_the_files_the_image_gets_build_the_wheel_with_the_bundled_scenarios_and_the_license(tmp_path: Path):
    context = tmp_path / "src"
    context.mkdir()
    for source in copied_sources():
        copy = shutil.copytree if (ROOT / source).is_dir() else shutil.copy
        copy(ROOT / source, context / source)
    [build] = [arguments for keyword, arguments in instructions() if keyword == "RUN" and "pip wheel" in arguments]
    assert shlex.split(build) == ["pip", "wheel", "--no-cache-dir", "--no-deps", "--wheel-dir", "/dist", "."]
    # The same step, with no download (hatchling from the test extra) and another output directory.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-cache-dir",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            tmp_path / "dist",
            ".",
        ],
        cwd=context,
        check=True,
        timeout=WAIT,
    )
    [wheel] = (tmp_path / "dist").iterdir()
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert len([name for name in names if name.startswith("fakehop/scenarios/")]) == len(
        list((ROOT / "scenarios").glob("*.yaml"))
    )
    assert any(
        name.endswith(".dist-info/licenses/LICENSE") for name in names
    )  # hatchling leaves out a missing one silently


def health_check(port: int, token: str | None) -> int:
    """The image's HEALTHCHECK command, asking the given port, with FAKEHOP_ADMIN_TOKEN as given."""
    command = [
        sys.executable if part == "python" else part.replace(f":{IMAGE_PORT}/", f":{port}/")
        for part in exec_form("HEALTHCHECK")
    ]
    environment = {k: v for k, v in os.environ.items() if k != "FAKEHOP_ADMIN_TOKEN"} | (
        {"FAKEHOP_ADMIN_TOKEN": token} if token else {}
    )
    return subprocess.run(command, capture_output=True, env=environment, timeout=WAIT).returncode


def status_for_host(url: str, host: str) -> int:
    request = urllib.request.Request(url + "/v1/models", headers={"Host": host})
    try:
        with urllib.request.urlopen(request, timeout=WAIT) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code


def test_the_image_command_serves_its_service_name_and_the_health_check_passes_only_while_it_does():
    """The image's command on loopback and a free port instead of 0.0.0.0:8080, under an admin token."""
    command = exec_form("ENTRYPOINT") + exec_form("CMD")
    command[command.index("--host") + 1], command[command.index("--port") + 1] = "127.0.0.1", "0"
    environment = {**os.environ, "FAKEHOP_ADMIN_TOKEN": "s3cret"}
    server = subprocess.Popen(
        [BIN / command[0], *command[1:]], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment
    )
    try:
        banner = server.stdout.readline()
        assert " listening on " in banner, banner + server.stderr.read()
        url = banner.split()[-1]
        port = int(url.rsplit(":", 1)[1])
        assert (health_check(port, "s3cret"), health_check(port, "wrong") != 0, health_check(port, None) != 0) == (
            0,
            True,
            True,
        )
        assert status_for_host(url, f"fakehop:{port}") == 200
        assert status_for_host(url, f"elsewhere:{port}") == 403
    finally:
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=WAIT)
    assert server.returncode == 0
    assert health_check(port, "s3cret") != 0


def test_the_compose_example_puts_the_app_beside_a_healthy_fakehop_it_reaches_by_name():
    compose = yaml.safe_load((CI / "compose.yaml").read_text())
    fakehop, app = compose["services"]["fakehop"], compose["services"]["app"]
    assert (CI / fakehop["build"]["context"]).resolve() == ROOT
    options = serve_options(fakehop["command"])
    assert (options.command, options.host, "fakehop" in options.allow_host) == ("serve", "0.0.0.0", True)
    assert app["depends_on"] == {"fakehop": {"condition": "service_healthy"}}
    environment = app["environment"]
    assert environment["FAKEHOP_URL"] == f"http://fakehop:{options.port}"
    assert environment["OPENAI_BASE_URL"] == f"http://fakehop:{options.port}/v1"
    assert (
        environment["FAKEHOP_ADMIN_TOKEN"]
        == fakehop["environment"]["FAKEHOP_ADMIN_TOKEN"]
        == "${FAKEHOP_ADMIN_TOKEN:-}"
    )
    [volume] = app["volumes"]
    assert (CI / volume.split(":")[0]).resolve() == CI / "example-app" and volume.split(":")[1] == app["working_dir"]
    assert "pip install --quiet -r requirements.txt && python -m pytest" in app["command"][-1]
    assert (CI / "example-app" / "requirements.txt").read_text().split() == ["openai>=1.60", "pytest>=8"]


def test_the_workflow_example_runs_the_recipe_and_keeps_its_results_whatever_happened():
    workflow = yaml.safe_load((CI / "github-actions.yml").read_text())
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as true
    assert set(triggers) == {"push", "pull_request"}
    steps = workflow["jobs"]["test"]["steps"]
    uses = [step.get("uses", "").split("@")[0] for step in steps]
    assert uses[:2] == ["actions/checkout", "actions/setup-python"] and uses[-1] == "actions/upload-artifact"
    [recipe] = [shlex.split(step["run"]) for step in steps if "run-with-fakehop.sh" in step.get("run", "")]
    assert recipe[:2] == ["bash", "ci/run-with-fakehop.sh"] and recipe[recipe.index("--") + 1 :] == [
        "python",
        "-m",
        "pytest",
        "-q",
    ]
    serve_options(["serve", *recipe[2 : recipe.index("--")]])
    assert steps[-1]["if"] == "always()" and steps[-1]["with"]["path"] == "fakehop-results/"
    assert "$FAKEHOP_PACKAGE" in " ".join(step.get("run", "") for step in steps) and workflow["env"][
        "FAKEHOP_PACKAGE"
    ].endswith(".whl")


def make_variable(name: str) -> str:
    [line] = [line for line in (ROOT / "Makefile").read_text().splitlines() if line.startswith(f"{name} :=")]
    return line.split(":=", 1)[1].strip()


def test_the_sdk_workflow_runs_the_newest_and_the_oldest_sdks_every_day():
    workflow = yaml.safe_load((CI / "sdk-drift.yml").read_text())
    triggers = workflow.get("on", workflow.get(True))
    assert triggers["schedule"][0]["cron"].split()[2:] == ["*", "*", "*"]  # daily
    job = workflow["jobs"]["sdks"]
    assert job["strategy"]["matrix"]["target"] == ["test-latest", "test-oldest"]
    assert any(step.get("run", "").startswith("make ${{ matrix.target }}") for step in job["steps"])
    for target in ("test-latest", "test-oldest"):
        planned = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True, timeout=WAIT)
        assert planned.returncode == 0 and "-m pytest" in planned.stdout, planned.stderr


def test_the_oldest_sdks_the_makefile_tests_are_those_the_contributing_page_names():
    oldest = dict(pin.split("==") for pin in make_variable("OLDEST_SDKS").split())
    assert set(oldest) == {"openai", "anthropic"}
    page = (ROOT / "docs" / "contributing.md").read_text()
    assert f"**openai {oldest['openai']} and anthropic {oldest['anthropic']}**" in page


def test_the_lock_pins_every_package_pyproject_names_and_make_test_installs_from_it():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 on
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    named = [*project["dependencies"], *project["optional-dependencies"]["test"]]
    lock = ROOT / make_variable("LOCK")
    pinned = {
        line.split("==")[0].lower()
        for line in lock.read_text().splitlines()
        if "==" in line and not line.startswith("#")
    }
    for requirement in named:
        name = re.split(r"[<>=!~\[ ;]", requirement, maxsplit=1)[0].lower().replace("_", "-")
        assert name in pinned, requirement
    planned = subprocess.run(
        ["make", "-n", "-B", ".venv/.installed-stamp"], cwd=ROOT, capture_output=True, text=True, timeout=WAIT
    )
    assert f"-r {make_variable('LOCK')}" in planned.stdout and "--no-deps --no-build-isolation -e ." in planned.stdout
