"""Helpers for the tests of hosted tools, compaction and pause_turn: a server playing one
scenario, the bytes it answers with, and what `fakehop import` makes of them."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from fakehop.protocols import PROTOCOLS
from fakehop.scenario.library import Library
from fakehop.scenario.model import Script

from . import clients
from .cli_runs import fakehop_here, fakehop_here_async
from .inline_scenarios import add


async def served(serve, make_gateway, name: str, text: str) -> tuple[str, dict]:
    """A real server playing the scenario `text`: its URL, and the headers that ask for it."""
    gateway = make_gateway()
    headers = add(gateway, name, text)
    return await serve(gateway), headers


async def answer_bytes(url: str, protocol: str, body: dict, headers: dict) -> bytes:
    """The answer's body as it came over the socket."""
    async with aiohttp.ClientSession() as session:
        async with session.post(url + PROTOCOLS[protocol].PATH, json=body, headers=headers) as answer:
            assert answer.status == 200, await answer.text()
            return await answer.read()


def request(protocol: str, stream: bool = True) -> dict:
    return dict(PROTOCOLS[protocol].EXAMPLE_REQUEST, stream=stream)


async def imported_script(tmp_path: Path, capture: bytes, suffix: str = ".sse") -> tuple[Script, str]:
    """`fakehop import` of the capture, through the CLI: the script it wrote, and the file's text."""
    source = tmp_path / f"capture{suffix}"
    source.write_bytes(capture)
    out = tmp_path / "imported"
    imported = await fakehop_here_async("import", str(source), "--out", str(out))
    assert imported.returncode == 0, imported.stderr
    [written] = sorted(out.glob("*.yaml"))
    script = Library.load([out], bundled=False)[written.stem].entries[0].script
    assert script is not None
    return script, written.read_text()


def validate_problems(tmp_path: Path, text: str) -> tuple[Path, str]:
    """`fakehop validate` of a file holding `text`, which must fail: the file, and what it said."""
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    validated = fakehop_here("validate", str(path))
    assert validated.returncode == 1
    return path, validated.stdout + validated.stderr


async def streamed_message(url: str, headers: dict, beta: bool = False):
    """The message `client.messages.stream()` (or with `beta`, `client.beta.messages.stream()`) ends with."""
    async with clients.anthropic_async(base_url=url, api_key="sk-test", max_retries=0) as client:
        helper = client.beta.messages if beta else client.messages
        async with helper.stream(
            model="claude-sonnet-5",
            max_tokens=1024,
            messages=[{"role": "user", "content": "Hi"}],
            extra_headers=headers,
        ) as stream:
            return await stream.get_final_message()
