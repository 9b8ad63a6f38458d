"""A text step's `citations`: Responses' url_citation annotations, Messages' web search citations
and Chat's message annotations, on the wire and through the official SDKs; and what loading
them refuses."""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml
from anthropic.types import CitationsWebSearchResultLocation
from openai.types.responses.response_output_text import AnnotationURLCitation

from fakehop.scenario.model import Output
from fakehop.scenario.schema import scenario_schema

from .cli_runs import fakehop_here
from .inline_scenarios import add, data_events, problems_of
from .round_trips import answer_bytes, imported_steps, recorded_steps

INTRO = "Found it. "
TEXT = "Paris is the capital of France."
CITED = (
    "steps:\n"
    f"  - text: {INTRO!r}\n"
    f"  - text: {TEXT!r}\n"
    "    chunk: word\n"
    "    citations:\n"
    "      - {url: 'https://example.com/paris', title: Paris, start: 0, end: 5}\n"
    "      - {url: 'https://example.com/france', title: France, start: 24, end: 30, cited_text: France is a country}\n"
)
# Offsets in the message's text, which the intro comes before.
PARIS = {"url": "https://example.com/paris", "title": "Paris", "start": len(INTRO), "end": len(INTRO) + 5}
FRANCE = {"url": "https://example.com/france", "title": "France", "start": len(INTRO) + 24, "end": len(INTRO) + 30}
MESSAGES = [{"role": "user", "content": "Capital of France?"}]


def url_citation(citation: dict) -> dict:
    return {
        "type": "url_citation",
        "start_index": citation["start"],
        "end_index": citation["end"],
        "url": citation["url"],
        "title": citation["title"],
    }


async def test_responses_add_annotations_as_the_cited_text_streams(base_url, gateway):
    headers = add(gateway, "cited", CITED)
    events = await data_events(base_url, "/v1/responses", {"model": "m", "input": "Hi", "stream": True}, headers)
    kinds = [e["type"] for e in events]
    added = [e for e in events if e["type"] == "response.output_text.annotation.added"]
    assert [e["annotation"] for e in added] == [url_citation(PARIS), url_citation(FRANCE)]
    assert [(e["annotation_index"], e["content_index"], e["output_index"]) for e in added] == [(0, 0, 0), (1, 0, 0)]
    streamed = ""
    for event in events[: events.index(added[0])]:
        streamed += event.get("delta", "") if event["type"] == "response.output_text.delta" else ""
    assert streamed == INTRO + "Paris"  # the first goes out once the text it cites has
    assert kinds.index("response.output_text.done") > events.index(added[1])
    annotations = [url_citation(PARIS), url_citation(FRANCE)]
    part = next(e for e in events if e["type"] == "response.content_part.done")["part"]
    item = next(e for e in events if e["type"] == "response.output_item.done")["item"]
    assert part["annotations"] == item["content"][0]["annotations"] == annotations
    assert events[-1]["response"]["output"][0]["content"][0]["annotations"] == annotations


async def test_openai_sdk_reads_responses_annotations(gateway, openai_client):
    headers = add(gateway, "cited", CITED)
    async with openai_client.responses.stream(model="m", input="Hi", extra_headers=headers) as stream:
        seen = [event async for event in stream]
        streamed = await stream.get_final_response()
    assert [e.annotation_index for e in seen if e.type == "response.output_text.annotation.added"] == [0, 1]
    whole = await openai_client.responses.create(model="m", input="Hi", extra_headers=headers)
    for response in (streamed, whole):
        annotations = response.output[0].content[0].annotations
        assert all(isinstance(annotation, AnnotationURLCitation) for annotation in annotations)
        assert [(a.url, a.title, a.start_index, a.end_index) for a in annotations] == [
            (c["url"], c["title"], c["start"], c["end"]) for c in (PARIS, FRANCE)
        ]
        assert response.output_text[FRANCE["start"] : FRANCE["end"]] == "France"


async def test_messages_stream_citations_deltas(base_url, gateway):
    headers = add(gateway, "cited", CITED)
    body = {"model": "c", "max_tokens": 100, "messages": MESSAGES, "stream": True}
    events = await data_events(base_url, "/v1/messages", body, headers)
    starts = [e["content_block"] for e in events if e["type"] == "content_block_start"]
    assert starts == [{"type": "text", "text": ""}]  # the block opened with the intro, which cites nothing
    citations = [e["delta"]["citation"] for e in events if e.get("delta", {}).get("type") == "citations_delta"]
    assert [(c["type"], c["url"], c["title"], c["cited_text"]) for c in citations] == [
        ("web_search_result_location", PARIS["url"], "Paris", "Paris"),
        ("web_search_result_location", FRANCE["url"], "France", "France is a country"),
    ]
    assert all(c["encrypted_index"] for c in citations)
    headers = add(gateway, "cited-first", "steps: [{text: Paris., citations: [{url: 'https://p', start: 0, end: 5}]}]")
    events = await data_events(base_url, "/v1/messages", body, headers)
    start = next(e for e in events if e["type"] == "content_block_start")["content_block"]
    assert start == {"type": "text", "text": "", "citations": []}
    citation = next(e["delta"]["citation"] for e in events if e.get("delta", {}).get("type") == "citations_delta")
    assert (citation["title"], citation["cited_text"]) == (None, "Paris")


