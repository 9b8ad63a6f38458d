"""The fault kinds that break or slow an answer's stream (interrupt, truncate, stall, hang,
malformed, latency), through the official SDKs on real sockets, in every protocol, streamed
or not: what the SDK raises, how many deltas came before, and what the journal says.

These tests use the installed plugin's `fakehop` fixture, at a small time scale.
"""

from __future__ import annotations

import json
import time

import anthropic
import openai
import pytest

from fakehop.testing import Fakehop
from fakehop.testing.remote import ControlClient, ControlFailed

from .sdk_results import CUT_SHORT, TIMED_OUT

PROTOCOLS = ("chat", "responses", "messages")
WORDS = ["Hello!", " How", " can", " I", " help", " you", " today?"]  # the default answer, word by word
HELLO = "".join(WORDS)
SCALE = 0.01  # the default stall_timeout (120 s) takes 1.2 s, the keepalive interval (10 s) 0.1 s


@pytest.fixture
def fast(fakehop: Fakehop) -> Fakehop:
    fakehop.time_scale = SCALE
    return fakehop


def ask(fakehop: Fakehop, protocol: str, stream: bool, deltas: list[str], timeout: float = 10) -> str:
    """One request through `protocol`'s SDK, without retries; the text of the answer. A stream's
    text deltas go into `deltas` as they come, so that they are there when the SDK raises."""
    prompt = [{"role": "user", "content": "Hi"}]
    if protocol == "messages":
        client = fakehop.anthropic_client(max_retries=0, timeout=timeout)
        if not stream:
            return client.messages.create(model="claude-sonnet-5", max_tokens=100, messages=prompt).content[0].text
        for event in client.messages.create(model="claude-sonnet-5", max_tokens=100, messages=prompt, stream=True):
            if event.type == "content_block_delta" and event.delta.type == "text_delta":
                deltas.append(event.delta.text)
        return "".join(deltas)
    openai_client = fakehop.openai_client(max_retries=0, timeout=timeout)
    if protocol == "responses":
        if not stream:
            return openai_client.responses.create(model="gpt-5.6-sol", input="Hi").output_text
        for item in openai_client.responses.create(model="gpt-5.6-sol", input="Hi", stream=True):
            if item.type == "response.output_text.delta":
                deltas.append(item.delta)
        return "".join(deltas)
    if not stream:
        return openai_client.chat.completions.create(model="m", messages=prompt).choices[0].message.content or ""
    for chunk in openai_client.chat.completions.create(model="m", messages=prompt, stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            deltas.append(chunk.choices[0].delta.content)
    return "".join(deltas)


def raised(fakehop: Fakehop, protocol: str, stream: bool, timeout: float = 10) -> tuple[Exception, list[str]]:
    """What the SDK raised for a broken answer, and the deltas that came before."""
    deltas: list[str] = []
    try:
        text = ask(fakehop, protocol, stream, deltas, timeout)
    except Exception as exc:  # which exception it is, is what the test looks at
        return exc, deltas
    raise AssertionError(f"expected the answer to break, got {text!r}")


def sdk(protocol: str):
    return anthropic if protocol == "messages" else openai


def last_request(fakehop: Fakehop):
    return fakehop.requests[-1]


def streams_and_protocols():
    return pytest.mark.parametrize(
        ("protocol", "stream"),
        [(protocol, stream) for protocol in PROTOCOLS for stream in (False, True)],
        ids=[f"{protocol}-{'streamed' if stream else 'whole'}" for protocol in PROTOCOLS for stream in (False, True)],
    )


@streams_and_protocols()
def test_interrupt_sends_the_first_deltas_then_the_protocol_s_error(fast, protocol, stream):
    fast.fault("interrupt", after=3, error="overloaded", message="busy now")
    error, deltas = raised(fast, protocol, stream)
    if stream:
        assert deltas == WORDS[:3]
        expected = anthropic.APIStatusError if protocol == "messages" else openai.APIError
        assert isinstance(error, expected) and "busy now" in str(error)
    else:  # overloaded is a 529 on Messages, a 503 elsewhere (each SDK release names its own class)
        assert isinstance(error, sdk(protocol).APIStatusError)
        assert error.status_code == (529 if protocol == "messages" else 503) and "busy now" in str(error)
    record = last_request(fast)
    assert (record.faults, record.end, record.error) == (["interrupt"], "failed", "overloaded: busy now")
    assert ask(fast, protocol, stream, []) == HELLO  # times: 1


@streams_and_protocols()
def test_truncate_sends_the_first_deltas_then_closes_with_no_terminator(fast, protocol, stream):
    fast.fault("truncate", after=2)
    error, deltas = raised(fast, protocol, stream)
    assert isinstance(error, CUT_SHORT)
    assert deltas == (WORDS[:2] if stream else [])
    record = last_request(fast)
    assert (record.faults, record.end) == (["truncate"], "disconnected")


@streams_and_protocols()
def test_stall_keeps_the_stream_alive_then_gives_the_gateway_s_stall_error(fast, protocol, stream):
    fast.fault("stall", after=1, timeout="50s")
    began = time.monotonic()
    error, deltas = raised(fast, protocol, stream)
    took = time.monotonic() - began
    assert 0.45 < took < 5, took  # 50 s at 0.01
    assert "Stream stalled: no output for 50s" in str(error)
    assert isinstance(error, (anthropic.APIStatusError if protocol == "messages" else openai.APIError))
    assert deltas == (WORDS[:1] if stream else [])
    record = last_request(fast)
    assert (record.faults, record.end) == (["stall"], "failed")
    if stream:
        keepalives = control(fast).call("GET", f"/requests/{record.seq}")["request"]["keepalives"]
        assert 2 <= keepalives <= 5  # one each 0.1 s of the 0.5 s


@streams_and_protocols()
def test_a_stall_that_continues_gives_the_whole_answer_later(fast, protocol, stream):
    fast.fault("stall", then="continue", timeout=40)
    began = time.monotonic()
    deltas: list[str] = []
    assert ask(fast, protocol, stream, deltas) == HELLO
    assert 0.35 < time.monotonic() - began < 5
    record = last_request(fast)
    assert (record.faults, record.end) == (["stall"], "completed")


def test_a_stall_waits_the_scenario_s_stall_timeout_by_default(fast):
    fast.fault("stall")
    began = time.monotonic()
    error, deltas = raised(fast, "chat", True)
    assert 1.1 < time.monotonic() - began < 6  # 120 s at 0.01
    assert deltas == WORDS[:1] and "no output for 120s" in str(error)


@streams_and_protocols()
def test_hang_sends_the_first_deltas_then_nothing_until_the_client_gives_up(fast, protocol, stream):
    fast.fault("hang", after=2)
    error, deltas = raised(fast, protocol, stream, timeout=1)
    assert isinstance(error, TIMED_OUT)
    assert deltas == (WORDS[:2] if stream else [])
    assert last_request(fast).faults == ["hang"]
    for _ in range(100):  # the server sees the client go a moment later
        if last_request(fast).end != "in_progress":
            break
        time.sleep(0.05)
    assert last_request(fast).end == "client_disconnected"


def test_hang_sends_no_delta_by_default(fast):
    fast.fault("hang")
    error, deltas = raised(fast, "messages", True, timeout=1)
    assert isinstance(error, TIMED_OUT) and deltas == []


@streams_and_protocols()
def test_malformed_writes_its_raw_text_after_the_first_deltas(fast, protocol, stream):
    fast.fault("malformed", after=4)
    error, deltas = raised(fast, protocol, stream)
    assert isinstance(error, json.JSONDecodeError)
    assert deltas == (WORDS[:4] if stream else [])
    record = last_request(fast)
    assert record.faults == ["malformed"]
    assert (record.end, record.status) == (("disconnected", 200) if stream else ("completed", 200))


def test_a_malformed_answer_not_streamed_is_a_200_whose_body_is_the_raw_text(fast):
    fast.fault("malformed", raw="{oops")
    response = fast.openai_client(max_retries=0).chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": "Hi"}]
    )
    assert (response.status_code, response.http_response.text) == (200, "{oops")


