"""Shared test helpers: a real fakehop server on a real socket, and SDK clients pointed at it."""

from __future__ import annotations

import gc
from importlib import metadata

import httpcore2  # noqa: F401 - see below
import pytest

from fakehop.scenario.library import Library
from fakehop.server.app import create_app
from fakehop.server.front import put_in_front
from fakehop.server.gateway import Gateway

# The SDKs' HTTP library imports httpcore2 when it makes its first client, and keeps a map from
# httpcore2's exceptions to its own from then on. A pytester run in this process removes the
# modules it imported when it ends: had it made the process's first client, the next client
# would get a fresh httpcore2 whose exceptions that map does not hold, and a cut stream or a
# timeout would reach a test as a bare httpcore2 error rather than the SDK's own. Imported here,
# httpcore2 is older than any such run, so no run removes it.

FAST = 0.01  # time scale for tests that do not measure time: a 120 s stall takes 1.2 s


@pytest.fixture(scope="session")
def library() -> Library:
    return Library.load()


@pytest.fixture
def make_gateway(library):
    def make(**kwargs) -> Gateway:
        kwargs.setdefault("time_scale", FAST)
        return Gateway(library, **kwargs)

    return make


@pytest.fixture
def gateway(make_gateway) -> Gateway:
    return make_gateway()


@pytest.fixture
def aiohttp_server(aiohttp_server):
    """pytest-aiohttp's, with the application's direct routes answered ahead of its router, as
    `fakehop serve` answers them (before any connection: each takes the server's handler as it opens)."""

    async def start(app, **kwargs):
        server = await aiohttp_server(app, **kwargs)
        put_in_front(server.runner)
        return server

    return start


@pytest.fixture
async def serve(aiohttp_server):
    """serve(gateway) -> base URL of a real server for it."""

    async def start(gateway: Gateway) -> str:
        server = await aiohttp_server(create_app(gateway))
        return str(server.make_url("")).rstrip("/")

    return start


@pytest.fixture
async def base_url(serve, gateway) -> str:
    return await serve(gateway)


@pytest.fixture
async def openai_client(base_url):
    """Closed after the test, on its own loop: a client left to the garbage collector closes
    itself on whichever loop runs then, or logs that its loop is gone."""
    from . import (
        clients,  # here, not above: the xdist controller loads this file too, and the SDKs take seconds to import
    )

    async with clients.openai_async(base_url=base_url + "/v1", api_key="sk-test", max_retries=0) as client:
        yield client


@pytest.fixture
async def anthropic_client(base_url):
    """Closed after the test, as openai_client."""
    from . import clients

    async with clients.anthropic_async(base_url=base_url, api_key="sk-test", max_retries=0) as client:
        yield client


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "long: one of the slowest tests (seconds to tens of seconds); run first, so that under xdist it ends with the others, not after them",
    )
    if not (
        getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput")
    ):  # not the xdist controller
        gc.disable()  # a process that collects: see pytest_collection_finish


def pytest_report_header(config) -> str:
    """The SDK versions the run tests against: `make test`'s are the lock's, `make test-latest`'s
    the newest of the day, `make test-oldest`'s the oldest supported."""
    return "official SDKs: " + ", ".join(
        f"{name} {metadata.version(name)}" for name in ("openai", "anthropic", "httpx2")
    )


def pytest_collection_finish(session):
    """Collection imports the SDKs, whose models are hundreds of thousands of objects that stay
    for good: the collector is off while they are made (a fifth of their import time otherwise),
    then frozen out of its reach, since each full collection would walk them again, and its
    first generation made larger, so that it runs less often. A sample of the suite spent about
    a sixth less CPU this way."""
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)
    gc.enable()


def pytest_collection_modifyitems(items):
    """The long tests first; the sort is stable, so every other test keeps its place. Under xdist
    as `make test` runs it (`--dist loadgroup --no-loadscope-reorder`), each worker is handed a
    test from the front in turn, then a second in turn, then one more whenever it is nearly
    done: so with as many workers as long tests, each long test starts at once on a worker of
    its own, rather than one after another."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)
