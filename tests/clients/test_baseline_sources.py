"""The batch-trained baseline on several sources draws each batch's source uniformly, as
Meta-Dataset does (``data/pipeline.py``: one uniformly chosen source per batch;
../shared/reference/md_learners.md, section 4), not in turn: ``seeds.batch_sources`` is a pure
function of (seed, step), and ``md_train.source_batch_indices`` reads each source's batches in
order, disjoint between ranks, so a resumed run continues exactly."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from clients.md_train import source_batch_indices
from clients.seeds import batch_sources
from clients.torch.md_train import main as torch_main


def test_each_batchs_source_is_uniform_and_a_pure_function_of_seed_and_step():
    drawn = batch_sources(7, 8, 40_000)
    counts = np.bincount(drawn, minlength=8)
    # 5,000 expected each: a binomial's sd is 66, so 4 sd = 265
    assert drawn.min() == 0 and drawn.max() == 7 and np.abs(counts - 5000).max() < 265, counts
    assert np.array_equal(batch_sources(7, 8, 5000), drawn[:5000])  # a longer run extends a shorter one
    assert not np.array_equal(batch_sources(8, 8, 5000), drawn[:5000])
    assert (np.diff(drawn[:64]) != 1).any()  # not the sources in turn
    assert not batch_sources(7, 1, 10).any() and len(batch_sources(7, 3, 0)) == 0
    with pytest.raises(ValueError, match="expected sources >= 1"):
        batch_sources(7, 0, 10)


@given(st.lists(st.integers(0, 4), max_size=120), st.integers(1, 4))
def test_the_ranks_read_disjoint_batches_of_each_source_in_order(drawn, ranks):
    drawn = np.array(drawn, np.int64)
    taken: dict[int, list[int]] = {}
    for rank in range(ranks):
        indices = source_batch_indices(drawn, rank, ranks)
        assert len(indices) == len(range(rank, len(drawn), ranks))
        for source in set(drawn[rank::ranks].tolist()):
            mine = indices[drawn[rank::ranks] == source].tolist()
            assert mine == list(range(rank, rank + ranks * len(mine), ranks))  # in order, every N-th
            taken.setdefault(source, []).extend(mine)
    for source, indices in taken.items():
        assert len(indices) == len(set(indices)) == int((drawn == source).sum())
        if ranks == 1:
            assert sorted(indices) == list(range(len(indices)))


@pytest.mark.slow
@pytest.mark.usefixtures("torch_one_thread")
def test_a_two_source_baseline_resumes_to_the_weights_of_an_unbroken_run(served, tmp_path):
    def run(name: str, steps: int, directory: str) -> dict:
        summary = tmp_path / f"{name}-{steps}.json"
        argv = ["--server", served.address, "--run", name, "--model", "baseline", "--sources", "folder",
                "folder_raw32", "--image-size", "32", "--batch-size", "4", "--train-steps", str(steps),
                "--eval-episodes", "0", "--checkpoint-dir", str(tmp_path / directory), "--threads", "1",
                "--device", "cpu", "--json-summary", str(summary), "--log-every", "10"]
        assert torch_main(argv) == 0
        return json.loads(summary.read_text())

    whole = run("whole", 10, "whole")
    assert whole["config"]["baseline_classes"] and len(whole["config"]["baseline_classes"]) == 2
    run("split", 4, "split")
    resumed = run("split", 10, "split")
    assert (resumed["start_index"], resumed["train"]["steps"]) == (4, 6)
    assert resumed["ranks"][0]["parameter_digest"] == whole["ranks"][0]["parameter_digest"]
    assert set(batch_sources(0, 2, 10).tolist()) == {0, 1}  # both sources were read
