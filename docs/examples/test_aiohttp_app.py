import aiohttp
import pytest
from aiohttp import web

from fakehop import Fakehop, make_app


def make_my_app(llm_base_url: str) -> web.Application:
    """The application under test: it asks the LLM and answers with its text."""

    async def ask(request: web.Request) -> web.Response:
        body = {"model": "gpt-5.6-sol", "messages": [{"role": "user", "content": await request.text()}]}
        async with aiohttp.ClientSession() as session:
            async with session.post(llm_base_url + "/chat/completions", json=body) as answer:
                completion = await answer.json()
        return web.Response(text=completion["choices"][0]["message"]["content"])

    app = web.Application()
    app.router.add_post("/ask", ask)
    return app


@pytest.mark.asyncio
async def test_my_app_answers_with_the_llm_text(aiohttp_server, aiohttp_client):
    fake = Fakehop.for_server(await aiohttp_server(make_app(time_scale=0.01)))
    fake.use({"steps": [{"text": "Forty-two"}]})
    client = await aiohttp_client(make_my_app(fake.openai_base_url))
    response = await client.post("/ask", data="What is the answer?")
    assert await response.text() == "Forty-two"
    [request] = await fake.async_wait_for_requests()
    assert request.body["messages"][0]["content"] == "What is the answer?"
