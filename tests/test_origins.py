"""What a web page in the user's browser can no longer do to a fakehop server: drive the control
API with "simple" cross-origin requests, or read it through a name rebound to 127.0.0.1."""

from __future__ import annotations

import aiohttp
import pytest

from fakehop.server.origins import HostCheck

CHAT = "/v1/chat/completions"
BODY = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
REBOUND = {"Host": "attacker.example:8080"}  # what a page on a name rebound to 127.0.0.1 sends


async def call(url: str, method: str, path: str, data=None, headers=None) -> tuple[int, str, dict | None]:
    async with aiohttp.ClientSession() as session:
        async with session.request(method, url + path, data=data, headers=headers or {}) as response:
            body = await response.json(content_type=None) if response.content_type == "application/json" else None
            return response.status, response.content_type, body


@pytest.mark.parametrize(
    "method,path",
    [
        ("GET", "/_fakehop/requests"),
        ("GET", "/_fakehop/health"),
        ("POST", "/_fakehop/reset"),
        ("GET", "/v1/models"),
        ("GET", "/no/such/path"),
        ("POST", CHAT),
        ("GET", "/v1/responses/resp_1"),
        ("DELETE", "/v1/responses/resp_1"),
    ],
)
async def test_a_rebound_host_is_refused_on_every_route(base_url, method, path):
    status, content_type, body = await call(base_url, method, path, data=BODY, headers=REBOUND)
    assert (status, content_type) == (403, "application/json")
    message = body["error"] if isinstance(body["error"], str) else body["error"]["message"]
    assert "does not answer requests for host 'attacker.example:8080'" in message and "--allow-host" in message


async def test_the_journal_cannot_be_read_through_a_rebound_name(base_url):
    await call(base_url, "POST", CHAT, data=BODY, headers={"Authorization": "Bearer sk-secret-of-another-client"})
    status, _, body = await call(base_url, "GET", "/_fakehop/requests", headers=REBOUND)
    assert status == 403 and "requests" not in body


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1:1234",
        "localhost:1",
        "LOCALHOST",
        "[::1]:80",
        "127.1.2.3",
        "10.0.0.7:8080",
        "dev.localhost:3000",
        "localhost.",
    ],
)
async def test_loopback_names_and_addresses_are_answered(base_url, host):
    status, _, _ = await call(base_url, "POST", CHAT, data=BODY, headers={"Host": host})
    assert status == 200


async def test_allowed_hosts_and_the_star(serve, make_gateway):
    named = await serve(make_gateway(allowed_hosts=("fakehop", "ci.internal:9000")))
    assert (await call(named, "POST", CHAT, data=BODY, headers={"Host": "fakehop:8080"}))[0] == 200
    assert (await call(named, "POST", CHAT, data=BODY, headers={"Host": "CI.internal"}))[0] == 200
    assert (await call(named, "POST", CHAT, data=BODY, headers={"Host": "other.internal"}))[0] == 403
    anything = await serve(make_gateway(allowed_hosts=("*",)))
    assert (await call(anything, "GET", "/_fakehop/health", headers=REBOUND))[0] == 200


def test_the_bound_host_is_answered_and_an_unspecified_one_adds_nothing():
    assert not HostCheck("myhost.lan").refuses("myhost.lan:8080")
    assert HostCheck("0.0.0.0").refuses("myhost.lan:8080")
    assert not HostCheck().refuses(None)  # HTTP/1.0 without a Host: no browser sends that


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"]
)
async def test_bodies_a_page_could_send_unasked_are_refused(base_url, content_type):
    """The three Content-Types a page may send another site without a preflight."""
    status, _, body = await call(
        base_url,
        "POST",
        "/_fakehop/queue",
        data=b'{"scenario": "hang", "times": 5}',
        headers={"Content-Type": content_type},
    )
    assert status == 415 and "application/json" in body["error"]
    assert (await call(base_url, "GET", "/_fakehop/queue"))[2]["queue"] == []


async def test_a_page_of_another_origin_is_refused_and_the_servers_own_is_not(base_url):
    json_type = {"Content-Type": "application/json"}
    status, _, body = await call(
        base_url,
        "POST",
        "/_fakehop/queue",
        data=b'{"scenario": "hang"}',
        headers={**json_type, "Origin": "http://attacker.example"},
    )
    assert status == 403 and "Origin: http://attacker.example" in body["error"]
    assert (await call(base_url, "POST", "/_fakehop/reset", headers={"Origin": "null"}))[0] == 403
    host = base_url.split("//", 1)[1]
    status, _, body = await call(
        base_url,
        "POST",
        "/_fakehop/queue",
        data=b'{"scenario": "hang"}',
        headers={**json_type, "Origin": base_url, "Host": host},
    )
    assert (status, body["length"]) == (200, 1)


async def test_yaml_and_json_bodies_are_taken(base_url):
    for content_type in ("application/yaml", "text/yaml", "application/x-yaml", "application/vnd.x+yaml"):
        status, _, _ = await call(
            base_url,
            "POST",
            "/_fakehop/scenarios?name=y",
            data=b"steps: [{text: y}]",
            headers={"Content-Type": content_type},
        )
        assert status in (200, 201), content_type
    status, _, _ = await call(base_url, "POST", "/_fakehop/reset")  # no body, no Content-Type
    assert status == 200


async def test_the_prefix_alone_is_a_json_404(base_url):
    status, content_type, body = await call(base_url, "GET", "/_fakehop")
    assert (status, content_type) == (404, "application/json")
    assert "GET /health" in body["error"]
