"""Meta-Dataset's model selection, framework-free: validate every N updates, test the best.

The reference validates before training and every ``validate_every`` updates on 600 episodes
of ImageNet's validation classes, saves a checkpoint at each, and ``select_best_model.py``
tests the checkpoint of the highest validation accuracy (an argmax over the steps, the first
of equal ones; ../shared/reference/md_learners.md, section 4). A trainer run here does the
same within the run: ``ValidationHistory`` holds what each validation measured and which one
is best; the framework keeps the best backbone (``Framework.keep_best``) and restores it before
the test episodes.

The history lives beside the checkpoint (``validation.json``) so a resumed run continues it:
its entries after the checkpoint's index are dropped, since the resumed run measures them
again, and gets the same values (training is exact on resume, validation episodes are the
server's pure function of their seed and index).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from clients.errors import UsageError

HISTORY_FILE = "validation.json"
MD_VALIDATION_SOURCES = ("ilsvrc_2012",)  # MD validates on ImageNet only, in both training settings


@dataclass
class Validation:
    update: int                 # the updates (items) trained before it
    accuracy: float             # the mean over the validation sources of each one's mean episode accuracy
    ci95: float | None          # of that mean for one source (``intervals.mean_ci95``); None for several
    by_source: dict[str, float] = field(default_factory=dict)


@dataclass
class ValidationHistory:
    sources: list[str]
    episodes: int
    validations: list[Validation] = field(default_factory=list)

    @property
    def best(self) -> Validation | None:
        """The highest accuracy; the earliest of equal ones (numpy's argmax, the reference's)."""
        best: Validation | None = None
        for validation in self.validations:
            if best is None or validation.accuracy > best.accuracy:
                best = validation
        return best

    def done(self, update: int) -> bool:
        return any(v.update == update for v in self.validations)

    def add(self, validation: Validation) -> bool:
        """Record ``validation``; whether it is the new best."""
        self.validations.append(validation)
        return self.best is validation

    def to_dict(self) -> dict:
        best = self.best
        return {"sources": self.sources, "episodes": self.episodes,
                "validations": [asdict(v) for v in self.validations],
                "best_update": best.update if best else None, "best_accuracy": best.accuracy if best else None}

    # ---- beside the checkpoint ------------------------------------------------------------------

    def save(self, directory: str | None) -> None:
        if directory is None:
            return
        path = Path(directory) / HISTORY_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(HISTORY_FILE + ".partial")
        partial.write_text(json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n")
        os.replace(partial, path)

    @classmethod
    def load(cls, directory: str | None, sources: list[str], episodes: int, up_to: int) -> ValidationHistory:
        """The history stored in ``directory`` up to update ``up_to`` (the checkpoint's), or an
        empty one; refused when it was measured on other sources or episode counts."""
        history = cls(sources, episodes)
        path = Path(directory) / HISTORY_FILE if directory is not None else None
        if path is None or not path.exists():
            return history
        try:
            stored = json.loads(path.read_text())
            kept = [Validation(**v) for v in stored["validations"] if v["update"] <= up_to]
            stored_sources, stored_episodes = list(stored["sources"]), int(stored["episodes"])
        except (ValueError, KeyError, TypeError) as error:
            raise UsageError(f"{path}: not a validation history of this trainer ({error})") from None
        if (stored_sources, stored_episodes) != (sources, episodes):
            raise UsageError(f"{path} was measured on {stored_episodes} episodes of {' '.join(stored_sources)}, "
                             f"this run validates on {episodes} of {' '.join(sources)}; use another --checkpoint-dir")
        history.validations = kept
        return history


def due(done: int, step: int, every: int) -> bool:
    """Whether a step of ``step`` items ending at ``done`` reached a validation point."""
    return every > 0 and done // every > (done - step) // every
