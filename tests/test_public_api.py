"""What `fakehop` itself exports: every name in `__all__` is there, from the module that makes it,
and a program can start a server, drive it and read its journal from `fakehop` alone."""

from __future__ import annotations

import subprocess
import sys

import fakehop

PROGRAM = """
import json, sys, urllib.request
import fakehop
assert "fakehop.server" not in sys.modules  # importing the package loads none of the server
from fakehop import Fakehop, Gateway, Library, ThreadServer

with ThreadServer(Gateway(Library.load(), time_scale=0.01)) as server:
    fake = Fakehop(server)
    fake.queue("hello")
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "Hi"}]}).encode()
    request = urllib.request.Request(fake.openai_base_url + "/chat/completions", data=body, headers={"Content-Type": "application/json"})
    answer = json.load(urllib.request.urlopen(request, timeout=30))
    [recorded] = fake.requests
    print(answer["choices"][0]["message"]["content"], recorded.scenario, recorded.end, sep="|")
"""


def test_every_public_name_is_exported_from_where_it_is_made():
    for name in fakehop.__all__:
        value = getattr(fakehop, name)
        assert value is not None, name
        if hasattr(value, "__module__") and name not in ("CONTROL_PREFIX", "__version__"):
            assert value.__module__.startswith("fakehop."), name
    assert set(fakehop.__all__) <= set(dir(fakehop))
    assert set(fakehop.__all__) == {"CONTROL_PREFIX", "__version__", *fakehop._PUBLIC}  # each name has its module


def test_an_unknown_name_is_an_attribute_error():
    try:
        fakehop.NoSuchThing  # noqa: B018
    except AttributeError as error:
        assert "NoSuchThing" in str(error)
    else:
        raise AssertionError("no AttributeError")


def test_a_program_serves_and_reads_its_journal_from_fakehop_alone():
    run = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "Hello! How can I help you today?|hello|completed\n"
