"""Scenario files in, validated immutable objects out; every problem named with file and line."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path
from typing import Any

import pytest
from multidict import CIMultiDict

from fakehop.protocols import chat
from fakehop.scenario import quoting
from fakehop.scenario.library import Library, SequenceCounters, resolve
from fakehop.scenario.model import (
    Delay,
    Disconnect,
    Fail,
    Hang,
    KeepaliveNow,
    Output,
    Quote,
    QuoteRef,
    Raw,
    Stall,
    ToolCall,
)
from fakehop.scenario.reader import MAX_TEXT_CHARS, ScenarioError, load_file, parse_duration, parse_text, split_deltas


def parse(text: str, name: str = "t"):
    return parse_text(textwrap.dedent(text), "t.yaml", default_name=name)


def problems(text: str) -> list[str]:
    with pytest.raises(ScenarioError) as raised:
        parse(text)
    return [str(p) for p in raised.value.problems]


def test_every_step_kind_parses():
    scenario = parse("""
        description: all steps
        model: gpt-x
        keepalive: 2s
        stall_timeout: 1.5m
        chunk_interval: 10ms
        usage: {input_tokens: 3, output_tokens: 4}
        finish: stop
        sequence:  # a step that ends the stream ends its entry
          - steps:
              - text: "Let me check."
                chunk: word
                interval: 30ms
              - delay: 250ms
              - reasoning: "Hmm."
              - tool_call: {name: f, arguments: {city: Paris}, id: call_1}
                chunk: 8
              - keepalive
              - stall: continue
              - raw: "data: {not json\\n\\n"
              - stall
          - steps: [hang]
          - steps: [{fail: rate_limit}]
          - steps: [{fail: {kind: server_error, message: "gone"}}]
          - steps: [disconnect]
    """)
    script = scenario.entries[0].script
    assert scenario.name == "t" and scenario.description == "all steps"
    assert (script.model, script.keepalive, script.stall_timeout, script.finish) == ("gpt-x", 2.0, 90.0, "stop")
    assert (script.usage.input_tokens, script.usage.output_tokens) == (3, 4)
    assert tuple(step for entry in scenario.entries for step in entry.script.steps) == (
        Output("text", ("Let", " me", " check."), 0.03, paced=False),
        Delay(0.25),
        Output("reasoning", ("Hmm.",), 0.01, paced=False),
        ToolCall("f", '{"city":"Paris"}', "call_1", ('{"city":', '"Paris"}'), 0.01, paced=False),
        KeepaliveNow(),
        Stall(True),
        Raw("data: {not json\n\n"),
        Stall(False),
        Hang(),
        Fail("rate_limit", None),
        Fail("server_error", "gone"),
        Disconnect(),
    )


def test_scenarios_are_immutable():
    scenario = parse("steps: [{text: hi}]")
    with pytest.raises(dataclasses.FrozenInstanceError):
        scenario.name = "other"


@pytest.mark.parametrize(
    "value,seconds", [(0.25, 0.25), (2, 2.0), ("250ms", 0.25), ("2s", 2.0), ("1.5m", 90.0), ("1h", 3600.0), ("3", 3.0)]
)
def test_durations(value, seconds):
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", ["-1s", "fast", True, None, [1], float("nan"), "2 days", 100000, -0.5])
def test_bad_durations(value):
    with pytest.raises(ValueError):
        parse_duration(value)


@pytest.mark.parametrize(
    "chunk,deltas",
    [
        (None, ("The quick brown",)),
        ("word", ("The", " quick", " brown")),
        ("char", tuple("The quick brown")),
        (4, ("The ", "quic", "k br", "own")),
    ],
)
def test_chunking(chunk, deltas):
    assert split_deltas("The quick brown", chunk) == deltas


def test_word_chunking_keeps_every_character():
    text = "  Two  spaces\nand a newline. "
    assert "".join(split_deltas(text, "word")) == text
    assert split_deltas(text, "word") == ("  Two", "  spaces", "\nand", " a", " newline. ")


def test_faker_text_is_deterministic_by_seed():
    one = parse("steps: [{text: {faker: paragraph, seed: 3}}]").entries[0].script.steps[0]
    two = parse("steps: [{text: {faker: paragraph, seed: 3}}]").entries[0].script.steps[0]
    other = parse("steps: [{text: {faker: paragraph, seed: 4}}]").entries[0].script.steps[0]
    assert one == two and one != other and len(one.deltas[0]) > 20


def test_faker_can_make_long_text():
    step = parse("steps: [{text: {faker: paragraphs, nb: 40, seed: 1}, chunk: word}]").entries[0].script.steps[0]
    assert len(step.deltas) > 500


def test_unknown_key_names_file_line_and_suggests():
    found = problems("""
        description: x
        steps:
          - text: hi
            chunks: word
    """)
    assert found == ["t.yaml:5: unknown key 'chunks' in a text step; did you mean 'chunk'?"]


def test_unknown_top_level_key_suggests():
    assert problems("stepz: [{text: hi}]\n")[0].startswith(
        "t.yaml:1: unknown key 'stepz' in the scenario; did you mean 'steps'?"
    )


def test_every_problem_is_listed():
    found = problems("""
        keepalive: soon
        steps:
          - text: hi
            chunk: sentence
          - delay: -2s
          - fail: meltdown
          - jump
    """)
    assert [p.split(":")[1] for p in found] == ["2", "5", "6", "7", "8"]
    assert (
        found[3]
        == "t.yaml:7: fail: unknown kind 'meltdown'; kinds: interrupted, invalid_prompt, overloaded, rate_limit, server_error"
    )


def test_wrong_types_are_named():
    assert "expected a list of steps" in problems("steps: hello")[0]
    assert "expected a mapping with a status" in problems("http_error: 500")[0]
    assert "from 400 to 599" in problems("http_error: {status: 200}")[0]
    assert "expected a string or a faker mapping" in problems("steps: [{text: 12}]")[0]
    assert "piece 1 is a number; every piece must be a string" in problems("steps: [{text: [1, 2]}]")[0]
    assert "not valid JSON" in problems("steps: [{tool_call: {name: f, arguments: '{bad'}}]")[0]


def test_a_number_whose_text_yaml_would_lose_is_refused_for_a_string_field():
    [lost] = problems("stop_sequence: 0.10\nsteps: [{text: a}]")
    [also_lost] = problems("model: 4.10\nsteps: [{text: a}]")

    assert lost.endswith("stop_sequence: YAML reads this as the number 0.1; quote it to keep it as written")
    assert "model: YAML reads this as the number 4.1" in also_lost
    assert parse("model: 5\nsteps: [{text: a}]").entries[0].script.model == "5"  # a whole number keeps its text
    assert (
        parse("stop_sequence: '0.10'\nfinish: stop_sequence\nsteps: [{text: a}]").entries[0].script.stop_sequence
        == "0.10"
    )


def test_empty_steps_and_missing_body_are_errors():
    assert "is empty" in problems("steps: []")[0]
    assert "needs exactly one of steps or http_error" in problems("description: nothing")[0]
    assert "not both" in problems("steps: [{text: a}]\nsequence: [{use: hello}]")[0]


def test_not_yaml_and_python_tags_are_refused():
    assert "not valid YAML" in problems("steps: [text: {")[0]
    assert "not allowed" in problems("steps: !!python/object/apply:os.system ['true']")[0]
    assert "a scenario must be a mapping" in problems("- just\n- a list")[0]


def test_duplicate_keys_are_refused():
    assert "duplicate key 'steps'" in problems("steps: [{text: a}]\nsteps: [{text: b}]")[0]


def test_a_key_of_the_mapping_overrides_what_a_merge_brings():
    scenario = parse("""
        steps:
          - &first {text: "a b", chunk: word, interval: 1s}
          - <<: *first
            text: "c d"
    """)
    overridden = scenario.entries[0].script.steps[1]
    assert (overridden.deltas, overridden.interval) == (("c", " d"), 1.0)
    assert problems("steps:\n  - <<: {chunk: word}\n    text: a\n    text: b\n") == [
        "t.yaml:4: duplicate key 'text' (first on line 3)"
    ]


@pytest.mark.parametrize("value", ["1", "1.0", "false", "0"])
def test_a_stall_takes_nothing_true_or_continue(value):
    assert problems(f"steps:\n  - text: a\n  - stall: {value}\n") == [
        f"t.yaml:3: stall: expected nothing or 'continue', got {value if value[0].isdigit() else 'False'}"
    ]


def test_bad_regex_in_match():
    assert "not a valid regular expression" in problems("match: {prompt: '/[unclosed/'}\nsteps: [{text: a}]")[0]


def asked(model: str, prompt: str):
    """A parsed Chat Completions request for `model` with one user message."""
    return chat.parse({"model": model, "messages": [{"role": "user", "content": prompt}]})


def test_match_rules():
    match = parse("match: {protocol: chat, model: 'gpt-*', prompt: weather}\nsteps: [{text: a}]").match
    assert match.fits("chat", asked("gpt-4o", "what's the weather?"), CIMultiDict())
    assert not match.fits("messages", asked("gpt-4o", "weather"), CIMultiDict())
    assert not match.fits("chat", asked("claude", "weather"), CIMultiDict())
    assert not match.fits("chat", asked("gpt-4o", "hello"), CIMultiDict())
    regex = parse("match: {prompt: '/^hi\\b/'}\nsteps: [{text: a}]").match
    assert regex.fits("chat", asked("m", "hi there"), CIMultiDict()) and not regex.fits(
        "chat", asked("m", "oh hi"), CIMultiDict()
    )


def test_sequence_entries_inherit_settings_and_last_repeats(library):
    scenario = parse("""
        model: seq-model
        sequence:
          - http_error: {status: 500}
          - steps: [{text: ok}]
            model: other
    """)
    assert scenario.is_sequence
    assert scenario.entries[0].script.model == "seq-model"
    assert scenario.entries[1].script.model == "other"
    assert scenario.entry_for(5) is scenario.entries[1]


def test_use_must_resolve_and_must_not_loop(tmp_path: Path):
    (tmp_path / "a.yaml").write_text("sequence: [{use: b}]\n")
    (tmp_path / "b.yaml").write_text("sequence: [{use: a}]\n")
    (tmp_path / "c.yaml").write_text("sequence:\n  - http_error: {status: 429}\n  - use: nowhere\n")
    with pytest.raises(ScenarioError) as raised:
        Library.load([tmp_path], bundled=False)
    messages = str(raised.value)
    assert "a.yaml:1: use: 'b' leads back to 'a', a loop" in messages
    assert "c.yaml:3: use: no scenario named 'nowhere'" in messages


def test_resolve_follows_use(library):
    assert resolve(library, "flaky-then-ok", 1)[0] == "flaky-then-ok[1]"
    label, script = resolve(library, "flaky-then-ok", 9)
    assert label == "flaky-then-ok[3]->hello" and script is library["hello"].entries[0].script


def test_a_directory_overrides_bundled_names(tmp_path: Path):
    (tmp_path / "hello.yaml").write_text("steps: [{text: mine}]\n")
    library = Library.load([tmp_path])
    script = library["hello"].entries[0].script
    assert script is not None and isinstance(script.steps[0], Output)
    assert script.steps[0].deltas == ("mine",)
    assert "weather-tool" in library


def test_file_limits_and_encoding(tmp_path: Path):
    big = tmp_path / "big.yaml"
    big.write_text("steps:\n" + "  - text: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n" * 40_000)
    with pytest.raises(ScenarioError, match="larger than the limit"):
        load_file(big)
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ScenarioError, match="not a UTF-8 text file"):
        load_file(binary)


def test_every_bundled_scenario_has_a_description(library):
    assert all(library[name].description for name in library.names())


@pytest.mark.parametrize(
    "headers,says",
    [
        ("{Content-Type: text/html}", "headers: Content-Type frames the answer"),
        ("{content-length: 5}", "headers: content-length frames the answer"),
        ("{Transfer-Encoding: chunked}", "headers: Transfer-Encoding frames the answer"),
        ("{Connection: close}", "headers: Connection frames the answer"),
        ("{'X-Evil': \"a\\r\\nSet-Cookie: x=1\"}", "headers: the value of X-Evil holds a line break"),
        ("{'': x}", "headers: '' is not a header name"),
        ("{'bad name': x}", "headers: 'bad name' is not a header name"),
        ("{X-Flag: yes}", "headers: the value of X-Flag reads as true/false; quote it"),
    ],
)
def test_http_error_headers_that_would_garble_the_connection_are_refused(headers, says):
    text = f"http_error:\n  status: 500\n  headers:\n    X-Fine: ok\n    {headers[1:-1]}\n"
    [problem] = problems(text)
    assert problem.startswith("t.yaml:5: ") and says in problem


def test_a_match_header_that_no_request_could_send_is_refused_at_its_line():
    [problem] = problems("match:\n  header:\n    X-Tenant: acme\n    X Tenant: acme\nsteps: [{text: a}]")
    assert problem.startswith("t.yaml:4: match header: 'X Tenant' is not a header name")


def test_a_retry_after_among_the_headers_in_any_case_is_the_retry_after():
    error = parse("http_error:\n  status: 429\n  headers: {retry-after: 3, x-other: y}\n").entries[0].script.http_error
    assert (error.retry_after, error.headers) == ("3", (("x-other", "y"),))
    assert problems("http_error:\n  status: 429\n  retry_after: 2\n  headers:\n    RETRY-AFTER: 3\n") == [
        "t.yaml:5: headers: RETRY-AFTER says again what retry_after says; give the wait once"
    ]
    assert problems("http_error:\n  status: 429\n  headers:\n    Retry-After: 1\n    retry-after: 2\n") == [
        "t.yaml:5: headers: Retry-After is given twice (Retry-After, retry-after); give it once"
    ]


def test_keepalive_below_a_millisecond_is_refused():
    [problem] = problems("keepalive: 0.000001\nsteps: [{delay: 1h}, {text: a}]")
    assert problem == "t.yaml:1: keepalive: must be 0 (never) or at least 1ms, got 1e-06"
    assert parse("keepalive: 1ms\nsteps: [{text: a}]").entries[0].script.keepalive == 0.001


@pytest.mark.parametrize("pattern", ["/(a)\\1/", "/(?=x)y/", "/(?<!a)b/"])
def test_regexes_re2_does_not_take_are_refused_at_load_naming_the_line(pattern):
    [problem] = problems(f"description: d\nmatch:\n  prompt: '{pattern}'\nsteps: [{{text: a}}]")
    assert problem.startswith("t.yaml:3: match prompt: not a valid regular expression (") and "RE2" in problem


def test_explicit_pieces_stream_as_they_are():
    script = (
        parse("""
        steps:
          - text: ["Hel", "lo", ""]
            interval: 20ms
          - reasoning: ["Think", "ing"]
            signature: "c2lnbmVk"
          - tool_call: {name: f, arguments: ['{"ci', 'ty":"Paris"}'], id: call_1}
    """)
        .entries[0]
        .script
    )
    assert script.steps == (
        Output("text", ("Hel", "lo", ""), 0.02, paced=False),
        Output("reasoning", ("Think", "ing"), 0.0, "c2lnbmVk"),
        ToolCall("f", '{"city":"Paris"}', "call_1", ('{"ci', 'ty":"Paris"}'), 0.0),
    )


def test_tool_call_pieces_are_not_checked_as_json():
    """A call cut short keeps what it had: a recording of a stream that broke mid-arguments."""
    step = (
        parse("""steps: [{tool_call: {name: f, arguments: ['{"city": "Pa']}}, disconnect]""").entries[0].script.steps[0]
    )
    assert step.arguments == '{"city": "Pa' and step.deltas == ('{"city": "Pa',)


def test_bad_pieces_are_named_with_their_line():
    assert problems("steps:\n  - text: [a, b]\n    chunk: word\n") == [
        "t.yaml:3: chunk: text is already a list of pieces; leave chunk out"
    ]
    assert problems("steps: [{reasoning: []}]") == [
        't.yaml:1: reasoning: is an empty list; give at least one piece, such as ["Hel", "lo"]'
    ]
    assert problems("steps:\n  - text:\n      - fine\n      - {no: pieces}\n") == [
        "t.yaml:4: text: piece 2 is a mapping; every piece must be a string"
    ]
    assert problems("steps:\n  - tool_call: {name: f, arguments: ['{}', 3]}\n") == [
        "t.yaml:2: tool_call arguments: piece 2 is a number; every piece must be a string"
    ]
    assert problems("steps:\n  - tool_call: {name: f, arguments: ['{}']}\n    chunk: 2\n") == [
        "t.yaml:3: chunk: tool_call arguments is already a list of pieces; leave chunk out"
    ]
    assert "unknown key 'signature' in a text step" in problems("steps: [{text: a, signature: s}]")[0]


def test_pieces_count_towards_the_text_limit():
    from fakehop.scenario import yamlsource
    from fakehop.scenario.reader import MAX_TEXT_CHARS, parse_document

    half = "a" * (MAX_TEXT_CHARS // 2)  # a file this big is refused for its size first: read past that check
    with pytest.raises(ScenarioError, match="more than 2,000,000 characters"):
        parse_document(yamlsource.load(f"steps: [{{text: [{half}, {half}, b]}}]"), "t.yaml", "t")


# ---------------------------------------------------------------- conversations, quotes and conversation rules


def at_turn(turn: int, result: str = "Sunny"):
    """A parsed Chat Completions request at `turn`, ending with one get_weather result."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Weather?"}]
    for earlier in range(1, turn):
        call = {"id": f"c{earlier}", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{earlier}", "content": result},
        ]
    return chat.parse({"model": "m", "messages": messages})


