"""The console in a real browser: Debian's Chromium, driven by playwright, against a real
fakehop server, with the official openai SDK as the app under test.

The browser is the system's (/usr/bin/chromium, or $FAKEHOP_CHROMIUM), never one playwright
downloads. Without it these tests are skipped, saying why, unless FAKEHOP_BROWSER_TESTS=required
(as .ci/run sets), where a missing browser fails them.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import threading
import time
import urllib.request
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from fakehop.server.gateway import Gateway
from fakehop.testing.thread_server import ThreadServer

from . import clients

pytestmark = pytest.mark.xdist_group("console")  # one xdist worker runs them all: they share one Chromium

CHROMIUM = Path(os.environ.get("FAKEHOP_CHROMIUM", "/usr/bin/chromium"))
REQUIRED = os.environ.get("FAKEHOP_BROWSER_TESTS") == "required"
# As root, with no network and a fresh profile (playwright's user_data_dir): nothing but the page.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1400, "height": 900}
MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Hi"}]
SCREENSHOT_VARIABLE = "FAKEHOP_CONSOLE_SCREENSHOT"


def browser_missing() -> str | None:
    if not CHROMIUM.is_file():
        return f"no Chromium at {CHROMIUM} (apt-get install chromium, or set FAKEHOP_CHROMIUM)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -e '.[test]')"
    return None


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """One Chromium for the module's tests, each of which opens its own page."""
    missing = browser_missing()
    if missing:
        if REQUIRED:
            pytest.fail(f"the browser tests must run here (FAKEHOP_BROWSER_TESTS=required), but there is {missing}")
        pytest.skip(missing)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=str(CHROMIUM),
            headless=True,
            args=CHROMIUM_ARGS,
            viewport=VIEWPORT,
        )
        yield context
        context.close()


class Console:
    """One fakehop server and one page of its console; `errors` holds what the page's console said was wrong."""

    def __init__(self, browser, library, **gateway_options):
        gateway_options.setdefault("time_scale", 1.0)
        self.server = ThreadServer(Gateway(library, **gateway_options))
        self.url = self.server.start()
        self.page = browser.new_page()
        self.errors: list[str] = []
        self.page.on("console", lambda message: self.errors.append(message.text) if message.type == "error" else None)
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.refused: list[str] = []  # the page's calls answered 401
        self.page.on("response", lambda response: self.refused.append(response.url) if response.status == 401 else None)

    def open(self, path: str = "/", wait_live: bool = True) -> None:
        from playwright.sync_api import expect

        self.page.goto(self.url + path)
        if wait_live:
            expect(self.page.locator("#connection")).to_have_text("live")

    def client(self, **options) -> openai.OpenAI:
        return clients.openai_sync(base_url=self.url + "/v1", api_key="sk-test", max_retries=0, **options)

    def rows(self):
        return self.page.locator("#log tbody tr")

    def row(self, seq: int):
        return self.page.locator(f'#log tbody tr[data-seq="{seq}"]')

    def cells(self, seq: int) -> dict[str, str]:
        headings = self.page.locator("#log thead th").all_inner_texts()
        return dict(zip(headings, self.row(seq).locator("td").all_inner_texts()))

    def control(self, method: str, path: str, yaml: str | None = None) -> dict:
        """A control call, as a test makes it (`yaml`: a body): the server's own answer, as JSON."""
        token = self.server.gateway.admin_token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if yaml is not None:
            headers["Content-Type"] = "application/yaml"
        call = urllib.request.Request(
            f"{self.url}/_fakehop/{path}", data=None if yaml is None else yaml.encode(), method=method, headers=headers
        )
        with urllib.request.urlopen(call, timeout=10) as response:  # raises for an error status
            return json.load(response)

    def frames(self) -> list[tuple[str, str, str]]:
        """The detail's frames as shown: (offset, text, kind) each."""
        rows = self.page.locator("#detail-frames tbody tr")
        return [
            (cells[0], cells[1], kind.removeprefix("frame-"))
            for cells, kind in zip(
                (row.locator("td").all_inner_texts() for row in rows.all()),
                (row.get_attribute("class") for row in rows.all()),
            )
        ]

    def close(self) -> None:
        self.page.close()
        self.server.stop()