async def test_anthropic_sdk_reads_citations(gateway, anthropic_client):
    headers = add(gateway, "cited", CITED)
    async with anthropic_client.messages.stream(
        model="c", max_tokens=100, messages=MESSAGES, extra_headers=headers
    ) as stream:
        events = [event async for event in stream]
        streamed = await stream.get_final_message()
    cited = [event for event in events if event.type == "citation"]
    assert [event.citation.url for event in cited] == [PARIS["url"], FRANCE["url"]]
    assert [len(event.snapshot) for event in cited] == [1, 2]
    whole = await anthropic_client.messages.create(model="c", max_tokens=100, messages=MESSAGES, extra_headers=headers)
    for message in (streamed, whole):
        block = message.content[0]
        assert block.text == INTRO + TEXT
        assert all(isinstance(citation, CitationsWebSearchResultLocation) for citation in block.citations)
        assert [(c.url, c.title, c.cited_text) for c in block.citations] == [
            (PARIS["url"], "Paris", "Paris"),
            (FRANCE["url"], "France", "France is a country"),
        ]


async def test_chat_annotates_the_message(base_url, gateway, openai_client):
    headers = add(gateway, "cited", CITED)
    chunks = await data_events(
        base_url, "/v1/chat/completions", {"model": "m", "messages": MESSAGES, "stream": True}, headers
    )
    annotated = [c["choices"][0]["delta"]["annotations"] for c in chunks if "annotations" in c["choices"][0]["delta"]]
    expected = [
        {
            "type": "url_citation",
            "url_citation": {key: url_citation(c)[key] for key in url_citation(c) if key != "type"},
        }
        for c in (PARIS, FRANCE)
    ]
    assert annotated == [expected]  # one chunk, before the finish
    whole = await openai_client.chat.completions.create(model="m", messages=MESSAGES, extra_headers=headers)
    async with openai_client.chat.completions.stream(model="m", messages=MESSAGES, extra_headers=headers) as stream:
        streamed = await stream.get_final_completion()
    for completion in (whole, streamed):
        message = completion.choices[0].message
        found = [
            (a.type, a.url_citation.url, a.url_citation.start_index, a.url_citation.end_index)
            for a in message.annotations
        ]
        assert found == [("url_citation", c["url"], c["start"], c["end"]) for c in (PARIS, FRANCE)]
        assert message.content[PARIS["start"] : PARIS["end"]] == "Paris"


async def test_a_token_limit_keeps_the_citations_of_the_text_that_came(base_url, gateway):
    headers = add(gateway, "cited", CITED)
    body = {"model": "m", "input": "Hi", "max_output_tokens": 5, "stream": True}  # 20 characters: the first only
    events = await data_events(base_url, "/v1/responses", body, headers)
    assert events[-1]["response"]["status"] == "incomplete"
    assert events[-1]["response"]["output"][0]["content"][0]["annotations"] == [url_citation(PARIS)]


def test_citation_problems_name_their_line():
    problems = problems_of(
        "steps:\n"
        "  - text: short\n"
        "    citations:\n"
        "      - {url: 'https://a', start: 0, end: 9}\n"
        "      - {title: t, start: 0, end: 2}\n"
        "      - {url: 'https://a', start: 3, end: 1}\n"
        "      - {url: 'https://a', end: 1}\n"
        "      - {url: 'https://a', start: 0, end: 1, page: 2}\n"
        "      - just a url\n"
    )
    assert "t.yaml:4: end: expected a whole number from 0 to 5, got 9" in problems
    assert "t.yaml:5: citation: needs a url" in problems
    assert "t.yaml:6: citation: end (1) must come after start (3)" in problems
    assert "t.yaml:7: citation: needs start and end, character offsets in the text (0 to 5)" in problems
    assert "t.yaml:8: unknown key 'page' in a citation" in problems
    assert "t.yaml:9: citations: each citation is a mapping of url, title, start and end, got a string" in problems
    assert "citations: a text that quotes the request cannot cite" in problems_of(
        "steps: [{text: {from: prompt}, citations: [{url: u, start: 0, end: 1}]}]"
    )
    assert "unknown key 'citations' in a reasoning step" in problems_of(
        "steps: [{reasoning: r, citations: [{url: u, start: 0, end: 1}]}]"
    )
    assert "citations: expected a list" in problems_of("steps: [{text: t, citations: []}]")