def test_a_malformed_stream_writes_the_raw_text_as_given(fast):
    fast.fault("malformed", after=1, raw="data: {broken\n\n")
    record_frames = []
    with pytest.raises(json.JSONDecodeError):
        ask(fast, "chat", True, record_frames)
    frames = control(fast).call("GET", f"/requests/{last_request(fast).seq}")["request"]["frames"]
    assert frames[-1][1].endswith("data: {broken\n\n")


@streams_and_protocols()
def test_latency_gives_the_same_answer_later(fast, protocol, stream):
    fast.fault("latency", first=30, between="10s")  # 0.3 s, then 0.1 s before each of six more: 0.9 s
    began = time.monotonic()
    deltas: list[str] = []
    assert ask(fast, protocol, stream, deltas) == HELLO
    assert 0.8 < time.monotonic() - began < 6
    if stream:
        assert deltas == WORDS
    record = last_request(fast)
    assert (record.faults, record.end) == (["latency"], "completed")


def test_keepalives_flow_through_a_long_latency(fast):
    fast.fault("latency", first=60)  # 0.6 s with the keepalive interval at 0.1 s
    assert ask(fast, "messages", True, []) == HELLO
    keepalives = control(fast).call("GET", f"/requests/{last_request(fast).seq}")["request"]["keepalives"]
    assert 3 <= keepalives <= 7


def test_after_counts_tool_call_argument_pieces_and_breaks_a_short_answer_where_it_would_end(fast):
    fast.queue("weather-tool")
    fast.fault("truncate", after=100)
    error, _ = raised(fast, "chat", True)
    assert isinstance(error, openai.APIConnectionError)  # fewer deltas than 100: cut before the ending
    fast.queue("weather-tool")  # five words of text, then the call's arguments eight characters a delta
    fast.fault("interrupt", after=7)
    pieces = []
    stream = fast.openai_client(max_retries=0).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "weather?"}], stream=True
    )
    with pytest.raises(openai.APIError, match="interrupted"):
        for chunk in stream:
            for call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                if call.function and call.function.arguments:
                    pieces.append(call.function.arguments)
    assert len(pieces) == 2


