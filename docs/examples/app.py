import openai

client = openai.OpenAI(base_url="http://127.0.0.1:8080/v1", api_key="anything", max_retries=0)
stream = client.chat.completions.create(model="gpt-5.6-sol", messages=[{"role": "user", "content": "Hi"}], stream=True)
for chunk in stream:
    print(chunk.choices[0].delta.content or "", end="", flush=True)
print()
