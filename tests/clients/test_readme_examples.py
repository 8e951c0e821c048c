"""The "Use your own model" code of docs/clients.md runs: its two ```python blocks
(titled ``torch`` and ``tf``) are pointed at a real server on 127.0.0.1 over packed
fixture stores (their ``SERVER`` and ``SOURCE`` constants replaced) and executed in a
fresh interpreter; their reports must land on the server."""

from __future__ import annotations

import pytest
from doc_blocks import python_block, run_python, with_constants

RUNS = {"torch": "my-torch-model", "tf": "my-keras-model"}


def _block(framework: str) -> str:
    return {"torch": python_block("docs/clients.md", "torch"), "tf": python_block("docs/clients.md", "tf")}[framework]


@pytest.mark.parametrize("framework", sorted(RUNS))
def test_use_your_own_model_example_runs_against_a_real_server(served, framework):
    pytest.importorskip("torch" if framework == "torch" else "tensorflow")
    code = with_constants(_block(framework), SERVER=served.address, SOURCE="folder")
    done = run_python(code)
    run = RUNS[framework]
    assert run in done.stdout  # the printed report table names the run
    stored = list(served.server.metrics.reports(run))
    assert [report.index for report in stored] == list(range(10))
    assert all(set(report.metrics) == {"accuracy", "loss"} and len(report.predicted) == 25 for report in stored)
    assert {report.split for report in stored} == {"test"}
    assert served.server.metrics.run_config(run) == {"model": "conv2-protonet", "lr": 1e-3, "ways": 5, "shots": 5,
                                                      "query": 5, "image_size": 28}
