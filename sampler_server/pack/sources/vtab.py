"""One prepared TFDS dataset of VTAB-1k (``pack vtab --tfds-name NAME --tfds-data-dir DIR``).

Input: what ``tfds download_and_prepare`` leaves in a data directory
(``DIR/<name>[/<config>]/<version>/``: ``dataset_info.json``, ``features.json`` and
the split's shard files). Nothing is downloaded; no builder code is needed
(``tfds_read``).

What each record keeps (``store.vtab_records`` reads it back):
- the image as TFDS stores it (the encoded PNG/JPEG bytes, never re-encoded
  unless ``--max-side``/``--raw-size`` ask); dSprites' 0/1 masks are stored x255
  (a ``scale=255`` derivation, lossless PNG), so decoding to RGB, which tiles the
  one channel to three, gives VTAB's input exactly, and ``--raw-size`` resizes
  those pixels rather than 0/1 values;
- its TFDS split and canonical index (``tfds_split``, ``tfds_index``);
- the attributes VTAB's label rules read, under names agreed with ``core.vtab``:
  ``label`` wherever the dataset has one; ``objects_pixel_z`` (CLEVR); dSprites'
  ``label_x_position``/``label_orientation``; smallNORB's ``label_azimuth``/
  ``label_elevation``; KITTI's ``objects_type`` and ``objects_location_z``.

Only datasets some VTAB task reads are packed (``core.vtab``); without a version
the highest prepared one its tasks take is chosen. Checked while reading, each
failure one line naming dataset, split, index and field: a feature a label needs
missing from the dataset, a class label outside the feature's class range, and
every task's label rule on every example (an example without the objects its label
needs, a derived label outside the task's classes). Records follow canonical order:
TFDS splits sorted by name, each in index order (``tfds_read``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sampler_server.core.vtab import tasks_for_dataset
from sampler_server.errors import DataLoss, InputFormatError, InvalidArgument
from sampler_server.pack.plan import ClassPlan, ConverterOptions, Derivation, SourceItem, SourcePlan
from sampler_server.pack.sources.common import reject_unused
from sampler_server.pack.tfds_read import (
    SplitLayout,
    TfdsName,
    locate,
    open_builder,
    read_split,
    split_layouts,
)
from sampler_server.store.vtab_records import (
    INDEX_COLUMN,
    SPLIT_ORDER,
    SPLIT_RULE,
    TfdsRecordsWriter,
    source_kind,
    version_matches,
)

SOURCE = "vtab"
DESCRIPTION = "one prepared TFDS dataset of VTAB-1k (--tfds-name, --tfds-data-dir), with split, index and label attributes"
ACCEPTS = ("tfds_name",)
IMAGE_FEATURE = "image"


@dataclass(frozen=True)
class AttributeRule:
    """One label attribute: where it lives in the TFDS features and how it is cut out."""

    name: str  # the record / column name, agreed with core.vtab (ATTRIBUTE_NAMES)
    feature: tuple[str, ...]  # path in the features dict ("objects", "pixel_coords")
    component: int | None = None  # one coordinate of a vector feature (z = 2)
    ragged: bool = False  # one value per object of a Sequence feature

    @property
    def feature_name(self) -> str:
        return "/".join(self.feature) + ("" if self.component is None else f"[:, {self.component}]")


RULES: dict[str, AttributeRule] = {
    rule.name: rule
    for rule in (
        AttributeRule("label", ("label",)),
        AttributeRule("objects_pixel_z", ("objects", "pixel_coords"), component=2, ragged=True),
        AttributeRule("label_x_position", ("label_x_position",)),
        AttributeRule("label_orientation", ("label_orientation",)),
        AttributeRule("label_azimuth", ("label_azimuth",)),
        AttributeRule("label_elevation", ("label_elevation",)),
        AttributeRule("objects_type", ("objects", "type"), ragged=True),
        AttributeRule("objects_location_z", ("objects", "location"), component=2, ragged=True),
    )
}
"""Every attribute a VTAB label rule reads (``core.vtab.ATTRIBUTE_NAMES``), by name."""
IMAGE_SCALE = {"dsprites": 255}
"""Datasets whose stored pixels are multiplied at pack time (dSprites: 0/1 masks -> 0/255)."""


@dataclass(frozen=True)
class _Column:
    """A rule resolved against the dataset's features."""

    rule: AttributeRule
    dtype: str
    num_classes: int | None

    def describe(self) -> dict[str, Any]:
        return {"name": self.rule.name, "feature": self.rule.feature_name, "dtype": self.dtype,
                "ragged": self.rule.ragged, "num_classes": self.num_classes}


