"""Sessions on one real server: each has its own queue, default, sequence counters, added
scenarios, time scale, strictness and journal view, whether a request names it by header or by
its API key; the official SDKs are the apps."""

from __future__ import annotations

import asyncio

import anthropic
import openai
import pytest

from . import clients
from .conftest import FAST
from .test_control_api import Control, control, session  # noqa: F401 - the fixtures, shared

QUESTION = "What is the weather?"
HELLO = "Hello! How can I help you today?"
FAULT_STATUSES = (400, 403, 404, 409, 422, 429, 500, 503)
SEQUENCE = {"X-Fakehop-Scenario": "flaky-then-ok"}


def in_session(name: str) -> dict:
    return {"params": {"session": name}}


class App:
    """An app under test in session `name`, with an official SDK: openai or anthropic, the session
    named by the header or by the API key alone."""

    def __init__(self, base_url: str, name: str, sdk: str, by_key: bool):
        options = (
            {"api_key": f"sk-fakehop-{name}"}
            if by_key
            else {"api_key": "sk-app", "default_headers": {"X-Fakehop-Session": name}}
        )
        self.question = f"{QUESTION} ({name})"
        self.client: openai.AsyncOpenAI | anthropic.AsyncAnthropic
        if sdk == "openai":
            self.client = clients.openai_async(base_url=base_url + "/v1", max_retries=0, **options)
        else:
            self.client = clients.anthropic_async(base_url=base_url, max_retries=0, **options)

    async def ask(self, **extra) -> str:
        """The streamed answer's text, or `HTTP <status>` for an error."""
        try:
            if isinstance(self.client, openai.AsyncOpenAI):
                stream = await self.client.chat.completions.create(
                    model="gpt-5.6-sol", messages=[{"role": "user", "content": self.question}], stream=True, **extra
                )
                return "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])
            async with self.client.messages.stream(
                model="claude-sonnet-5", max_tokens=100, messages=[{"role": "user", "content": self.question}], **extra
            ) as events:
                return "".join([text async for text in events.text_stream])
        except (openai.APIStatusError, anthropic.APIStatusError) as exc:
            return f"HTTP {exc.status_code}"


async def run_session(control: Control, base_url: str, number: int) -> tuple[list[str], list[dict]]:
    """Session `number` sets itself up (its own `fault`, `answer` and `mine`, under the same names
    as every other session's), then makes six requests; returns the answers and its journal."""
    name = f"worker-{number}"
    status = FAULT_STATUSES[number]
    await control.ok(
        "PUT",
        "/default",
        json={"scenario": {"name": "mine", "steps": [{"text": f"default of {name}"}]}},
        **in_session(name),
    )
    await control.ok(
        "POST",
        "/queue",
        json={"scenario": {"name": "fault", "http_error": {"status": status, "message": f"fault of {name}"}}},
        **in_session(name),
    )
    answer = {
        "name": "answer",
        "steps": [{"text": f"the answer of {name}", "chunk": "word", "interval": "1s"}],
    }  # 10 ms a word at FAST
    await control.ok("POST", "/queue", json={"scenario": answer}, **in_session(name))
    app = App(base_url, name, ("openai", "anthropic")[number % 2], by_key=number % 4 >= 2)
    async with app.client:
        answers = [await app.ask(), await app.ask()]
        answers += [await app.ask(extra_headers=SEQUENCE) for _ in range(3)]
        answers.append(await app.ask())
    journal = (await control.ok("GET", "/requests", **in_session(name)))["requests"]
    return answers, journal


async def test_eight_sessions_at_once_each_get_their_own_answers_and_journal(control, base_url):
    results = await asyncio.gather(*(run_session(control, base_url, number) for number in range(8)))

    for number, (answers, journal) in enumerate(results):
        name = f"worker-{number}"
        assert answers == [
            f"HTTP {FAULT_STATUSES[number]}",
            f"the answer of {name}",
            "HTTP 429",
            "HTTP 500",
            HELLO,
            f"default of {name}",
        ]
        assert [r["scenario"] for r in journal] == [
            "fault",
            "answer",
            "flaky-then-ok[1]",
            "flaky-then-ok[2]",
            "flaky-then-ok[3]->hello",
            "mine",
        ]
        assert {r["session"] for r in journal} == {name}
        assert all(r["body"]["messages"] == [{"role": "user", "content": f"{QUESTION} ({name})"}] for r in journal)
        assert journal[0]["error"] == f"fault of {name}"
    everything = (await control.ok("GET", "/requests"))["requests"]
    assert len(everything) == 48 and None not in {r["session"] for r in everything}
    assert (await control.ok("GET", "/queue"))["queue"] == []
    assert (await control.ok("GET", "/health"))["default"] == "hello"


