"""The control API under /_fakehop/, driven over HTTP against a real server, with the openai SDK as the app."""

from __future__ import annotations

import aiohttp
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from fakehop.scenario.library import Library
from fakehop.server.gateway import Gateway
from fakehop.state.journal import Journal

from . import clients
from .conftest import FAST

MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Hello"}]
SAY_ONE = {"name": "say-one", "steps": [{"text": "one"}]}
SAY_TWO = {"name": "say-two", "steps": [{"text": "two"}]}


class Control:
    """Calls to /_fakehop/ on one server; each returns (status, JSON body)."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, token: str | None = None):
        self.session = session
        self.base_url = base_url
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    async def call(self, method: str, path: str, **kwargs) -> tuple[int, dict]:
        """`data=` text goes as YAML unless `headers` say otherwise (a YAML scenario file's text)."""
        yaml_type = {"Content-Type": "application/yaml"} if isinstance(kwargs.get("data"), str) else {}
        headers = {**self.headers, **yaml_type, **kwargs.pop("headers", {})}
        async with self.session.request(
            method, f"{self.base_url}/_fakehop{path}", headers=headers, **kwargs
        ) as response:
            assert response.content_type == "application/json"
            return response.status, await response.json()

    async def ok(self, method: str, path: str, **kwargs) -> dict:
        status, body = await self.call(method, path, **kwargs)
        assert status in (200, 201), body
        return body


@pytest.fixture
async def session():
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
def control(session, base_url) -> Control:
    return Control(session, base_url)


async def ask(client: openai.AsyncOpenAI, **extra) -> str | None:
    """What the app sees: the answer's text, or the name of the error the SDK raised."""
    try:
        completion = await client.chat.completions.create(model="gpt-5.6-sol", messages=MESSAGES, **extra)
    except openai.APIStatusError as exc:
        return f"HTTP {exc.status_code}"
    return completion.choices[0].message.content


async def scenarios_by_name(control: Control) -> dict[str, dict]:
    return {s["name"]: s for s in (await control.ok("GET", "/scenarios"))["scenarios"]}


async def journal_labels(control: Control) -> list[str]:
    return [r["scenario"] for r in (await control.ok("GET", "/requests"))["requests"]]


# ---------------------------------------------------------------- health and scenarios


async def test_health(control, library):
    body = await control.ok("GET", "/health")
    assert body["status"] == "ok"
    assert body["default"] == "hello"
    assert body["scenarios"] == len(library.names())


async def test_scenarios_say_kind_and_origin(serve, session, tmp_path):
    (tmp_path / "mine.yaml").write_text("description: Mine.\nsteps:\n  - text: mine\n")
    control = Control(session, await serve(Gateway(Library.load([tmp_path]), time_scale=FAST)))
    await control.ok("POST", "/scenarios", data="name: posted\nsteps: [{text: hi}]\n")

    listed = await scenarios_by_name(control)

    assert {k: listed["hello"][k] for k in ("kind", "origin")} == {"kind": "steps", "origin": "bundled"}
    assert listed["server-error"]["kind"] == "http_error"
    assert listed["flaky-then-ok"]["kind"] == "sequence"
    assert listed["mine"] == {
        "name": "mine",
        "description": "Mine.",
        "kind": "steps",
        "origin": str(tmp_path),
        "source": str(tmp_path / "mine.yaml"),
    }
    assert listed["posted"]["origin"] == "api"
    assert listed["posted"]["source"] == "<POST /_fakehop/scenarios>"


async def test_posted_yaml_scenario_is_added_then_replaced(control, openai_client):
    status, body = await control.call("POST", "/scenarios", data="name: greet\nsteps:\n  - text: first version\n")
    assert (status, body["replaced"], body["scenario"]["name"]) == (201, False, "greet")
    assert await ask(openai_client, extra_headers={"X-Fakehop-Scenario": "greet"}) == "first version"

    status, body = await control.call("POST", "/scenarios", data="name: greet\nsteps:\n  - text: second version\n")
    assert (status, body["replaced"]) == (200, True)
    assert await ask(openai_client, extra_headers={"X-Fakehop-Scenario": "greet"}) == "second version"


async def test_a_scenario_that_uses_a_replaced_one_plays_the_new_version(control, openai_client):
    await control.ok("POST", "/scenarios", data="name: inner\nsteps:\n  - text: old inner\n")
    await control.ok("POST", "/scenarios", data="name: outer\nsequence:\n  - use: inner\n")
    assert await ask(openai_client, extra_headers={"X-Fakehop-Scenario": "outer"}) == "old inner"

    await control.ok("POST", "/scenarios", data="name: inner\nsteps:\n  - text: new inner\n")

    assert await ask(openai_client, extra_headers={"X-Fakehop-Scenario": "outer"}) == "new inner"
    assert (await control.ok("GET", "/requests"))["requests"][-1]["scenario"] == "outer[1]->inner"


async def test_posted_json_scenario_with_escapes(control, openai_client):
    await control.ok(
        "POST", "/scenarios", json={"name": "emoji", "steps": [{"text": "caf\u00e9 \U0001f600", "chunk": "char"}]}
    )

    assert await ask(openai_client, extra_headers={"X-Fakehop-Scenario": "emoji"}) == "caf\u00e9 \U0001f600"


async def test_posted_scenario_takes_its_name_from_the_query(control):
    await control.ok("POST", "/scenarios", params={"name": "from-query"}, data="steps: [{text: hi}]")
    status, body = await control.call("POST", "/scenarios", data="steps: [{text: hi}]")

    assert "from-query" in await scenarios_by_name(control)
    assert status == 400
    assert body["problems"] == ["<POST /_fakehop/scenarios>:1: needs a name"]


async def test_bad_scenario_lists_every_problem_and_changes_nothing(control, openai_client):
    before = await scenarios_by_name(control)
    bad = "name: hello\nsteps:\n  - text: replaced\n  - stal\n  - delay: 3x\nchunk_intervl: 1s\n"

    status, body = await control.call("POST", "/scenarios", data=bad)

    assert status == 400
    assert body["error"] == "3 problems in the scenario; nothing was changed"
    assert sorted(body["problems"]) == [
        "<POST /_fakehop/scenarios>:4: unknown step 'stal'; did you mean 'stall'?",
        "<POST /_fakehop/scenarios>:5: delay: expected a duration such as 2s, 250ms or 1.5m, got '3x'",
        "<POST /_fakehop/scenarios>:6: unknown key 'chunk_intervl' in the scenario; did you mean 'chunk_interval'?",
    ]
    assert await scenarios_by_name(control) == before
    assert await ask(openai_client) == "Hello! How can I help you today?"


async def test_scenario_whose_use_does_not_resolve_is_refused(control):
    status, body = await control.call("POST", "/scenarios", data="name: broken\nsequence:\n  - use: no-such\n")

    assert status == 400
    assert body["problems"] == ["<POST /_fakehop/scenarios>:3: use: no scenario named 'no-such'"]
    assert "broken" not in await scenarios_by_name(control)


async def test_yaml_that_does_not_parse_is_a_400_with_its_line(control):
    status, body = await control.call("POST", "/scenarios", data="name: x\nsteps: [\n")

    assert status == 400
    assert body["problems"][0].startswith("<POST /_fakehop/scenarios>:3: not valid YAML")


# ---------------------------------------------------------------- queue and default


async def test_queue_serves_names_in_order_and_times(control, openai_client):
    await control.ok("POST", "/scenarios", json=SAY_ONE)
    await control.ok("POST", "/scenarios", json=SAY_TWO)
    await control.ok("POST", "/queue", json={"scenario": "say-one"})
    body = await control.ok("POST", "/queue", json={"scenario": "say-two", "times": 2})
    assert body == {"queued": "say-two", "times": 2, "requests": 2, "length": 3}
    assert (await control.ok("GET", "/queue"))["queue"] == ["say-one", "say-two", "say-two"]

    named = await ask(openai_client, extra_headers={"X-Fakehop-Scenario": "server-error"})
    answers = [await ask(openai_client) for _ in range(4)]

    assert named == "HTTP 500"
    assert answers == ["one", "two", "two", "Hello! How can I help you today?"]
    assert (await control.ok("GET", "/queue"))["queue"] == []


async def test_control_bodies_may_come_as_yaml(control, openai_client):
    queued = await control.ok("POST", "/queue", data="scenario: server-error\ntimes: 2\n")
    laid = await control.ok("POST", "/faults", data="kind: truncate\nafter: 1\n")
    status, refused = await control.call("POST", "/queue", data="scenario: [server-error\n")
    listed, not_a_mapping = await control.call("POST", "/queue", data="- server-error\n")

    assert (queued["queued"], queued["times"]) == ("server-error", 2)
    assert laid["kind"] == "truncate"
    assert status == 400 and refused["error"].startswith("the body is not valid YAML at line 2")
    assert listed == 400 and not_a_mapping["error"].startswith("the body must be a YAML mapping")
    assert await ask(openai_client) == "HTTP 500"


async def test_queue_shrinks_as_requests_take_from_it(control, openai_client):
    await control.ok("POST", "/queue", json={"scenario": "server-error", "times": 3})
    await ask(openai_client)

    assert (await control.ok("GET", "/queue"))["queue"] == ["server-error", "server-error"]
    assert await control.ok("DELETE", "/queue") == {"removed": 2, "queue": []}
    assert await ask(openai_client) == "Hello! How can I help you today?"


async def test_inline_scenarios_are_added_under_their_name_or_inline_n(control, openai_client):
    await control.ok("POST", "/queue", json={"scenario": {"steps": [{"text": "first inline"}]}})
    await control.ok("POST", "/queue", json={"scenario": {"http_error": {"status": 503}}})
    await control.ok("POST", "/queue", json={"scenario": {"name": "named-inline", "steps": [{"text": "named"}]}})

    assert (await control.ok("GET", "/queue"))["queue"] == ["inline-1", "inline-2", "named-inline"]
    assert [await ask(openai_client) for _ in range(3)] == ["first inline", "HTTP 503", "named"]
    listed = await scenarios_by_name(control)
    assert listed["inline-2"] == {
        "name": "inline-2",
        "description": "",
        "kind": "http_error",
        "origin": "api",
        "source": "<POST /_fakehop/queue>",
    }


async def test_bad_inline_scenario_changes_nothing(control):
    before = await scenarios_by_name(control)
    bad = {"name": "bad", "steps": [{"txt": "typo"}, "stal"], "keepalive": "often"}

    status, body = await control.call("POST", "/queue", json={"scenario": bad, "times": 2})

    assert status == 400
    assert sorted(body["problems"]) == [
        "<POST /_fakehop/queue>: keepalive: expected a duration such as 2s, 250ms or 1.5m, got 'often'",
        "<POST /_fakehop/queue>: unknown key 'txt' in a step; did you mean 'text'?",
        "<POST /_fakehop/queue>: unknown step 'stal'; did you mean 'stall'?",
    ]
    assert (await control.ok("GET", "/queue"))["queue"] == []
    assert await scenarios_by_name(control) == before


async def test_unknown_name_is_a_400_naming_the_known_ones(control, library):
    status, body = await control.call("POST", "/queue", json={"scenario": "stal"})

    assert status == 400
    assert body["error"].startswith("Unknown scenario 'stal'; did you mean 'stall'? Known scenarios: ")
    assert body["known"] == library.names()
    assert (await control.ok("GET", "/queue"))["queue"] == []


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("stall", "the body is not valid JSON"),
        ('["stall"]', "the body must be a JSON object such as"),
        ('{"scenario": "stall", "time": 2}', "unknown key 'time'; the keys are: scenario, times"),
        ('{"scenario": "stall", "times": 0}', "times: expected a whole number from 1 to 10000, got 0"),
        ('{"scenario": "stall", "times": true}', "times: expected a whole number from 1 to 10000, got true"),
        ('{"scenario": "stall", "times": "2"}', 'times: expected a whole number from 1 to 10000, got "2"'),
        ("{}", "scenario: expected a scenario name"),
        ('{"scenario": 5}', "scenario: expected a scenario name"),
    ],
)
async def test_bad_queue_bodies_are_400s_that_say_why(control, body, message):
    status, answer = await control.call("POST", "/queue", data=body, headers={"Content-Type": "application/json"})

    assert status == 400
    assert answer["error"].startswith(message), answer["error"]
    assert (await control.ok("GET", "/queue"))["queue"] == []


