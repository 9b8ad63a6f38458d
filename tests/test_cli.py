"""The `fakehop` command, run as a user runs it.

`python -m fakehop` runs as a process of its own where the process is what a test is about:
`serve` and `record` that start (their banners, signals and ports, a port in use among them),
the import that must leave aiohttp out, `play` of a file named relative to its working
directory, and one run each of `validate` and `list`, for the entry point and its exit status.
The rest run main() in this process (tests/cli_runs.py), `serve` and `record` that refuse to
start among them (one that started would fail on its thread's signal handlers, not serve): an
exception that main() lets out fails the test there, so their checks for a traceback on stderr
went with them.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import jsonschema
import pytest
import yaml

from fakehop.scenario.library import bundled_directory

from .cli_runs import fakehop_here, fakehop_process


@pytest.fixture
def broken_dir(tmp_path: Path) -> Path:
    (tmp_path / "good.yaml").write_text("steps: [{text: fine}]\n")
    (tmp_path / "typo.yaml").write_text("description: typo\nsteps:\n  - txt: hello\n")
    (tmp_path / "broken.yaml").write_text("steps:\n  - text: [unclosed\n")
    return tmp_path


def test_validate_lists_every_error_with_file_and_line(broken_dir: Path):
    result = fakehop_process("validate", str(broken_dir))
    assert result.returncode == 1
    assert f"{broken_dir / 'typo.yaml'}:3: unknown key 'txt' in a step; did you mean 'text'?" in result.stderr
    assert f"{broken_dir / 'broken.yaml'}:3: not valid YAML" in result.stderr
    assert "2 problems found" in result.stderr
    assert "Traceback" not in result.stderr


def test_validate_ok(tmp_path: Path):
    (tmp_path / "a.yaml").write_text("steps: [{text: fine}]\n")
    result = fakehop_here("validate", str(tmp_path / "a.yaml"), str(bundled_directory()))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok: ")


def test_serve_refuses_to_start_on_a_broken_file(broken_dir: Path):
    result = fakehop_here("serve", "--port", "0", "--scenarios", str(broken_dir))
    assert result.returncode == 1
    assert f"{broken_dir / 'typo.yaml'}:3:" in result.stderr
    assert "nothing was started" in result.stderr


def test_serve_prints_its_url_and_answers(tmp_path: Path):
    (tmp_path / "mine.yaml").write_text("steps: [{text: from my dir}]\n")
    server = subprocess.Popen(
        [sys.executable, "-m", "fakehop", "serve", "--port", "0", "--scenarios", str(tmp_path), "--default", "mine"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None and server.stderr is not None
    try:
        first = server.stdout.readline()
        url = first.split("listening on ")[1].strip()
        request = urllib.request.Request(
            url + "/v1/chat/completions",
            method="POST",
            data=json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            answer = json.load(response)
        assert answer["choices"][0]["message"]["content"] == "from my dir"
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=10)
    assert server.returncode == 0
    assert "Traceback" not in server.stderr.read()


def test_unknown_default_is_refused():
    result = fakehop_here("serve", "--port", "0", "--default", "nope")
    assert result.returncode == 2
    assert "Unknown scenario 'nope'" in result.stderr and "hello" in result.stderr


def test_play_unknown_scenario_and_bad_body():
    result = fakehop_here("play", "nope")
    assert result.returncode == 2 and "Known scenarios:" in result.stderr
    result = fakehop_here("play", "hello", "--body", '{"model": "m"}')
    assert result.returncode == 2 and "Missing required parameter: 'messages'" in result.stderr


def test_play_a_file_as_queue_takes_one(tmp_path: Path):
    (tmp_path / "mine.yaml").write_text("steps:\n  - text: from my file\n")
    (tmp_path / "then-hello.yml").write_text("sequence:\n  - steps: [{text: first}]\n  - use: hello\n")

    mine = fakehop_here("play", str(tmp_path / "mine.yaml"), "--no-stream", "--no-wait")
    used = fakehop_here("play", str(tmp_path / "then-hello.yml"), "--no-stream", "--no-wait", "--request", "2")
    relative = fakehop_process("play", "mine.yaml", "--no-stream", "--no-wait", cwd=tmp_path)

    assert mine.returncode == 0, mine.stderr
    assert json.loads(mine.stdout)["choices"][0]["message"]["content"] == "from my file"
    assert json.loads(used.stdout)["choices"][0]["message"]["content"] == "Hello! How can I help you today?"
    assert json.loads(relative.stdout)["choices"][0]["message"]["content"] == "from my file"


def test_play_a_bad_file_lists_its_problems_and_plays_nothing(tmp_path: Path):
    (tmp_path / "typo.yaml").write_text("steps:\n  - txt: hi\n")
    (tmp_path / "lost.yaml").write_text("sequence:\n  - use: nowhere\n")

    typo = fakehop_here("play", str(tmp_path / "typo.yaml"), "--no-wait")
    lost = fakehop_here("play", str(tmp_path / "lost.yaml"), "--no-wait")
    missing = fakehop_here("play", str(tmp_path / "missing.yaml"), "--no-wait")

    assert (typo.returncode, typo.stdout) == (1, "")
    assert typo.stderr.splitlines() == [
        f"{tmp_path / 'typo.yaml'}:2: unknown key 'txt' in a step; did you mean 'text'?",
        f"fakehop: 1 problem in {tmp_path / 'typo.yaml'}; nothing was played",
    ]
    assert (lost.returncode, lost.stdout) == (1, "")
    assert lost.stderr.startswith(f"{tmp_path / 'lost.yaml'}:2: use: no scenario named 'nowhere'")
    assert lost.stderr.splitlines()[-1] == f"fakehop: 1 problem in {tmp_path / 'lost.yaml'}; nothing was played"
    assert missing.returncode == 1 and f"{tmp_path / 'missing.yaml'}: cannot be read" in missing.stderr


def test_a_bare_fakehop_lists_the_commands_and_exits_2():
    bare = fakehop_here()
    helped = fakehop_here("--help")

    assert (bare.returncode, helped.returncode) == (2, 0)
    assert bare.stdout == helped.stdout
    assert all(
        f"\n    {command} " in bare.stdout for command in ("serve", "play", "queue", "requests", "list", "record")
    )
    assert bare.stderr == ""


@pytest.mark.parametrize(
    "args,says",
    [
        (["queue"], "fakehop: queue: give a scenario NAME or FILE to queue, or --clear to empty the queue"),
        (
            ["queue", "--clear", "--times", "2"],
            "fakehop: --times: says how often to queue a scenario; give its NAME or FILE",
        ),
        (
            ["list", "--session", "ci-1"],
            "fakehop: --session: a session belongs to a running server; give its --url too",
        ),
        (
            ["list", "--url", "http://127.0.0.1:1", "--scenarios", "."],
            "fakehop: --scenarios: with --url the server's own scenarios are listed",
        ),
    ],
)
def test_options_that_do_not_go_together_are_one_line_and_exit_2(args, says):
    result = fakehop_here(*args)
    assert result.returncode == 2
    assert result.stderr.startswith(says) and result.stderr.count("\n") == 1


@pytest.mark.parametrize("command,undone", [("play", "nothing was played"), ("list", "nothing was listed")])
def test_a_broken_scenarios_directory_says_what_the_command_left_undone(broken_dir: Path, command, undone):
    arguments = ["hello", "--no-wait"] if command == "play" else []
    result = fakehop_here(command, *arguments, "--scenarios", str(broken_dir))
    assert (result.returncode, result.stdout) == (1, "")
    assert f"{broken_dir / 'typo.yaml'}:3:" in result.stderr
    assert result.stderr.splitlines()[-1] == f"fakehop: 2 scenario problems; {undone}"


def test_play_no_stream_prints_one_json_body():
    result = fakehop_here("play", "weather-tool", "--no-stream", "--no-wait")
    answer = json.loads(result.stdout)
    assert answer["object"] == "chat.completion"
    assert answer["choices"][0]["finish_reason"] == "tool_calls"


def test_play_a_conversation_answers_the_turn_of_its_request():
    example_turn_2 = json.loads(
        fakehop_here("play", "agent-weather", "--no-stream", "--no-wait", "--request", "2").stdout
    )
    assert example_turn_2["choices"][0]["message"]["content"] == "The weather in Paris: Sunny, 21 °C."
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "Hail"},
        ],
    }
    given = json.loads(
        fakehop_here("play", "agent-weather", "--no-stream", "--no-wait", "--body", json.dumps(body)).stdout
    )
    assert given["choices"][0]["message"]["content"] == "The weather in Paris: Hail."
    both = fakehop_here("play", "agent-weather", "--body", json.dumps(body), "--request", "2")
    assert both.returncode == 2 and "give --body or --request, not both" in both.stderr
    body["messages"][2]["tool_call_id"] = "c2"
    refused = fakehop_here("play", "agent-weather", "--body", json.dumps(body))
    assert (
        refused.returncode == 2
        and "'tool_call_id' of 'c2' not found in 'tool_calls' of previous message" in refused.stderr
    )


def test_play_http_error_reports_status_on_stderr():
    result = fakehop_here("play", "rate-limited", "--no-wait")
    assert json.loads(result.stdout)["error"]["code"] == "rate_limit_exceeded"
    assert "HTTP 429" in result.stderr and "Retry-After: 2" in result.stderr


def test_play_waits_unless_told_not_to():
    import time

    started = time.monotonic()
    result = fakehop_here("play", "slow-typing", "--time-scale", "0.2")
    elapsed = time.monotonic() - started
    assert result.stdout.count("data: ") > 40
    assert elapsed >= 43 * 0.05 * 0.2


def test_list_shows_names_and_descriptions():
    result = fakehop_process("list")
    assert result.returncode == 0
    assert any(line.startswith("weather-tool ") and "get_weather" in line for line in result.stdout.splitlines())


def test_a_reader_that_stops_early_ends_the_output_quietly():
    """`fakehop schema | head -1`: the schema is more than a pipe holds, so its writing meets
    the closed pipe, and the command ends as SIGPIPE ends others, saying nothing."""
    process = subprocess.Popen(
        [sys.executable, "-m", "fakehop", "schema"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.readline() == b"{\n"
    process.stdout.close()
    stderr = process.stderr.read()
    assert process.wait(timeout=30) == 141
    assert stderr == b""


def test_schema_is_valid_and_accepts_every_bundled_scenario():
    schema = json.loads(fakehop_here("schema").stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for path in sorted(bundled_directory().glob("*.yaml")):
        errors = list(validator.iter_errors(yaml.safe_load(path.read_text())))
        assert not errors, f"{path.name}: {errors[0].message}"


def test_schema_accepts_explicit_pieces_and_signatures():
    from fakehop.scenario.schema import scenario_schema

    document = {
        "steps": [
            {"reasoning": ["Thin", "king"], "signature": "c2ln", "interval": "5ms"},
            {"text": ["Hel", "lo"]},
            {"tool_call": {"name": "f", "arguments": ['{"a":', "1}"], "id": "call_1"}, "interval": 0.01},
        ]
    }
    assert not list(jsonschema.Draft202012Validator(scenario_schema()).iter_errors(document))


def test_schema_accepts_the_conversation_keys():
    from fakehop.scenario.reader import parse_text
    from fakehop.scenario.schema import scenario_schema

    document = {
        "match": {
            "turn": [1, ">=3"],
            "tool_result": "get_weather",
            "tools": "get_weather",
            "system": "/brief/",
            "header": {"X-Tenant": "acme-*"},
        },
        "conversation": [
            {"steps": [{"text": {"from": "prompt"}}, {"reasoning": {"from": "tool_result", "tool": "get_time"}}]},
            {"steps": [{"text": {"template": "{tool_result} {{literally}}"}, "chunk": "word"}]},
            {"use": "hello"},
        ],
    }
    parse_text(json.dumps(document), "<t>", "t")
    assert list(jsonschema.Draft202012Validator(scenario_schema()).iter_errors(document)) == []


@pytest.mark.parametrize(
    "document",
    [
        {"match": {"turn": 0}, "steps": [{"text": "a"}]},
        {"match": {"turn": ">=0"}, "steps": [{"text": "a"}]},
        {"match": {"turn": [2, ">= 00"]}, "steps": [{"text": "a"}]},
        {"sequence": [{"use": "hello", "model": "m"}]},
        {"sequence": [{"use": ""}]},
        {"match": {"tool_result": 3}, "steps": [{"text": "a"}]},
        {"match": {"header": "X-Tenant"}, "steps": [{"text": "a"}]},
        {"match": {"header": {"X Tenant": "acme"}}, "steps": [{"text": "a"}]},
        {"steps": [{"reasoning": {"parts": ["a", {"from": "prompt"}]}}]},
        {"steps": [{"text": {"from": "nowhere"}}]},
        {"steps": [{"text": {"template": "{tool_result}", "from": "prompt"}}]},
        {"conversation": []},
        {"stepz": [{"text": "a"}]},
        {"steps": [{"txt": "a"}]},
        {"steps": [{"text": "a", "chunk": "sentence"}]},
        {"steps": [{"fail": "meltdown"}]},
        {"http_error": {"status": 200}},
        {"steps": []},
        {"steps": [{"text": ["Hel", "lo"], "chunk": "word"}]},
        {"steps": [{"reasoning": []}]},
        {"steps": [{"tool_call": {"name": "f", "arguments": ["{}", 1]}}]},
        {"steps": [{"text": ["a"], "signature": "s"}]},
        {"steps": [{"redacted_thinking": ""}]},
        {"stop_details": {"category": "malware"}, "steps": [{"refusal": "No."}]},
        {"stop_details": {"reason": "x"}, "steps": [{"refusal": "No."}]},
        {"usage": {"input_tokens": 2_000_000_000}, "steps": [{"text": "a"}]},
        {"rate_limit": {"requests": 10**13}, "steps": [{"text": "a"}]},
        {"timing": {"tokens_per_second": {"mean": 60}, "seed": 2**64}, "steps": [{"text": "a"}]},
    ],
)
def test_schema_rejects_what_the_loader_rejects(document):
    from fakehop.scenario.reader import ScenarioError, parse_text
    from fakehop.scenario.schema import scenario_schema

    with pytest.raises(ScenarioError):
        parse_text(json.dumps(document), "<t>", "t")
    assert list(jsonschema.Draft202012Validator(scenario_schema()).iter_errors(document))


@pytest.mark.parametrize(
    "args,env,says",
    [
        (["serve", "--port", "70000"], {}, "--port: expected a port from 0 to 65535"),
        (["serve", "--port", "-1"], {}, "--port: expected a port from 0 to 65535"),
        (["serve", "--time-scale", "inf"], {}, "--time-scale: expected a number more than 0, got 'inf'"),
        (["serve", "--time-scale", "nan"], {}, "--time-scale: expected a number more than 0, got 'nan'"),
        (["serve", "--journal-bytes", "lots"], {}, "--journal-bytes: expected a number of bytes"),
        (
            ["requests", "--url", "http://[not-an-address"],
            {},
            "--url: expected a server URL such as http://127.0.0.1:8080",
        ),
        (["reset", "--url", "http://127.0.0.1:99999"], {}, "--url: expected a server URL"),
        (["queue", "hello", "--url", "localhost:8080"], {}, "--url: expected a server URL"),
        (
            ["requests", "--url", "http://127.0.0.1:8080/v1"],
            {},
            "--url: expected a server URL such as http://127.0.0.1:8080, with no path",
        ),
        (["reset"], {"FAKEHOP_URL": "http://127.0.0.1:8080/?session=a"}, "$FAKEHOP_URL"),
        (["reset"], {"FAKEHOP_URL": "ftp://example"}, "$FAKEHOP_URL"),
        (["play", "flaky-then-ok", "--request", "-5"], {}, "--request: must be a whole number from 1, got -5"),
        (
            ["play", "hello", "--no-wait"],
            {"FAKEHOP_TIME_SCALE": "abc"},
            "FAKEHOP_TIME_SCALE: expected a number more than 0, got 'abc'",
        ),
        (
            ["play", "hello", "--no-wait"],
            {"FAKEHOP_TIME_SCALE": "-1"},
            "FAKEHOP_TIME_SCALE: expected a number more than 0, got '-1'",
        ),
        (
            ["play", "hello", "--no-wait"],
            {"FAKEHOP_TIME_SCALE": "0"},
            "FAKEHOP_TIME_SCALE: expected a number more than 0, got '0'",
        ),
        (
            ["play", "hello", "--no-wait"],
            {"FAKEHOP_TIME_SCALE": "nan"},
            "FAKEHOP_TIME_SCALE: expected a number more than 0, got 'nan'",
        ),
        (
            ["serve", "--port", "0"],
            {"FAKEHOP_TIME_SCALE": "abc"},
            "FAKEHOP_TIME_SCALE: expected a number more than 0, got 'abc'",
        ),
    ],
    ids=lambda value: str(value)[:40],
)
def test_bad_options_and_variables_are_one_line_and_exit_2(args, env, says):
    result = fakehop_here(*args, env=env)
    assert result.returncode == 2, result.stderr
    assert says in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def started(*args: str) -> tuple[subprocess.Popen, str]:
    """A fakehop command that serves, and the URL its first line names."""
    process = subprocess.Popen(
        [sys.executable, "-m", "fakehop", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    first = process.stdout.readline()
    found = re.search(r" on (http://[^ ]+?:\d+)", first)
    assert found, first
    return process, found.group(1)


def stopped(process: subprocess.Popen) -> tuple[str, str]:
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=10)
    assert process.returncode == 0 and "Traceback" not in stderr
    return stdout, stderr


def test_record_writes_each_answer_through_it_as_a_scenario_that_validates(tmp_path: Path):
    upstream, upstream_url = started("serve", "--port", "0", "--time-scale", "0.01", "--quiet")
    try:
        recorder, url = started(
            "record", "--upstream", upstream_url + "/v1", "--out", str(tmp_path / "out"), "--port", "0"
        )
        try:
            request = urllib.request.Request(
                url + "/v1/messages",
                method="POST",
                data=json.dumps(
                    {
                        "model": "claude-sonnet-5",
                        "max_tokens": 100,
                        "messages": [{"role": "user", "content": "Weather in Paris?"}],
                    }
                ).encode(),
                headers={"X-Fakehop-Scenario": "weather-tool", "x-api-key": "sk-cli-0123456789"},
            )
            with urllib.request.urlopen(request, timeout=10) as response:
                assert json.load(response)["content"][1]["name"] == "get_weather"
        finally:
            stdout, _ = stopped(recorder)
    finally:
        stopped(upstream)
    path = tmp_path / "out" / "messages-weather-in-paris.yaml"
    assert f"recorded {path}: messages, whole, HTTP 200, finished" in stdout
    assert "sk-cli-0123456789" not in path.read_text()
    assert fakehop_here("validate", str(tmp_path / "out")).stdout == "ok: 1 scenario\n"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["--upstream", "localhost:8080"],
            "fakehop: --upstream must be an http:// or https:// URL, got 'localhost:8080'",
        ),
        (
            ["--upstream", "http://127.0.0.1:9", "--min-gap", "soon"],
            "argument --min-gap: expected a duration such as 2s, 250ms or 1.5m, got 'soon'",
        ),
    ],
)
def test_record_refuses_bad_options_in_one_line(tmp_path: Path, args, says):
    result = fakehop_here("record", "--out", str(tmp_path), "--port", "0", *args)
    assert result.returncode == 2 and says in result.stderr


def test_record_refuses_an_out_that_is_a_file_and_a_port_in_use(tmp_path: Path):
    (tmp_path / "file").write_text("")
    result = fakehop_here("record", "--upstream", "http://127.0.0.1:9", "--out", str(tmp_path / "file"), "--port", "0")
    assert (result.returncode, result.stderr) == (2, f"fakehop: --out {tmp_path / 'file'} is not a directory\n")
    holder, url = started("record", "--upstream", "http://127.0.0.1:9", "--out", str(tmp_path), "--port", "0")
    try:
        result = fakehop_process(
            "record", "--upstream", "http://127.0.0.1:9", "--out", str(tmp_path), "--port", url.rsplit(":", 1)[1]
        )
        assert result.returncode == 2 and result.stderr.startswith("fakehop: ") and result.stderr.count("\n") == 1
    finally:
        stopped(holder)


def test_record_warns_when_others_can_reach_it(tmp_path: Path):
    recorder, _ = started(
        "record",
        "--upstream",
        "http://127.0.0.1:9",
        "--out",
        str(tmp_path),
        "--host",
        "0.0.0.0",
        "--port",
        "0",
        "--upstream-key",
        "sk-mine-0123456789",
    )
    _, stderr = stopped(recorder)
    assert stderr == (
        "fakehop: warning: recording on 0.0.0.0: anyone who can reach it can send requests upstream, "
        "with --upstream-key, on your key\n"
    )


@pytest.mark.parametrize(
    "document",
    [
        {
            "steps": [
                {
                    "fail": {
                        "kind": "rate_limit",
                        "error_event": False,
                        "type": "insufficient_quota",
                        "code": "insufficient_quota",
                        "param": "input",
                    }
                }
            ]
        },
        {
            "http_error": {
                "status": 400,
                "type": "invalid_request_error",
                "code": "context_length_exceeded",
                "param": "messages",
            }
        },
        {
            "usage": {
                "reasoning_tokens": 1,
                "cached_tokens": 2,
                "cache_write_tokens": 3,
                "input_audio_tokens": 4,
                "output_audio_tokens": 5,
                "accepted_prediction_tokens": 6,
                "rejected_prediction_tokens": 7,
            },
            "steps": [{"text": "a"}],
        },
        {"finish": "stop_sequence", "stop_sequence": "###", "steps": [{"text": "a"}]},
        {
            "rate_limit": {
                "requests": 60,
                "tokens": 100000,
                "input_tokens": 80000,
                "output_tokens": 20000,
                "window": "1m",
            },
            "steps": [{"text": "a"}],
        },
        {"rate_limit": {}, "sequence": [{"steps": [{"text": "a"}], "rate_limit": {"requests": 2}}]},
        {
            "steps": [
                {"text": "a", "phase": "commentary", "chunk": "word"},
                {"refusal": "Sorry", "chunk": 3, "interval": "10ms"},
            ]
        },
        {
            "force_reasoning": True,
            "steps": [
                {"reasoning": {"parts": ["a", {"faker": "sentence"}]}, "chunk": "word"},
                "redacted_thinking",
                {"redacted_thinking": "EmwK"},
                {"redacted_thinking": None},
            ],
        },
        {
            "usage": {"thinking_tokens": 1, "cache_read_input_tokens": 2, "cache_creation_input_tokens": 3},
            "steps": [{"text": "a"}],
        },
        {"stop_details": {"category": "cyber", "explanation": "Why."}, "steps": [{"refusal": "No."}]},
        {"finish": "content_filter", "stop_details": {"category": None}, "steps": [{"text": "a"}]},
        {"match": {"turn": [" >= 010 ", 1]}, "sequence": [{"use": "hello"}]},
    ],
)
def test_schema_accepts_what_the_loader_accepts(document):
    from fakehop.scenario.reader import parse_text
    from fakehop.scenario.schema import scenario_schema

    parse_text(json.dumps(document), "<t>", "t")
    assert not list(jsonschema.Draft202012Validator(scenario_schema()).iter_errors(document))


def test_the_commands_for_a_running_server_start_without_the_server_stack():
    """`fakehop queue`, `requests`, `wait` and the rest only talk HTTP to a server: importing the
    CLI leaves aiohttp out, which halves their start-up."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, fakehop.cli.main; print(sorted(m for m in sys.modules if m.split('.')[0] == 'aiohttp'))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
