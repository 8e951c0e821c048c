"""Generic converter: one sub-folder per class, images inside (any PIL format).

Class name = folder name. Splits come from ``--class-splits``, from
``--split-fractions`` (the default rule's permutation cut at other shares) or the default
70/15/15 rule. Files with other suffixes are ignored; sub-sub-folders too. Not a
Meta-Dataset source, so files are stored as they are (no reference re-encoding).
"""

from __future__ import annotations

from pathlib import Path

from sampler_server.pack.plan import ConverterOptions, SourcePlan
from sampler_server.pack.sources.common import (
    ClassEntry,
    PlanBuilder,
    file_items,
    list_images,
    reject_unused,
    require_dir,
)

SOURCE = "image_folder"
DESCRIPTION = "any dataset laid out as ROOT/<class name>/<image files>"
ACCEPTS = ("class_splits", "split_fractions")


def plan(input_dir: Path, options: ConverterOptions) -> SourcePlan:
    reject_unused(SOURCE, options, ACCEPTS)
    root = require_dir(Path(input_dir), "input")
    builder = PlanBuilder(SOURCE, reference_encoding=False)
    for class_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        builder.add(ClassEntry(class_dir.name, lambda d=class_dir: file_items(root, list_images(d))))
    return builder.build(options)