async def test_put_default_changes_what_unnamed_requests_get(control, openai_client):
    assert await control.ok("PUT", "/default", json={"scenario": "server-error"}) == {"default": "server-error"}
    assert await ask(openai_client) == "HTTP 500"

    status, body = await control.call("PUT", "/default", json={"scenario": "nope"})
    assert status == 400
    assert "Known scenarios" in body["error"]
    assert (await control.ok("GET", "/health"))["default"] == "server-error"


async def test_queue_comes_before_the_default(control, openai_client):
    await control.ok("PUT", "/default", json={"scenario": {"name": "fallback", "steps": [{"text": "fallback"}]}})
    await control.ok("POST", "/queue", json={"scenario": "server-error"})

    assert [await ask(openai_client) for _ in range(2)] == ["HTTP 500", "fallback"]


# ---------------------------------------------------------------- journal


async def test_requests_page_with_since_and_limit(serve, make_gateway, session):
    """With --journal-secrets, the headers as they came, the key included."""
    control = Control(session, await serve(make_gateway(journal=Journal(secrets=True))))
    async with clients.openai_async(
        base_url=control.base_url + "/v1", api_key="sk-test", max_retries=0
    ) as openai_client:
        for number in range(5):
            await openai_client.chat.completions.create(
                model="gpt-5.6-sol", messages=[{"role": "user", "content": f"question {number}"}]
            )

    first = await control.ok("GET", "/requests", params={"limit": "2"})
    second = await control.ok("GET", "/requests", params={"since": first["next_since"], "limit": "2"})
    third = await control.ok("GET", "/requests", params={"since": second["next_since"], "limit": "2"})
    after = await control.ok("GET", "/requests", params={"since": third["next_since"]})

    pages = [first, second, third]
    assert [[r["seq"] for r in page["requests"]] for page in pages] == [[1, 2], [3, 4], [5]]
    assert [page["more"] for page in pages] == [True, True, False]
    assert after == {"requests": [], "next_since": 5, "more": False}
    record = third["requests"][0]
    assert record["body"]["messages"] == [{"role": "user", "content": "question 4"}]
    assert (record["method"], record["path"], record["protocol"], record["scenario"]) == (
        "POST",
        "/v1/chat/completions",
        "chat",
        "hello",
    )
    assert (record["status"], record["end"], record["stream"]) == (200, "completed", False)
    assert record["headers"]["Authorization"] == "Bearer sk-test"