def test_a_conversation_answers_each_turn_with_its_entry_and_repeats_the_last(library):
    scenario = parse("""
        name: talk
        model: talk-model
        conversation:
          - steps: [{text: one}]
          - http_error: {status: 503}
          - steps: [{text: {from: tool_result}}]
    """)
    assert scenario.is_conversation and not scenario.is_sequence
    talk = library.with_scenario(scenario)
    played = [resolve(talk, "talk", 99, at_turn(turn, f"result {turn}")) for turn in (1, 2, 3, 7)]
    assert [label for label, _ in played] == ["talk[1]", "talk[2]", "talk[3]", "talk[3]"]
    assert played[1][1].http_error.status == 503
    assert [script.steps[0].deltas for _, script in (played[0], played[2], played[3])] == [
        ("one",),
        ("result 3",),
        ("result 7",),
    ]
    assert {script.model for _, script in played} == {"talk-model"}


def test_a_use_of_a_sequence_inside_a_conversation_keeps_the_sequences_own_count(library):
    talk = library.with_scenario(parse("name: talk\nconversation: [{steps: [{text: first}]}, {use: flaky-then-ok}]"))
    counters = SequenceCounters()
    labels = [counters.next_script(talk, "talk", at_turn(turn))[0] for turn in (2, 1, 2, 2)]
    assert labels == [
        "talk[2]->flaky-then-ok[1]",
        "talk[1]",
        "talk[2]->flaky-then-ok[2]",
        "talk[2]->flaky-then-ok[3]->hello",
    ]


