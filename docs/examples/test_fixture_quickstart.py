import anthropic
import openai
import pytest

QUESTION = [{"role": "user", "content": "Hi"}]


def ask(client: openai.OpenAI) -> str:
    """What the code under test would do: stream a chat answer and join its text."""
    stream = client.chat.completions.create(model="gpt-5.6-sol", messages=QUESTION, stream=True)
    return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)


def test_streams_the_default_answer(fakehop):
    assert ask(fakehop.openai_client()) == "Hello! How can I help you today?"
    [request] = fakehop.requests
    assert request.body["messages"] == QUESTION
    assert (request.scenario, request.end) == ("hello", "completed")


def test_the_anthropic_client_gets_the_same_scenarios(fakehop):
    client: anthropic.Anthropic = fakehop.anthropic_client()
    with client.messages.stream(model="claude-sonnet-5", max_tokens=100, messages=QUESTION) as stream:
        assert "".join(stream.text_stream) == "Hello! How can I help you today?"
    assert fakehop.requests[0].path == "/v1/messages"


@pytest.mark.fakehop(scenario="fail-rate-limit")
def test_an_error_inside_the_stream(fakehop):
    with pytest.raises(openai.APIError, match="Rate limit"):
        ask(fakehop.openai_client())
    assert fakehop.requests[0].end == "failed"


def test_the_retry_gets_the_next_queued_answer(fakehop):
    fakehop.queue("rate-limited", {"steps": [{"text": "Second time lucky"}]})
    client = fakehop.openai_client(max_retries=0)
    with pytest.raises(openai.RateLimitError):
        ask(client)
    assert ask(client) == "Second time lucky"
    assert [r.scenario for r in fakehop.requests] == ["rate-limited", "inline-1"]


@pytest.mark.fakehop(scenario="stall", time_scale=0.01)
def test_a_stalled_stream_fails_after_the_stall_timeout(fakehop):
    with pytest.raises(openai.APIError, match="stalled"):  # 120 s at time scale 0.01: 1.2 s
        ask(fakehop.openai_client())


@pytest.mark.fakehop(scenario="hang")
def test_giving_up_on_a_silent_stream_is_recorded(fakehop):
    stream = fakehop.openai_client().chat.completions.create(model="gpt-5.6-sol", messages=QUESTION, stream=True)
    next(iter(stream))
    stream.close()
    [request] = fakehop.wait_for_requests()  # the server sees the hang-up a moment later
    assert request.end == "client_disconnected"