async def test_a_header_sent_twice_shows_both_values_in_the_journal(control, session):
    headers = [("Content-Type", "application/json"), ("X-Tag", "a"), ("X-Tag", "b")]
    async with session.post(
        control.base_url + "/v1/chat/completions",
        data=b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}',
        headers=headers,
    ) as response:
        assert response.status == 200

    [record] = (await control.ok("GET", "/requests"))["requests"]
    assert record["headers"]["X-Tag"] == "a, b"


async def test_journal_records_streams_and_errors(control, openai_client):
    stream = await openai_client.chat.completions.create(model="gpt-5.6-sol", messages=MESSAGES, stream=True)
    [chunk async for chunk in stream]
    await ask(openai_client, extra_headers={"X-Fakehop-Scenario": "rate-limited"})

    streamed, refused = (await control.ok("GET", "/requests"))["requests"]

    assert (streamed["stream"], streamed["end"], streamed["status"]) == (True, "completed", 200)
    assert streamed["events"] > 2
    assert (refused["scenario"], refused["end"], refused["status"]) == ("rate-limited", "http_error", 429)


async def test_delete_requests_empties_the_journal_but_seq_keeps_counting(control, openai_client):
    await ask(openai_client)
    await ask(openai_client)

    assert await control.ok("DELETE", "/requests") == {"removed": 2}
    assert (await control.ok("GET", "/requests"))["requests"] == []
    await ask(openai_client)
    assert [r["seq"] for r in (await control.ok("GET", "/requests"))["requests"]] == [3]


