"""FGVC-Aircraft 2013b as Meta-Dataset uses it: 100 variants, each image cropped to its box.

Original layout (``fgvc-aircraft-2013b.tar.gz`` unpacks to ``fgvc-aircraft-2013b/``)::

    data/images/<7-digit id>.jpg       photos with a 20-pixel copyright banner at the bottom
    data/variants.txt                  the 100 variant names, one a line
    data/images_variant_train.txt      '<image id> <variant name>' (names hold spaces and '/')
    data/images_variant_val.txt
    data/images_variant_test.txt       (``images_variant_trainval.txt`` = train + val; not read)
    data/images_box.txt                '<image id> <xmin> <ymin> <xmax> <ymax>'

What the converter applies, and why:

- Classes are the variants of ``variants.txt`` (MD's class names, e.g. ``'A340-300'``,
  ``'F/A-18'``: a class name is a label, never a path). The dataset's image-level
  train/val/test partition is merged, because MD splits by class.
- Every image is cropped to its bounding box, as MD does: the box keeps the labelled
  aircraft only and drops the copyright banner. The dataset's README states the box in
  1-based inclusive pixel coordinates (the top-left pixel is (1, 1)); the MD reference
  converter hands the four integers unchanged to ``PIL.Image.crop``, which reads them as
  a 0-based half-open box, so MD's crops lose the box's first column and first row. We
  keep that convention, ``Derivation(crop=(xmin, ymin, xmax, ymax))``, so records match
  MD's pixel for pixel. The file's numbers are kept in the record metadata as ``bbox``.
  Crops are stored as the reference writes them, RGB JPEG at quality 75
  (``--lossless-derived``: PNG).
- Splits: ``--class-splits`` (MD's ``aircraft_splits.json``) or the default 70/15/15 rule.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from sampler_server.errors import InputFormatError
from sampler_server.pack.plan import (
    ConverterOptions,
    Derivation,
    SourceItem,
    SourcePlan,
)
from sampler_server.pack.sources.common import (
    ClassEntry,
    PlanBuilder,
    reject_unused,
    require_dir,
    require_file,
)

SOURCE = "aircraft"
DESCRIPTION = "FGVC-Aircraft 2013b (fgvc-aircraft-2013b/): 100 variants, images cropped to their boxes"
ACCEPTS = ("class_splits",)

VARIANT_FILES = ("images_variant_train.txt", "images_variant_val.txt", "images_variant_test.txt")

Box = tuple[int, int, int, int]


def _lines(path: Path) -> Iterable[tuple[int, str]]:
    """(1-based line number, stripped text) of each non-blank line."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise InputFormatError(path, f"not UTF-8 text ({error})") from None
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped:
            yield number, stripped


def read_variants(path: Path) -> list[str]:
    """The variant names of ``variants.txt``, in file order; duplicates are an error."""
    names: list[str] = []
    seen: set[str] = set()
    for number, name in _lines(require_file(path, "variant list")):
        if name in seen:
            raise InputFormatError(path, f"line {number}: variant {name!r} is listed twice")
        seen.add(name)
        names.append(name)
    if not names:
        raise InputFormatError(path, "no variants listed")
    return names


def read_image_variants(data_dir: Path, variants: set[str]) -> dict[str, str]:
    """Image id -> variant, from the train, val and test variant files together."""
    labels: dict[str, str] = {}
    for file_name in VARIANT_FILES:
        path = require_file(data_dir / file_name, "image-variant list")
        for number, line in _lines(path):
            parts = line.split(maxsplit=1)
            if len(parts) != 2:
                raise InputFormatError(path, f"line {number}: expected '<image id> <variant name>', got {line!r}")
            image_id, variant = parts[0], parts[1].strip()
            if "/" in image_id or image_id.startswith("."):
                raise InputFormatError(path, f"line {number}: {image_id!r} is not an image id")
            if variant not in variants:
                raise InputFormatError(path, f"line {number}: unknown variant {variant!r} (not in variants.txt)")
            if image_id in labels:
                raise InputFormatError(path, f"line {number}: image {image_id} is labelled twice")
            labels[image_id] = variant
    return labels


def parse_box_line(path: Path, number: int, line: str) -> tuple[str, Box]:
    parts = line.split()
    if len(parts) != 5:
        raise InputFormatError(path, f"line {number}: expected '<image id> <xmin> <ymin> <xmax> <ymax>', got {line!r}")
    try:
        xmin, ymin, xmax, ymax = (int(value) for value in parts[1:])
    except ValueError:
        raise InputFormatError(path, f"line {number}: box coordinates must be integers, got {line!r}") from None
    if xmin < 0 or ymin < 0 or xmax <= xmin or ymax <= ymin:
        raise InputFormatError(path, f"line {number}: empty or negative box {xmin} {ymin} {xmax} {ymax}")
    return parts[0], (xmin, ymin, xmax, ymax)


def read_boxes(path: Path) -> dict[str, Box]:
    """Image id -> (xmin, ymin, xmax, ymax) as the file writes them."""
    boxes: dict[str, Box] = {}
    for number, line in _lines(require_file(path, "bounding-box file")):
        image_id, box = parse_box_line(path, number, line)
        if image_id in boxes:
            raise InputFormatError(path, f"line {number}: image {image_id} has two boxes")
        boxes[image_id] = box
    return boxes


def _class_items(root: Path, image_ids: list[str], boxes: dict[str, Box]) -> list[SourceItem]:
    items = []
    for image_id in image_ids:
        path = root / "data" / "images" / f"{image_id}.jpg"
        box = boxes[image_id]
        items.append(
            SourceItem(
                origin=path.relative_to(root).as_posix(),
                path=path,
                derivation=Derivation(crop=box),
                metadata={"bbox": list(box)},
            )
        )
    return sorted(items, key=lambda item: item.origin)


def plan(input_dir: Path, options: ConverterOptions) -> SourcePlan:
    reject_unused(SOURCE, options, ACCEPTS)
    root = require_dir(Path(input_dir), "input")
    data_dir = require_dir(root / "data", "data")
    require_dir(data_dir / "images", "images")
    variants = read_variants(data_dir / "variants.txt")
    labels = read_image_variants(data_dir, set(variants))
    box_path = data_dir / "images_box.txt"
    all_boxes = read_boxes(box_path)
    unboxed = sorted(image_id for image_id in labels if image_id not in all_boxes)
    if unboxed:
        more = " ..." if len(unboxed) > 5 else ""
        raise InputFormatError(box_path, f"no box for image(s) {unboxed[:5]}{more}")
    boxes = {image_id: all_boxes[image_id] for image_id in labels}
    members: dict[str, list[str]] = {variant: [] for variant in variants}
    for image_id, variant in labels.items():
        members[variant].append(image_id)
    builder = PlanBuilder(SOURCE)
    for variant in sorted(variants):
        ids = members[variant]
        builder.add(ClassEntry(variant, lambda ids=ids: _class_items(root, ids, boxes)))
    return builder.build(options)
