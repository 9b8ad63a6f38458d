"""`fakehop serve --workers N`: N processes answering on one port, their state on Redis; refused
without --state."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import time
import urllib.request
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import yaml

from fakehop.protocols import PROTOCOLS
from fakehop.testing.remote import ControlClient

from .cli_runs import fakehop_here
from .golden_files import Case
from .redis_server import redis_server, serve_process, stopped, url_in  # noqa: F401 - the fixture, by its name

STREAMS = 200


def test_more_than_one_worker_without_state_is_refused_in_one_line():
    ran = fakehop_here("serve", "--workers", "2")
    assert ran.returncode == 2
    assert ran.stderr.count("\n") == 1 and "--workers 2 needs --state redis://" in ran.stderr


def test_a_mistake_in_the_options_is_said_once_before_any_worker_starts(redis_server):
    ran = fakehop_here("serve", "--workers", "2", "--state", redis_server.url, "--default", "no-such-scenario")
    assert ran.returncode == 2
    assert ran.stderr.count("\n") == 1 and ran.stderr.startswith("fakehop: --default: ")


def test_a_state_that_is_not_a_redis_url_is_refused_in_one_line():
    ran = fakehop_here("serve", "--state", "http://127.0.0.1:6379")
    assert ran.returncode == 2
    assert ran.stderr.count("\n") == 1 and "--state" in ran.stderr and "redis://127.0.0.1:6379/0" in ran.stderr


async def stream(client: aiohttp.ClientSession, url: str) -> bytes:
    body = dict(PROTOCOLS["chat"].EXAMPLE_REQUEST, stream=True)
    headers = {"X-Fakehop-Scenario": "think-then-tool", "X-Fakehop-Seed": "0"}
    async with client.post(url + PROTOCOLS["chat"].PATH, json=body, headers=headers) as response:
        return await response.read()


async def test_two_workers_answer_200_concurrent_streams_byte_for_byte_into_one_journal(redis_server, tmp_path):
    ready = tmp_path / "fakehop.url"
    server = serve_process("--port", "0", "--workers", "2", "--state", redis_server.url, ready=ready)
    try:
        url = url_in(ready, server)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, force_close=True)) as client:
            received = await asyncio.gather(*(stream(client, url) for _ in range(STREAMS)))
        expected = Case("chat", "think-then-tool", True, 0).path.read_bytes()
        wrong = [answer[:300] for answer in received if answer != expected]
        assert not wrong, wrong[:3]
        records = ControlClient(url).call("GET", "/requests", query={"limit": 1000})["requests"]
        assert sorted(record["seq"] for record in records) == list(range(1, STREAMS + 1))
        answered_by = Counter(record["answered_by"] for record in records)
        assert len(answered_by) == 2, answered_by
    finally:
        out, err = stopped(server)
    assert server.returncode == 0, err
    assert "with 2 workers" in out


def requests_counted(url: str) -> int:
    text = urllib.request.urlopen(url + "/_fakehop/metrics", timeout=10).read().decode()
    return sum(
        int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines() if line.startswith("fakehop_requests_total{")
    )


async def test_the_metrics_of_two_workers_count_every_request_whichever_worker_is_asked(redis_server, tmp_path):
    ready = tmp_path / "fakehop.url"
    server = serve_process("--port", "0", "--workers", "2", "--state", redis_server.url, ready=ready)
    try:
        url = url_in(ready, server)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as client:
            await asyncio.gather(*(stream(client, url) for _ in range(40)))
        deadline = time.monotonic() + 15  # each worker publishes its counts every 2 s
        while (counted := [requests_counted(url) for _ in range(4)]) != [40] * 4 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert counted == [40] * 4
        answered_by = {record["answered_by"] for record in ControlClient(url).call("GET", "/requests")["requests"]}
        assert len(answered_by) == 2
    finally:
        stopped(server)


def test_ctrl_c_stops_every_worker(redis_server, tmp_path):
    ready = tmp_path / "fakehop.url"
    server = serve_process("--port", "0", "--workers", "2", "--state", redis_server.url, ready=ready)
    url = url_in(ready, server)
    assert ControlClient(url).call("GET", "/health")["status"] == "ok"
    server.send_signal(signal.SIGINT)
    out, err = stopped(server)
    assert server.returncode == 0, err
    assert not ready.exists()
    pids = out.split("(pids ")[1].split(")")[0].split(", ")
    for pid in pids:
        assert not process_alive(int(pid))


def test_a_worker_that_stops_stops_the_others_and_the_server_says_which(redis_server, tmp_path):
    ready = tmp_path / "fakehop.url"
    server = serve_process("--port", "0", "--workers", "2", "--state", redis_server.url, ready=ready)
    url_in(ready, server)
    deadline = time.monotonic() + 15
    while "pids" not in (banner := server.stdout.readline()) and time.monotonic() < deadline:
        pass
    first, second = (int(pid) for pid in banner.split("(pids ")[1].split(")")[0].split(", "))
    os.kill(first, signal.SIGKILL)
    server.wait(15)
    out, err = stopped(server)
    assert server.returncode == 1
    assert f"worker {first} stopped with exit code -9; stopping the others" in err
    assert not process_alive(second) and not ready.exists()


def test_workers_on_a_port_another_server_holds_is_one_line_and_exit_2(redis_server):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = str(holder.getsockname()[1])
        ran = fakehop_here("serve", "--workers", "2", "--state", redis_server.url, "--port", port)
    assert ran.returncode == 2 and ran.stderr.count("\n") == 1
    assert f"port {port} on 127.0.0.1 is already in use" in ran.stderr


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


REPLICAS = Path(__file__).resolve().parent.parent / "docs" / "ci" / "replicas"


def option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_the_replicas_example_puts_replicas_sharing_one_redis_behind_nginx():
    services = yaml.safe_load((REPLICAS / "compose.yaml").read_text())["services"]
    fakehop, balancer = services["fakehop"], services["balancer"]
    state = urlsplit(option(fakehop["command"], "--state"))
    assert state.scheme == "redis" and state.hostname in services and state.port == 6379
    assert fakehop["deploy"]["replicas"] >= 2
    assert "./nginx.conf:/etc/nginx/conf.d/default.conf:ro" in balancer["volumes"]
    nginx = (REPLICAS / "nginx.conf").read_text()
    port = option(fakehop["command"], "--port")
    assert f"server fakehop:{port};" in nginx and "proxy_buffering off;" in nginx
    host = re.search(r"proxy_set_header Host (\S+);", nginx)
    assert host is not None and host[1] == option(fakehop["command"], "--allow-host")
    ran = fakehop_here(*fakehop["command"][:-2], "--workers", "1", "--port", "-1")
    assert ran.returncode == 2 and "--port" in ran.stderr  # its options parse: only the port given here is refused


def test_the_kubernetes_example_points_the_replicas_at_the_redis_service():
    documents = list(yaml.safe_load_all((REPLICAS / "kubernetes.yaml").read_text()))
    services = {doc["metadata"]["name"]: doc for doc in documents if doc["kind"] == "Service"}
    deployments = {doc["metadata"]["name"]: doc for doc in documents if doc["kind"] == "Deployment"}
    fakehop = deployments["fakehop"]
    assert fakehop["spec"]["replicas"] >= 2
    [container] = fakehop["spec"]["template"]["spec"]["containers"]
    state = urlsplit(option(container["args"], "--state"))
    redis_service = services[state.hostname]
    assert redis_service["spec"]["ports"][0]["port"] == state.port
    redis_labels = deployments["fakehop-redis"]["spec"]["template"]["metadata"]["labels"]
    assert redis_service["spec"]["selector"] == redis_labels
    assert services["fakehop"]["spec"]["selector"] == fakehop["spec"]["template"]["metadata"]["labels"]
    assert services["fakehop"]["spec"]["ports"][0]["targetPort"] == int(option(container["args"], "--port"))
    assert container["readinessProbe"]["httpGet"]["path"] == "/_fakehop/health"
