"""The docs' `sampler-server` commands that read stores run on the stores ``make demo``
leaves: each is run as written, in a scratch folder, with the reader's data directory
(``~/stores``, ``DATA``, ``demo-data/store``) pointed at ``demo_data``'s. Two kinds are
changed or left out, each for a reason the demo cannot help:
- CoG commands at the paper's scale (5 levels of 1000 concepts of 782 images) get the
  demo's ``--level-size 4 --min-images 60``: the demo's IN-21K layout has 189 synsets;
- commands naming naver/cog's published files (``--levels-file``, ``--compare``) are not
  run: those files are not ours to ship (their loading is tested in tests/cli).
The first command of each kind (``episode``, ``cog``, ...) runs in a fresh interpreter, as
``python -m sampler_server``; the others run in this process (``exec_command``, the
``sampler-server`` script's ``main`` with their arguments): the same code and arguments,
without an interpreter start and the command's imports for each."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from doc_blocks import REPO_ROOT, exec_command
from test_doc_commands import _commands, _program

READS_STORES = {"episode", "batches", "inspect", "regime", "vtab", "cog", "hierarchy"}
DATA_DIRECTORIES = ("~/stores", "DATA", "demo-data/store")
NAVER_FILES = ("--levels-file", "--compare", "--concepts-split-file")
DEMO_COG_SCALE = ["--level-size", "4", "--min-images", "60"]


def _reading_commands() -> list[tuple[str, list[str]]]:
    found = []
    for block, line, tokens in _commands():
        program, arguments = _program(tokens)
        if program == "sampler-server" and arguments and arguments[0] in READS_STORES:
            found.append((f"{block.where}: {line}", arguments))
    return found


def _as_run(arguments: list[str], data: Path) -> list[str] | None:
    """The command a reader runs on the demo's stores, or None when the demo cannot serve it."""
    if any(flag in arguments for flag in NAVER_FILES):
        return None
    run = [str(data) if argument in DATA_DIRECTORIES else argument for argument in arguments]
    if run[0] == "cog" and "--level-size" not in run:
        run += DEMO_COG_SCALE
    return run


def test_the_docs_name_commands_that_read_stores():
    found = _reading_commands()
    assert {arguments[0] for _, arguments in found} == READS_STORES, found
    assert len(found) >= 15


@pytest.mark.slow
def test_every_docs_command_that_reads_stores_runs_on_the_demo_stores(demo_data, tmp_path):
    environment = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    ran, fresh = 0, set()
    for where, arguments in _reading_commands():
        run = _as_run(arguments, demo_data.data)
        if run is None:
            continue
        if run[0] not in fresh:
            fresh.add(run[0])
            done = subprocess.run([sys.executable, "-m", "sampler_server", *run], cwd=tmp_path, env=environment,
                                  capture_output=True, text=True, timeout=300, check=False)
            status, stdout, stderr = done.returncode, done.stdout, done.stderr
        else:
            status, printed = exec_command(f"sampler-server {shlex.join(run)}", cwd=tmp_path, where=where)
            stdout, stderr = printed.stdout, printed.stderr
        assert status == 0, f"{where}\n$ sampler-server {shlex.join(run)}\n{stderr[-1500:]}"
        assert stdout.strip(), where
        ran += 1
    assert ran >= 12, ran
    assert fresh == READS_STORES, fresh  # each kind once in a fresh interpreter
