"""Short versions of `make soak`: the server outlives clients that hang up, stop reading or
come all at once, and gives every one of them exactly the golden bytes.

Each test runs a fakehop server in a process of its own (soak/child.py) that reports its
asyncio tasks, timers, file descriptors, connections and RSS, and logs to a stderr the test
reads; the clients are real aiohttp clients and raw sockets. soak/runs.py has the runs.
"""

from __future__ import annotations

import typing

import pytest

from fakehop.scenario import reader as sc
from soak.runs import (
    LOAD_TIME_SCALE,
    RSS_TOLERANCE_MIB,
    SLOW_MEMORY_BOUND_MIB,
    SOAK_TIME_SCALE,
    aborts,
    load,
    slow_readers,
)
from soak.server import ServerProcess
from soak.streams import library_with_every_step

JOURNAL_SIZE = 100  # a short warm-up fills it


@pytest.fixture
def soak_server(request):
    with ServerProcess(request.param, journal_size=JOURNAL_SIZE) as server:
        yield server


@pytest.mark.parametrize("soak_server", [SOAK_TIME_SCALE], indirect=True)
async def test_clients_that_hang_up_anywhere_leave_nothing_behind(soak_server):
    run = await aborts(soak_server, streams=500, cut_share=0.2)
    assert run.logged == ""
    assert run.unfinished == 0
    assert run.wrong == []
    assert {"cut after bytes", "cut after time", "cut mid-request"} <= set(run.outcomes)
    assert run.back_to_baseline, (run.baseline, run.after)
    assert run.rss_growth_mib < RSS_TOLERANCE_MIB


@pytest.mark.parametrize("soak_server", [SOAK_TIME_SCALE], indirect=True)
async def test_readers_that_stop_reading_do_not_grow_the_server(soak_server):
    run = await slow_readers(soak_server, readers=3, stall_seconds=1.0)
    assert run.most_events_written < run.stream_events / 2  # writes wait for the socket to drain
    assert run.readers * run.stream_bytes > 4 * SLOW_MEMORY_BOUND_MIB * 2**20
    assert (run.rss_while_stalled - run.baseline.rss) / 2**20 < SLOW_MEMORY_BOUND_MIB
    assert run.back_to_baseline, (run.baseline, run.after)
    assert run.logged == ""


@pytest.mark.parametrize("soak_server", [LOAD_TIME_SCALE], indirect=True)
async def test_streams_at_once_are_each_exactly_as_golden(soak_server):
    run = await load(soak_server, streams=200, rounds=1)
    assert run.outcomes == {"read to the end": 200}
    assert run.wrong == [] and run.surprises == []
    assert run.logged == "" and run.unfinished == 0
    assert run.back_to_baseline, (run.baseline, run.after)


def test_clients_hang_up_during_every_kind_of_step():
    """The hang-up runs play every bundled scenario and EVERY_STEP, so every kind of step is cut."""
    library = library_with_every_step()
    scripts = [entry.script for name in library.names() for entry in library[name].entries if entry.script]
    assert {type(step) for script in scripts for step in script.steps} == set(typing.get_args(sc.Step))
    assert any(script.http_error for script in scripts)
