"""docs/reference/sdk-exceptions.md, what the official SDKs raise for each bundled fault, is
computed here through a real server and the real SDKs, so that it cannot go stale:
`make docs-tables` (FAKEHOP_WRITE_DOCS=1) rewrites it, and this test fails when it differs."""

from __future__ import annotations

import asyncio
import os
from importlib import metadata
from pathlib import Path

import pytest

from .sdk_results import HANG_TIMEOUT, final_result

PAGE = Path(__file__).resolve().parent.parent / "docs" / "reference" / "sdk-exceptions.md"
FAULTS = (
    "fail-rate-limit",
    "fail-server-error",
    "fail-invalid-prompt",
    "fail-overloaded",
    "interrupted",
    "stall",
    "disconnect",
    "hang",
    "malformed",
    "rate-limited",
    "server-error",
)
COLUMNS = [
    ("chat", False, "Chat Completions"),
    ("chat", True, "Chat Completions, streamed"),
    ("responses", False, "Responses"),
    ("responses", True, "Responses, streamed"),
    ("messages", False, "Messages"),
    ("messages", True, "Messages, streamed"),
]
SDKS = ("openai", "anthropic")

INTRO = """# What the SDKs raise

What the official Python SDKs raise for each bundled fault scenario: the exception's class and,
where it has one, its HTTP status (`200` is an error inside a stream that had begun). Chat
Completions and Responses are the `openai` SDK's, Messages the `anthropic` SDK's, each asked
with `max_retries=0` (with their default retries a 429 or a 5xx is tried again, and `hang` is
given a short read timeout). A test run computes this table through a real server and the real
SDKs, and fails when it differs from this page; `make docs-tables` rewrites it. The scenarios are
in [the scenario format](scenarios.md#bundled-scenarios), and the error each sends in
[the three protocols](protocols.md).
"""


def cell(result: dict) -> str:
    if "causes" not in result:  # an answer, not an exception
        return "no exception"
    status = result.get("status_code")
    return f"`{result['error']}`" + (f" ({status})" if status is not None else "")


async def table(url: str) -> str:
    async def row(name: str) -> str:
        timeout = HANG_TIMEOUT if name == "hang" else 30.0
        results = await asyncio.gather(
            *(
                final_result(url, protocol, stream, {"X-Fakehop-Scenario": name}, timeout)
                for protocol, stream, _ in COLUMNS
            )
        )
        return f"| `{name}` | " + " | ".join(cell(result) for result in results) + " |"

    header = "| scenario | " + " | ".join(title for _, _, title in COLUMNS) + " |\n|" + " --- |" * (len(COLUMNS) + 1)
    rows = await asyncio.gather(*(row(name) for name in FAULTS))
    return header + "\n" + "\n".join(rows) + "\n"


def sdk_versions() -> str:
    return ", ".join(f"{name} {metadata.version(name)}" for name in SDKS)


def page(rows: str) -> str:
    return f"{INTRO}\nComputed with {sdk_versions()}.\n\n{rows}"


@pytest.mark.long
async def test_the_pages_table_is_what_the_sdks_raise(base_url):
    written = PAGE.read_text() if PAGE.exists() else ""
    expected = page(await table(base_url))
    if os.environ.get("FAKEHOP_WRITE_DOCS") == "1":
        PAGE.write_text(expected)
        return
    if f"Computed with {sdk_versions()}." not in written:  # make test-latest, test-oldest
        pytest.skip(
            f"the page is of other SDK versions than these ({sdk_versions()}): `make docs-tables` under the lock"
        )
    assert written == expected, "`make docs-tables` rewrites the page: review the diff"