def test_a_fault_over_a_scenario_s_own_ending_lets_it_end_first(fast):
    fast.queue("disconnect")  # "Here is the start of", word by word, then the connection closes
    fast.fault("interrupt", after=10)
    error, deltas = raised(fast, "chat", True)
    assert isinstance(error, openai.APIConnectionError) and len(deltas) == 5
    assert (last_request(fast).end, last_request(fast).faults) == ("disconnected", ["interrupt"])


def test_an_http_error_scenario_is_answered_as_it_says(fast):
    fast.queue("rate-limited")
    fast.fault("truncate")
    error, _ = raised(fast, "chat", True)
    assert isinstance(error, openai.RateLimitError)


def test_a_header_names_a_break_for_its_request_alone(fast):
    client = fast.openai_client(max_retries=0, default_headers={"X-Fakehop-Fault": "interrupt; after=2"})
    got = []
    with pytest.raises(openai.APIError, match="interrupted"):
        for chunk in client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Hi"}], stream=True
        ):
            got.extend([chunk.choices[0].delta.content] if chunk.choices and chunk.choices[0].delta.content else [])
    assert got == WORDS[:2]
    assert ask(fast, "chat", True, []) == HELLO


# ---------------------------------------------------------------- the parameters


def control(fakehop: Fakehop) -> ControlClient:
    return ControlClient(fakehop.url, session=fakehop.session)


def refusal(fakehop: Fakehop, body: dict) -> str:
    with pytest.raises(ControlFailed) as caught:
        control(fakehop).call("POST", "/faults", body)
    assert caught.value.status == 400 and caught.value.answer is not None
    return caught.value.answer["error"]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"kind": "truncate", "after": -1}, "after: expected a whole number from 0 to 1000000, got -1"),
        ({"kind": "truncate", "after": 1.5}, "after: expected a whole number"),
        ({"kind": "truncate", "after": True}, "after: expected a whole number"),
        ({"kind": "interrupt", "error": "overload"}, "error: expected one of rate_limit, server_error, invalid_prompt"),
        ({"kind": "interrupt", "error": "overload"}, "did you mean 'overloaded'?"),
        ({"kind": "stall", "then": "resume"}, "then: expected one of error, continue, got 'resume'"),
        ({"kind": "stall", "timeout": "soon"}, "timeout: expected a duration such as 2s"),
        ({"kind": "stall", "timeout": -1}, "timeout: a duration must be zero or more seconds"),
        ({"kind": "latency", "first": "2d"}, "first: expected a duration"),
        ({"kind": "latency", "between": 90000}, "between: a duration must be at most 24h"),
        ({"kind": "malformed", "raw": ""}, "raw: expected a text of 1 to 100,000 characters"),
        ({"kind": "malformed", "raw": 7}, "raw: expected a text"),
        ({"kind": "truncate", "error": "overloaded"}, "truncate: unknown parameter 'error'; the parameters are: after"),
        ({"kind": "stall", "timout": 3}, "did you mean 'timeout'?"),
        ({"kind": "latncy"}, "did you mean 'latency'?"),
    ],
)
def test_a_wrong_parameter_is_a_400_naming_it(fakehop, body, says):
    assert says in refusal(fakehop, body)
    assert fakehop.faults == []


def test_each_kind_lists_its_parameters_with_their_defaults(fakehop):
    client = control(fakehop)
    shown = {kind: client.call("POST", "/faults", {"kind": kind}) for kind in PARAMETERS}
    for kind, parameters in PARAMETERS.items():
        assert {name: shown[kind][name] for name in parameters} == parameters
    assert [fault.kind for fault in fakehop.faults] == list(PARAMETERS)


PARAMETERS = {
    "interrupt": {"after": 1, "error": "interrupted", "message": None},
    "truncate": {"after": 1},
    "stall": {"after": 1, "then": "error", "timeout": None},
    "hang": {"after": 0},
    "malformed": {"after": 1, "raw": "event: content_block_delta\ndata: {not json\n\n"},
    "latency": {"first": 0.0, "between": 0.0},
}


def test_durations_are_numbers_of_seconds_or_scenario_durations(fakehop):
    fault = fakehop.fault("latency", first="250ms", between=1.5)
    assert (fault.settings["first"], fault.settings["between"]) == (0.25, 1.5)
    assert fakehop.fault("stall", timeout="2m").settings["timeout"] == 120.0


def test_after_counts_reasoning_deltas_too(fast):
    fast.queue("think-then-tool")  # reasoning word by word, then text, then a tool call
    fast.fault("interrupt", after=3)
    kinds = []
    events = fast.openai_client(max_retries=0).responses.create(
        model="gpt-5.6-sol", input="weather?", reasoning={"effort": "low", "summary": "auto"}, stream=True
    )
    with pytest.raises(openai.APIError, match="interrupted"):
        for event in events:
            if event.type.endswith(".delta"):
                kinds.append(event.type)
    assert kinds == ["response.reasoning_summary_text.delta"] * 3
