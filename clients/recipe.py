"""Meta-Dataset's training recipe, framework-free: what both trainers compute the same way
(google-research/meta-dataset ``trainer.py``; ../shared/reference/md_learners.md, section 4).

- The learning rate of update u (counted from 0 in this run's schedule, which a resumed run
  continues and ``--init-from`` starts afresh) with ``--decay-every N --decay-rate R``:
  lr x R^floor(u / N), TensorFlow's ``exponential_decay(..., staircase=True)``; N = 0 keeps it
  constant (MD's default: decay off). R is taken at float32 precision, as the reference's
  TensorFlow converts the Python float before raising it to the power (0.99999 differs from its
  float32 value by 1e-8, which 734 updates turn into 1e-5 of the rate).
- ``--optimizer``: ``adam`` (torch's Adam: beta 0.9 / 0.999, eps 1e-8; every learner of
  Meta-Dataset trains with Adam, ``trainer.py``), ``sgd`` (plain) or ``momentum`` (SGD with
  momentum 0.9, torch's form: the buffer starts at the first gradient). The TensorFlow trainer
  runs torch's update rules (``clients.tf.optimizers``), so both frameworks take the same steps.
- ``--weight-decay W``: W x the sum of the squared kernels (convolutions and linear layers;
  no batch-norm parameter, no bias) added to the loss that is differentiated, as Keras'
  ``L2(W)`` regulariser the reference binds to every backbone and head (no 1/2 factor; its
  gradient is 2 W w). The loss a run reports stays the cross-entropy.
"""

from __future__ import annotations

import math

import numpy as np

OPTIMIZERS = ("adam", "sgd", "momentum")
MOMENTUM = 0.9  # --optimizer momentum's


def learning_rate(lr: float, update: int, decay_every: int, decay_rate: float) -> float:
    """The staircase rate of update ``update`` (0-based)."""
    if update < 0:
        raise ValueError(f"update: got {update}, expected an integer >= 0")
    if not decay_every:
        return lr
    return lr * math.pow(float(np.float32(decay_rate)), update // decay_every)


def decayed(shape: tuple[int, ...]) -> bool:
    """Whether a parameter of ``shape`` takes the weight decay: a kernel (two axes or more),
    not a batch norm's scale or offset, nor a bias."""
    return len(shape) >= 2
