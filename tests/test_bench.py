"""`python -m bench --quick` runs end to end: real servers, a real client, every section in the JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.run import FIXTURE_OVERHEAD, SECTIONS, TARGETS
from fakehop.protocols import PROTOCOLS

REPO = Path(__file__).resolve().parent.parent
TINY = ["--long-clients", "2", "--short-clients", "3", "--idle-streams", "8", "--timing-streams", "3"]


def test_quick_bench_writes_every_section(tmp_path):
    results_path = tmp_path / "bench.json"
    done = subprocess.run([sys.executable, "-m", "bench", "--quick", *TINY, "--json", str(results_path)],
                          cwd=REPO, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    results = json.loads(results_path.read_text())
    assert set(results["sections"]) == {*SECTIONS, "fixture_overhead"}
    fixture = results["sections"]["fixture_overhead"]
    assert fixture["status"] == ("ok" if FIXTURE_OVERHEAD.exists() else "not present"), fixture
    for name, section in SECTIONS.items():
        assert set(results["sections"][name]) == set(PROTOCOLS), name
        for protocol, outcome in results["sections"][name].items():
            for target in TARGETS:
                assert len(outcome[target]["runs"]) == 1, (name, protocol, target)
                assert outcome[target]["median"]["errors"] == 0, (name, protocol, target, outcome[target]["runs"])
                assert outcome[target]["median"][section.headline] is not None, (name, protocol, target)
            assert outcome["verdict"]["metric"] == section.headline
    assert "events_per_s" in done.stdout.decode()
