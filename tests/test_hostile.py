"""Short versions of `make soak`'s hostile run: while each request that once froze the server's
loop or blew up its memory is served, the health check still answers, and memory stays bounded.

A server in a process of its own (soak/child.py) gets each case in turn (soak/hostile.py); a
thread in this process times `GET /_fakehop/health` all along. The bound here, a second, is looser than
the soak's 100 ms: a loaded 2-core machine holds processes up by tens of milliseconds now
and then, while the faults these cases once caused held the loop for seconds.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from soak.hostile import RSS_BOUND_MIB, cases, hostile
from soak.runs import SOAK_TIME_SCALE
from soak.server import ServerProcess

pytestmark = pytest.mark.xdist_group("hostile")  # one xdist worker runs them all: they share one server process

SCALE = 0.1
HEALTH_BOUND_MS = 1000.0
NAMES = [case.name for case in cases(SCALE)]
# The cases that held the loop for seconds at full size (3,000,000 empty objects: 6.5 s) and
# would not at a tenth of it: run at full size.
FULL_SIZE = [
    case.name
    for case in cases(1.0)
    if case.name.startswith(
        ("3,000,000 empty objects", "a conversation of 900,000", "bodies of 149,000 numbers", "headers of 120 lines")
    )
]


@pytest.fixture(scope="module")
def hostile_server():
    with ServerProcess(SOAK_TIME_SCALE) as server:
        yield server


@pytest.mark.parametrize("name", NAMES)
async def test_the_loop_answers_the_health_check_while_a_hostile_request_is_served(hostile_server, name):
    [figures] = await hostile(hostile_server, SCALE, only=name)
    assert figures.health_ms < HEALTH_BOUND_MS, figures
    assert figures.peak_rss_mib < RSS_BOUND_MIB, figures
    assert figures.failures == [], figures
    assert hostile_server.logged() == ""


@pytest.mark.parametrize("name", FULL_SIZE)
async def test_the_loop_answers_the_health_check_while_a_full_size_hostile_request_is_served(hostile_server, name):
    [figures] = await hostile(hostile_server, 1.0, only=name)
    assert figures.health_ms < HEALTH_BOUND_MS, figures
    assert figures.failures == [], figures
    assert hostile_server.logged() == ""


def test_sigterm_stops_a_server_that_sends_keepalives_every_millisecond(tmp_path):
    (tmp_path / "tiny.yaml").write_text("keepalive: 1ms\nsteps: [{text: a}, {delay: 1h}]\n")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fakehop",
            "serve",
            "--port",
            "0",
            "--quiet",
            "--scenarios",
            str(tmp_path),
            "--time-scale",
            "0.001",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = server.stdout.readline().split()[-1]
    request = urllib.request.Request(
        url + "/v1/chat/completions",
        method="POST",
        headers={"X-Fakehop-Scenario": "tiny"},
        data=b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true}',
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.read(2000)  # keepalives coming
        started = time.monotonic()
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=10)
    assert time.monotonic() - started < 5
    assert "Traceback" not in server.stderr.read()
