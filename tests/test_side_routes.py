"""The protocol routes that play no scenario, through the official SDKs: one model by its id,
and the input tokens a request would count, which are the ones its answer's usage gives."""

from __future__ import annotations

import aiohttp
import anthropic
import openai
import pytest

QUESTION = [{"role": "user", "content": "What is the weather in Paris, and should I take an umbrella?"}]


async def test_a_messages_count_is_the_input_tokens_its_answer_counts(anthropic_client):
    counted = await anthropic_client.messages.count_tokens(
        model="claude-sonnet-5", messages=QUESTION, system="Be brief."
    )
    answer = await anthropic_client.messages.create(
        model="claude-sonnet-5", max_tokens=256, messages=QUESTION, system="Be brief."
    )

    assert counted.input_tokens == answer.usage.input_tokens > 0


async def test_a_responses_count_is_the_input_tokens_its_answer_counts(openai_client):
    counted = await openai_client.responses.input_tokens.count(model="gpt-5.6-sol", input=QUESTION[0]["content"])
    answer = await openai_client.responses.create(model="gpt-5.6-sol", input=QUESTION[0]["content"])

    assert counted.object == "response.input_tokens"
    assert counted.input_tokens == answer.usage.input_tokens > 0


async def test_a_count_lets_go_of_its_body_as_an_answer_does(anthropic_client, gateway):
    long_question = [{"role": "user", "content": "word " * 100_000}]  # past the size read in the body thread
    for _ in range(3):
        await anthropic_client.messages.count_tokens(model="claude-sonnet-5", messages=QUESTION)
    counted = await anthropic_client.messages.count_tokens(model="claude-sonnet-5", messages=long_question)

    assert counted.input_tokens > 100_000
    assert gateway.bodies.held == 0


async def test_a_count_of_a_request_the_api_refuses_is_its_400(anthropic_client, base_url):
    with pytest.raises(anthropic.BadRequestError) as no_messages:
        await anthropic_client.messages.count_tokens(model="claude-sonnet-5", messages=[])
    async with aiohttp.ClientSession() as session:
        async with session.post(base_url + "/v1/responses/input_tokens", data=b"{not json") as response:
            status, body = response.status, await response.json()

    assert no_messages.value.status_code == 400
    assert status == 400 and body["error"]["type"] == "invalid_request_error"


async def test_a_model_is_fetched_by_its_id_and_an_unknown_one_is_a_404(anthropic_client, openai_client):
    known = await anthropic_client.models.retrieve("claude-sonnet-5")
    also_known = await openai_client.models.retrieve("gpt-5.6-sol")
    with pytest.raises(anthropic.NotFoundError) as unknown:
        await anthropic_client.models.retrieve("claude-nope")
    with pytest.raises(openai.NotFoundError) as also_unknown:
        await openai_client.models.retrieve("gpt-nope")

    assert (known.type, known.id) == ("model", "claude-sonnet-5")
    assert (also_known.object, also_known.id) == ("model", "gpt-5.6-sol")
    assert unknown.value.status_code == 404 and unknown.value.body["error"]["type"] == "not_found_error"
    assert also_unknown.value.code == "model_not_found"


async def test_the_side_routes_take_the_servers_key(make_gateway, serve):
    base_url = await serve(make_gateway(api_key="sk-right"))
    async with aiohttp.ClientSession(headers={"x-api-key": "sk-wrong", "anthropic-version": "2023-06-01"}) as session:
        async with session.post(
            base_url + "/v1/messages/count_tokens", json={"model": "m", "messages": QUESTION}
        ) as counted:
            assert counted.status == 401
        async with session.get(base_url + "/v1/models/claude-sonnet-5") as fetched:
            assert fetched.status == 401
    async with aiohttp.ClientSession(headers={"x-api-key": "sk-wrong"}) as session:  # an Anthropic client's key alone
        async with session.get(base_url + "/v1/models") as listed:
            assert listed.status == 401 and (await listed.json())["type"] == "error"  # Anthropic's error shape
