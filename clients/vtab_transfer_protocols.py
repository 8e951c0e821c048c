"""The transfer trainers' named protocols (``transfer --protocol NAME``): every value a
protocol fixes, where each comes from, and the learning-rate schedule. Pure: no I/O, no
framework; ``clients.trainer_args`` resolves a command line against these and
``clients.vtab_transfer`` runs what they resolve to.

Sources (cited, not copied):

- ``vtab``: the VTAB paper (Zhai et al. 2019, ``../shared/seeds/000_992ea1e9d954e1f1.txt``),
  Sec. 3.1 "Protocol" (model selection per task on a validation set, the chosen setting
  trained again on the 1000 examples, the median of three test runs; also Table 6's
  caption) and Appendix I "Lightweight sweep" (batch 512, SGD momentum 0.9, no weight decay
  when fine-tuning, learning rates {0.1, 0.01} x {2500, 10000} steps, /10 after 1/3 and
  2/3 of the steps and once more shortly before the end; selection for the 1000-example
  runs on each task's regular validation set). The decay points default to those of
  google-research/task_adaptation's README example of the same setting (batch 512,
  ``--max_steps 2500 --decay_steps 750,1500,2250``: 30/60/90%); ``--decay paper`` takes
  the paper's words (1/3, 2/3, and 9/10 for its unnumbered "shortly before the end").
  No warm-up: the reference's ``--warmup_steps`` defaults to 0 and the example sets none.
- ``vtab-md``: VTAB+MD (Dumoulin et al. 2021, ``../shared/seeds/004_53df0c5d64efeacf.txt``,
  Sec. 4, BiT on VTAB-v2): the same optimiser, {0.01, 0.001} x {2500, 10000}, trained on
  the 800 examples, ONE setting for all tasks by mean val200 accuracy; this project's
  schedule before protocols were named (8% warm-up, /10 at 30/60/90%).
- ``reference-script``: task_adaptation's ``scripts/run_all_tasks.sh``: batch 64, learning
  rate 0.01, 1000 steps, ``--decay_steps 300,600,900``, ``--warmup_steps 80``,
  ``--train_examples 1000`` of the default ``trainval`` split, no sweep. Its schedule is
  ``trainer.get_train_op``: ``piecewise_constant`` (the rate drops after the boundary
  step) under a linear warm-up from 0 (``apply_warmup_lr``), momentum 0.9 from
  ``adapt_and_eval.py``'s flag default.

- ``control-baselines``: the transfer-controls reference (EPFL-VILAB/transfer-controls:
  ``run_cls.sh``, ``train_ssl2taskonomy.py``, ``downstream_tasks/taskonomy_dst.py``,
  ``data/cifar100.py``, ``data/eurosat.py``; Atanov et al. 2022, ``../shared/seeds/``):
  ``torch.optim.AdamW`` (betas 0.9/0.999, eps 1e-8) at lr 1e-4 with weight decay 1e-4, no
  schedule (``--lr_decay none``, ``--lr_warmup_step 0``), batch 64, up to 40,000 steps,
  validation every 1,000 (``--val_check_interval``), and the checkpoint of the lowest
  validation loss is the one tested (``ModelCheckpoint(monitor='val_loss', mode='min')``, then
  ``trainer.test``, whose default checkpoint is the best); a random horizontal flip at
  training; regimes drawn by ``StratifiedShuffleSplit`` 80/20 (``--stratified``). Nothing is
  retrained on train + val (``--final-split none``).

Warm-up and decay points are fractions of each setting's steps, so they follow ``--steps``
and ``--steps-scale`` (the script's 80 of 1000 steps is 0.08); so does ``--validate-every``.
"""

from __future__ import annotations

import statistics
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MOMENTUM = 0.9  # VTAB Appendix I; task_adaptation's --momentum default
FINETUNE_WEIGHT_DECAY, SCRATCH_WEIGHT_DECAY = 0.0, 0.001
"""VTAB Appendix I: "When fine-tuning, we do not use weight decay, and when training from
scratch we set it to 0.001" (SGD's weight decay: g + wd w, torch's ``SGD(weight_decay=)``)."""