def _resolve(features: Any, rule: AttributeRule, where: str) -> _Column:
    """Check the rule against the features dict; its dtype and class count."""
    node, ragged = features, False
    for depth, key in enumerate(rule.feature):
        if type(node).__name__ == "Sequence":
            node, ragged = node.feature, True
        try:
            node = node[key]
        except (KeyError, TypeError):
            raise InputFormatError(
                where, f"field {'/'.join(rule.feature[:depth + 1])}: missing from the dataset's features; "
                f"VTAB's labels need it (attribute {rule.name})"
            ) from None
    if ragged != rule.ragged:
        raise InputFormatError(where, f"field {rule.feature_name}: expected {'a' if rule.ragged else 'no'} sequence")
    shape = tuple(getattr(node, "shape", ()))
    if (rule.component is None) != (shape == ()) or (rule.component is not None and rule.component >= shape[-1]):
        raise InputFormatError(where, f"field {rule.feature_name}: has shape {shape}, which the rule cannot read")
    kind = np.dtype(node.np_dtype).kind
    if kind not in "iuf":
        raise InputFormatError(where, f"field {rule.feature_name}: dtype {node.np_dtype} is not numeric")
    num_classes = getattr(node, "num_classes", None) if type(node).__name__ == "ClassLabel" else None
    return _Column(rule, "<f4" if kind == "f" else "<i8", num_classes)


def _decode_spec(columns: tuple[_Column, ...]) -> dict[str, Any]:
    """The PartialDecoding spec: the image and every feature a rule reads."""
    spec: dict[str, Any] = {IMAGE_FEATURE: True}
    for column in columns:
        node = spec
        for key in column.rule.feature[:-1]:
            node = node.setdefault(key, {})
        node[column.rule.feature[-1]] = True
    return spec


def _values(example: Mapping[str, Any], column: _Column) -> Any:
    value: Any = example
    for key in column.rule.feature:
        value = value[key]
    array = np.asarray(value)
    if column.rule.component is not None:
        array = array.reshape(-1, array.shape[-1])[:, column.rule.component]
    array = array.astype(np.float32 if column.dtype == "<f4" else np.int64)
    return array.tolist() if column.rule.ragged else array.item()


