"""A request that asks for JSON output (Chat's `response_format`, Responses' `text.format`,
Messages' `output_config.format`) meeting a scenario whose text is not JSON, which the real API
never answers and the SDKs' parse() fails on: strict, the protocol's 400 naming the field; else
a note in the journal. A scenario whose text is JSON gets neither, and parses."""

from __future__ import annotations

import pydantic
import pytest

from .inline_scenarios import add, last_record, post

HI = [{"role": "user", "content": "Hi"}]
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}
# (path, a body asking for JSON output, the field that asks)
ASKING = [
    (
        "/v1/chat/completions",
        {
            "model": "gpt-5.6-sol",
            "messages": HI,
            "response_format": {"type": "json_schema", "json_schema": {"name": "c", "schema": SCHEMA}},
        },
        "response_format",
    ),
    (
        "/v1/chat/completions",
        {"model": "gpt-5.6-sol", "messages": HI, "response_format": {"type": "json_object"}},
        "response_format",
    ),
    (
        "/v1/responses",
        {
            "model": "gpt-5.6-sol",
            "input": "Hi",
            "text": {"format": {"type": "json_schema", "name": "c", "schema": SCHEMA}},
        },
        "text.format",
    ),
    (
        "/v1/messages",
        {
            "model": "claude-sonnet-5",
            "max_tokens": 100,
            "messages": HI,
            "output_config": {"format": {"type": "json_schema", "schema": SCHEMA}},
        },
        "output_config.format",
    ),
    (
        "/v1/messages",
        {
            "model": "claude-sonnet-5",
            "max_tokens": 100,
            "messages": HI,
            "output_format": {"type": "json_schema", "schema": SCHEMA},
        },
        "output_format",
    ),
]
IDS = ["chat-schema", "chat-object", "responses", "messages", "messages-output-format"]
JSON_ANSWER = """steps: [{text: ['{"city": ', '"Paris"}']}]"""


class City(pydantic.BaseModel):
    city: str


@pytest.mark.parametrize(("path", "body", "field"), ASKING, ids=IDS)
async def test_text_that_is_not_json_is_noted_in_the_journal(base_url, path, body, field):
    status, _ = await post(base_url, path, body, {"X-Fakehop-Scenario": "hello"})
    (note,) = (await last_record(base_url))["notes"]

    assert status == 200
    assert note.startswith(f"{field} asks for JSON output, but scenario 'hello' answers with text that is not JSON")


@pytest.mark.parametrize(("path", "body", "field"), ASKING, ids=IDS)
async def test_text_that_is_not_json_is_a_strict_400_naming_the_field(make_gateway, serve, path, body, field):
    base_url = await serve(make_gateway(strict=True))
    status, answer = await post(base_url, path, body, {"X-Fakehop-Scenario": "hello"})

    assert status == 400 and "asks for JSON output" in answer["error"]["message"]
    if path != "/v1/messages":  # Anthropic's error has no param
        assert answer["error"]["param"] == field
    assert (await last_record(base_url))["end"] == "rejected"


@pytest.mark.parametrize(("path", "body", "field"), ASKING, ids=IDS)
async def test_json_text_gets_no_note(make_gateway, serve, path, body, field):
    gateway = make_gateway(strict=True)
    base_url = await serve(gateway)
    for headers in (add(gateway, "json-answer", JSON_ANSWER), {"X-Fakehop-Scenario": "two-tools"}):  # no text at all
        status, _ = await post(base_url, path, body, headers)
        assert status == 200 and (await last_record(base_url))["notes"] == []


async def test_the_sdks_parse_a_json_answer_into_their_models(openai_client, gateway):
    headers = add(gateway, "json-answer", JSON_ANSWER)
    completion = await openai_client.chat.completions.parse(
        model="gpt-5.6-sol", messages=HI, response_format=City, extra_headers=headers
    )
    response = await openai_client.responses.parse(
        model="gpt-5.6-sol", input="Hi", text_format=City, extra_headers=headers
    )

    assert completion.choices[0].message.parsed == City(city="Paris")
    assert response.output_parsed == City(city="Paris")
