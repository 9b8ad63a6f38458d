import time

import openai


def ask_with_retries(client: openai.OpenAI, question: str, attempts: int = 3):
    """The code under test: a retry loop of its own around the SDK."""
    for _ in range(attempts - 1):
        try:
            return client.chat.completions.create(model="gpt-5.6-sol", messages=[{"role": "user", "content": question}])
        except openai.RateLimitError as error:
            time.sleep(float(error.response.headers.get("retry-after", "1")))  # without this: retry_after_ignored
    return client.chat.completions.create(model="gpt-5.6-sol", messages=[{"role": "user", "content": question}])


def test_my_retry_loop_keeps_hopbases_rules(fakehop):
    fakehop.queue("rate-limited", "hello")
    answer = ask_with_retries(fakehop.openai_client(max_retries=0), "Hi")
    assert answer.choices[0].message.content == "Hello! How can I help you today?"
    fakehop.assert_client_ok()  # AssertionError listing each finding, if any
