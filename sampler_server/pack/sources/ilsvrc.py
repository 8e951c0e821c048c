"""ILSVRC-2012 (ImageNet) training-set converter.

Original layout, after the steps of Meta-Dataset's ``doc/dataset_conversion.md``
(extract ``ILSVRC2012_img_train.tar``, then each ``n????????.tar`` into a folder
of the same name)::

    ILSVRC2012_img_train/n01440764/n01440764_10026.JPEG
    ILSVRC2012_img_train/n01440764.tar          (may stay beside its folder)
    ILSVRC2012_img_train/wordnet.is_a.txt ...   (other files are ignored)

What the converter applies, and why:
- One class per wnid folder; the class name and wnid are the folder name. A folder
  whose name is not a wnid (``n`` + 8 digits) is an error, as are per-class tar
  archives that were never extracted (the converter reads folders only).
- Splits are not decided here: Meta-Dataset derives them from the WordNet 3.0
  hierarchy (valid = leaves under carnivore, test = leaves under device), which
  the hierarchy module computes from the wnids. Classes are listed by wnid.
- ``--duplicates FILE`` (repeatable) takes Meta-Dataset's lists of ILSVRC training
  files that duplicate images of other benchmark datasets (lines
  ``n01531178/n01531178_12730.JPEG  # comment``, ``#`` comment lines); those files
  are left out so test images of other sources never appear in training. The
  manifest notes how many entries were listed and how many files were removed.
- Images are stored as they are (original JPEG bytes) in file-name order.
- ``--validation VAL_DIR`` (with ``--validation-labels FILE`` and ``--devkit-meta FILE``
  for the flat download; ``ilsvrc_validation`` reads every layout) packs the official
  validation images as the store's held-out ``validation`` partition: after every
  train record, per class in class order, each class's files in name order. No class
  range holds them, so Meta-Dataset's episodes, batches and the train fingerprint are
  those of the same train input packed alone; ImageNet-CoG's IN-1K tests on them.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from sampler_server.errors import InputFormatError, InvalidArgument
from sampler_server.pack.plan import ClassPlan, ConverterOptions, SourceItem, SourcePlan
from sampler_server.pack.sources.common import (
    ClassEntry,
    PlanBuilder,
    file_items,
    list_images,
    reject_unused,
    require_dir,
    require_file,
)
from sampler_server.pack.sources.ilsvrc_validation import check_classes, find_validation

SOURCE = "ilsvrc_2012"
DESCRIPTION = ("ILSVRC-2012 train: ILSVRC2012_img_train/<wnid>/*.JPEG (per-class tars extracted); "
               "--validation VAL_DIR: the official validation images")
ACCEPTS = ("duplicates", "validation", "validation_labels", "devkit_meta")

SPLIT_RULE = "wordnet-hierarchy"
HIERARCHY = "wordnet-3.0"
_WNID = re.compile(r"n[0-9]{8}")
_DUPLICATE_ENTRY = re.compile(r"(n[0-9]{8})/([^/\s]+)")

DuplicateKey = tuple[str, str]  # (wnid folder, file name)


def parse_duplicates(path: Path) -> set[DuplicateKey]:
    """Entries of one Meta-Dataset duplicates list as (wnid, file name) pairs."""
    require_file(Path(path), "duplicates list")
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise InputFormatError(path, f"cannot read the duplicates list ({error})") from None
    entries: set[DuplicateKey] = set()
    for number, line in enumerate(lines, start=1):
        entry = line.split("#", 1)[0].strip()
        if not entry:
            continue
        match = _DUPLICATE_ENTRY.fullmatch(entry)
        if match is None:
            raise InputFormatError(
                path, f"line {number}: expected 'n<8 digits>/<file name>  # comment', got {entry!r}"
            )
        entries.add((match.group(1), match.group(2)))
    return entries


def _class_dirs(root: Path) -> list[Path]:
    dirs = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    for directory in dirs:
        if _WNID.fullmatch(directory.name) is None:
            raise InputFormatError(directory, "folder name is not a WordNet id (expected 'n' followed by 8 digits)")
    tars = sorted(p for p in root.iterdir() if p.is_file() and p.suffix == ".tar" and _WNID.fullmatch(p.stem))
    unextracted = [p.name for p in tars if not (root / p.stem).is_dir()]
    if unextracted:
        shown = ", ".join(unextracted[:5]) + (f" and {len(unextracted) - 5} more" if len(unextracted) > 5 else "")
        raise InputFormatError(
            root,
            f"holds per-class archives that are not extracted ({shown}); extract each n????????.tar into a "
            "folder of the same name (Meta-Dataset doc/dataset_conversion.md, ilsvrc_2012 step 3)",
        )
    if not dirs:
        raise InputFormatError(root, "holds no class folders (expected one folder per wnid, e.g. n01440764/)")
    return dirs


def _class_items(root: Path, class_dir: Path, skip: frozenset[str]) -> list[SourceItem]:
    return file_items(root, [p for p in list_images(class_dir) if p.name not in skip])


def _skip_sets(duplicates: set[DuplicateKey]) -> dict[str, frozenset[str]]:
    by_wnid: dict[str, set[str]] = {}
    for wnid, name in duplicates:
        by_wnid.setdefault(wnid, set()).add(name)
    return {wnid: frozenset(names) for wnid, names in by_wnid.items()}


def plan(input_dir: Path, options: ConverterOptions) -> SourcePlan:
    reject_unused(SOURCE, options, ACCEPTS)
    root = require_dir(Path(input_dir), "input")
    duplicates: set[DuplicateKey] = set()
    for path in options.duplicates:
        duplicates |= parse_duplicates(path)
    class_dirs = _class_dirs(root)
    skip = _skip_sets(duplicates)
    builder = PlanBuilder(SOURCE)
    for class_dir in class_dirs:
        wnid = class_dir.name
        skipped = skip.get(wnid, frozenset())
        builder.add(ClassEntry(wnid, lambda d=class_dir, s=skipped: _class_items(root, d, s), wnid=wnid))
    removed = sum(1 for wnid, name in duplicates if (root / wnid / name).is_file())
    notes = {
        "duplicates_files": [Path(p).name for p in options.duplicates],
        "duplicates_listed": len(duplicates),
        "duplicates_removed": removed,
    }
    plan = builder.build(options, hierarchy=HIERARCHY, notes=notes, structural_rule=SPLIT_RULE)
    if options.validation is None:
        if options.validation_labels is not None or options.devkit_meta is not None:
            raise InvalidArgument("--validation-labels and --devkit-meta describe the images of --validation VAL_DIR; "
                                  "pass it too")
        return plan
    return with_validation(plan, Path(options.validation), options)


def with_validation(plan: SourcePlan, val_dir: Path, options: ConverterOptions) -> SourcePlan:
    """``plan`` with the official validation images of ``val_dir`` as its held-out partition."""
    images = find_validation(val_dir, options.validation_labels, options.devkit_meta)
    check_classes(images, [str(c.wnid) for c in plan.classes], val_dir)
    validation = tuple(
        ClassPlan(name=c.name, wnid=c.wnid, items=lambda files=images.by_wnid[str(c.wnid)]: _validation_items(files))
        for c in plan.classes
    )
    return dataclasses.replace(plan, validation=validation, validation_labels=images.labels)


def _validation_items(files: tuple[Path, ...]) -> list[SourceItem]:
    """Known by file name alone, so every layout of the same images is the same content."""
    return [SourceItem(origin=path.name, path=path) for path in files]
