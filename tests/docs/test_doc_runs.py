"""The documented training, evaluation and report commands run as printed on the stores
``make demo`` leaves. Every shell block of README.md and docs/ that holds one (a trainer,
``clients.init_weights``, ``torchrun``, ``sampler-server report`` or ``calibrate``) either runs
here, line by line in a scratch folder of its own, with only the server's address
(127.0.0.1:50051) and the reader's data directory (``~/stores``, ``DATA``, ``demo-data/store``)
pointed at the demo's; or its first line tells the reader why it cannot, in the block itself:
``# not on the demo: REASON`` (a GPU, a checkpoint or files of the reader's, the full scale a
protocol needs). The README's quickstart blocks run in test_quickstart.py.

The commands run in this process (``exec_command``: the trainer module as ``__main__`` with its
arguments, the ``sampler-server`` script's ``main``): a fresh interpreter for each would add its
start and a framework's import, not a check; each framework's trainer keeps a run in a fresh
interpreter in test_quickstart.py and tests/clients/test_readme_examples.py."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from doc_blocks import Block, all_blocks, exec_command
from test_doc_commands import _logical_lines
from test_doc_data_commands import DATA_DIRECTORIES
from test_quickstart import README_ADDRESS, _quickstart

RUNS = re.compile(r"python -m clients\.|torchrun|sampler-server (?:report|calibrate)\b")
NOT_ON_DEMO = re.compile(r"^# not on the demo: (?P<reason>\S.{9,})$")
PLACEHOLDERS = ("...", "HOST:PORT", "sampler.lab", "my-ckpt.pt", "mine.pt")


def _blocks() -> list[Block]:
    """The shell blocks with a command this module runs (the quickstart's run elsewhere)."""
    quickstart = {block.where for block in _quickstart()}
    return [block for block in all_blocks() if block.language == "sh" and not block.page.startswith("bench/")
            and RUNS.search(block.code) and block.where not in quickstart]


def _reason(block: Block) -> str | None:
    marked = NOT_ON_DEMO.match(block.code.split("\n", 1)[0])
    return marked["reason"] if marked else None


RUNNABLE = [block for block in _blocks() if _reason(block) is None]


def test_every_documented_run_either_runs_on_the_demo_or_says_why_not():
    blocks = _blocks()
    assert len(blocks) >= 25, [block.where for block in blocks]
    assert len(RUNNABLE) >= 5, [block.where for block in RUNNABLE]
    for block in RUNNABLE:  # a line a reader cannot paste as it is says so on the block's first line
        held = [word for word in PLACEHOLDERS if word in block.code]
        assert not held, f"{block.where}: {held} in a block without '# not on the demo: REASON' first"
    for block in blocks:  # the mark is the block's first line only: a reader meets it before the commands
        assert all(not NOT_ON_DEMO.match(line) for line in block.code.split("\n")[1:]), block.where
    pages = {block.page for block in RUNNABLE}
    assert {"docs/evaluate.md", "docs/clients.md", "docs/protocols/md.md"} <= pages, pages


def _as_printed(line: str, address: str, data: Path) -> str:
    """The documented line with only the server's address and the data directory replaced."""
    tokens = shlex.split(line.replace(README_ADDRESS, address), comments=True)
    return shlex.join(str(data) if token in DATA_DIRECTORIES else token for token in tokens)


@pytest.mark.slow
@pytest.mark.parametrize("where", [block.where for block in RUNNABLE])
def test_the_documented_block_runs_on_the_demo_stores(where, demo_data, tmp_path, one_core):
    (block,) = [block for block in RUNNABLE if block.where == where]
    lines = list(_logical_lines(block.code))
    assert lines, where
    for line in lines:
        command = _as_printed(line, demo_data.address, demo_data.data)
        status, printed = exec_command(command, cwd=tmp_path, where=where)
        assert status == 0, f"{where}\n$ {line}\nexited {status}:\n{printed.stderr[-3000:]}"
        if "clients." in command and "init_weights" not in command:  # a run ends saying what it did
            assert re.search(r"accuracy|reported", printed.stdout + printed.stderr), printed.stderr[-2000:]
