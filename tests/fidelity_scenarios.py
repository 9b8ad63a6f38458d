"""Scenarios that play what the fidelity steps and settings give, as an upstream for the record
and import tests: whatever of them a recording drops, the SDKs' result shows it."""

from __future__ import annotations

from fakehop.scenario.library import Library
from fakehop.scenario.reader import parse_text

FIDELITY = {
    "refusal": 'steps: [{refusal: "I can\'t help with that.", chunk: word}]',
    "text-then-refusal": "steps: [{text: 'Let me see.'}, {refusal: 'No, I will not.'}]",
    "refusal-after-a-call": "steps: [{tool_call: {name: get_weather, arguments: {city: Paris}, id: call_w}}, {refusal: 'I stop here.'}]",
    "redacted-thinking": "steps: [{reasoning: 'Thinking it over.'}, {redacted_thinking: 'RURBVEFEQVRB'}, redacted_thinking, {text: Done.}]",
    "stop-sequence": "steps: [{text: 'Count: 1, 2, 3', chunk: word}]\nfinish: stop_sequence\nstop_sequence: '###'",
    "usage-details": (
        "steps: [{reasoning: Hmm.}, {text: Counted.}]\n"
        "usage: {input_tokens: 120, output_tokens: 40, reasoning_tokens: 17, cached_tokens: 64, cache_write_tokens: 32,"
        " input_audio_tokens: 5, output_audio_tokens: 6, accepted_prediction_tokens: 7, rejected_prediction_tokens: 8}"
    ),
    "fail-context-length": (
        "steps: [{text: Part}, {fail: {kind: invalid_prompt, code: context_length_exceeded, param: messages,"
        ' message: "This model\'s maximum context length is 8192 tokens."}}]'
    ),
    "fail-quota": "steps: [{text: Part}, {fail: {kind: rate_limit, type: insufficient_quota, code: insufficient_quota, message: Pay up.}}]",
    "http-error-quota": "http_error: {status: 429, type: insufficient_quota, code: insufficient_quota, message: 'You exceeded your current quota.'}",
    "http-error-param": "http_error: {status: 400, code: context_length_exceeded, param: messages, message: Too long.}",
    "summary-parts": (
        "force_reasoning: true\n"
        "steps: [{reasoning: {parts: ['**Plan** Look it up.', '**Answer** Say it.']}, chunk: word}, {text: Done.}]"
    ),
    "phases": (
        "steps: [{text: Checking., phase: commentary}, {tool_call: {name: get_weather, arguments: {}, id: call_p}},"
        " {text: 'It is sunny.', phase: final_answer}]"
    ),
}


def with_fidelity(library: Library) -> Library:
    """`library` with the FIDELITY scenarios added."""
    for name, text in FIDELITY.items():
        library = library.with_scenario(parse_text(text, "<fidelity>", name))
    return library
