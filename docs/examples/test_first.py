import openai
import pytest


def ask(client: openai.OpenAI) -> str:
    question = [{"role": "user", "content": "Hi"}]
    stream = client.chat.completions.create(model="gpt-5.6-sol", messages=question, stream=True)
    return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)


def test_streams_the_default_answer(fakehop):
    assert ask(fakehop.openai_client()) == "Hello! How can I help you today?"


@pytest.mark.fakehop(scenario="fail-rate-limit")
def test_an_error_inside_the_stream(fakehop):
    with pytest.raises(openai.APIError, match="Rate limit"):
        ask(fakehop.openai_client())
    assert fakehop.requests[0].end == "failed"