@pytest.fixture
def open_console(browser, library):
    """open_console(**gateway_options) -> a Console on a fresh server, its page open and live."""
    opened: list[Console] = []

    def make(path: str = "/", wait_live: bool = True, **gateway_options) -> Console:
        console = Console(browser, library, **gateway_options)
        opened.append(console)
        console.open(path, wait_live)
        return console

    yield make
    for console in opened:
        console.close()


def expect(locator):
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


def ask(client: openai.OpenAI, scenario: str | None = None) -> str:
    headers = {"X-Fakehop-Scenario": scenario} if scenario else {}
    stream = client.chat.completions.create(model="gpt-5.6-sol", messages=MESSAGES, stream=True, extra_headers=headers)
    return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)


# ---------------------------------------------------------------- the tests the issue lists


def test_the_page_loads_with_no_console_errors(open_console):
    console = open_console()
    page = console.page
    assert page.url == console.url + "/_fakehop/ui"
    expect(page.locator("#scenarios li")).to_have_count(len(console.server.gateway.library.names()))
    expect(page.locator("#editor-state")).to_have_text("✓ my-fault (steps)")
    expect(page.locator("#time-scale")).to_have_value("1")
    expect(page.locator("#default")).to_have_text("hello")
    assert not page.locator("#token-dialog").is_visible()
    assert console.errors == []


SHOWN_WITHIN = 2.0  # seconds: the push takes milliseconds, but Chromium shares a loaded 2-core machine with the suite


def test_a_request_from_the_sdk_shows_while_it_streams_and_its_row_updates_when_it_ends(open_console):
    """slow-typing streams for 2.2 s, so a row shown within SHOWN_WITHIN is one shown while it streams."""
    console = open_console()
    client = console.client()
    asked = time.monotonic()
    stream = client.chat.completions.create(
        model="gpt-5.6-sol", messages=MESSAGES, stream=True, extra_headers={"X-Fakehop-Scenario": "slow-typing"}
    )  # a character every 50 ms
    expect(console.row(1)).to_contain_text("slow-typing", timeout=SHOWN_WITHIN * 1000)
    shown = time.monotonic() - asked
    assert console.cells(1)["end"] == "in_progress" and console.cells(1)["duration"] == "…"
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    ended = time.monotonic()
    expect(console.row(1).locator("td").nth(6)).to_have_text("completed", timeout=SHOWN_WITHIN * 1000)
    record = console.server.call(lambda: console.server.gateway.journal.records[0])
    cells = console.cells(1)
    assert (cells["protocol"], cells["model"], cells["status"], cells["events"]) == (
        "chat",
        "gpt-5.6-sol",
        "200",
        str(record.events),
    )
    assert cells["duration"] == f"{to_fixed(record.duration, 3)} s" and text and shown < SHOWN_WITHIN, (
        shown,
        time.monotonic() - ended,
    )


def test_clicking_429_lays_a_429_over_the_usual_answer_and_the_row_shows_it(open_console):
    console = open_console()
    page = console.page
    page.get_by_role("button", name="429", exact=True).click()
    expect(page.locator("#fault-list")).to_have_text("rate_limit")
    with pytest.raises(openai.RateLimitError) as raised:
        ask(console.client())
    assert raised.value.status_code == 429 and raised.value.response.headers["retry-after"] == "2"
    expect(console.row(1).locator("td").nth(5)).to_have_text("429")
    assert console.cells(1)["end"] == "http_error" and console.cells(1)["scenario"] == "hello"
    expect(page.locator("#fault-list")).to_have_text("none")
    expect(page.locator("#message")).to_have_text("fault rate_limit for the next request")  # no list gone stale
    assert console.control("GET", "requests")["requests"][0]["faults"] == ["rate_limit"]
    console.row(1).click()
    expect(page.locator("#detail-summary")).to_contain_text("Retry-After 2")
    assert ask(console.client()) == "Hello! How can I help you today?"  # the fault broke one answer


