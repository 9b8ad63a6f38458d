"""Keys and tokens: redacted in everything the journal hands out, honoured on every route, and
`serve` says so when the control API can be reached from elsewhere without a token."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from urllib.parse import urlsplit

import aiohttp
import pytest

from fakehop.state.journal import Journal

CHAT = "/v1/chat/completions"
BODY = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
SECRETS = {
    "Authorization": "Bearer sk-live-0123456789abcdef",
    "x-api-key": "sk-ant-api03-secretsecret9876",
    "Cookie": "session=abcdefghijklmnopqrstuvwxyz",
    "api-key": "azure-key-0000000011112222",
}


async def journal_headers(url: str) -> dict:
    async with aiohttp.ClientSession() as session:
        async with session.post(
            url + CHAT, data=BODY, headers={"Content-Type": "application/json", **SECRETS}
        ) as response:
            assert response.status == 200
        async with session.get(url + "/_fakehop/requests") as response:
            [record] = (await response.json())["requests"]
    return record["headers"]


async def test_the_journal_hands_out_keys_redacted(base_url):
    headers = await journal_headers(base_url)
    assert headers["Authorization"] == "Bearer ****cdef"
    assert headers["x-api-key"] == "****9876"
    assert headers["Cookie"] == "****wxyz"
    assert headers["api-key"] == "****2222"
    assert headers["Content-Type"] == "application/json"


async def test_journal_secrets_shows_them_whole(serve, make_gateway):
    headers = await journal_headers(await serve(make_gateway(journal=Journal(secrets=True))))
    assert {name: headers[name] for name in SECRETS} == SECRETS


def test_the_fixture_sees_what_the_client_sent(fakehop):
    """Inside the test process nothing leaves it: a test may check the key its app sent."""
    fakehop.openai_client(api_key="sk-app-key-under-test").chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}]
    )
    [request] = fakehop.requests
    assert request.headers["authorization"] == "Bearer sk-app-key-under-test"


async def test_models_need_the_api_key(serve, make_gateway):
    url = await serve(make_gateway(api_key="sekret"))
    async with aiohttp.ClientSession() as session:
        async with session.get(url + "/v1/models") as response:
            assert response.status == 401
            assert (await response.json())["error"]["code"] == "invalid_api_key"
        async with session.get(
            url + "/v1/models", headers={"anthropic-version": "2023-06-01", "x-api-key": "wrong"}
        ) as response:
            assert (response.status, (await response.json())["error"]["type"]) == (401, "authentication_error")
        async with session.get(url + "/v1/models", headers={"Authorization": "bearer sekret"}) as response:
            assert response.status == 200 and (await response.json())["data"]


async def test_the_admin_token_scheme_is_any_case_and_a_bad_byte_is_a_401(serve, make_gateway):
    url = await serve(make_gateway(admin_token="t0ken"))
    async with aiohttp.ClientSession() as session:
        for scheme in ("Bearer", "bearer", "BEARER"):
            async with session.get(url + "/_fakehop/health", headers={"Authorization": f"{scheme} t0ken"}) as response:
                assert response.status == 200, scheme
    address = urlsplit(url)
    reader, writer = await asyncio.open_connection(address.hostname, address.port)
    writer.write(
        b"GET /_fakehop/health HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer t\xff\xfeken\r\nConnection: close\r\n\r\n"
    )
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 401 ") and b"admin token" in answer


@pytest.mark.parametrize(
    "options", [["--host", "0.0.0.0", "--api-key", "K"], ["--host", "0"], ["--host", "::", "--api-key", "K"]]
)
def test_serve_warns_when_the_control_api_has_no_token_beyond_loopback(options):
    server = subprocess.Popen(
        [sys.executable, "-m", "fakehop", "serve", "--port", "0", "--quiet", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert "listening on" in server.stdout.readline()
    finally:
        server.terminate()
        _, stderr = server.communicate(timeout=10)
    assert "the control API" in stderr and "--admin-token" in stderr
    if "--api-key" not in options:
        assert "listening on all interfaces with no --api-key or --admin-token" in stderr
    assert "Traceback" not in stderr
