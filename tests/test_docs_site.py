"""The documentation site builds with `mkdocs build --strict` (a broken link, anchor or snippet
fails it) and shows the example files as they are; README.md, the front page, stays short, its
links lead somewhere and its two examples are files the tests run."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
EXAMPLES = ROOT / "docs" / "examples"
WAIT = 120  # seconds: generous, for a loaded machine
README_LINES = 250


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [Path(sys.executable).parent / "mkdocs", "build", "--strict", "--site-dir", out],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=WAIT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert built.returncode == 0, built.stderr
    return out


def included_files(page: Path) -> list[str]:
    """The example files `page` includes whole."""
    return re.findall(r'^--8<-- "(docs/examples/[^":]+)"$', page.read_text(), flags=re.MULTILINE)


def test_the_site_builds_strict_and_shows_every_included_example_whole(site):
    pages = sorted((ROOT / "docs").rglob("*.md"))
    included = {page: included_files(page) for page in pages if included_files(page)}
    in_readme = {"test_first.py", "queue-a-fault.sh"}  # the README's, which GitHub shows with no includes
    every_other = {f"docs/examples/{path.name}" for path in EXAMPLES.iterdir() if path.name not in in_readme}
    assert {name for names in included.values() for name in names} >= every_other
    for page, names in included.items():
        built = site / page.relative_to(ROOT / "docs").with_suffix("") / "index.html"
        if page.name == "index.md" and page.parent == ROOT / "docs":
            built = site / "index.html"
        text = html.unescape(re.sub(r"<[^>]+>", "", built.read_text()))
        for name in names:
            for line in (ROOT / name).read_text().splitlines():
                assert line.strip() in text, f"{page.name}: {name}: {line}"


def readme_blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", README.read_text(), flags=re.DOTALL | re.MULTILINE)


def test_the_readme_is_a_front_page_whose_examples_are_files_the_tests_run():
    assert len(README.read_text().splitlines()) <= README_LINES
    assert readme_blocks("python") == [(EXAMPLES / "test_first.py").read_text()]
    assert readme_blocks("sh")[-1] == (EXAMPLES / "queue-a-fault.sh").read_text()


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a file's headings (code fences left out)."""
    text = re.sub(r"^```.*?^```", "", markdown, flags=re.DOTALL | re.MULTILINE)
    titles = re.findall(r"^#{1,6} (.+)$", text, flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-") for title in titles}


def test_every_link_of_the_readme_leads_to_a_file_and_anchor_that_exist():
    links = re.findall(r"\]\(([^)]+)\)", README.read_text())
    assert links
    for link in links:
        if link.startswith(("http://", "https://")):
            continue
        path, _, anchor = unquote(link).partition("#")
        target = ROOT / path if path else README
        assert target.is_file(), link
        if anchor:
            assert anchor in github_anchors(target.read_text()), link