def test_a_fault_for_the_next_n_requests_and_a_scenario_made_the_default(open_console):
    console = open_console()
    page = console.page
    page.fill("#times", "2")
    page.get_by_role("button", name="500", exact=True).click()
    expect(page.locator("#fault-list")).to_have_text("server_error ×2")
    client = console.client()
    for _ in range(2):
        with pytest.raises(openai.InternalServerError):
            ask(client)
    page.locator('#scenarios li[data-name="max-tokens"] .make-default').click()
    expect(page.locator("#default")).to_have_text("max-tokens")
    expect(page.locator('#scenarios li[data-name="max-tokens"]')).to_have_class("default")
    ask(client)
    expect(console.row(3)).to_contain_text("max-tokens")


def streamed_words(client: openai.OpenAI, words: list[str]) -> None:
    """A streamed answer of the default scenario, its words put in `words` as they come."""
    for chunk in client.chat.completions.create(model="gpt-5.6-sol", messages=MESSAGES, stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            words.append(chunk.choices[0].delta.content)


@pytest.mark.parametrize(
    ("button", "raised"),
    [
        ("interrupt", openai.APIError),
        ("truncate", openai.APIConnectionError),
        ("malformed", json.JSONDecodeError),
        ("stall", openai.APIError),
    ],
)
def test_a_stream_button_breaks_the_usual_answer_after_three_words(open_console, button, raised):
    console = open_console()
    page = console.page
    set_time_scale(page, "0.01")
    page.get_by_role("button", name=button, exact=True).click()
    expect(page.locator("#fault-list")).to_have_text(button)
    words: list[str] = []
    with pytest.raises(raised):
        streamed_words(console.client(), words)
    assert words == ["Hello!", " How", " can"]
    expect(console.row(1)).to_contain_text("hello")
    assert console.control("GET", "requests")["requests"][0]["faults"] == [button]
    expect(page.locator("#fault-list")).to_have_text("none")


def test_the_latency_button_slows_the_usual_answer_and_clear_removes_a_fault(open_console):
    console = open_console()
    page = console.page
    set_time_scale(page, "0.5")
    page.get_by_role("button", name="latency", exact=True).click()
    expect(page.locator("#fault-list")).to_have_text("latency")
    began = time.monotonic()
    words: list[str] = []
    streamed_words(console.client(), words)
    assert "".join(words) == "Hello! How can I help you today?" and time.monotonic() - began > 1  # 0.5 + 6 × 0.1
    page.get_by_role("button", name="hang", exact=True).click()
    expect(page.locator("#fault-list")).to_have_text("hang")
    page.click("#clear-faults")
    expect(page.locator("#fault-list")).to_have_text("none")
    expect(page.locator("#message")).to_have_text("removed 1 fault")
    assert console.control("GET", "faults") == {"faults": []}


def to_fixed(number: float, digits: int) -> str:
    """`number` as the page's `toFixed(digits)` writes it: the double's exact value rounded, a
    tie upwards (217.25 is 217.3 there, where Python's format rounds a tie to even: 217.2)."""
    return str(Decimal(number).quantize(Decimal(1).scaleb(-digits), ROUND_HALF_UP))


def kept_frames(request: dict) -> list[tuple[str, str, str]]:
    """The frames of a journal record's kept writes, as the detail should show them: each
    event and each comment at its write's offset, the unended rest of a cut write last."""
    frames = []
    for offset, text in request["frames"]:
        *ended, rest = text.split("\n\n")
        at = f"{to_fixed(offset * 1000, 1)} ms"
        frames += [(at, block, "comment" if block.startswith(":") else "event") for block in ended]
        if rest:
            frames.append((at, rest, "unended"))
    return frames


def test_a_requests_detail_shows_each_sse_event_as_a_frame_of_its_own_at_its_writes_offset(open_console):
    console = open_console()
    client = console.client()
    stream = client.chat.completions.create(
        model="gpt-5.6-sol", messages=MESSAGES, stream=True, extra_headers={"X-Fakehop-Scenario": "weather-tool"}
    )
    calls = [
        call.function.name for chunk in stream if chunk.choices for call in chunk.choices[0].delta.tool_calls or ()
    ]
    assert [name for name in calls if name] == ["get_weather"]
    console.row(1).click()
    request = console.control("GET", "requests/1")["request"]
    expect(console.page.locator("#detail-frames tbody tr")).to_have_count(request["events"])
    shown = console.frames()
    assert shown == kept_frames(request)
    assert [text for _, text, _ in shown][-1] == "data: [DONE]" and all(
        text.startswith("data: {") for _, text, _ in shown[:-1]
    )
    writes = len(request["frames"])
    assert len({offset for offset, _, _ in shown}) == writes  # every frame at its write's offset
    expect(console.page.locator("#detail-frames-note")).to_have_text(
        f"({request['events']} frames in {writes} write{'s' if writes > 1 else ''}, {request['frame_bytes']} bytes)"
    )
    assert console.errors == []


LONG_WAIT = """name: long-wait
keepalive: 100ms
steps:
  - delay: 350ms
  - text: "%s"
    chunk: word
"""


def test_keepalives_are_frames_of_their_own_and_the_detail_shows_where_the_journal_cut_the_stream(open_console):
    console = open_console()
    console.control("POST", "scenarios", yaml=LONG_WAIT % ("word " * 600))
    assert ask(console.client(), "long-wait") == "word " * 600
    console.row(1).click()
    request = console.control("GET", "requests/1")["request"]
    assert (
        request["frames_cut"]
        and request["keepalives"] >= 2
        and request["sent_bytes"] > request["frame_bytes"] == 32 * 1024
    )
    expect(console.page.locator("#detail-frames tbody tr.frame-cut")).to_have_count(1)
    *frames, (_, cut, kind) = console.frames()
    assert frames == kept_frames(request)
    assert [kind for _, _, kind in frames[: request["keepalives"]]] == ["comment"] * request["keepalives"]
    assert frames[-1][2] == "unended" and {kind for _, _, kind in frames[request["keepalives"] : -1]} == {"event"}
    assert (
        kind == "cut"
        and cut == f"cut here: the journal keeps a stream's first 32768 bytes, and {request['sent_bytes']} were sent"
    )
    expect(console.page.locator("#detail-frames-note")).to_contain_text(
        f"{len(frames)} frames in {len(request['frames'])} writes"
    )
    expect(console.page.locator("#detail-frames-note")).to_contain_text("; cut)")
    assert console.errors == []


def test_queue_next_in_the_scenario_list_queues_it_for_the_next_n_requests(open_console):
    console = open_console()
    page = console.page
    page.fill("#times", "2")
    page.locator('#scenarios li[data-name="max-tokens"]').get_by_role("button", name="queue next").click()
    expect(page.locator("#queue")).to_have_text("max-tokens ×2 (2)")
    assert console.control("GET", "queue")["queue"] == ["max-tokens", "max-tokens"]
    client = console.client()
    for _ in range(2):
        answer = client.chat.completions.create(model="gpt-5.6-sol", messages=MESSAGES)
        assert answer.choices[0].finish_reason == "length"
    assert ask(client) == "Hello! How can I help you today?"  # the queue held two
    expect(page.locator("#queue")).to_have_text("empty")
    assert [console.cells(seq)["scenario"] for seq in (1, 2)] == ["max-tokens", "max-tokens"]
    assert console.errors == []


def set_time_scale(page, value: str) -> None:
    page.fill("#time-scale", value)
    page.get_by_role("button", name="set", exact=True).click()
    expect(page.locator("#message")).to_have_text(f"time scale: {value}")


def test_the_time_scale_set_on_the_page_paces_the_next_answers(open_console):
    console = open_console()
    page = console.page
    set_time_scale(page, "0.02")
    assert console.control("GET", "health")["time_scale"] == 0.02
    began = time.monotonic()
    assert ask(console.client(), "slow-typing") == "The quick brown fox jumps over the lazy dog."
    assert (
        time.monotonic() - began < 1.0
    )  # 44 characters 50 ms apart: 2.2 s at the time scale of 1 the server started with
    page.reload()
    expect(page.locator("#time-scale")).to_have_value("0.02")
    assert console.errors == []


def test_reset_on_the_page_puts_the_server_back_as_it_started(open_console):
    console = open_console()
    page = console.page
    for fault in ("500", "stall"):
        page.get_by_role("button", name=fault, exact=True).click()
    expect(page.locator("#fault-list")).to_have_text("server_error, stall")
    page.fill("#editor", "name: added-here\nsteps:\n  - text: from the editor\n")
    expect(page.locator("#editor-state")).to_have_text("✓ added-here (steps)")
    page.click("#editor-add")
    page.locator('#scenarios li[data-name="added-here"] .make-default').click()
    expect(page.locator("#default")).to_have_text("added-here")
    set_time_scale(page, "0.5")
    with pytest.raises(openai.InternalServerError):
        ask(console.client())
    expect(console.rows()).to_have_count(1)

    page.click("#reset")
    expect(console.rows()).to_have_count(0)
    expect(page.locator("#queue")).to_have_text("empty")
    expect(page.locator("#fault-list")).to_have_text("none")
    expect(page.locator("#default")).to_have_text("hello")
    expect(page.locator('#scenarios li[data-name="added-here"]')).to_have_count(0)
    expect(page.locator("#time-scale")).to_have_value("1")
    health = console.control("GET", "health")
    assert (health["default"], health["time_scale"]) == ("hello", 1.0)
    assert console.control("GET", "queue")["queue"] == [] and console.control("GET", "requests")["requests"] == []
    assert "added-here" not in {scenario["name"] for scenario in console.control("GET", "scenarios")["scenarios"]}
    assert ask(console.client()) == "Hello! How can I help you today?"
    expect(console.row(2)).to_contain_text("hello")
    assert console.errors == []


def test_the_editor_shows_a_typos_line_and_nearest_key_then_adds_and_queues_the_fix(open_console):
    console = open_console()
    page = console.page
    page.fill("#editor", "name: typo-demo\nsteps:\n  - txt: fixed in the page\n")
    expect(page.locator("#problems li")).to_have_text("line 3: unknown key 'txt' in a step; did you mean 'text'?")
    expect(page.locator("#editor-lines .bad")).to_have_text("3")
    expect(page.locator("#editor-state")).to_have_text("1 problem")
    page.fill("#editor", "name: typo-demo\nsteps:\n  - text: fixed in the page\n")
    expect(page.locator("#editor-state")).to_have_text("✓ typo-demo (steps)")
    expect(page.locator("#problems li")).to_have_count(0)
    page.click("#editor-queue")
    expect(page.locator("#queue")).to_have_text("typo-demo (1)")
    expect(page.locator('#scenarios li[data-name="typo-demo"]')).to_contain_text("api")
    assert ask(console.client()) == "fixed in the page"
    assert console.errors == []


def test_the_admin_token_is_asked_for_once_and_sent_with_every_call(open_console):
    console = open_console(wait_live=False, admin_token="console-t0ken")
    page = console.page
    expect(page.locator("#token-dialog")).to_be_visible()
    page.fill("#token", "not-the-token")
    page.click("#token-form button")
    expect(page.locator("#token-error")).to_have_text("the server refused that token")
    page.fill("#token", "console-t0ken")
    page.click("#token-form button")
    expect(page.locator("#connection")).to_have_text("live")
    expect(page.locator("#token-dialog")).to_be_hidden()
    expect(page.locator("#scenarios li").first).to_be_visible()
    page.get_by_role("button", name="500", exact=True).click()
    expect(page.locator("#fault-list")).to_have_text("server_error")
    page.reload()  # the tab keeps the token
    expect(page.locator("#connection")).to_have_text("live")
    expect(page.locator("#fault-list")).to_have_text("server_error")
    assert not page.locator("#token-dialog").is_visible()
    with pytest.raises(openai.InternalServerError):
        ask(console.client(), "hello")
    expect(console.row(1)).to_contain_text("hello")
    page.click("#forget-token")
    expect(page.locator("#token-dialog")).to_be_visible()
    expect(page.locator("#connection")).to_have_text("token needed")
    time.sleep(6)  # past the next reading of the sessions, every 5 s while the page is let in
    assert console.errors == [] and console.refused == []  # no call of the page's was refused, so nothing was logged


def test_a_token_the_server_no_longer_takes_is_asked_for_again_before_any_call(open_console):
    console = open_console(wait_live=False, admin_token="console-t0ken")
    page = console.page
    page.evaluate("() => sessionStorage.setItem('fakehop-admin-token', 'yesterdays-t0ken')")
    page.reload()
    expect(page.locator("#token-error")).to_have_text("the server refused that token")
    expect(page.locator("#scenarios li")).to_have_count(0)
    page.fill("#token", "console-t0ken")
    page.click("#token-form button")
    expect(page.locator("#connection")).to_have_text("live")
    expect(page.locator("#forget-token")).to_be_visible()
    assert console.errors == [] and console.refused == []


def test_without_an_admin_token_the_page_asks_for_none(open_console):
    console = open_console()
    expect(console.page.locator("#scenarios li").first).to_be_visible()
    assert console.page.locator("#token-dialog").is_hidden() and console.page.locator("#forget-token").is_hidden()


def test_the_session_selector_points_the_buttons_and_the_log_at_one_session(open_console):
    console = open_console()
    page = console.page
    tester = console.client(default_headers={"X-Fakehop-Session": "checkout"})
    assert ask(tester) == ask(console.client())
    expect(page.locator("#session option")).to_have_count(2, timeout=10_000)  # the sessions are read every 5 s
    expect(console.row(1).locator("td").nth(9)).to_have_text("checkout")
    expect(console.row(2).locator("td").nth(9)).to_have_text("global")
    page.select_option("#session", "checkout")
    expect(console.row(2)).to_be_hidden()
    page.get_by_role("button", name="429", exact=True).click()
    expect(page.locator("#fault-list")).to_have_text("rate_limit")
    assert ask(console.client()) == "Hello! How can I help you today?"  # the global session has no fault
    with pytest.raises(openai.RateLimitError):
        ask(tester)
    expect(console.row(4).locator("td").nth(5)).to_have_text("429")
    expect(console.row(3)).to_be_hidden()
    page.select_option("#session", "")
    expect(console.row(3)).to_be_visible()
    expect(page.locator("#queue")).to_have_text("empty")
    assert console.errors == []


# ---------------------------------------------------------------- under load


LONG_TASKS = """
window.consoleLoad = {longTasks: [], logMutations: 0};
new PerformanceObserver((list) => { for (const entry of list.getEntries()) window.consoleLoad.longTasks.push(entry.duration); })
  .observe({type: "longtask", buffered: true});
document.addEventListener("DOMContentLoaded", () => {
  new MutationObserver(() => { window.consoleLoad.logMutations += 1; })
    .observe(document.querySelector("#log tbody"), {childList: true, subtree: true, characterData: true});
});
"""


def send_at(rate: float, count: int, url: str) -> list[float]:
    """`count` requests through the SDK, `rate` a second, each from its own thread; their durations."""
    client = clients.openai_sync(base_url=url + "/v1", api_key="sk-test", max_retries=0)

    def one(_: int) -> float:
        began = time.monotonic()
        try:
            ask(client)
        except openai.InternalServerError:  # the fault the test queues meanwhile
            pass
        return time.monotonic() - began

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
        futures = []
        for number in range(count):
            time.sleep(max(0.0, started + number / rate - time.monotonic()))
            futures.append(pool.submit(one, number))
        return [future.result() for future in futures]


def test_the_page_stays_usable_at_50_requests_a_second_its_rows_batched_and_its_log_bounded(open_console, browser):
    console = open_console(wait_live=False)
    page = console.page
    page.add_init_script(LONG_TASKS)
    console.open("/_fakehop/ui?rows=100")
    load = threading.Thread(target=send_at, args=(50, 300, console.url))
    load.start()
    latencies = []
    try:
        time.sleep(1.5)
        clicked = time.time()
        page.get_by_role("button", name="500", exact=True).click()  # clicks while the log scrolls
        page.get_by_role("button", name="500", exact=True).click()
        while load.is_alive():
            began = time.monotonic()
            page.evaluate("() => document.querySelectorAll('#log tbody tr').length")
            latencies.append(time.monotonic() - began)
            time.sleep(0.25)
    finally:
        load.join()
    expect(page.locator("#log-count")).to_contain_text("of 300 requests", timeout=3000)
    expect(console.rows()).to_have_count(100)
    expect(console.rows().first).to_have_attribute("data-seq", "300")
    failed = console.server.call(
        lambda: [r.started_at for r in console.server.gateway.journal.records if r.faults == ("server_error",)]
    )
    assert len(failed) == 2 and failed[0] - clicked < 1.0
    load_figures = page.evaluate("() => window.consoleLoad")
    assert max(latencies) < 1.0, latencies
    assert max(load_figures["longTasks"], default=0) < 500, load_figures["longTasks"]
    assert load_figures["logMutations"] < 300 / 2, load_figures  # a few pushes a second, not one update a request
    assert console.errors == []


# ---------------------------------------------------------------- the README's screenshot


def test_a_screenshot_of_the_console_at_work(open_console, tmp_path):
    """The README's picture; `FAKEHOP_CONSOLE_SCREENSHOT=docs/console.png` writes it there too."""
    console = open_console()
    page = console.page
    client = console.client()
    ask(client)
    ask(client, "weather-tool")
    page.get_by_role("button", name="429", exact=True).click()
    expect(page.locator("#fault-list")).to_have_text("rate_limit")
    with pytest.raises(openai.RateLimitError):
        ask(client)
    with pytest.raises(openai.APIError):
        ask(client, "fail-rate-limit")
    with client.responses.stream(
        model="gpt-5.6-sol", input="Hi", extra_headers={"X-Fakehop-Scenario": "think-then-tool"}
    ) as answer:
        answer.get_final_response()
    anthropic_client = clients.anthropic_sync(base_url=console.url, api_key="sk-test", max_retries=0)
    with anthropic_client.messages.stream(
        model="claude-sonnet-5",
        max_tokens=100,
        messages=MESSAGES,
        extra_headers={"X-Fakehop-Scenario": "reasoning-pause"},
    ) as stalled:
        next(iter(stalled))
        page.fill("#editor", "name: cut-short\nsteps:\n  - txt: Half an answer\n  - disconnect\n")
        expect(page.locator("#problems li")).to_have_count(1)
        expect(console.row(6)).to_contain_text("in_progress")
        console.row(2).click()
        expect(page.locator("#detail-frames tbody tr").first).to_be_visible()
        page.locator("#detail-frames").scroll_into_view_if_needed()  # the frames, one row each, in the picture
        expect(page.locator("#queue")).to_have_text("empty")
        picture = tmp_path / "console.png"
        page.screenshot(path=str(picture))
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    wanted = os.environ.get(SCREENSHOT_VARIABLE)
    if wanted:
        shutil.copyfile(picture, wanted)
