"""The official JavaScript SDKs (openai, @anthropic-ai/sdk) against a real fakehop: tests/js, run by `node --test`.

The npm packages are installed into tests/js/node_modules from package-lock.json, once per
change of the lock file, and reused after that. With FAKEHOP_JS_DIR set (`make test-latest`),
the tests run in that directory instead, with the packages already installed there.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

JS_DIR = Path(__file__).parent / "js"
GIVEN_DIR = os.environ.get("FAKEHOP_JS_DIR")
LOCK_FILE = JS_DIR / "package-lock.json"
INSTALLED_STAMP = JS_DIR / "node_modules" / ".fakehop-installed-lock"
INSTALL_TIMEOUT = 300
TEST_TIMEOUT = 120

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or shutil.which("npm") is None,
    reason="node and npm are needed for the JavaScript SDK tests (tests/js); install Node.js 20 or later",
)


def lock_digest() -> str:
    return hashlib.sha256(LOCK_FILE.read_bytes()).hexdigest()


def install_packages() -> None:
    """`npm ci` unless node_modules already holds what the lock file names."""
    digest = lock_digest()
    if INSTALLED_STAMP.is_file() and INSTALLED_STAMP.read_text() == digest:
        return
    installed = subprocess.run(
        ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=JS_DIR,
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT,
    )
    assert installed.returncode == 0, f"npm ci failed:\n{installed.stdout}\n{installed.stderr}"
    INSTALLED_STAMP.write_text(digest)


@pytest.mark.long
def test_javascript_sdks_accept_fakehop():
    if not GIVEN_DIR:
        install_packages()
    env = dict(os.environ, FAKEHOP_PYTHON=sys.executable)
    run = subprocess.run(
        ["node", "--test"], cwd=GIVEN_DIR or JS_DIR, env=env, capture_output=True, text=True, timeout=TEST_TIMEOUT
    )
    assert run.returncode == 0, f"node --test failed:\n{run.stdout[-20000:]}\n{run.stderr[-5000:]}"
    assert "# fail 0" in run.stdout
