"""One VTAB-1k task result as the metrics store keeps it, and what a valid one is.

A run reports, per task and split, its top-1 accuracy over the examples it evaluated;
the control baselines add the data regime it trained on and the run's role. ``validate``
is the one place these rules live: the store runs it on every result it writes, and
``ReportMetrics`` runs it (with the wire's field names) on every vtab-task report.
"""

from __future__ import annotations

from dataclasses import dataclass

from sampler_server.core.baselines.sources import SOURCE_SPLITS, is_source_task, store_of
from sampler_server.core.vtab.splits import SPLITS
from sampler_server.core.vtab.tasks import get_task
from sampler_server.errors import InvalidArgument
from sampler_server.quoting import quoted

ROLES = ("model", "scratch", "max")
"""A run's role in a calibrated report: the method under study, the scratch control, the max control."""


@dataclass(frozen=True)
class TaskResult:
    """One VTAB-1k task evaluated by a run: top-1 accuracy over ``examples`` examples of ``split``.

    ``split`` is the VTAB split evaluated (``"test"`` for the reported score, ``"val200"``
    when choosing hyperparameters); ``examples`` lets a reader check the whole split was
    evaluated. ``regime`` is the number of training examples of the data regime the run
    trained on (0: the task's usual training split; then ``regime_seed`` is 0 too) and
    ``role`` the run's role in a calibrated report (``ROLES``).
    """

    run_id: str
    task: str
    split: str
    accuracy: float
    examples: int
    regime: int = 0
    regime_seed: int = 0
    role: str = "model"

    def key(self) -> tuple[str, str, str, int, int]:
        return (self.run_id, self.task, self.split, self.regime, self.regime_seed)

    def where(self) -> str:
        regime = f" regime {self.regime} seed {self.regime_seed}" if self.regime else ""
        kind = "task" if self.task.startswith("source:") else "VTAB task"
        return f"{kind} {self.task} split {self.split}{regime}"

    def validate(self, prefix: str = "") -> TaskResult:
        """Itself; ``InvalidArgument`` naming the field and what is allowed otherwise.

        ``prefix`` "reports." names the fields as a ``ReportMetrics`` request spells them
        (``reports.task_split``, ``reports.metrics["accuracy"]``; there an empty role means
        model). The run id is checked where it is claimed (``MetricsStore``).
        """
        split_field = f"{prefix}task_split" if prefix else "split"
        accuracy_field = f'{prefix}metrics["accuracy"]' if prefix else "accuracy"
        if is_source_task(self.task):  # a packed source as a transfer task (control baselines)
            store_of(self.task)
            if self.split not in SOURCE_SPLITS:
                raise InvalidArgument(f"{split_field}: got {quoted(self.split)} for task {self.task}, expected one of "
                                      f"{', '.join(SOURCE_SPLITS)} (the held-out splits of a packed source)")
        else:
            get_task(self.task)
            if self.split not in SPLITS:
                raise InvalidArgument(f"{split_field}: got {quoted(self.split)} for task {self.task}, expected one "
                                      f"of {', '.join(SPLITS)}")
        number = isinstance(self.accuracy, (int, float)) and not isinstance(self.accuracy, bool)
        if not number or not 0.0 <= float(self.accuracy) <= 1.0:
            raise InvalidArgument(f"{accuracy_field}: got {quoted(self.accuracy)} for task {self.task}, expected 0 to 1")
        if isinstance(self.examples, bool) or not isinstance(self.examples, int) or self.examples < 1:
            raise InvalidArgument(
                f"{prefix}examples: got {quoted(self.examples)} for task {self.task}, expected an integer >= 1"
            )
        if self.role not in ROLES:
            empty = " (or empty for model)" if prefix else ""
            raise InvalidArgument(f"{prefix}role: got {quoted(self.role)} for task {self.task}, expected one of "
                                  f"{', '.join(ROLES)}{empty}")
        for name in ("regime", "regime_seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
                raise InvalidArgument(f"{prefix}{name}: got {quoted(value)} for task {self.task}, expected an "
                                      "integer >= 0")
        if self.regime == 0 and self.regime_seed != 0:
            raise InvalidArgument(f"{prefix}regime_seed: got {self.regime_seed} for task {self.task} with regime 0, "
                                  "expected 0 (a seed draws a regime; regime 0 is the usual training split)")
        if self.role == "max" and self.regime != 0:
            raise InvalidArgument(f"{prefix}regime: got {self.regime} for task {self.task} of a max run, expected 0 "
                                  "(a max run trains on all training data)")
        return self
