"""The blind guess: what an input-blind predictor fitted on the training labels scores on test.

- Classification (``blind_guess``): the most frequent label of the training labels (ties:
  the lowest label); its test accuracy is the share of that label among the test labels
  and its risk the error, 1 - accuracy.
- Regression (``regression_blind_guess``), for targets given as numbers: the mean of the
  training targets under the L2 loss (risk = mean squared error on the test targets),
  the median under L1 (risk = mean absolute error).

Pure functions of the label (target) multisets: their order never matters.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sampler_server.errors import InvalidArgument
from sampler_server.quoting import quoted


@dataclass(frozen=True)
class BlindGuess:
    """A classification blind guess: its label and how it does on the test split."""

    label: int
    test_accuracy: float
    test_error: float
    test_examples: int

    @property
    def risk(self) -> float:
        """The blind-guess risk R_blind: its test error."""
        return self.test_error

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "test_accuracy": self.test_accuracy, "test_error": self.test_error,
                "test_examples": self.test_examples}


def _where(task: str) -> str:
    return f"task {task}: " if task else ""


def blind_guess(train_labels: Sequence[int] | np.ndarray, test_labels: Sequence[int] | np.ndarray, *,
                task: str = "") -> BlindGuess:
    """The most frequent training label (ties: lowest) scored on ``test_labels``.

    Raises:
        InvalidArgument: no training or no test labels (the message names ``task``).
    """
    train = np.asarray(train_labels, dtype=np.int64).ravel()
    test = np.asarray(test_labels, dtype=np.int64).ravel()
    if not len(train):
        raise InvalidArgument(f"{_where(task)}the blind guess needs training labels, got none")
    if not len(test):
        raise InvalidArgument(f"{_where(task)}the blind guess is scored on the test split, which is empty")
    values, counts = np.unique(train, return_counts=True)  # values ascending: argmax takes the lowest tie
    label = int(values[int(np.argmax(counts))])
    hits = int(np.count_nonzero(test == label))
    accuracy = hits / len(test)
    return BlindGuess(label=label, test_accuracy=accuracy, test_error=(len(test) - hits) / len(test),
                      test_examples=len(test))


class RegressionLoss(str, enum.Enum):
    """The loss a regression blind guess minimises; the value is its name on the command line."""

    L2 = "l2"
    L1 = "l1"


@dataclass(frozen=True)
class RegressionBlindGuess:
    """A regression blind guess: the constant prediction and its test risk under ``loss``."""

    loss: RegressionLoss
    prediction: float
    risk: float
    test_examples: int

    def to_json(self) -> dict[str, Any]:
        return {"loss": self.loss.value, "prediction": self.prediction, "risk": self.risk,
                "test_examples": self.test_examples}


def _targets(values: Sequence[float] | np.ndarray, name: str, task: str) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64).ravel()
    if not len(array):
        raise InvalidArgument(f"{_where(task)}{name}: the regression blind guess needs targets, got none")
    if not np.isfinite(array).all():
        raise InvalidArgument(f"{_where(task)}{name}: every target must be a finite number")
    return array


def parse_loss(loss: RegressionLoss | str, field: str = "loss") -> RegressionLoss:
    """``loss`` as a ``RegressionLoss``; else one line naming ``field`` and the allowed names."""
    try:
        return RegressionLoss(loss)
    except ValueError:
        raise InvalidArgument(f"{field}: got {quoted(loss)}, expected one of "
                              f"{', '.join(v.value for v in RegressionLoss)}") from None


def regression_blind_guess(train_targets: Sequence[float] | np.ndarray, test_targets: Sequence[float] | np.ndarray,
                           loss: RegressionLoss | str, *, task: str = "") -> RegressionBlindGuess:
    """Mean (L2, risk = MSE) or median (L1, risk = MAE) of the training targets, scored on test."""
    loss = parse_loss(loss)
    train = _targets(train_targets, "train targets", task)
    test = _targets(test_targets, "test targets", task)
    if loss is RegressionLoss.L2:
        prediction = math.fsum(train.tolist()) / len(train)
        risk = math.fsum(((test - prediction) ** 2).tolist()) / len(test)
    else:
        prediction = float(np.median(train))
        risk = math.fsum(np.abs(test - prediction).tolist()) / len(test)
    return RegressionBlindGuess(loss=loss, prediction=float(prediction), risk=float(risk), test_examples=len(test))
