"""The package as an index would get it: `python -m build` makes an sdist and a wheel that
`twine check` passes, and the wheel, installed into a fresh virtualenv, lists and serves the
bundled scenarios from inside the installed package."""

from __future__ import annotations

import signal
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

from fakehop import __version__
from fakehop.scenario.library import Library

from . import clients

pytestmark = pytest.mark.xdist_group(
    "packaging"
)  # one xdist worker runs them all: they share one built wheel and its virtualenv

ROOT = Path(__file__).resolve().parent.parent
SDIST = f"fakehop-{__version__}.tar.gz"
WHEEL = f"fakehop-{__version__}-py3-none-any.whl"
WAIT = 60.0  # seconds: generous, for a loaded machine


def run(*command: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run([str(part) for part in command], capture_output=True, text=True, timeout=WAIT, cwd=cwd)
    assert result.returncode == 0, f"{command} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result


def bundled_files() -> list[str]:
    return sorted(path.name for path in (ROOT / "scenarios").iterdir() if path.suffix in (".yaml", ".yml"))


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """`python -m build`: the sdist, then the wheel built from the unpacked sdist (no isolated
    environment, so nothing is downloaded: hatchling comes with the test extra)."""
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, ROOT)
    return out


@pytest.fixture(scope="module")
def installed(dist, tmp_path_factory) -> Path:
    """A fresh virtualenv with the wheel installed alone (`--no-deps`); its dependencies come
    from this environment's site-packages, added after its own. Returns its bin directory."""
    venv = tmp_path_factory.mktemp("venv")
    run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    own_site = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip())
    (own_site / "dependencies-from-the-test-environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run(sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps", "--no-index", dist / WHEEL)
    return venv / "bin"


def test_build_makes_an_sdist_and_a_wheel_that_twine_check_passes(dist: Path):
    assert sorted(path.name for path in dist.iterdir()) == [WHEEL, SDIST]
    checked = run(sys.executable, "-m", "twine", "check", "--strict", dist / SDIST, dist / WHEEL)
    assert checked.stdout.count("PASSED") == 2, checked.stdout


def test_the_sdist_holds_the_sources_the_scenarios_the_tests_the_ci_files_and_the_license(dist: Path):
    with tarfile.open(dist / SDIST) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    assert {
        "pyproject.toml",
        "README.md",
        "LICENSE",
        "PKG-INFO",
        "fakehop/cli/main.py",
        "tests/conftest.py",
        "Dockerfile",
        "docs/ci/run-with-fakehop.sh",
        "requirements/test.txt",
        "mkdocs.yml",
        "docs/examples/test_first.py",
    } <= names
    assert {name.removeprefix("scenarios/") for name in names if name.startswith("scenarios/")} == set(bundled_files())
    assert not any(name.startswith((".ci/", ".venv/", "dist/")) or "__pycache__" in name for name in names)


def test_the_wheel_holds_the_package_the_bundled_scenarios_and_the_license(dist: Path):
    with zipfile.ZipFile(dist / WHEEL) as wheel:
        names = set(wheel.namelist())
        metadata = wheel.read(f"fakehop-{__version__}.dist-info/METADATA").decode()
        entry_points = wheel.read(f"fakehop-{__version__}.dist-info/entry_points.txt").decode()
    info = f"fakehop-{__version__}.dist-info"
    assert {
        "fakehop/__init__.py",
        "fakehop/cli/main.py",
        "fakehop/protocols/chat.py",
        f"{info}/licenses/LICENSE",
    } <= names
    assert (
        sorted(name.removeprefix("fakehop/scenarios/") for name in names if name.startswith("fakehop/scenarios/"))
        == bundled_files()
    )
    assert not any(name.startswith(("tests/", "bench/", "soak/")) for name in names)
    for field in (
        "License-Expression: MIT",
        "Requires-Python: >=3.10",
        "Requires-Dist: aiohttp",
        "Classifier: Framework :: Pytest",
        "Description-Content-Type: text/markdown",
    ):
        assert field in metadata
    assert "fakehop = fakehop.cli.main:main" in entry_points and "fakehop = fakehop.testing.plugin" in entry_points


def test_the_installed_wheel_lists_the_bundled_scenarios_from_the_installed_package(installed: Path, tmp_path: Path):
    python = installed / "python"
    where = run(
        python, "-c", "import fakehop.scenario.library as l; print(l.bundled_directory())", cwd=tmp_path
    ).stdout.strip()
    assert Path(where).is_relative_to(installed.parent) and Path(where).name == "scenarios", where
    listed = run(installed / "fakehop", "list", cwd=tmp_path).stdout
    assert [line.split()[0] for line in listed.splitlines()] == Library.load().names()


def test_the_installed_wheel_serves_a_request(installed: Path, tmp_path: Path):
    server = subprocess.Popen(
        [installed / "fakehop", "serve", "--port", "0", "--quiet"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None and server.stderr is not None
    try:
        banner = server.stdout.readline()
        assert f"fakehop {__version__} listening on " in banner, banner + server.stderr.read()
        url = banner.split()[-1]
        assert f"{len(Library.load().names())} scenarios, default 'hello'" in server.stdout.readline()
        client = clients.openai_sync(base_url=url + "/v1", api_key="sk-fakehop", max_retries=0, timeout=WAIT)
        stream = client.chat.completions.create(
            model="gpt-5.6-sol", messages=[{"role": "user", "content": "Hi"}], stream=True
        )
        assert (
            "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
            == "Hello! How can I help you today?"
        )
    finally:
        server.send_signal(signal.SIGINT)
        _, stderr = server.communicate(timeout=WAIT)
    assert server.returncode == 0 and "Traceback" not in stderr