def test_validate_names_the_file_and_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: bad\nsteps:\n  - text: hi\n    citations:\n      - {url: u, start: 1, end: 1}\n")
    run = fakehop_here("validate", str(path))
    assert run.returncode == 1
    assert f"{path}:5: citation: end (1) must come after start (1)" in run.stdout + run.stderr
    good = tmp_path / "good.yaml"
    good.write_text(f"name: good\n{CITED}")
    assert fakehop_here("validate", str(good)).returncode == 0


def test_the_schema_takes_citations():
    validator = jsonschema.Draft202012Validator(scenario_schema())
    assert not list(validator.iter_errors(yaml.safe_load(CITED)))
    for wrong in (
        {"text": "t", "citations": []},
        {"text": "t", "citations": [{"url": "u", "start": 0}]},
        {"text": "t", "citations": [{"url": "u", "start": 0, "end": 1, "page": 2}]},
        {"reasoning": "t", "citations": [{"url": "u", "start": 0, "end": 1}]},
    ):
        assert list(validator.iter_errors({"steps": [wrong]})), wrong


def cited_steps(steps) -> list[tuple]:
    """Each text step that cites, with its text and its citations."""
    return [
        ("".join(step.deltas), [(c.url, c.title, c.cited_text, c.start, c.end) for c in step.citations])
        for step in steps
        if isinstance(step, Output) and step.citations
    ]


# What the scenario cites, as offsets in the text of the one step an import writes for the block.
READ_BACK = [
    (
        INTRO + TEXT,
        [
            (PARIS["url"], "Paris", "Paris", PARIS["start"], PARIS["end"]),
            (FRANCE["url"], "France", "France is a country", FRANCE["start"], FRANCE["end"]),
        ],
    )
]


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("protocol", ["responses", "chat"])
async def test_imported_annotations_are_citations_again(base_url, gateway, tmp_path, protocol, stream):
    """OpenAI's annotations carry no cited text: the step's is the text from start to end."""
    headers = add(gateway, "cited", CITED)
    steps = await imported_steps(await answer_bytes(base_url, protocol, stream, headers), tmp_path)
    [(text, citations)] = cited_steps(steps)
    assert (text, citations) == (READ_BACK[0][0], [(*c[:2], text[c[3] : c[4]], *c[3:]) for c in READ_BACK[0][1]])


@pytest.mark.parametrize("stream", [True, False])
async def test_imported_messages_citations_are_citations_again(base_url, gateway, tmp_path, stream):
    """Messages' citations have no offsets: one cites where its cited text is (in a stream, the
    last place in the text that came before it), else all of that text."""
    headers = add(gateway, "cited", CITED)
    steps = await imported_steps(await answer_bytes(base_url, "messages", stream, headers), tmp_path)
    france = (FRANCE["url"], "France", "France is a country", 0, len(INTRO + TEXT))  # its cited text is not the text's
    assert cited_steps(steps) == [(INTRO + TEXT, [READ_BACK[0][1][0], france])]


@pytest.mark.parametrize("protocol", ["responses", "messages"])
async def test_a_recording_keeps_the_citations(aiohttp_server, base_url, gateway, tmp_path, protocol):
    headers = add(
        gateway,
        "cited",
        "steps: [{text: 'Paris is big.', citations: [{url: 'https://p', title: P, start: 0, end: 5}]}]",
    )
    steps = await recorded_steps(aiohttp_server, base_url, protocol, True, headers, tmp_path / "recorded")
    assert cited_steps(steps) == [("Paris is big.", [("https://p", "P", "Paris", 0, 5)])]


async def test_a_block_that_cites_before_its_text_cites_its_cited_text(tmp_path):
    """A stream in the real API's order: the block starts with `citations: []`, its citation
    comes before its text, and the citation's cited text is where it cites."""

    def event(name: str, value: dict) -> str:
        return f"event: {name}\ndata: {json.dumps({'type': name, **value})}\n\n"

    citation = {
        "type": "web_search_result_location",
        "cited_text": "capital of France",
        "url": "https://p",
        "title": "P",
        "encrypted_index": "Eo8BCioIBxgCIiQ4",
    }
    message = {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "c", "usage": {}}
    stream = "".join(
        [
            event("message_start", {"message": message}),
            event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": "", "citations": []}}),
            event("content_block_delta", {"index": 0, "delta": {"type": "citations_delta", "citation": citation}}),
            event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": TEXT}}),
            event("content_block_stop", {"index": 0}),
            event("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}}),
            event("message_stop", {}),
        ]
    )
    steps = await imported_steps(stream.encode(), tmp_path)
    assert cited_steps(steps) == [(TEXT, [("https://p", "P", "capital of France", 13, 30)])]
