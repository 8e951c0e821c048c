"""A diverged trial of the CoG hyper-parameter search keeps its measured val accuracy, as
naver/cog's ``logreg.py`` does: on a non-finite loss ``train`` returns -1, the epoch's
``validate`` still runs, the loop breaks and the trial returns its last measured top-1 (it
is not scored 0)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from cog_eval_fake import SMALL, FakeCogClient

from clients.cog_eval import CogRun
from clients.torch.cog_eval import TorchCogBackend
from clients.trainer_args import parse_cog_args

DIVERGING_LR = 1.0  # the 2x2 grid's learning rates are 0.1 and 100: the larger diverges here


class DivergingBackend(TorchCogBackend):
    """The torch backend whose loss turns non-finite at a large learning rate (after the step)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.diverging = False

    def reset(self, weight, bias, weight_decay) -> None:
        self.diverging = False
        super().reset(weight, bias, weight_decay)

    def train_step(self, data, indices, lr):
        loss = super().train_step(data, indices, lr)
        if lr > DIVERGING_LR:
            self.diverging = True
            return math.nan
        return loss


def test_a_diverged_search_trial_keeps_its_measured_val_accuracy(tmp_path: Path):
    lines: list[str] = []
    args = parse_cog_args("torch", [*SMALL, "--feature-cache", str(tmp_path / "cache"), "--levels", "L1", "--shots",
                                    "8", "--seeds", "1"])
    backend = DivergingBackend(args)
    summary = CogRun(backend, FakeCogClient(), lines.append).execute()
    diverged = [line for line in lines if line.endswith("(diverged)")]
    assert diverged, "the large learning rate should diverge in this test"
    results = [r for entry in summary["levels"].values() for r in entry["results"]]
    scores = [(point["lr"], point["val_accuracy"]) for r in results for point in r["search"]]
    diverged_scores = [score for lr, score in scores if lr > DIVERGING_LR]
    assert len(diverged_scores) == len(diverged)
    # measured, not 0: the colours stay far better than nothing after one large step
    assert all(0.0 < score <= 1.0 for score in diverged_scores), diverged_scores
    for line in diverged:
        shown = line.split("val accuracy ")[1].split()[0]
        assert shown.endswith("%"), line  # in percent, as the reports
        measured = float(shown.removesuffix("%"))
        assert measured > 0 and np.isfinite(measured)
