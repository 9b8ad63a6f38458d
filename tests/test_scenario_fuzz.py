"""Fuzzing the scenario loader: whatever it is fed, it answers with a Scenario or its own error.

FAKEHOP_FUZZ_EXAMPLES sets the number of examples per test (200 by default; `make soak` uses more).
"""

from __future__ import annotations

import os

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fakehop.scenario.model import Scenario
from fakehop.scenario.reader import ACTION_KEYS, ENTRY_KEYS, FAIL_KINDS, TOP_KEYS, ScenarioError, parse_text

KEYS = st.sampled_from(
    TOP_KEYS
    + ENTRY_KEYS
    + ACTION_KEYS
    + ("chunk", "interval", "name", "arguments", "kind", "status", "faker", "seed", "nb")
) | st.text(max_size=8)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
    | st.sampled_from(["2s", "250ms", "word", "char", "continue", "paragraph", *FAIL_KINDS, "hang", "stall"])
)
DOCUMENTS = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=5), max_leaves=25
)
FUZZ = settings(
    max_examples=int(os.environ.get("FAKEHOP_FUZZ_EXAMPLES", "200")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def check(text: str) -> None:
    try:
        scenario = parse_text(text, "fuzz.yaml", "fuzz")
    except ScenarioError as exc:
        assert exc.problems
        for problem in exc.problems:
            assert problem.source == "fuzz.yaml"
            assert problem.line >= 0 and problem.message
    else:
        assert isinstance(scenario, Scenario) and scenario.entries


@FUZZ
@given(DOCUMENTS)
def test_any_yaml_document(document):
    check(yaml.safe_dump(document, allow_unicode=True))


@FUZZ
@given(st.dictionaries(KEYS, DOCUMENTS, max_size=6).map(lambda d: {**d, "steps": d.get("steps", [])}))
def test_documents_shaped_like_scenarios(document):
    check(yaml.safe_dump(document, allow_unicode=True))


@FUZZ
@given(st.text(max_size=200))
def test_any_text(text):
    check(text)


@FUZZ
@given(st.binary(max_size=200))
def test_any_bytes_decoded_leniently(data):
    check(data.decode("utf-8", "replace"))


@FUZZ
@given(
    st.lists(
        st.sampled_from(
            [
                "steps:",
                "  - text: a",
                "  - stall",
                "- ",
                "{",
                "}",
                "[",
                "&a",
                "*a",
                "!!python/name:os.system",
                "sequence:",
                "  - use: x",
                ": :",
                "\t",
            ]
        ),
        max_size=12,
    )
)
def test_yaml_fragments(lines):
    check("\n".join(lines))


def test_problems_in_parseable_documents_carry_a_line():
    with_line = parse_problems("steps:\n  - text: a\n    chunk: 0\n  - fail: nope\n")
    assert [p.line for p in with_line] == [3, 4]


def parse_problems(text: str):
    try:
        parse_text(text, "fuzz.yaml", "fuzz")
    except ScenarioError as exc:
        return exc.problems
    return []
