"""VTAB-1k tasks: which TFDS examples form each split, and how their labels follow.

Pure data and functions (no I/O, no TensorFlow): a split is a pure function of the
task and the sizes of the prepared TFDS splits, and a label a pure function of a
record's stored attributes, both checked against the reference and TFDS in tests.

- ``tasks``: ``Task``, ``TASKS``, ``GROUPS``, ``get_task``, ``tasks_for_dataset``, ``resolve``;
- ``splits``: ``SPLITS`` and the four ways datasets carve them;
- ``read_order``: TFDS's default (interleaved) read order, for ``trainval1000``;
- ``slicing``: TFDS's slice-spec semantics in pure Python;
- ``labels``: the label rules and the attribute names shared with the packer.
"""

from sampler_server.core.vtab.labels import ATTRIBUTE_NAMES, LabelRule, RuleKind
from sampler_server.core.vtab.read_order import ShardLayout, default_read
from sampler_server.core.vtab.slicing import SliceRange, resolve_spec
from sampler_server.core.vtab.splits import READ_ORDER_SPLITS, SPLITS, Carving, SplitLayout
from sampler_server.core.vtab.tasks import (
    DATASETS,
    GROUPS,
    TASKS,
    Group,
    Task,
    attributes_for_dataset,
    get_task,
    group_of,
    resolve,
    tasks_for_dataset,
)

__all__ = [
    "ATTRIBUTE_NAMES",
    "Carving",
    "DATASETS",
    "GROUPS",
    "Group",
    "LabelRule",
    "READ_ORDER_SPLITS",
    "RuleKind",
    "SPLITS",
    "ShardLayout",
    "SliceRange",
    "SplitLayout",
    "TASKS",
    "Task",
    "attributes_for_dataset",
    "default_read",
    "get_task",
    "group_of",
    "resolve",
    "resolve_spec",
    "tasks_for_dataset",
]
