"""The README's examples outside the fixture's section run as written."""

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).parent.parent


def readme_section(title: str) -> str:
    readme = (REPO / "README.md").read_text()
    return readme.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_example_without_pytest_prints_what_the_readme_says(tmp_path):
    section = readme_section("From Python, without pytest")
    [program] = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    [printed] = re.findall(r"```text\n(.*?)```", section, flags=re.DOTALL)
    (tmp_path / "tests" / "scenarios").mkdir(parents=True)
    (tmp_path / "example.py").write_text(program)
    done = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == printed


def test_the_walkthroughs_fault_file_plays_as_it_says(tmp_path):
    [document] = re.findall(r"```yaml\n# my-fault.yaml\n(.*?)```", readme_section("Manual fault injection"), flags=re.DOTALL)
    (tmp_path / "my-fault.yaml").write_text(document)
    played = subprocess.run([sys.executable, "-m", "fakehop", "play", "my-fault", "--scenarios", str(tmp_path), "--no-wait"],
                            capture_output=True, text=True, timeout=60)
    assert played.returncode == 0, played.stderr
    deltas = re.findall(r'"content":"([^"]+)"', played.stdout)
    assert "".join(deltas) == "Let me look that up" and "[DONE]" not in played.stdout