async def test_an_api_key_alone_puts_an_app_in_its_session(control, base_url):
    await control.ok("POST", "/queue", json={"scenario": {"steps": [{"text": "for a"}]}}, **in_session("a"))
    await control.ok("POST", "/queue", json={"scenario": {"steps": [{"text": "for b"}]}}, **in_session("b"))
    async with (
        clients.openai_async(base_url=base_url + "/v1", api_key="sk-fakehop-a", max_retries=0) as app_a,
        clients.anthropic_async(base_url=base_url, api_key="sk-fakehop-b", max_retries=0) as app_b,
        clients.openai_async(base_url=base_url + "/v1", api_key="sk-anything", max_retries=0) as other,
    ):
        stream = await other.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert stream.choices[0].message.content == HELLO  # the global session has nothing queued
        answer_b = await app_b.messages.create(
            model="claude-sonnet-5", max_tokens=50, messages=[{"role": "user", "content": "hi"}]
        )
        answer_a = await app_a.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert answer_a.choices[0].message.content == "for a"
    assert answer_b.content[0].text == "for b"
    journal_b = (await control.ok("GET", "/requests", **in_session("b")))["requests"]
    assert [(r["session"], r["path"], r["headers"]["Authorization"]) for r in journal_b] == [
        ("b", "/v1/messages", "Bearer ****op-b")
    ]  # redacted


async def test_the_bearer_scheme_may_come_in_any_case(control, session, base_url):
    await control.ok("POST", "/queue", json={"scenario": "server-error"}, **in_session("any-case"))
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    async with session.post(
        base_url + "/v1/chat/completions", json=body, headers={"Authorization": "BEARER sk-fakehop-any-case"}
    ) as response:
        assert response.status == 500
    assert [r["session"] for r in (await control.ok("GET", "/requests"))["requests"]] == ["any-case"]


async def test_an_x_api_key_names_a_session_too(control, session, base_url):
    await control.ok("POST", "/queue", json={"scenario": "server-error"}, **in_session("by-x-api-key"))
    body = {"model": "claude-sonnet-5", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"x-api-key": "sk-fakehop-by-x-api-key", "anthropic-version": "2023-06-01"}
    async with session.post(base_url + "/v1/messages", json=body, headers=headers) as response:
        assert response.status == 500
    assert [r["session"] for r in (await control.ok("GET", "/requests"))["requests"]] == ["by-x-api-key"]


async def test_a_session_has_its_own_scenarios_default_and_time_scale(control, base_url, library):
    await control.ok(
        "POST", "/scenarios", data="name: hello\nmodel: my-model\nsteps: [{text: replaced}]\n", **in_session("mine")
    )
    await control.ok("PUT", "/time_scale", json={"time_scale": 0.5}, **in_session("mine"))

    mine = await control.ok("GET", "/health", **in_session("mine"))
    assert (mine["session"], mine["time_scale"], mine["strict"]) == ("mine", 0.5, False)
    assert (await control.ok("GET", "/health"))["time_scale"] == FAST
    assert {s["name"]: s["origin"] for s in (await control.ok("GET", "/scenarios", **in_session("mine")))["scenarios"]}[
        "hello"
    ] == "api"
    assert {s["name"]: s["origin"] for s in (await control.ok("GET", "/scenarios"))["scenarios"]}["hello"] == "bundled"
    async with clients.openai_async(base_url=base_url + "/v1", api_key="sk-fakehop-mine", max_retries=0) as app:
        models = [model.id async for model in app.models.list()]
        answer = await app.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert "my-model" in models and answer.choices[0].message.content == "replaced"
    async with clients.openai_async(base_url=base_url + "/v1", api_key="sk-else", max_retries=0) as other:
        assert "my-model" not in [model.id async for model in other.models.list()]


