"""One ImageNet-CoG result as the metrics store keeps it, and what a valid one is.

A trainer reports, for each level (IN-1K, L1..L5), each number of training images
per concept N (0 = all, or 1, 2, ..., 128) and each seed, the test top-1 of the
linear classifier it trained (CoG paper, Sec. 3.4 and supplementary B). The key
(run, level, N, seed) names that one evaluation; ``validate`` refuses a level, N,
seed, accuracy, example count or optional metric outside what the protocol allows,
naming the field as the wire spells it. The run id is checked where it is claimed
(``MetricsStore``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from sampler_server.errors import InvalidArgument
from sampler_server.quoting import quoted

MAX_SQLITE_INTEGER = 2**63 - 1
COG_EXTRAS = {
    "val_accuracy": "a number from 0 to 1",
    "learning_rate": "a finite number > 0",
    "weight_decay": "a finite number >= 0",
}
"""The optional metrics a CoG report may carry beside "accuracy", and what each allows:
the validation top-1 and the hyper-parameters the search chose."""


def cog_levels() -> tuple[str, ...]:
    """The levels a result may name, in table order: IN-1K (seen), then L1..L5."""
    from sampler_server.core.cog import LEVEL_NAMES, SEEN_LEVEL

    return (SEEN_LEVEL, *LEVEL_NAMES)


def shots_name(shots: int) -> str:
    """How tables and messages write a number of training images per concept (0 = all)."""
    return "all" if shots == 0 else str(shots)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_SQLITE_INTEGER


@dataclass(frozen=True)
class CogResult:
    """One ImageNet-CoG linear evaluation by a run: top-1 accuracy on the ``examples``
    test images of ``level``, for the classifier trained on ``shots`` images per concept
    (0 = the whole train split) with seed ``seed`` (which draws the few-shot subset and
    the validation split its hyper-parameters were chosen on).

    ``extras`` holds what the run may add of ``COG_EXTRAS`` (validation accuracy, the
    chosen learning rate and weight decay); it is part of the stored result, so a retry
    must resend it unchanged.
    """

    run_id: str
    level: str
    shots: int
    seed: int
    accuracy: float
    examples: int
    extras: Mapping[str, float] = field(default_factory=dict)

    def key(self) -> tuple[str, str, int, int]:
        return (self.run_id, self.level, self.shots, self.seed)

    def where(self) -> str:
        """The key in words, for messages."""
        return f"level {self.level} N={shots_name(self.shots)} seed {self.seed}"

    def validate(self, prefix: str = "") -> CogResult:
        """Itself; ``InvalidArgument`` naming the field (as ``prefix`` + its wire name) and
        what is allowed otherwise."""
        from sampler_server.core.cog import SHOTS

        levels = cog_levels()
        if self.level not in levels:
            raise InvalidArgument(f"{prefix}cog_level: got {quoted(self.level)}, expected one of {', '.join(levels)}")
        if isinstance(self.shots, bool) or self.shots not in (0, *SHOTS):
            raise InvalidArgument(f"{prefix}shots: got {quoted(self.shots)} for level {self.level}, expected 0 (all "
                                  f"training images) or one of {', '.join(map(str, SHOTS))}")
        if not _is_count(self.seed):
            raise InvalidArgument(f"{prefix}seed: got {quoted(self.seed)} for level {self.level} "
                                  f"N={shots_name(self.shots)}, expected an integer from 1 to {MAX_SQLITE_INTEGER}")
        if not _is_number(self.accuracy) or not 0.0 <= self.accuracy <= 1.0:
            raise InvalidArgument(f"{prefix}metrics[\"accuracy\"]: got {quoted(self.accuracy)} for {self.where()}, "
                                  "expected test top-1 from 0 to 1")
        if not _is_count(self.examples):
            raise InvalidArgument(f"{prefix}examples: got {quoted(self.examples)} for {self.where()}, expected the "
                                  f"number of test images evaluated, 1 to {MAX_SQLITE_INTEGER}")
        for name, value in self.extras.items():
            if name not in COG_EXTRAS:
                raise InvalidArgument(f"{prefix}metrics: got {quoted(name)} for {self.where()}, expected \"accuracy\" "
                                      f"and optionally {', '.join(COG_EXTRAS)}")
            allowed = _is_number(value) and (
                0.0 <= value <= 1.0 if name == "val_accuracy" else value > 0 if name == "learning_rate" else value >= 0)
            if not allowed:
                raise InvalidArgument(f"{prefix}metrics[\"{name}\"]: got {quoted(value)} for {self.where()}, expected "
                                      f"{COG_EXTRAS[name]}")
        return self

    def extras_json(self) -> str:
        return json.dumps({name: float(value) for name, value in self.extras.items()}, sort_keys=True)
