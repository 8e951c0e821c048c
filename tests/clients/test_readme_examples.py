"""The "Use your own model" code of docs/clients.md runs unchanged against the stores
``make demo`` leaves: its two ```python blocks (titled ``torch`` and ``tf``) are pointed at a
real server on 127.0.0.1 (only ``SERVER`` replaced) and executed in a fresh interpreter,
then again in that interpreter (``transfer_runs_twice``: one start-up and framework import
for both runs): their reports land on the server, and the rerun reports the same results
again (each example seeds before it builds its model, so the rerun starts from the same
weights although the first run moved every random generator on), which the server accepts."""

from __future__ import annotations

import pytest
from doc_blocks import python_block, with_constants
from transfer_runs_twice import ExampleRuns

RUNS = {"torch": "my-torch-model", "tf": "my-keras-model"}


def _block(framework: str) -> str:
    return {"torch": python_block("docs/clients.md", "torch"), "tf": python_block("docs/clients.md", "tf")}[framework]


@pytest.mark.parametrize("framework", sorted(RUNS))
def test_use_your_own_model_example_runs_and_reruns_against_the_demo_stores(demo_data, framework, one_core):
    code = with_constants(_block(framework), SERVER=demo_data.address)
    run = RUNS[framework]
    metrics = demo_data.server.metrics
    with ExampleRuns(code) as example:
        first = example.run()
        assert run in first  # the printed report table names the run
        stored = list(metrics.reports(run))
        assert [report.index for report in stored] == list(range(10))
        assert all(set(report.metrics) == {"accuracy", "loss"} and len(report.predicted) == 25 for report in stored)
        assert {report.split for report in stored} == {"test"}
        assert {report.source for report in stored} == {"aircraft"}
        assert metrics.run_config(run) == {"model": "conv2-protonet", "lr": 1e-3, "ways": 5, "shots": 5, "query": 5,
                                           "image_size": 28}
        again = example.run()  # the same example again: the same weights, the same reports
        assert again == first
        assert [(r.index, r.metrics, list(r.predicted)) for r in metrics.reports(run)] == \
            [(r.index, r.metrics, list(r.predicted)) for r in stored]