def weight_decay_for(mode: str, from_scratch: bool) -> float:
    """The weight decay of a run: 0.001 when the whole network trains from random init
    (``--mode finetune`` without weights: ``--role scratch``, ``max``, a named backbone without
    ``--weights``), none when fine-tuning a checkpoint, and none for a linear probe (the head
    alone on frozen features, neither of the paper's two cases)."""
    return SCRATCH_WEIGHT_DECAY if mode == "finetune" and from_scratch else FINETUNE_WEIGHT_DECAY

DECAYS: dict[str, tuple[float, ...]] = {
    # task_adaptation README: 2500 steps, --decay_steps 750,1500,2250 (and 300,600,900 of 1000,
    # as run_all_tasks.sh); BiT's hyperrule has the same 30/60/90%
    "readme": (0.3, 0.6, 0.9),
    # VTAB Appendix I: "after 1/3 and 2/3 of the training time, and one more time shortly
    # before the end" (no number given for the last: 9/10, the README example's)
    "paper": (1 / 3, 2 / 3, 0.9),
    # the control-baselines reference: a constant rate (--lr_decay none, no --lr_step)
    "none": (),
}
SELECT_SPLITS = ("val", "val200", "none")
FINAL_SPLITS = ("train800val200", "trainval1000", "none")
"""``none``: nothing is retrained; the sweep's best-validated checkpoint (``--validate-every``) is tested."""
SWEEP_TRAIN_SPLIT = "train800"
SELECTIONS = ("all-tasks", "per-task")
MODES = ("linear", "finetune")
OPTIMIZERS = ("sgd", "adamw")
"""sgd: ``torch.optim.SGD`` with momentum 0.9 (VTAB); adamw: ``torch.optim.AdamW`` with its
defaults (betas 0.9/0.999, eps 1e-8; the control-baselines reference's)."""
AUGMENTS = ("none", "flip")
"""flip: each training image mirrored left-right with probability 1/2 (torchvision's
``RandomHorizontalFlip``, the control-baselines reference's training transform)."""
REGIME_SAMPLINGS = ("uniform", "stratified", "one-per-class-first")
"""How the server draws a data regime (``sampler_common.splits``'s names, the wire's)."""


@dataclass(frozen=True)
class Schedule:
    """A step schedule: linear warm-up over the first ``warmup`` of the steps (from 0, as
    task_adaptation's ``apply_warmup_lr``), then the base rate divided by 10 after each
    ``decay_at`` fraction of the steps (``piecewise_constant``: the drop takes effect on
    the step after the boundary)."""

    decay_at: tuple[float, ...]
    warmup: float = 0.0

    def points(self, total: int) -> dict[str, Any]:
        """The warm-up length and the decay boundaries in steps, for ``total`` steps."""
        return {"warmup_steps": int(round(self.warmup * total)),
                "decay_steps": [int(round(fraction * total)) for fraction in self.decay_at]}

    def learning_rate(self, base: float, step: int, total: int) -> float:
        """The rate of update ``step`` (counted from 0) of ``total``."""
        points = self.points(total)
        warmup = points["warmup_steps"]
        if step < warmup:
            return base * step / warmup
        return base * 0.1 ** sum(step > boundary for boundary in points["decay_steps"])


@dataclass(frozen=True)
class Protocol:
    """Every value a named protocol fixes; a command-line flag given overrides its field."""

    name: str
    source: str
    mode: str
    lrs: tuple[float, ...]
    steps: tuple[int, ...]
    batch_size: int
    decay: str
    warmup: float
    select: str
    select_split: str
    final_split: str
    runs: int
    optimizer: str = "sgd"
    weight_decay: float | None = None
    """None: VTAB's rule (``weight_decay_for``)."""
    validate_every: int = 0
    """Steps between validations of a fit, whose best checkpoint is tested (0: none)."""
    augment: str = "none"
    regime_sampling: str = "uniform"

    def values(self) -> dict[str, Any]:
        """The overridable values by flag name (dashes as underscores)."""
        return {"mode": self.mode, "lrs": list(self.lrs), "steps": list(self.steps), "batch_size": self.batch_size,
                "decay": self.decay, "warmup": self.warmup, "select": self.select,
                "select_split": self.select_split, "final_split": self.final_split, "runs": self.runs,
                "optimizer": self.optimizer, "weight_decay": self.weight_decay,
                "validate_every": self.validate_every, "augment": self.augment,
                "regime_sampling": self.regime_sampling}