async def test_a_sessions_time_scale_paces_its_answers(control, base_url):
    await control.ok("PUT", "/time_scale", json={"time_scale": 0.5}, **in_session("slow"))
    pause = {"steps": [{"delay": "1s"}, {"text": "done"}]}
    for name in ("slow", "fast"):
        await control.ok("POST", "/queue", json={"scenario": pause}, **in_session(name))
        async with clients.openai_async(base_url=base_url + "/v1", api_key=f"sk-fakehop-{name}", max_retries=0) as app:
            await app.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    [slow] = (await control.ok("GET", "/requests", **in_session("slow")))["requests"]
    [fast] = (await control.ok("GET", "/requests", **in_session("fast")))["requests"]
    assert 0.5 <= slow["duration"] < 2.5  # 1 s at 0.5
    assert fast["duration"] < 0.5  # 1 s at the server's 0.01, with room for a loaded machine


async def test_sessions_are_listed_and_dropped(control, base_url):
    await control.ok("POST", "/queue", json={"scenario": "stall", "times": 2}, **in_session("one"))
    await control.ok("PUT", "/strict", json={"strict": True}, headers={"X-Fakehop-Session": "two"})
    async with clients.openai_async(base_url=base_url + "/v1", api_key="sk-fakehop-two", max_retries=0) as app:
        with pytest.raises(openai.BadRequestError):
            await app.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])

    listing = await control.ok("GET", "/sessions")
    assert (listing["max_sessions"], listing["idle_timeout"]) == (1000, 600)
    by_name = {s["session"]: s for s in listing["sessions"]}
    assert [s["session"] for s in listing["sessions"]] == ["one", "two"]
    assert (by_name["one"]["queue"], by_name["one"]["requests"], by_name["one"]["strict"]) == (2, 0, False)
    assert (by_name["two"]["queue"], by_name["two"]["requests"], by_name["two"]["strict"]) == (0, 1, True)
    assert by_name["one"]["default"] == "hello" and by_name["one"]["idle"] >= 0

    assert await control.ok("DELETE", "/sessions/one") == {"dropped": "one"}
    assert await control.call("DELETE", "/sessions/one") == (
        404,
        {"error": "no session 'one'; GET /_fakehop/sessions lists them"},
    )
    assert await control.ok("POST", "/reset", **in_session("two")) == {"status": "reset", "default": "hello"}
    assert (await control.ok("GET", "/sessions"))["sessions"] == []
    assert (await control.ok("GET", "/queue", **in_session("one")))["queue"] == []  # made afresh by this call
    assert (await control.ok("GET", "/requests", **in_session("two")))["requests"] == []
    assert (await control.ok("GET", "/health", **in_session("two")))["strict"] is False


async def test_global_reset_and_clear_leave_the_sessions_alone(control, base_url):
    await control.ok("POST", "/queue", json={"scenario": "server-error"}, **in_session("kept"))
    async with clients.openai_async(base_url=base_url + "/v1", api_key="sk-fakehop-kept", max_retries=0) as app:
        await app.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], extra_headers={"X-Fakehop-Scenario": "hello"}
        )

    assert (await control.ok("DELETE", "/requests")) == {"removed": 1}
    await control.ok("POST", "/reset")

    assert (await control.ok("GET", "/requests"))["requests"] == []
    assert [r["scenario"] for r in (await control.ok("GET", "/requests", **in_session("kept")))["requests"]] == [
        "hello"
    ]
    assert (await control.ok("GET", "/queue", **in_session("kept")))["queue"] == ["server-error"]
    assert (await control.ok("DELETE", "/requests", **in_session("kept"))) == {"removed": 1}
    assert (await control.ok("GET", "/requests", **in_session("kept")))["requests"] == []