async def test_journal_keeps_only_the_last_n(serve, make_gateway, session, openai_client):
    control = Control(session, await serve(make_gateway(journal=Journal(3))))
    client = openai_client.with_options(base_url=control.base_url + "/v1")
    for _ in range(5):
        await ask(client)

    assert [r["seq"] for r in (await control.ok("GET", "/requests"))["requests"]] == [3, 4, 5]
    assert [
        r["seq"] for r in (await control.ok("GET", "/requests", params={"since": "1", "limit": "1"}))["requests"]
    ] == [3]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"since": "-1"}, "since: expected a whole number from 0, got '-1'"),
        ({"since": "x"}, "since: expected a whole number from 0, got 'x'"),
        ({"limit": "0"}, "limit: expected a whole number from 1, got '0'"),
        ({"sinse": "1"}, "unknown query parameter 'sinse'; the parameters are since and limit"),
    ],
)
async def test_bad_journal_queries_are_400s(control, query, message):
    assert await control.call("GET", "/requests", params=query) == (400, {"error": message})


# ---------------------------------------------------------------- reset, errors, admin token


async def test_reset_puts_everything_back(control, openai_client, library):
    flaky = {"X-Fakehop-Scenario": "flaky-then-ok"}
    await control.ok("POST", "/scenarios", data="name: hello\nsteps: [{text: replaced}]\n")
    await control.ok("POST", "/queue", json={"scenario": {"steps": [{"text": "inline"}]}, "times": 3})
    await control.ok("PUT", "/default", json={"scenario": "server-error"})
    assert [await ask(openai_client, extra_headers=flaky) for _ in range(2)] == ["HTTP 429", "HTTP 500"]

    assert await control.ok("POST", "/reset") == {"status": "reset", "default": "hello"}

    assert (await control.ok("GET", "/queue"))["queue"] == []
    assert (await control.ok("GET", "/requests"))["requests"] == []
    assert sorted(await scenarios_by_name(control)) == library.names()
    assert await ask(openai_client, extra_headers=flaky) == "HTTP 429"
    assert await ask(openai_client) == "Hello! How can I help you today?"


