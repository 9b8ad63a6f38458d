import time

import openai

FALLBACK = "Sorry, the assistant is busy; try again in a minute."


def answer(question: str, attempts: int = 3) -> str:
    """The app under test: its own client, configured by the environment, and its own retries."""
    client = openai.OpenAI(max_retries=0)
    for attempt in range(1, attempts + 1):
        try:
            completion = client.chat.completions.create(
                model="gpt-5.6-sol", messages=[{"role": "user", "content": question}]
            )
            return completion.choices[0].message.content
        except openai.RateLimitError as error:
            if attempt < attempts:
                time.sleep(float(error.response.headers.get("retry-after", "1")))
        except openai.APIError:
            break
    return FALLBACK