PROTOCOLS: dict[str, Protocol] = {p.name: p for p in (
    Protocol("vtab", "VTAB paper Sec. 3.1 and Appendix I (lightweight sweep); decay points: task_adaptation README",
             mode="finetune", lrs=(0.1, 0.01), steps=(2500, 10000), batch_size=512, decay="readme", warmup=0.0,
             select="per-task", select_split="val", final_split="train800val200", runs=3),
    Protocol("vtab-md", "VTAB+MD Sec. 4 (BiT on VTAB-v2: one setting for all tasks by mean val200)",
             mode="finetune", lrs=(0.01, 0.001), steps=(2500, 10000), batch_size=512, decay="readme", warmup=0.08,
             select="all-tasks", select_split="val200", final_split="train800val200", runs=1),
    Protocol("reference-script", "task_adaptation scripts/run_all_tasks.sh",
             mode="finetune", lrs=(0.01,), steps=(1000,), batch_size=64, decay="readme", warmup=0.08,
             select="per-task", select_split="none", final_split="trainval1000", runs=1),
    Protocol("control-baselines", "transfer-controls run_cls.sh (AdamW, best validation loss of 40 checks, flip, "
             "stratified regimes)",
             mode="finetune", lrs=(1e-4,), steps=(40000,), batch_size=64, decay="none", warmup=0.0,
             select="per-task", select_split="val200", final_split="none", runs=1, optimizer="adamw",
             weight_decay=1e-4, validate_every=1000, augment="flip", regime_sampling="stratified"),
)}
DEFAULT_PROTOCOL = "vtab"


def resolve(name: str, given: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The protocol's values with every ``given`` value that is not None in their place, and
    the names of those overridden (sorted)."""
    values = PROTOCOLS[name].values()
    overridden = sorted(key for key in values if given.get(key) is not None)
    values.update({key: given[key] for key in overridden})
    return values, overridden


def validation_steps(every: int, total: int) -> list[int]:
    """The steps (counted from 1) after which a fit of ``total`` steps is validated: every
    ``every``-th, and the last when it is not one of them (none when ``every`` is 0)."""
    if not every:
        return []
    steps = list(range(every, total + 1, every))
    return steps if steps and steps[-1] == total else [*steps, total]


def schedule(decay: str, warmup: float) -> Schedule:
    return Schedule(DECAYS[decay], warmup)


def median(values: Sequence[float]) -> float:
    """The reported test accuracy of several runs (VTAB Sec. 3.1: "the median score")."""
    return float(statistics.median(values))


def describe(width: int = 100) -> str:
    """The protocols for ``--help``: name, source and values, one wrapped block each."""
    blocks = []
    for protocol in PROTOCOLS.values():
        v = protocol.values()
        decay = ", ".join(f"{f:.3g}" for f in DECAYS[v["decay"]])
        decay = f" (/10 after {decay} of the steps)" if decay else " (a constant rate)"
        decay_text = "VTAB's" if v["weight_decay"] is None else f"{v['weight_decay']:g}"
        text = (f"{protocol.name}{' (default)' if protocol.name == DEFAULT_PROTOCOL else ''}: {protocol.source}. "
                f"--mode {v['mode']}, --optimizer {v['optimizer']}, --lrs {' '.join(map(str, v['lrs']))}, "
                f"--weight-decay {decay_text}, --steps {' '.join(map(str, v['steps']))}, --batch-size "
                f"{v['batch_size']}, --decay {v['decay']}{decay}, --warmup {v['warmup']:g}, --select {v['select']}, "
                f"--select-split {v['select_split']}, --final-split {v['final_split']}, --runs {v['runs']}, "
                f"--validate-every {v['validate_every']}, --augment {v['augment']}, --regime-sampling "
                f"{v['regime_sampling']}")
        blocks.append(textwrap.fill(text, width, initial_indent="  ", subsequent_indent="    ",
                                    break_on_hyphens=False))
    return "\n".join(blocks)
