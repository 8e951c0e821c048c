"""The trainers' human-read lines give accuracies in percent with two decimals, as the
report tables and plots do (69.57%, not 0.6957); the JSON summaries keep fractions."""

from __future__ import annotations

import json

from clients import cog_eval, evaluate, md_train, vtab_transfer


def test_md_summary_lines_give_accuracy_chance_and_interval_in_percent():
    train = md_train.TrainSummary(unit="episode", start_index=0, next_index=10)
    result = md_train.EvalSummary(source="image_folder", split="test", episodes=30, mean_accuracy=0.695652,
                                  ci95=0.01234, mean_loss=0.9, mean_chance=0.2, stored=30, duplicates=0, seconds=1.0,
                                  episodes_per_s=30.0)
    summary = md_train.RunSummary(run="r", framework="torch", model="protonet", backbone="conv4", device="cpu",
                                  precision="float32", parameter_count=1, resumed_from=None, start_index=0,
                                  next_index=10, train=train, eval={"folder": result})
    lines = md_train.format_summary(summary).splitlines()
    assert lines[-1] == "  eval folder (test): accuracy 69.57% ± 1.23% (chance 20.00%, loss 0.9000, 30 episodes)"
    assert md_train._ci(None) == "n/a (one episode)"


def test_vtab_summary_lines_give_val_test_and_each_run_in_percent():
    summary = {"run": "r", "mode": "linear", "protocol": "vtab", "config": {"framework": "torch", "backbone": "b"},
               "tasks": {"dtd": {"val_split": "val200", "val_accuracy": 0.5, "test_accuracy": 0.695652,
                                 "test_examples": 1880, "chosen": {"lr": 0.01, "steps": 500},
                                 "test_runs": [{"test_accuracy": 0.69}, {"test_accuracy": 0.695652}]}}}
    assert vtab_transfer.format_summary(summary).splitlines()[1] == (
        "  dtd lr=0.01 steps=500: val200 50.00%, test 69.57% (1880 examples, median of 2: 69.00% 69.57%)")
    assert json.loads(json.dumps(summary))["tasks"]["dtd"]["test_accuracy"] == 0.695652  # the JSON: fractions


def test_cog_and_evaluate_lines_give_accuracy_in_percent():
    summary = {"run": "r", "config": {}, "extracted": 0, "levels": {"L1": {"results": [
        {"shots": 0, "seed": 1, "learning_rate": 0.1, "weight_decay": 0.0, "accuracy": 0.695652,
         "test_examples": 500}]}}}
    assert cog_eval.format_summary(summary).splitlines()[1] == "  L1 N=all seed 1: lr=0.1 wd=0 test 69.57% (500 images)"
    assert evaluate._describe({"episodes": 30, "mean_accuracy": 0.695652}) == "30 episodes, mean accuracy 69.57%"
    assert evaluate._describe({"tasks": {"dtd": 0.695652, "svhn": 0.5}}) == "dtd test 69.57%, svhn test 50.00%"
    assert evaluate._describe({"accuracy": 0.695652, "learning_rate": 0.1, "weight_decay": 1e-4}) == (
        "test accuracy 69.57% (lr=0.1, wd=0.0001)")
