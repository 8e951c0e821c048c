"""The one-GPU training bench's learner mode and its host-sync check, on CPU.

``bench/gpu_train.py --learners`` times every MD learner of the torch trainer (bench/README.md
gives its GPU figures) and counts the host syncs of a warm training step, for the MAML family
per inner step (issue 38: its inner loop stays on the GPU without a host sync per step). The
count (``SyncCounter``: value reads, boolean masks, copies to the CPU, synchronize calls) finds
code patterns, so it runs here on CPU: the trainer's own step, on a small episode, with one
inner step and with five; a planted value read in every inner step is found and named.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from clients.md_learners import ADAPTING, MODELS
from clients.torch import adaptation
from clients.torch.md_train import TorchFramework
from clients.torch.staging import StagedEpisode
from clients.trainer_args import parse_args

REPO = Path(__file__).resolve().parents[2]
SIZE, SUPPORT, QUERY, WAYS = 16, 6, 6, 3


def load_bench():
    spec = importlib.util.spec_from_file_location("gpu_train", REPO / "bench" / "gpu_train.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gpu_train", module)
    spec.loader.exec_module(module)
    return module


bench = load_bench()


def warm_framework(learner: str) -> tuple[TorchFramework, StagedEpisode]:
    """The trainer's framework for ``learner`` (the bench's own arguments, on CPU) after one step."""
    framework = TorchFramework(parse_args("torch", bench.trainer_argv("127.0.0.1:1", "conv4", SIZE, "off:off", 4,
                                                                      "cpu", 1, "md", learner)))
    framework.build(0)
    rng = np.random.RandomState(0)
    images = torch.from_numpy(rng.randint(0, 256, (SUPPORT + QUERY, SIZE, SIZE, 3), dtype=np.uint8))
    labels = torch.from_numpy((np.arange(SUPPORT + QUERY) % WAYS).astype(np.int64))
    item = StagedEpisode(images, labels, SUPPORT, QUERY, WAYS, 0)
    framework.train_step(item)
    return framework, item


def test_learners_all_is_every_trainer_model_and_runs_buckets_without_compile():
    args = bench.parse(["--learners", "all"])
    assert args.learners == list(MODELS) and args.configs == ["on:off"]
    assert bench.parse([]).configs == ["on:on", "on:off", "off:off"]  # the ProtoNet mode as before
    with pytest.raises(SystemExit):
        bench.parse(["--learners", "protonet", "nonesuch"])


def test_batch_learners_train_for_steps_and_episodic_ones_for_episodes():
    batches = bench.trainer_argv("a:1", "conv4", 84, "on:off", 7, "cpu", 1, "md", "baseline")
    episodes = bench.trainer_argv("a:1", "conv4", 84, "on:off", 7, "cpu", 1, "md", "maml")
    assert batches[batches.index("--train-steps") + 1] == "7" and "--train-episodes" not in batches
    assert episodes[episodes.index("--train-episodes") + 1] == "7" and episodes[episodes.index("--model") + 1] == "maml"


@pytest.mark.parametrize("learner", ADAPTING)
def test_the_maml_familys_inner_steps_read_nothing_on_the_host(learner):
    framework, item = warm_framework(learner)
    syncs = bench.step_syncs(framework, item)
    assert syncs["syncs_per_inner_step"] == 0, syncs
    assert syncs["inner_sync_names"] == []
    assert framework.train_loop.steps == 5  # restored after the count


def test_a_value_read_in_each_inner_step_is_counted_and_named(monkeypatch):
    original = adaptation.TorchAdaptation.support_gradients

    def reading(self, weights, head):
        gradients = original(self, weights, head)
        if float(gradients[1][1].abs().sum()) < 0:  # a host read of a device value, as a loop might branch
            raise AssertionError
        return gradients

    monkeypatch.setattr(adaptation.TorchAdaptation, "support_gradients", reading)
    framework, item = warm_framework("maml")
    syncs = bench.step_syncs(framework, item)
    assert syncs["syncs_per_inner_step"] >= 1
    assert any(name.startswith("Tensor.__float__ at tests/bench/test_gpu_train.py:")
               for name in syncs["inner_sync_names"]), syncs


def test_repeats_take_each_rate_median_and_keep_the_pairs_in_turn():
    def measured(model: float, e2e: float) -> dict:
        return {"model_first": model - 1, "model_second": model + 1, "model_window": model, "model_fed": model - 2,
                "model_used": model - 3, "model_loop": model - 4, "e2e": e2e - 1,
                "e2e_last": e2e, "syncs_per_step": 1}

    merged = bench.alternated([measured(40.0, 37.0), measured(45.0, 45.0), measured(42.0, 38.0)])
    assert merged["model_window"] == 42.0 and merged["e2e_last"] == 38.0 and merged["model_first"] == 41.0
    assert merged["model_second"] == 43.0
    assert merged["model_fed"] == 40.0 and merged["model_used"] == 39.0 and merged["model_loop"] == 38.0
    assert merged["pairs"] == [(40.0, 37.0), (45.0, 45.0), (42.0, 38.0)] and merged["syncs_per_step"] == 1
    without = bench.alternated([{key: value for key, value in measured(40.0, 37.0).items()
                                 if key not in bench.LOCATING}])
    assert "model_fed" not in without and bench.located_text(without) == ""
    assert bench.parse(["--learners", "baseline", "--repeats", "3"]).repeats == 3
    with pytest.raises(SystemExit):
        bench.parse(["--learners", "baseline", "--repeats", "0"])


def test_vs_eager_divides_each_rows_end_to_end_by_its_learners_unpadded_model_rate_on_the_same_window():
    def row(learner: str, config: str, model: float, e2e: float) -> tuple:
        return learner, "conv4", 84, config, {"model_second": 2 * model, "model_window": model, "e2e_last": e2e}

    rows = [row("protonet", "on:off", 50.0, 48.0), row("protonet", "off:off", 60.0, 30.0),
            row("baseline", "on:off", 150.0, 140.0), row("maml", "on:off", 12.0, 11.0),
            row("maml", "off:off", 16.0, 8.0)]
    versus = bench.versus_eager(rows)
    assert versus[0] == pytest.approx(0.8) and versus[1] == pytest.approx(0.5) and versus[2] is None
    assert versus[3] == pytest.approx(11.0 / 16.0) and versus[4] == pytest.approx(0.5)


def _recording_run(fresh: list[str], events: list[str]) -> tuple[object, object]:
    """A run whose feed gives ``fresh`` in turn and a framework whose step records its item,
    both writing what happens to ``events``."""
    given = iter(fresh)

    class Feed:
        def __next__(self):
            item = next(given)
            events.append(f"take {item}")
            return 0, item, 1

        def close(self):
            events.append("close")

    class Framework:
        def train_step(self, item):
            events.append(f"step {item}")
            return 0.0, 0.0

        def to_floats(self, values):
            return [float(v) for v in values]

    return type("Run", (), {"feed": lambda self, start: Feed()})(), Framework()


def test_the_fed_pass_takes_one_fresh_item_per_step_and_closes_its_feed():
    """``fed_pass``: the step over the held items, the trainer's feed taken once before and
    once per step after the first (its waits left out), closed at the end."""
    events: list[str] = []
    run, framework = _recording_run(["x", "y", "z"], events)
    rate = bench.fed_pass(run, framework, ["a", "b", "c"], lambda: None)
    assert events == ["take x", "take y", "step a", "take z", "step b", "step c", "close"] and rate > 0


def test_the_used_pass_steps_on_each_item_its_feed_gives():
    """``fed_pass(use_fed=True)``: the step runs on the feed's items in their order, each taken
    before the step on the one before it is launched."""
    events: list[str] = []
    run, framework = _recording_run(["x", "y", "z"], events)
    rate = bench.fed_pass(run, framework, ["a", "b", "c"], lambda: None, use_fed=True)
    assert events == ["take x", "take y", "step x", "take z", "step y", "step z", "close"] and rate > 0


def test_the_loop_pass_is_the_trainers_own_rate_without_its_first_wait():
    """``loop_pass``: ``Run.train`` over a fresh feed from item 0, its steps over its seconds
    less the first item's wait."""
    from types import SimpleNamespace

    starts: list[int] = []

    class Run:
        def feed(self, start):
            starts.append(start)
            return "feed"

        def train(self, feed):
            assert feed == "feed"
            return SimpleNamespace(steps=4, seconds=3.0, first_wait_seconds=1.0)

    assert bench.loop_pass(Run(), lambda: None) == 2.0 and starts == [0]


def test_each_bucketed_configuration_is_measured_at_each_ratio_and_the_unbucketed_once():
    one = bench.parse(["--configs", "on:off", "off:off"])
    assert bench.measurements(one) == [("on:off", "on:off", 1.125), ("off:off", "off:off", 1.125)]
    two = bench.parse(["--configs", "on:off", "off:off", "on:on", "--bucket-ratio", "1.125", "1.0625"])
    assert bench.measurements(two) == [("on:off@1.125", "on:off", 1.125), ("on:off@1.0625", "on:off", 1.0625),
                                       ("off:off", "off:off", 1.125), ("on:on@1.125", "on:on", 1.125),
                                       ("on:on@1.0625", "on:on", 1.0625)]
    with pytest.raises(SystemExit):
        bench.parse(["--bucket-ratio", "1"])