def test_quotes_take_the_pieces_of_a_template():
    [step] = (
        parse("steps: [{text: {template: 'It is {tool_result:get_time}; {{ {prompt} }}'}, chunk: word}]")
        .entries[0]
        .script.steps
    )
    assert step.pieces == ("It is ", QuoteRef("tool_result", "get_time"), "; { ", QuoteRef("prompt"), " }")
    script = parse("steps: [{reasoning: {from: tool_result, tool: get_weather}}, {text: plain}]").entries[0].script
    assert script.request_text and script.steps[0] == Quote(
        "reasoning", (QuoteRef("tool_result", "get_weather"),), None, 0.0
    )
    assert not parse("steps: [{text: plain}]").entries[0].script.request_text


def test_filled_quotes_split_as_the_step_says():
    script = parse("steps: [{text: {template: 'Got {tool_result}, asked {prompt}'}, chunk: word}]").entries[0].script
    [output] = quoting.filled(script, at_turn(2, "light rain")).steps
    assert output == Output("text", ("Got", " light", " rain,", " asked", " Weather?"), 0.0)
    assert quoting.filled(script, at_turn(1)).steps[0].deltas == (
        "Got",
        " ,",
        " asked",
        " Weather?",
    )  # no tool result: ""


@pytest.mark.parametrize(
    "text, problem",
    [
        (
            "steps: [{text: {from: answer}}]",
            "t.yaml:1: text: cannot quote 'answer'; a quote takes prompt or tool_result",
        ),
        ("steps: [{text: {from: prompt, tool: f}}]", "t.yaml:1: text: only tool_result takes a tool name, not prompt"),
        ("steps: [{text: {tool: f}}]", "t.yaml:1: text: a quote needs from: prompt or tool_result"),
        (
            "steps:\n  - text:\n      template: 'a } b'",
            "t.yaml:3: text: template: a lone '}'; write }} for the brace itself",
        ),
        (
            "steps: [{text: {template: '{toolresult}'}}]",
            "t.yaml:1: text: cannot quote 'toolresult'; a quote takes prompt or tool_result",
        ),
        (
            "steps: [{text: {template: 'x', from: prompt}}]",
            "t.yaml:1: text: a quote takes from (and tool) or template, not both",
        ),
        (
            "steps: [{text: {from: prompt, tol: f}}]",
            "t.yaml:1: unknown key 'tol' in a quoting text; did you mean 'tool'?",
        ),
        ("conversation: []", "t.yaml:1: conversation: expected a non-empty list of entries"),
        (
            "conversation: [{steps: [{text: a}]}]\nsteps: [{text: b}]",
            "t.yaml:1: conversation: a scenario has either a conversation or its own steps/http_error, not both",
        ),
        (
            "conversation:\n  - stepz: []",
            "t.yaml:2: unknown key 'stepz' in a conversation entry; did you mean 'steps'?",
        ),
        (
            "sequence: [{use: hello}]\nconversation: [{use: hello}]",
            "t.yaml:2: a scenario has either a sequence or a conversation, not both",
        ),
        (
            "match:\n  turn: [2, '<3']\nsteps: [{text: a}]",
            "t.yaml:2: match turn: expected a turn number from 1, a list of them, or \">=N\", got '<3'",
        ),
        (
            "match: {tool_result: ''}\nsteps: [{text: a}]",
            "t.yaml:1: match tool_result: expected true, false or a tool's name, got a string",
        ),
        (
            "match: {header: [X-Tenant]}\nsteps: [{text: a}]",
            't.yaml:1: match header: expected a mapping of header names to globs, such as {X-Tenant: "acme-*"}',
        ),
        (
            "match:\n  system: '/(/'\nsteps: [{text: a}]",
            "t.yaml:2: match system: not a valid regular expression (missing ): (); match regexes run on RE2",
        ),
        ("match: {tool: f}\nsteps: [{text: a}]", "t.yaml:1: unknown key 'tool' in match; did you mean 'tools'?"),
    ],
)
def test_conversation_mistakes_are_found_at_load_with_their_line(text, problem):
    assert any(found.startswith(problem) for found in problems(text)), problems(text)


