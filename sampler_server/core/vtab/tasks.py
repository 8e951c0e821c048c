"""The 19 VTAB-1k tasks as data: TFDS builder, split carving, label rule, group.

Everything here is a constant or a pure function of its arguments. A VTAB split of a
task is a pure function of the task and the sizes of the prepared TFDS splits (the
carving percents are applied to ``|train|``); the examples it holds are canonical
indices within those TFDS splits, so the packer and the samplers agree with
``tfds.load(f"{task.tfds_name}:{task.version}", split=task.spec(split, sizes))``.
The one exception, ``trainval1000``, is the order TFDS reads trainval in, a pure
function of the shard lengths too (``read_order``).
Figures are the reference's (``../shared/reference/vtab.md``, task_adaptation).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

from sampler_common.suggest import did_you_mean
from sampler_server.core.vtab.labels import LabelRule, RuleKind
from sampler_server.core.vtab.slicing import SliceRange, expand
from sampler_server.core.vtab.read_order import ShardLayout, default_read
from sampler_server.core.vtab.splits import READ_ORDER_SPLITS, Carving, SplitLayout
from sampler_server.errors import FailedPrecondition, InvalidArgument
from sampler_server.quoting import quoted


class Group(str, enum.Enum):
    """VTAB's three task groups (the paper, Sec. 2); the value is the name used everywhere."""

    NATURAL = "natural"
    SPECIALIZED = "specialized"
    STRUCTURED = "structured"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Task:
    """One VTAB-1k task: where its images come from, how splits are carved, how labels follow."""

    name: str
    group: Group
    tfds_name: str
    version: str
    num_classes: int
    layout: SplitLayout
    rule: LabelRule

    def __post_init__(self) -> None:
        assert isinstance(self.group, Group) and self.num_classes >= 2, self

    @property
    def attributes(self) -> tuple[str, ...]:
        """The per-record attributes ``label`` reads (names shared with the packer)."""
        return self.rule.attributes

    @property
    def builder(self) -> str:
        """``name:version`` as ``tfds.builder`` takes it, e.g. ``"eurosat/rgb:2.*.*"``."""
        return f"{self.tfds_name}:{self.version}"

    def label(self, attrs: Mapping[str, Any]) -> int:
        """The label of a record from its stored attributes; ``DataLoss`` when they are
        missing or malformed or give a label outside ``[0, num_classes)``."""
        return self.rule.apply(attrs, task=self.name, num_classes=self.num_classes)

    def slices(self, split: str, sizes: Mapping[str, int]) -> tuple[str, ...]:
        """The TFDS spec parts of VTAB ``split``, in order, given the sizes of the TFDS splits.

        Unknown split or a TFDS split missing from ``sizes``: ``InvalidArgument``.
        """
        return self.layout.slices(split, sizes, dataset=self.tfds_name)

    def spec(self, split: str, sizes: Mapping[str, int]) -> str:
        """``slices`` joined with ``+``: the one spec string ``tfds.load(split=...)`` takes."""
        return "+".join(self.slices(split, sizes))

    def ranges(self, split: str, sizes: Mapping[str, int]) -> tuple[SliceRange, ...]:
        """The absolute ranges of VTAB ``split``; a slice past a split's end is an
        ``InvalidArgument``, as TFDS refuses it (nothing is clamped)."""
        return self.layout.ranges(split, sizes, dataset=self.tfds_name)


def _label_task(name: str, group: Group, tfds_name: str, version: str, num_classes: int, layout: SplitLayout) -> Task:
    return Task(
        name=name,
        group=group,
        tfds_name=tfds_name,
        version=version,
        num_classes=num_classes,
        layout=layout,
        rule=LabelRule(RuleKind.RAW, ("label",)),
    )


_VALIDATION = SplitLayout(carving=Carving.VALIDATION_SPLIT)
_TAIL_90 = SplitLayout(carving=Carving.TAIL_OF_TRAIN, train_percent=90)
_TAIL_80 = SplitLayout(carving=Carving.TAIL_OF_TRAIN, train_percent=80)
_THREE_WAY_60_20 = SplitLayout(carving=Carving.THREE_WAY, train_percent=60, val_percent=20)
_THREE_WAY_80_10 = SplitLayout(carving=Carving.THREE_WAY, train_percent=80, val_percent=10)
_CLEVR = SplitLayout(carving=Carving.TAIL_OF_TRAIN, train_percent=90, test_split="validation")
_HALF_OF_TEST = SplitLayout(carving=Carving.HALF_OF_TEST)
_N, _SP, _ST = Group.NATURAL, Group.SPECIALIZED, Group.STRUCTURED

