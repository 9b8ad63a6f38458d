import openai


def summarize(text: str) -> str:
    """The code under test: it builds its own client, configured by the environment."""
    client = openai.OpenAI()
    completion = client.chat.completions.create(
        model="gpt-5.6-sol", messages=[{"role": "user", "content": f"Summarize: {text}"}]
    )
    return completion.choices[0].message.content


def test_the_app_gets_the_queued_answer(fakehop, fakehop_env):
    fakehop.queue({"steps": [{"text": "A short summary."}]})
    assert summarize("a long text") == "A short summary."
    [request] = fakehop.requests
    assert request.body["messages"] == [{"role": "user", "content": "Summarize: a long text"}]