def test_match_rules_on_the_conversation():
    def fits(rules: str, request, headers=()) -> bool:
        return parse(f"match: {rules}\nsteps: [{{text: a}}]").match.fits("chat", request, CIMultiDict(headers))

    assert fits("{turn: 2}", at_turn(2)) and not fits("{turn: 2}", at_turn(3))
    assert fits("{turn: [1, '>=4']}", at_turn(5)) and not fits("{turn: [1, '>=4']}", at_turn(3))
    assert fits("{tool_result: true}", at_turn(2)) and fits("{tool_result: false}", at_turn(1))
    assert fits("{tool_result: get_weather}", at_turn(2)) and not fits("{tool_result: get_time}", at_turn(2))
    assert fits("{header: {x-tenant: 'acme-*'}}", at_turn(1), [("X-Tenant", "other"), ("X-Tenant", "acme-1")])
    assert not fits("{header: {x-tenant: 'acme-*'}, turn: 2}", at_turn(1), [("X-Tenant", "acme-1")])


def test_a_quote_is_cut_at_the_limit_of_a_scenarios_own_text():
    script = parse("steps: [{text: {template: '>{tool_result}'}}]").entries[0].script
    [output] = quoting.filled(script, at_turn(2, "x" * (MAX_TEXT_CHARS + 10))).steps
    assert output.deltas == (">" + "x" * (MAX_TEXT_CHARS - 1),)
