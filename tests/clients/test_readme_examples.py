"""The README's "Use your own model" code runs: each ```python block of that section
(marked ``title="torch"`` or ``title="tf"``) is extracted, pointed at a real server on
127.0.0.1 over packed fixture stores (its ``SERVER`` and ``SOURCE`` constants
replaced) and executed in a fresh interpreter; its reports must land on the server."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from conftest import REPO_ROOT

SECTION = "## Use your own model"
BLOCK = re.compile(r'^```python title="(?P<title>\w+)"\n(?P<code>.*?)^```$', re.MULTILINE | re.DOTALL)
RUNS = {"torch": "my-torch-model", "tf": "my-keras-model"}


def _blocks() -> dict[str, str]:
    text = (REPO_ROOT / "README.md").read_text()
    assert text.count(SECTION) == 1, f"README.md has no single {SECTION!r} section"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = {match["title"]: match["code"] for match in BLOCK.finditer(section)}
    assert section.count("```python") == len(blocks), "every python block of the section names what runs it"
    assert set(blocks) == set(RUNS)
    return blocks


def _point_at(code: str, address: str, source: str) -> str:
    for name, value in (("SERVER", address), ("SOURCE", source)):
        code, replaced = re.subn(rf'^{name} = "[^"]*"', f'{name} = "{value}"', code, flags=re.MULTILINE)
        assert replaced == 1, f"the example sets {name} once"
    return code


@pytest.mark.parametrize("framework", sorted(RUNS))
def test_readme_example_runs_against_a_real_server(served, framework):
    pytest.importorskip("torch" if framework == "torch" else "tensorflow")
    code = _point_at(_blocks()[framework], served.address, "folder")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLE_ONEDNN_OPTS": "0"}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    run = RUNS[framework]
    assert run in done.stdout  # the printed report table names the run
    stored = list(served.server.metrics.reports(run))
    assert [report.index for report in stored] == list(range(10))
    assert all(set(report.metrics) == {"accuracy", "loss"} and len(report.predicted) == 25 for report in stored)
    assert {report.split for report in stored} == {"test"}
    assert served.server.metrics.run_config(run) == {"model": "conv2-protonet", "lr": 1e-3, "ways": 5, "shots": 5,
                                                      "query": 5, "image_size": 28}
