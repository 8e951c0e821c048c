"""Describable Textures Dataset (DTD r1.0.1) as Meta-Dataset uses it: 47 textures, full images.

Original layout (``dtd-r1.0.1.tar.gz`` unpacks to ``dtd/``)::

    images/<class>/<class>_<NNNN>.jpg     47 folders of 120 images, e.g. images/banded/banded_0002.jpg
    labels/                               joint annotations and the ten train/val/test image splits
    imdb/imdb.mat                         the same, for MATLAB

What the converter applies, and why:

- Classes are the folder names under ``images/``; only image files are records. The
  release leaves a stray ``images/waffled/.directory`` (a KDE folder-settings file);
  the MD reference skips it by name, we skip it with any hidden or non-image file.
- ``labels/`` and ``imdb/`` hold DTD's own image-level splits, which MD does not use
  (MD splits by class); they are not read.
- Files are stored as they are (byte for byte).
- Splits: ``--class-splits`` (MD's ``dtd_splits.json``) or the default 70/15/15 rule.
"""

from __future__ import annotations

from pathlib import Path

from sampler_server.pack.plan import ConverterOptions, SourceItem, SourcePlan
from sampler_server.pack.sources.common import (
    ClassEntry,
    PlanBuilder,
    file_items,
    list_images,
    reject_unused,
    require_dir,
)

SOURCE = "dtd"
DESCRIPTION = "Describable Textures Dataset (dtd/): 47 texture classes, full images"
ACCEPTS = ("class_splits",)


def class_dirs(images_dir: Path) -> list[Path]:
    """The class folders under ``images/``, sorted by name (hidden entries skipped)."""
    return sorted(p for p in images_dir.iterdir() if p.is_dir() and not p.name.startswith("."))


def _class_items(root: Path, class_dir: Path) -> list[SourceItem]:
    return file_items(root, list_images(class_dir))


def plan(input_dir: Path, options: ConverterOptions) -> SourcePlan:
    reject_unused(SOURCE, options, ACCEPTS)
    root = require_dir(Path(input_dir), "input")
    images_dir = require_dir(root / "images", "images")
    builder = PlanBuilder(SOURCE)
    for class_dir in class_dirs(images_dir):
        builder.add(ClassEntry(class_dir.name, lambda class_dir=class_dir: _class_items(root, class_dir)))
    return builder.build(options)
