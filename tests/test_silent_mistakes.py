"""Mistakes that used to pass unnoticed, now said through the parts a user meets: the
`fakehop` command, a real server on a real socket, the control API and the fixture."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from fakehop.cli import main
from fakehop.library import Library, bundled_directory
from fakehop.scenario import ScenarioError

# ---------------------------------------------------------------- steps after an ending

ENDINGS = [  # (the step as written, as the problem names it)
    ("- fail: rate_limit", "a fail"),
    ("- fail: {kind: server_error, message: gone}", "a fail"),
    ("- disconnect", "a disconnect"),
    ("- hang", "a hang"),
    ("- stall", "a stall without continue"),
    ("- stall: true", "a stall without continue"),
]
DEAD = "steps:\n  - text: partial\n  {ending}\n  - text: never played\n  - keepalive\n"


def dead_steps_problem(source: str, ending: str) -> str:
    """The problem a DEAD scenario gets: at the first step after the ending (line 4), naming the ending's line (3)."""
    return f"{source}:4: steps after {ending} never play: it ends the stream (line 3); remove them, or move them before it"


@pytest.mark.parametrize("written,ending", ENDINGS)
def test_validate_finds_steps_after_an_ending_with_file_and_line(tmp_path: Path, capsys, written, ending):
    path = tmp_path / "dead.yaml"
    path.write_text(DEAD.format(ending=written))
    assert main(["validate", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[0].startswith(dead_steps_problem(str(path), ending))
    assert err.splitlines()[1:] == ["1 problem found"]


def test_a_stall_without_continue_is_told_how_to_go_on(tmp_path: Path, capsys):
    (tmp_path / "dead.yaml").write_text(DEAD.format(ending="- stall"))
    main(["validate", str(tmp_path)])
    assert "; or write stall: continue to go on after the stall" in capsys.readouterr().err


def test_steps_after_stall_continue_and_an_ending_that_ends_the_steps_are_fine(tmp_path: Path, capsys):
    (tmp_path / "goes-on.yaml").write_text("steps:\n  - stall: continue\n  - raw: 'data: {}\\n\\n'\n  - text: after\n  - disconnect\n")
    (tmp_path / "fails-last.yaml").write_text("steps: [{text: a}, {fail: overloaded}]\n")
    assert main(["validate", str(tmp_path)]) == 0
    assert capsys.readouterr().out == "ok: 2 scenarios\n"


def test_steps_after_an_ending_in_a_sequence_or_conversation_entry_are_found_at_their_line(tmp_path: Path, capsys):
    (tmp_path / "seq.yaml").write_text("sequence:\n  - steps: [{text: a}]\n  - steps:\n      - hang\n      - text: b\n")
    (tmp_path / "conv.yaml").write_text("conversation:\n  - steps:\n      - disconnect\n      - text: c\n  - use: hello\n")
    assert main(["validate", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert f"{tmp_path / 'seq.yaml'}:5: steps after a hang never play: it ends the stream (line 4)" in err
    assert f"{tmp_path / 'conv.yaml'}:4: steps after a disconnect never play: it ends the stream (line 3)" in err


def test_serve_refuses_to_start_on_steps_after_an_ending(tmp_path: Path, capsys):
    (tmp_path / "dead.yaml").write_text(DEAD.format(ending="- disconnect"))
    assert main(["serve", "--port", "0", "--scenarios", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert dead_steps_problem(str(tmp_path / "dead.yaml"), "a disconnect") in err
    assert err.splitlines()[-1] == "fakehop: 1 scenario problem; nothing was started"


async def test_the_control_api_refuses_steps_after_an_ending_and_adds_nothing(base_url):
    source = "<POST /_fakehop/scenarios>"
    text = DEAD.format(ending="- fail: rate_limit")
    async with aiohttp.ClientSession() as client:
        yaml_type = {"Content-Type": "application/yaml"}
        async with client.post(base_url + "/_fakehop/scenarios?name=dead", data=text, headers=yaml_type) as response:
            assert response.status == 400
            assert (await response.json())["problems"] == [dead_steps_problem(source, "a fail")]
        async with client.post(base_url + "/_fakehop/scenarios?name=dead&check=true", data=text, headers=yaml_type) as response:
            checked = await response.json()
        assert checked["valid"] is False
        assert checked["problems"] == [{"line": 4, "message": dead_steps_problem(source, "a fail").split(":4: ")[1]}]
        inline = {"scenario": {"steps": [{"text": "partial"}, "hang", {"text": "never"}]}}
        for method, path in (("POST", "/_fakehop/queue"), ("PUT", "/_fakehop/default")):
            async with client.request(method, base_url + path, json=inline) as response:
                assert response.status == 400
                [problem] = (await response.json())["problems"]
                assert problem.endswith("steps after a hang never play: it ends the stream (line 0); remove them, or move them before it")
        async with client.get(base_url + "/_fakehop/scenarios") as response:
            names = [scenario["name"] for scenario in (await response.json())["scenarios"]]
        assert names == Library.load().names()


def test_the_fixture_refuses_an_inline_scenario_with_steps_after_an_ending(fakehop):
    with pytest.raises(ScenarioError, match="steps after a fail never play"):
        fakehop.queue({"steps": [{"fail": "rate_limit"}, {"text": "never"}]})


def test_every_bundled_scenario_loads_under_the_rule():
    assert len(Library.load().names()) == len(list(bundled_directory().glob("*.yaml")))