async def test_one_request_is_shown_only_in_its_sessions_view(control, base_url):
    async with clients.openai_async(base_url=base_url + "/v1", api_key="sk-fakehop-own", max_retries=0) as app:
        await app.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    [record] = (await control.ok("GET", "/requests", **in_session("own")))["requests"]

    own = await control.ok("GET", f"/requests/{record['seq']}", **in_session("own"))
    from_global = await control.ok("GET", f"/requests/{record['seq']}")
    status, refused = await control.call("GET", f"/requests/{record['seq']}", **in_session("other"))

    assert own["request"]["session"] == from_global["request"]["session"] == "own"
    assert "frames" in own["request"] and own["request"]["seq"] == record["seq"]
    assert (status, refused["error"]) == (404, f"no request #{record['seq']} in the journal; it keeps the last 1,000")


async def test_idle_sessions_are_dropped_and_the_number_kept_is_bounded(serve, make_gateway, session):
    control = Control(session, await serve(make_gateway(max_sessions=3, session_idle=0.5)))
    for name in ("a", "b", "c"):
        await control.ok("POST", "/queue", json={"scenario": "stall"}, **in_session(name))
    await control.ok("GET", "/queue", **in_session("a"))  # a is now the one used last
    await control.ok("GET", "/queue", **in_session("d"))  # so b, idle longest, goes
    assert [s["session"] for s in (await control.ok("GET", "/sessions"))["sessions"]] == ["c", "a", "d"]
    assert (await control.ok("GET", "/queue", **in_session("b")))["queue"] == []

    await asyncio.sleep(0.7)

    assert (await control.ok("GET", "/sessions"))["sessions"] == []
    assert (await control.ok("GET", "/queue", **in_session("a")))["queue"] == []


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Fakehop-Session": "has space"},
        {"X-Fakehop-Session": "-leading-dash"},
        {"X-Fakehop-Session": "x" * 129},
        {"Authorization": "Bearer sk-fakehop-no/slash"},
        {"Authorization": "Bearer sk-fakehop-"},
    ],
)
async def test_a_bad_session_name_is_a_400_in_the_openai_shape(session, base_url, headers):
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    async with session.post(base_url + "/v1/chat/completions", json=body, headers=headers) as response:
        answer = await response.json()
    assert response.status == 400
    assert answer["error"]["type"] == "invalid_request_error" and answer["error"]["param"] == "X-Fakehop-Session"
    assert answer["error"]["message"].startswith("Invalid session name ")
    assert "1 to 128 letters, digits, '.', '_' and '-', starting with a letter or digit" in answer["error"]["message"]


async def test_a_bad_session_name_is_a_400_in_the_anthropic_shape(session, base_url):
    body = {"model": "claude-sonnet-5", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    async with session.post(base_url + "/v1/messages", json=body, headers={"x-api-key": "sk-fakehop-bad!"}) as response:
        answer = await response.json()
    assert response.status == 400
    assert answer["type"] == "error" and answer["error"]["type"] == "invalid_request_error"
    assert answer["error"]["message"].startswith("Invalid session name 'bad!'")


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "message"),
    [
        ("GET", "/queue", {"params": {"session": "bad name"}}, "Invalid session name 'bad name'"),
        ("GET", "/queue", {"params": {"session": ""}}, "Invalid session name ''"),
        ("POST", "/reset", {"headers": {"X-Fakehop-Session": "a:b"}}, "Invalid session name 'a:b'"),
        ("DELETE", "/sessions/bad%21name", {}, "Invalid session name 'bad!name'"),
        (
            "GET",
            "/queue",
            {"params": {"session": "a"}, "headers": {"X-Fakehop-Session": "b"}},
            "the X-Fakehop-Session header names session 'b' and ?session= names 'a'; name one",
        ),
        ("POST", "/reset", {"params": {"sesion": "a"}}, "unknown query parameter 'sesion'; the only one is session"),
        ("PUT", "/strict", {"json": {"strict": "yes"}}, 'strict: expected true or false, got "yes"'),
        ("PUT", "/time_scale", {"json": {"time_scale": 0}}, "time_scale: expected a number more than 0, got 0"),
        (
            "PUT",
            "/time_scale",
            {"json": {"time_scale": "fast"}},
            'time_scale: expected a number more than 0, got "fast"',
        ),
    ],
)
async def test_bad_control_calls_about_sessions_are_json_400s(control, method, path, kwargs, message):
    status, body = await control.call(method, path, **kwargs)
    assert status == 400
    assert body["error"].startswith(message)