_ALL = (
    _label_task("caltech101", _N, "caltech101", "3.*.*", 102, _TAIL_90),
    _label_task("cifar100", _N, "cifar100", "3.*.*", 100, _TAIL_90),
    _label_task("dtd", _N, "dtd", "3.*.*", 47, _VALIDATION),
    _label_task("flowers102", _N, "oxford_flowers102", "2.*.*", 102, _VALIDATION),
    _label_task("pets", _N, "oxford_iiit_pet", "3.*.*", 37, _TAIL_80),
    _label_task("sun397", _N, "sun397/tfds", "4.*.*", 397, _VALIDATION),
    _label_task("svhn", _N, "svhn_cropped", "3.*.*", 10, _TAIL_90),
    _label_task("camelyon", _SP, "patch_camelyon", "2.*.*", 2, _VALIDATION),
    _label_task("eurosat", _SP, "eurosat/rgb", "2.*.*", 10, _THREE_WAY_60_20),
    _label_task("resisc45", _SP, "resisc45", "3.*.*", 45, _THREE_WAY_60_20),
    _label_task("retinopathy", _SP, "diabetic_retinopathy_detection/btgraham-300", "3.*.*", 5, _VALIDATION),
    Task(name="clevr_count", group=_ST, tfds_name="clevr", version="3.*.*", num_classes=8, layout=_CLEVR,
         rule=LabelRule(RuleKind.OBJECT_COUNT, ("objects_pixel_z",))),
    Task(name="clevr_distance", group=_ST, tfds_name="clevr", version="3.*.*", num_classes=6, layout=_CLEVR,
         rule=LabelRule(RuleKind.CLOSEST_OBJECT_BIN, ("objects_pixel_z",))),
    _label_task("dmlab", _ST, "dmlab", "2.0.1", 6, _VALIDATION),
    Task(name="dsprites_location", group=_ST, tfds_name="dsprites", version="2.*.*", num_classes=16,
         layout=_THREE_WAY_80_10, rule=LabelRule(RuleKind.COARSE_BIN, ("label_x_position",), source_values=32)),
    Task(name="dsprites_orientation", group=_ST, tfds_name="dsprites", version="2.*.*", num_classes=16,
         layout=_THREE_WAY_80_10, rule=LabelRule(RuleKind.COARSE_BIN, ("label_orientation",), source_values=40)),
    Task(name="kitti_distance", group=_ST, tfds_name="kitti", version="3.1.0", num_classes=4, layout=_VALIDATION,
         rule=LabelRule(RuleKind.CLOSEST_VEHICLE_BIN, ("objects_type", "objects_location_z"))),
    Task(name="smallnorb_azimuth", group=_ST, tfds_name="smallnorb", version="2.*.*", num_classes=18,
         layout=_HALF_OF_TEST, rule=LabelRule(RuleKind.RAW, ("label_azimuth",))),
    Task(name="smallnorb_elevation", group=_ST, tfds_name="smallnorb", version="2.*.*", num_classes=9,
         layout=_HALF_OF_TEST, rule=LabelRule(RuleKind.RAW, ("label_elevation",))),
)

TASKS: dict[str, Task] = {task.name: task for task in _ALL}
"""Every task by name, natural then specialized then structured (the order of vtab.md's list)."""

GROUPS: dict[Group, tuple[str, ...]] = {
    group: tuple(task.name for task in _ALL if task.group is group) for group in Group
}
"""Task names of each group, in ``TASKS`` order."""

DATASETS: tuple[str, ...] = tuple(dict.fromkeys(task.tfds_name for task in _ALL))
"""The 16 TFDS builder names (clevr, dsprites and smallnorb serve two tasks each)."""


def get_task(name: str) -> Task:
    """The task called ``name``; ``InvalidArgument`` listing the allowed names otherwise."""
    task = TASKS.get(name) if isinstance(name, str) else None
    if task is None:
        raise InvalidArgument(f"unknown VTAB task {quoted(name)}{did_you_mean(name, TASKS)}; allowed: {', '.join(TASKS)}")
    return task


def group_of(task_name: str) -> Group:
    """The group of the task called ``task_name``."""
    return get_task(task_name).group


def tasks_for_dataset(tfds_name: str) -> list[Task]:
    """The tasks whose images come from TFDS builder ``tfds_name`` (config included, no version)."""
    tasks = [task for task in _ALL if task.tfds_name == tfds_name]
    if not tasks:
        raise InvalidArgument(f"no VTAB task reads TFDS dataset {quoted(tfds_name)}; known: {', '.join(DATASETS)}")
    return tasks


def attributes_for_dataset(tfds_name: str) -> tuple[str, ...]:
    """What the packer stores per record of ``tfds_name``: every attribute its tasks read."""
    return tuple(dict.fromkeys(name for task in tasks_for_dataset(tfds_name) for name in task.attributes))


def resolve(task: Task | str, split: str, sizes: Mapping[str, int],
            shards: ShardLayout | None = None) -> list[tuple[str, int]]:
    """The examples of VTAB ``split`` of ``task``, in order, as (TFDS split, index within it).

    ``sizes`` maps each TFDS split of the prepared dataset to its number of examples;
    ``shards`` is how its splits are cut into files, which a read-order split
    (``READ_ORDER_SPLITS``: ``trainval1000``) needs and the slice splits ignore.

    Raises:
        InvalidArgument: unknown task or split, or a split these sizes cannot carve.
        FailedPrecondition: a read-order split without ``shards``.
    """
    chosen = task if isinstance(task, Task) else get_task(task)
    if split not in READ_ORDER_SPLITS:
        return expand(chosen.ranges(split, sizes))
    read, count = READ_ORDER_SPLITS[split]
    if shards is None:
        raise FailedPrecondition(f"VTAB split {split} of {chosen.name} is the first {count} of TFDS's default "
                                 f"(interleaved) read of {read}, which needs the shard lengths of the TFDS splits")
    ranges = chosen.ranges(read, sizes)
    for piece in ranges:
        if shards.split_size(piece.split) != sizes[piece.split]:
            raise InvalidArgument(f"{chosen.tfds_name}: shard lengths of split {piece.split!r} sum to "
                                  f"{shards.split_size(piece.split)}, not its {sizes[piece.split]} examples")
    return default_read(ranges, shards, count)
