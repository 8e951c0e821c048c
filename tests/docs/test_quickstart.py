"""The README's quickstart runs unchanged on the stores ``make demo`` leaves, in the order a
reader runs it, from the clone (``demo_data.root``, where ``demo-data/store`` is): its
``serve`` command (``--port 0`` for the README's 50051, which a test cannot count on),
its Python blocks (only ``SERVER`` pointed at that server) and its other commands (the
README's address replaced by the served one).

The serve command, the training command (the first time) and ``report`` run as the reader
runs them, each in a process of its own. The Python blocks, ``sampler-server episode`` (which
test_doc_data_commands.py runs in a fresh interpreter) and the training command's second
run run in the test's process (``exec_python``, ``exec_command``): a fresh interpreter for
each would add its start and a framework's import, not a check (the blocks run in a fresh
interpreter, a torch one and a TensorFlow one, are in tests/clients/test_readme_examples.py;
``doc_blocks``'s docstring says why)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from doc_blocks import REPO_ROOT, Block, blocks, exec_command, exec_python, python_block, with_constants

README_ADDRESS = "127.0.0.1:50051"
SECTION = "## Quickstart"


def _quickstart() -> list[Block]:
    """The README's blocks from the quickstart heading to the next heading."""
    lines = (REPO_ROOT / "README.md").read_text().split("\n")
    start = next(i for i, line in enumerate(lines, 1) if line.startswith(SECTION))
    end = next((i for i, line in enumerate(lines, 1) if i > start and line.startswith("## ")), len(lines))
    return [block for block in blocks("README.md") if start < block.line < end]


def _commands(block: Block) -> list[str]:
    return [line for line in block.code.replace("\\\n", " ").split("\n") if line.strip()]


def _environment() -> dict[str, str]:
    """What a reader's shell has after `. .venv/bin/activate`, with this clone importable."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONPATH": str(REPO_ROOT), "TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLE_ONEDNN_OPTS": "0"}


def _run(command: str, root: Path, address: str, where: str) -> str:
    """What a quickstart command printed: ``sampler-server episode`` in this process
    (test_doc_data_commands.py runs this very line in a fresh interpreter); the others (the
    trainer, ``report``) in a shell of their own, as written."""
    command = command.replace(README_ADDRESS, address)
    if command.startswith("sampler-server episode "):
        status, printed = exec_command(command, cwd=root, where=where)
        assert status == 0, f"{where}: `{command}` exited {status}: {printed.stderr[-2000:]}"
        return printed.stdout
    done = subprocess.run(["bash", "-c", command], cwd=root, env=_environment(),
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, f"`{command}` exited {done.returncode}: {done.stderr[-2000:]}"
    return done.stdout


def test_the_quickstart_is_the_first_code_after_the_two_commands():
    readme = blocks("README.md")
    two_commands = next(i for i, block in enumerate(readme) if "make demo" in block.code and "make test" in block.code)
    assert readme[two_commands + 1] == _quickstart()[0]
    assert "sampler-server serve --data demo-data/store" in _quickstart()[0].code


@pytest.mark.slow
def test_the_quickstart_runs_on_the_demo_stores(demo_data, one_core):
    quickstart = _quickstart()
    serve = _commands(quickstart[0])
    assert len(serve) == 1 and "--port 50051" in serve[0], serve
    process = subprocess.Popen(["bash", "-c", "exec " + serve[0].split("#")[0].replace("--port 50051", "--port 0")],
                               cwd=demo_data.root, env=_environment(), stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
    try:
        ready = process.stdout.readline()
        assert ready.startswith("listening on 127.0.0.1:"), ready  # what the README says it prints
        address = ready.split()[2]
        printed: dict[str, str] = {}
        for block in quickstart[1:]:
            if block.language == "python":
                code = with_constants(block.code, SERVER=address)
                printed[block.title] = exec_python(code, where=f"{block.where} ({block.title})").stdout
            else:
                assert block.language == "sh", block.where
                printed[block.where] = "".join(_run(command, demo_data.root, address, block.where)
                                               for command in _commands(block))
        # The same episode in torch, in tf and from the CLI (which reads no server)
        torch_ways, fingerprint = printed["quickstart-md-torch"].split()
        assert printed["quickstart-md-tf"].split() == [torch_ways, fingerprint]
        cli = next(text for where, text in printed.items() if where.startswith("README.md:") and "fingerprint" in text)
        assert fingerprint in cli
        vtab, cog = printed["quickstart-vtab-cog"].strip().split("\n")
        assert vtab == "torch.uint8 (64, 224, 224, 3)"
        assert re.fullmatch(r"32 [0-9a-f]{64}", cog), cog
        report = next(text for where, text in printed.items() if "quickstart" in text and "aircraft/test" in text)
        assert re.search(r"aircraft/test\s+\d+\.\d\d ± \d+\.\d\d \(10\)", report), report
        # The same training command again: the same numbers, accepted by the server
        train = next(c for b in quickstart if b.language == "sh" for c in _commands(b) if "--run quickstart" in c
                     and "clients.torch" in c)
        status, again = exec_command(train.replace(README_ADDRESS, address), cwd=demo_data.root,
                                     where="README.md quickstart: the training command again")
        assert status == 0 and "reported 0 new, 10 again as run 'quickstart'" in again.stderr + again.stdout, \
            again.stderr[-2000:]
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_every_quickstart_python_block_is_titled_and_run_here():
    run_above = [python_block("README.md", "quickstart-md-torch"), python_block("README.md", "quickstart-md-tf"),
                 python_block("README.md", "quickstart-vtab-cog")]
    assert [block.code for block in _quickstart() if block.language == "python"] == run_above