async def test_a_replaced_sequence_starts_from_its_first_entry(control, openai_client):
    header = {"X-Fakehop-Scenario": "flaky-then-ok"}
    assert await ask(openai_client, extra_headers=header) == "HTTP 429"
    await control.ok(
        "POST", "/scenarios", data="name: flaky-then-ok\nsequence:\n  - http_error: {status: 503}\n  - use: hello\n"
    )

    assert [await ask(openai_client, extra_headers=header) for _ in range(2)] == [
        "HTTP 503",
        "Hello! How can I help you today?",
    ]


async def test_unknown_calls_and_methods_are_json_errors(control):
    status, body = await control.call("GET", "/nope")
    assert status == 404
    assert body["error"].startswith("no control call /_fakehop/nope; the calls under /_fakehop are: GET /health")

    async with control.session.patch(f"{control.base_url}/_fakehop/queue") as response:
        assert response.status == 405
        assert await response.json() == {"error": "PATCH is not allowed on /_fakehop/queue"}
        assert "POST" in response.headers["Allow"]


async def test_admin_token_guards_the_control_api_only(serve, make_gateway, session, openai_client):
    base_url = await serve(make_gateway(admin_token="s3cret"))
    client = openai_client.with_options(base_url=base_url + "/v1")

    for token in (None, "wrong"):
        status, body = await Control(session, base_url, token).call("POST", "/queue", json={"scenario": "server-error"})
        assert (status, body) == (401, {"error": "the control API needs Authorization: Bearer <admin token>"})
    assert (await Control(session, base_url).call("GET", "/nope"))[0] == 401
    assert await ask(client) == "Hello! How can I help you today?"

    await Control(session, base_url, "s3cret").ok("POST", "/queue", json={"scenario": "server-error"})
    assert await ask(client) == "HTTP 500"
