import openai

client = openai.OpenAI(base_url="http://127.0.0.1:8080/v1", api_key="anything")
stream = client.chat.completions.create(
    model="gpt-5.6-sol",
    messages=[{"role": "user", "content": "Hi"}],
    stream=True,
    extra_headers={"X-Fakehop-Scenario": "fail-rate-limit"},
)
for chunk in stream:  # prints "Here is the start of", then raises
    print(chunk.choices[0].delta.content or "", end="")
# openai.APIError: Rate limit reached, please retry after a short wait
# (the exception's .code is "rate_limit_exceeded", its .type "requests", as HopBase sends them)
