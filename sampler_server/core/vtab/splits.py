"""VTAB's split names and how each dataset carves them out of its TFDS splits.

Four carvings cover the 19 tasks (``../shared/reference/vtab.md``):

- ``VALIDATION_SPLIT``: the TFDS ``validation`` split is VTAB's val;
- ``TAIL_OF_TRAIN``: val is ``train[T:]`` with ``T = pct * |train| // 100``; the test
  is one TFDS split (``test``, or ``validation`` for CLEVR);
- ``THREE_WAY``: train, val and test all come from TFDS ``train``: ``train[:T]``,
  ``train[T:T+V]``, ``train[T+V:]`` with ``T``, ``V`` floored percents of ``|train|``;
- ``HALF_OF_TEST``: smallNORB's val is ``test[:50%]`` and its test ``test[50%:]``.

In every carving ``train800 = train[:800]``, ``val200`` is the first 200 examples of
the val region, and ``train800val200`` is the two concatenated in that order. The
specs are written as the reference writes them (percent bounds stay percents), so
joined with ``+`` they can go to ``tfds.load`` unchanged.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping

from sampler_common.splits import VTAB as VTAB_SPLIT_NAMES
from sampler_server.core.vtab.slicing import SliceRange, resolve_spec, split_size, take
from sampler_server.errors import InvalidArgument, field_checks
from sampler_server.quoting import quoted

SPLITS = VTAB_SPLIT_NAMES.names
"""VTAB split names (``sampler_common.splits.VTAB``, which the client and the CLI read too): the 1k splits, the test, the full splits, and the reference script's variant.

``trainval1000`` is what task_adaptation's ``scripts/run_all_tasks.sh`` trains on
(``--train_examples 1000``: ``data.take(1000)`` of the default ``trainval`` split): the
first 1000 examples of TFDS's default read of the trainval expression, which
interleaves its shard files (``core.vtab.read_order``), so it depends on how the
prepared dataset is sharded. ``trainval1000-canonical`` is the first 1000 of
``trainval`` in canonical order (a slice: for most tasks ``train[:1000]``).
"""
SCRIPT_TRAIN_EXAMPLES = 1000
"""``run_all_tasks.sh``'s ``--train_examples``."""
READ_ORDER_SPLITS: dict[str, tuple[str, int]] = {"trainval1000": ("trainval", SCRIPT_TRAIN_EXAMPLES)}
"""Splits that are a read order rather than a slice: name -> (the split read, how many of
its first examples in TFDS's default read order)."""
VTAB_1K_TRAIN = 800
VTAB_1K_VAL = 200


class Carving(enum.Enum):
    """Where a dataset's VTAB val (and test) come from; see the module docstring."""

    VALIDATION_SPLIT = "validation_split"
    TAIL_OF_TRAIN = "tail_of_train"
    THREE_WAY = "three_way"
    HALF_OF_TEST = "half_of_test"


@dataclasses.dataclass(frozen=True, kw_only=True)
class SplitLayout:
    """A carving and its percents; ``slices`` turns a VTAB split into TFDS spec parts."""

    carving: Carving
    train_percent: int = 0
    val_percent: int = 0
    test_split: str = "test"

    def __post_init__(self) -> None:
        if self.carving in (Carving.TAIL_OF_TRAIN, Carving.THREE_WAY):
            if not 0 < self.train_percent < 100:
                raise InvalidArgument(f"train_percent must be in (0, 100), got {self.train_percent}")
        elif self.train_percent:
            raise InvalidArgument(f"{self.carving.value} takes no train_percent, got {self.train_percent}")
        if self.carving is Carving.THREE_WAY:
            if not 0 < self.val_percent <= 100 - self.train_percent:
                raise InvalidArgument(f"val_percent must be in (0, {100 - self.train_percent}], got {self.val_percent}")
        elif self.val_percent:
            raise InvalidArgument(f"{self.carving.value} takes no val_percent, got {self.val_percent}")

    def slices(self, split: str, sizes: Mapping[str, int], *, dataset: str) -> tuple[str, ...]:
        """The TFDS spec parts of VTAB ``split`` (joined with ``+``, one TFDS spec)."""
        check_split(split)
        if split in READ_ORDER_SPLITS:
            read, count = READ_ORDER_SPLITS[split]
            raise InvalidArgument(f"VTAB split {split} is not a slice: it is the first {count} of TFDS's default "
                                  f"(interleaved) read of {read}, which needs the shard lengths (core.vtab.read_order)")
        if split == "trainval1000-canonical":
            trainval = resolve_spec(self.slices("trainval", sizes, dataset=dataset), sizes, dataset=dataset)
            return tuple(piece.spec(sizes[piece.split]) for piece in take(trainval, SCRIPT_TRAIN_EXAMPLES))
        if split == "train800val200":
            train800 = self.slices("train800", sizes, dataset=dataset)
            return train800 + self.slices("val200", sizes, dataset=dataset)
        parts = self._parts(split, sizes, dataset)
        for part in parts:  # every named TFDS split must be there, even where no size is needed
            split_size(sizes, part.partition("[")[0], dataset=dataset)
        return parts

    def _parts(self, split: str, sizes: Mapping[str, int], dataset: str) -> tuple[str, ...]:
        if split == "train800":
            return (f"train[:{VTAB_1K_TRAIN}]",)
        if self.carving is Carving.VALIDATION_SPLIT:
            return {
                "val200": (f"validation[:{VTAB_1K_VAL}]",),
                "test": (self.test_split,),
                "train": ("train",),
                "val": ("validation",),
                "trainval": ("train", "validation"),
            }[split]
        if self.carving is Carving.HALF_OF_TEST:
            return {
                "val200": (f"test[:{VTAB_1K_VAL}]",),
                "test": ("test[50%:]",),
                "train": ("train",),
                "val": ("test[:50%]",),
                "trainval": ("train", "test[:50%]"),
            }[split]
        if self.carving is Carving.TAIL_OF_TRAIN and split == "test":
            return (self.test_split,)
        if self.carving is Carving.TAIL_OF_TRAIN and split == "trainval":
            return ("train",)
        total = split_size(sizes, "train", dataset=dataset)
        train_end = self.train_percent * total // 100
        val_end = train_end + self.val_percent * total // 100
        if split == "val200":
            return (f"train[{train_end}:{train_end + VTAB_1K_VAL}]",)
        if split == "train":
            return (f"train[:{train_end}]",)
        if self.carving is Carving.TAIL_OF_TRAIN:  # val
            return (f"train[{train_end}:]",)
        return {
            "val": (f"train[{train_end}:{val_end}]",),
            "trainval": (f"train[:{val_end}]",),
            "test": (f"train[{val_end}:]",),
        }[split]

    def ranges(self, split: str, sizes: Mapping[str, int], *, dataset: str) -> tuple[SliceRange, ...]:
        """The absolute ranges of VTAB ``split``, in order (bounds checked as TFDS does)."""
        return resolve_spec(self.slices(split, sizes, dataset=dataset), sizes, dataset=dataset)


def check_split(split: str) -> str:
    """``split`` itself when it is one of ``SPLITS``, else an ``InvalidArgument`` listing them."""
    if split not in SPLITS:
        raise InvalidArgument(f"unknown VTAB split {quoted(split)}; allowed: {', '.join(SPLITS)}")
    return split


def parse_split(name: str, field: str = "split") -> str:
    """The canonical VTAB split a user's ``name`` stands for ("valid" and "validation" are
    "val"; "val200" is its own split), else an ``InvalidArgument`` listing the accepted names."""
    with field_checks():
        return VTAB_SPLIT_NAMES.canonical(name, field)
