"""``python -m clients.torch|tf``'s entry (``clients.trainer_args.command_main``): the command
named first, or ``train``, its arguments, and its module imported with the collector held off,
then frozen (sampler_common.startup). Run in a fresh interpreter: the freeze is a program's."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO_ROOT

ENTRY = """
import gc, json
from clients.trainer_args import command_main
assert gc.get_freeze_count() == 0
command, main, arguments = command_main("clients.torch", ["--seed", "3"])
first = {"command": command, "main": main.__module__, "arguments": arguments,
         "frozen": gc.get_freeze_count(), "enabled": gc.isenabled()}
later = [(c, m.__module__, a) for c, m, a in (command_main("clients.torch", argv) for argv in
         (["train", "--seed", "3"], ["transfer", "--help"], ["cog"], ["evaluate", "x"]))]
print(json.dumps({"first": first, "later": later, "frozen": gc.get_freeze_count()}))
"""


def test_the_entry_runs_the_named_command_and_freezes_what_its_framework_imported():
    done = subprocess.run([sys.executable, "-c", ENTRY], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    first = got["first"]
    assert (first["command"], first["main"], first["arguments"]) == ("train", "clients.torch.md_train", ["--seed", "3"])
    assert first["enabled"] and first["frozen"] > 100_000  # PyTorch's objects, out of every later pass
    assert got["later"] == [["train", "clients.torch.md_train", ["--seed", "3"]],
                            ["transfer", "clients.torch.vtab_transfer", ["--help"]],
                            ["cog", "clients.torch.cog_eval", []],
                            ["evaluate", "clients.torch.evaluate", ["x"]]]
    assert got["frozen"] == first["frozen"]  # frozen once
