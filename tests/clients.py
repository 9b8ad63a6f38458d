"""The official SDK clients the tests make, for servers on plain HTTP.

Each is the SDK's client as an application makes it, on the SDK's own HTTP client, given the
TLS context of `fakehop.testing.plain_http_tls`: made once, with no CA bundle. The SDK would
otherwise load the bundle afresh for every client, some 30 ms of CPU that a test of an
http:// server never uses, paid some 1,600 times over the suite.
"""

from __future__ import annotations

from typing import Any

import anthropic
import openai

from fakehop.testing import plain_http_tls


def openai_async(**options: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(http_client=openai.DefaultAsyncHttpxClient(verify=plain_http_tls()), **options)


def openai_sync(**options: Any) -> openai.OpenAI:
    return openai.OpenAI(http_client=openai.DefaultHttpxClient(verify=plain_http_tls()), **options)


def anthropic_async(**options: Any) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(http_client=anthropic.DefaultAsyncHttpxClient(verify=plain_http_tls()), **options)


def anthropic_sync(**options: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(http_client=anthropic.DefaultHttpxClient(verify=plain_http_tls()), **options)
