"""A small app that asks an LLM through the openai SDK: the app under test in fakehop's CI recipe.

The SDK reads its base URL and key from OPENAI_BASE_URL and OPENAI_API_KEY, so the app needs no
change to be pointed at fakehop: run-with-fakehop.sh (or a compose file) sets them.
"""

from __future__ import annotations

import sys

import openai


def ask(question: str) -> str:
    """Stream the answer to `question` and join its text. The SDK retries what fails before the
    stream starts (429s, 5xx), waiting as Retry-After says; an error inside the stream is raised."""
    client = openai.OpenAI(timeout=30)
    with client.chat.completions.create(model="gpt-5.6-sol", messages=[{"role": "user", "content": question}], stream=True) as stream:
        return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)


if __name__ == "__main__":
    print(ask(" ".join(sys.argv[1:]) or "Hi"))
