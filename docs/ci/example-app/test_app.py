"""The example app's tests, run against a fakehop server that run-with-fakehop.sh (or compose) started.

A test changes what the app's next request gets with one call to fakehop's control API at
$FAKEHOP_URL, which tests in any language can make.
"""

from __future__ import annotations

import json
import os
import urllib.request

import openai
import pytest

from app import ask

HELLO = "Hello! How can I help you today?"  # what fakehop's default scenario, hello, answers


def queue(scenario: str) -> None:
    """The app's next request gets `scenario` (a bundled one, or one from serve --scenarios)."""
    headers = {"Content-Type": "application/json"}
    if os.environ.get("FAKEHOP_ADMIN_TOKEN"):
        headers["Authorization"] = f"Bearer {os.environ['FAKEHOP_ADMIN_TOKEN']}"
    body = json.dumps({"scenario": scenario}).encode()
    urllib.request.urlopen(urllib.request.Request(f"{os.environ['FAKEHOP_URL']}/_fakehop/queue", body, headers), timeout=10).close()


def test_answers_with_the_model_text():
    assert ask("Hi") == HELLO


def test_a_server_error_before_the_stream_is_retried():
    queue("server-error")  # HTTP 500; the retry gets the default answer
    assert ask("What is new?") == HELLO


def test_an_error_inside_the_stream_reaches_the_caller():
    queue("fail-server-error")  # a few words, then a server_error event
    with pytest.raises(openai.APIError, match="upstream went away"):
        ask("Tell me a story")