class _Reader:
    """Turns one split's examples into checked ``SourceItem``s (runs in the pack's main process)."""

    def __init__(self, builder: Any, directory: Path, name: TfdsName, version: str,
                 columns: tuple[_Column, ...], tasks: tuple[Any, ...]) -> None:
        self.builder, self.directory, self.columns, self.tasks = builder, directory, columns, tasks
        self.label = f"tfds {name.dataset}:{version}"
        self.scale = IMAGE_SCALE.get(name.base)

    def items(self, layout: SplitLayout) -> Iterator[SourceItem]:
        derivation = Derivation(scale=self.scale)
        for index, example in enumerate(read_split(self.builder, layout, _decode_spec(self.columns), (IMAGE_FEATURE,))):
            attributes = {column.rule.name: self._checked(example, column, layout.name, index) for column in self.columns}
            self._check_tasks(attributes, layout.name, index)
            yield SourceItem(
                origin=f"{layout.name}/{index}",
                path=self.directory,
                derivation=derivation,
                metadata={"tfds_split": layout.name, INDEX_COLUMN: index, **attributes},
                data=bytes(example[IMAGE_FEATURE]),
                where=f"{self.label}: split {layout.name}, index {index}, field {IMAGE_FEATURE}",
            )

    def _checked(self, example: Mapping[str, Any], column: _Column, split: str, index: int) -> Any:
        value = _values(example, column)
        if column.num_classes is not None:
            outside = [v for v in (value if column.rule.ragged else [value]) if not 0 <= v < column.num_classes]
            if outside:
                raise InputFormatError(
                    self.label, f"split {split}, index {index}, field {column.rule.feature_name}: class {outside[0]} "
                    f"is outside the dataset's class range [0, {column.num_classes})"
                )
        return value

    def _check_tasks(self, attributes: Mapping[str, Any], split: str, index: int) -> None:
        """Every task's label derives and lies in its classes (the registry names task and field)."""
        for task in self.tasks:
            try:
                task.label(attributes)
            except DataLoss as error:
                raise InputFormatError(self.label, f"split {split}, index {index}: {error}") from None


def plan(input_dir: Path, options: ConverterOptions) -> SourcePlan:
    """The dataset's TFDS splits as classes (sorted by name); examples read lazily in canonical order."""
    reject_unused(SOURCE, options, ACCEPTS)
    if not options.tfds_name:
        raise InvalidArgument("pack vtab needs --tfds-name (e.g. clevr, eurosat/rgb, kitti:3.1.0)")
    name = TfdsName.parse(options.tfds_name)
    all_tasks = tuple(tasks_for_dataset(name.dataset))  # InvalidArgument for a dataset no task reads
    directory, version = locate(Path(input_dir), name, tuple(sorted({t.version for t in all_tasks})))
    tasks = tuple(t for t in all_tasks if version_matches(version, t.version))
    builder = open_builder(directory)
    where = f"tfds {name.dataset}:{version}"
    features = builder.info.features
    if IMAGE_FEATURE not in features or type(features[IMAGE_FEATURE]).__name__ != "Image":
        raise InputFormatError(where, f"field {IMAGE_FEATURE}: missing or not an image feature")
    needed = dict.fromkeys(attribute for task in all_tasks for attribute in task.attributes)
    if "label" in features:
        needed.setdefault("label")
    columns = tuple(_resolve(features, RULES[attribute], where) for attribute in sorted(needed))
    layouts = split_layouts(builder)
    if not layouts:
        raise InputFormatError(where, "the dataset has no splits")
    reader = _Reader(builder, directory, name, version, columns, tasks)
    tfds_block = {
        "name": name.dataset,
        "version": version,
        "split_order": SPLIT_ORDER,
        "splits": {s: {"num_examples": layouts[s].num_examples, "shard_lengths": list(layouts[s].shard_lengths)}
                   for s in sorted(layouts)},
        "disable_shuffling": bool(builder.info.disable_shuffling),  # TFDS's default read order follows it
        "attributes": [column.describe() for column in columns],
        "image": {"feature": IMAGE_FEATURE, "scale": reader.scale},
        "dataset_info_sha256": "sha256:" + hashlib.sha256((directory / "dataset_info.json").read_bytes()).hexdigest(),
    }
    classes = tuple(ClassPlan(name=s, items=lambda s=s: reader.items(layouts[s])) for s in sorted(layouts))
    return SourcePlan(
        source=source_kind(name.dataset),
        classes=classes,
        split_rule=SPLIT_RULE,
        reference_encoding=False,
        sidecar=lambda partial_dir: TfdsRecordsWriter(partial_dir, tfds_block),
        default_name="tfds_" + name.dataset.replace("/", "_"),
        total_items=sum(layout.num_examples for layout in layouts.values()),
    )