async def test_the_same_request_gets_the_same_bytes_in_a_session(session, base_url):
    body = {"model": "gpt-5.6-sol", "messages": [{"role": "user", "content": "Hello"}], "stream": True}
    seeded = {"X-Fakehop-Seed": "0", "X-Fakehop-Scenario": "think-then-tool"}
    answers = []
    for extra in ({}, {"X-Fakehop-Session": "s1"}, {"Authorization": "Bearer sk-fakehop-s2"}):
        async with session.post(base_url + "/v1/chat/completions", json=body, headers={**seeded, **extra}) as response:
            answers.append((response.status, await response.read()))
    assert answers[0][0] == 200 and answers[0] == answers[1] == answers[2]


# ---------------------------------------------------------------- strict mode


async def ask_chat(base_url: str, api_key: str = "sk-app", **extra) -> str | None:
    async with clients.openai_async(base_url=base_url + "/v1", api_key=api_key, max_retries=0) as app:
        try:
            completion = await app.chat.completions.create(
                model="gpt-5.6-sol", messages=[{"role": "user", "content": "hi"}], **extra
            )
        except openai.BadRequestError as exc:
            assert isinstance(exc.body, dict), exc.body
            return f"HTTP 400: {exc.body['message']}"
    return completion.choices[0].message.content


async def test_strict_mode_refuses_what_no_scenario_was_set_up_for(serve, make_gateway, session):
    base_url = await serve(make_gateway(strict=True))
    control = Control(session, base_url)
    await control.ok("PUT", "/default", json={"scenario": "server-error"})

    refused = await ask_chat(base_url)
    named = await ask_chat(base_url, extra_headers={"X-Fakehop-Scenario": "hello"})
    await control.ok("POST", "/queue", json={"scenario": {"steps": [{"text": "queued"}]}})
    queued = await ask_chat(base_url)
    await control.ok("POST", "/scenarios", data="name: greet\nmatch: {prompt: hi}\nsteps: [{text: matched}]\n")
    matched = await ask_chat(base_url)

    assert refused.startswith(
        "HTTP 400: No scenario was set up for this request, and the global session of this fakehop server is strict, "
        "so it does not fall back to the default scenario. Name one with the X-Fakehop-Scenario header, queue one"
    )
    assert (named, queued, matched) == (HELLO, "queued", "matched")
    first, *_ = (await control.ok("GET", "/requests"))["requests"]
    assert (first["scenario"], first["status"], first["end"]) == (None, 400, "unmatched")
    assert first["error"] == refused.removeprefix("HTTP 400: ")


async def test_strict_mode_answers_anthropic_clients_in_their_shape(serve, make_gateway):
    base_url = await serve(make_gateway(strict=True))
    async with clients.anthropic_async(base_url=base_url, api_key="sk-fakehop-claude", max_retries=0) as app:
        with pytest.raises(anthropic.BadRequestError) as raised:
            await app.messages.create(
                model="claude-sonnet-5", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
            )
    assert raised.value.body["error"]["type"] == "invalid_request_error"
    assert raised.value.body["error"]["message"].startswith(
        "No scenario was set up for this request, and session 'claude' of this fakehop server is strict"
    )


async def test_strict_is_set_per_session(control, base_url):
    assert await control.ok("PUT", "/strict", json={"strict": True}, **in_session("careful")) == {"strict": True}

    assert (await ask_chat(base_url, "sk-fakehop-careful")).startswith("HTTP 400: No scenario was set up")
    assert await ask_chat(base_url, "sk-fakehop-relaxed") == HELLO
    assert await ask_chat(base_url) == HELLO
    [record] = (await control.ok("GET", "/requests", **in_session("careful")))["requests"]
    assert (record["end"], record["session"]) == ("unmatched", "careful")
    assert await control.ok("PUT", "/strict", json={"strict": False}, **in_session("careful")) == {"strict": False}
    assert await ask_chat(base_url, "sk-fakehop-careful") == HELLO
