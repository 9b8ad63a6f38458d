import openai

from fakehop import Fakehop, Gateway, Library, ThreadServer

with ThreadServer(Gateway(Library.load(["tests/scenarios"]), time_scale=0.1)) as server:
    fake = Fakehop(server)
    fake.queue("fail-rate-limit")
    client = openai.OpenAI(base_url=fake.openai_base_url, api_key=fake.api_key, max_retries=0)
    try:
        for chunk in client.chat.completions.create(
            model="gpt-5.6-sol", messages=[{"role": "user", "content": "Hi"}], stream=True
        ):
            print(chunk.choices[0].delta.content or "", end="")
    except openai.APIError as error:
        print(f"\n{type(error).__name__}: {error.message} (code {error.code})")
    print(fake.requests[-1])
