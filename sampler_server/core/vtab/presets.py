"""Named VTAB task sets and the VTAB+MD evaluation plan, as data.

- VTAB-v1: the 19 tasks of VTAB-1k (Zhai et al.), in ``TASKS`` order.
- VTAB-v2: VTAB+MD's task set (Dumoulin et al., Sec. 3): VTAB-v1 without DTD,
  because DTD's classes are also split into MD train/valid/test classes, so a
  learner trained on MD sources would have seen test images of the DTD task.

``VTAB_MD_PLAN`` says what a VTAB+MD evaluation runs: every VTAB-v2 task as one
full-way episode (support = ``train800val200``, all classes; query = ``test``),
MD-v2 test episodes of every MD-v2 test source, and MD-v2 validation episodes as the
only data for choosing hyperparameters (VTAB itself offers no validation tasks).
The aggregate the paper reports is the mean over MD-v2 test sources of their mean
query accuracy, beside the mean VTAB-v2 test accuracy and its three group means.

Pure: constants and functions of their arguments only.
"""

from __future__ import annotations

import dataclasses
import enum

from sampler_server.core.md.presets import Benchmark, benchmark_sources
from sampler_server.core.split import Split
from sampler_server.core.vtab.splits import check_split
from sampler_server.core.vtab.tasks import TASKS, Group, get_task
from sampler_server.errors import InvalidArgument
from sampler_server.quoting import quoted


class VtabBenchmark(str, enum.Enum):
    """A named VTAB task set; the value is the name the CLI and reports use."""

    VTAB_V1 = "vtab-v1"
    VTAB_V2 = "vtab-v2"

    @classmethod
    def parse(cls, value: VtabBenchmark | str) -> VtabBenchmark:
        """``value`` as a benchmark; ``InvalidArgument`` naming it and the allowed names otherwise."""
        if isinstance(value, cls):
            return value
        try:
            return cls(value)
        except ValueError:
            allowed = ", ".join(b.value for b in cls)
            raise InvalidArgument(f"VTAB benchmark: got {quoted(value)}, expected one of {allowed}") from None


REMOVED_IN_V2: tuple[str, ...] = ("dtd",)
"""Tasks VTAB-v2 drops: their images are also MD sources' train/valid classes."""

BENCHMARK_TASKS: dict[VtabBenchmark, tuple[str, ...]] = {
    VtabBenchmark.VTAB_V1: tuple(TASKS),
    VtabBenchmark.VTAB_V2: tuple(name for name in TASKS if name not in REMOVED_IN_V2),
}


def vtab_tasks(benchmark: VtabBenchmark | str) -> tuple[str, ...]:
    """Task names of ``benchmark`` in ``TASKS`` order (natural, specialized, structured)."""
    return BENCHMARK_TASKS[VtabBenchmark.parse(benchmark)]


def vtab_groups(benchmark: VtabBenchmark | str) -> dict[Group, tuple[str, ...]]:
    """Task names of ``benchmark`` per group, every group present (VTAB-v2 natural has six)."""
    tasks = vtab_tasks(benchmark)
    return {group: tuple(name for name in tasks if get_task(name).group is group) for group in Group}


@dataclasses.dataclass(frozen=True, kw_only=True)
class VtabMdPlan:
    """What a VTAB+MD evaluation runs and reports (see the module docstring)."""

    md_benchmark: Benchmark = Benchmark.MD_V2
    md_test_split: Split = Split.TEST
    md_validation_split: Split = Split.VALID
    vtab_benchmark: VtabBenchmark = VtabBenchmark.VTAB_V2
    vtab_support_split: str = "train800val200"
    vtab_query_split: str = "test"
    vtab_full_way: bool = True  # a VTAB task is one episode over all its classes, not sampled ways

    def __post_init__(self) -> None:
        if not isinstance(self.md_benchmark, Benchmark):
            raise InvalidArgument(f"md_benchmark: got {quoted(self.md_benchmark)}, expected a Benchmark")
        if not isinstance(self.vtab_benchmark, VtabBenchmark):
            raise InvalidArgument(f"vtab_benchmark: got {quoted(self.vtab_benchmark)}, expected a VtabBenchmark")
        for name in ("md_test_split", "md_validation_split"):
            if not isinstance(getattr(self, name), Split):
                raise InvalidArgument(f"{name}: got {quoted(getattr(self, name))}, expected a Split")
        check_split(self.vtab_support_split)
        check_split(self.vtab_query_split)

    @property
    def md_test_sources(self) -> tuple[str, ...]:
        """The MD sources whose test episodes are evaluated, sorted by name."""
        return benchmark_sources(self.md_benchmark, self.md_test_split)

    @property
    def md_validation_sources(self) -> tuple[str, ...]:
        """The MD sources whose validation episodes choose hyperparameters, sorted by name."""
        return benchmark_sources(self.md_benchmark, self.md_validation_split)

    @property
    def vtab_tasks(self) -> tuple[str, ...]:
        """The VTAB tasks evaluated, in ``TASKS`` order."""
        return vtab_tasks(self.vtab_benchmark)


VTAB_MD_PLAN = VtabMdPlan()
"""The plan Dumoulin et al. prescribe: MD-v2 test and validation episodes, VTAB-v2 tasks."""
