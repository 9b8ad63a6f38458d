"""Shared test helpers: a real fakehop server on a real socket, and SDK clients pointed at it."""

from __future__ import annotations

import pytest

from fakehop.library import Library
from fakehop.server import Gateway, create_app

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
    from . import clients  # here, not above: the xdist controller loads this file too, and the SDKs take seconds to import

    async with clients.openai_async(base_url=base_url + "/v1", api_key="sk-test", max_retries=0) as client:
        yield client


@pytest.fixture
async def anthropic_client(base_url):
    """Closed after the test, as openai_client."""
    from . import clients

    async with clients.anthropic_async(base_url=base_url, api_key="sk-test", max_retries=0) as client:
        yield client


def pytest_configure(config):
    config.addinivalue_line("markers", "long: a test of tens of seconds; run first, so that under xdist it ends with the others, not after them")


def pytest_collection_modifyitems(items):
    """The long tests first, each followed by a short one; every other test keeps its place.
    Under xdist with `--maxschedchunk 1`, as `make test` runs, each worker is handed two tests
    at a time from the front: so the long tests start at once on workers of their own, rather
    than one after another on the first worker."""
    long = [item for item in items if item.get_closest_marker("long")]
    short = [item for item in items if not item.get_closest_marker("long")]
    paired = [test for pair in zip(long, short) for test in pair]
    items[:] = paired + long[len(short):] + short[len(long):]
