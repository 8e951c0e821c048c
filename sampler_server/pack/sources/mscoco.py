"""MS-COCO 2017 train as Meta-Dataset uses it: one record per object, cropped around its box.

Original layout (``train2017.zip`` and ``annotations_trainval2017.zip`` unpacked into
one ``mscoco/`` directory)::

    train2017/<12-digit image id>.jpg
    annotations/instances_train2017.json
        'images'      [{'id', 'file_name', 'width', 'height', ...}]
        'annotations' [{'id', 'image_id', 'category_id', 'bbox': [x, y, width, height], ...}]
        'categories'  [{'id', 'name', 'supercategory'}]

(``instances_train2017.json`` directly in the root, where the MD reference looks for it,
is accepted too.)

What the converter applies, and why (facts checked against the MD reference converter):

- Every object annotation is one record of its category, crowd annotations included
  (MD's dataset spec counts 860,001 records for train2017); class name = category name
  (``'stop sign'``).
- The crop is the COCO box ([x, y, width, height], floats) scaled by 1.2 about its
  centre, then turned into an integer PIL box the way the reference does: with the scaled box
  (x, y, w, h), left = max(round(x - 0.5), 0), upper = max(round(y - 0.5), 0),
  right = min(round(x + w - 0.5) + 1, width), lower = min(round(y + h - 0.5) + 1, height),
  with Python 3's ``round`` (halves to even), the float operations in the reference's
  order. The image size is the one its 'images' entry gives, so no file is opened here.
  Crops are stored as the reference writes them, RGB JPEG at quality 75
  (``--lossless-derived``: PNG).
- A box of zero width or height still yields a crop one pixel wide or high (the
  reference keeps those). A crop that is empty after clipping (a box wholly outside its
  image) makes the reference skip the annotation; we skip it too and count it in the
  manifest's pack options as ``annotations_skipped_empty_crop``.
- Record metadata: ``bbox`` (the original COCO box), ``category_id``, ``annotation_id``,
  ``image_id``; origin ``train2017/<file>#ann=<annotation id>``.
- Splits: ``--class-splits`` (MD's ``mscoco_splits.json``) or the default rule
  ``half-valid-half-test``: MD has no MSCOCO training classes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
)

SOURCE = "mscoco"
DESCRIPTION = "MS-COCO 2017 train (mscoco/ with train2017/, annotations/): one crop per object, 80 classes"
ACCEPTS = ("class_splits",)

BOX_SCALE = 1.2
IMAGE_DIR = "train2017"
ANNOTATION_NAME = "instances_train2017.json"

Box = tuple[int, int, int, int]


@dataclass(frozen=True, slots=True)
class ImageInfo:
    file_name: str
    width: int
    height: int


@dataclass(frozen=True, slots=True)
class ObjectCrop:
    """One future record, kept compact until its class is written."""

    file_name: str
    annotation_id: int
    image_id: int
    category_id: int
    bbox: tuple[float, float, float, float]
    crop: Box


def md_crop_box(
    bbox: tuple[float, float, float, float], width: int, height: int, scale: float = BOX_SCALE
) -> Box | None:
    """The PIL crop box MD cuts for a COCO box, or None when it is empty after clipping."""
    x, y, box_w, box_h = bbox
    grow = scale - 1.0
    x = x - 0.5 * box_w * grow
    y = y - 0.5 * box_h * grow
    box_w = box_w * scale
    box_h = box_h * scale
    left = max(int(round(x - 0.5)), 0)
    upper = max(int(round(y - 0.5)), 0)
    right = min(int(round(x + box_w - 0.5)) + 1, width)
    lower = min(int(round(y + box_h - 0.5)) + 1, height)
    if right <= left or lower <= upper:
        return None
    return left, upper, right, lower


def find_annotation_file(root: Path) -> Path:
    candidates = (root / "annotations" / ANNOTATION_NAME, root / ANNOTATION_NAME)
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise InputFormatError(candidates[0], f"missing annotation file (also looked for {candidates[1]})")


def load_json(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            data = json.load(handle)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InputFormatError(path, f"not valid JSON ({error})") from None
    if not isinstance(data, dict):
        raise InputFormatError(path, "expected a JSON object with 'images', 'annotations' and 'categories'")
    for key in ("images", "annotations", "categories"):
        if not isinstance(data.get(key), list):
            raise InputFormatError(path, f"'{key}' is missing or not a list")
    return data


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def read_categories(path: Path, entries: list[Any]) -> dict[int, str]:
    """Category id -> name."""
    categories: dict[int, str] = {}
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or not _is_int(entry.get("id")) or not isinstance(entry.get("name"), str):
            raise InputFormatError(path, f"categories[{index}]: expected an object with integer 'id' and string 'name'")
        if entry["id"] in categories:
            raise InputFormatError(path, f"categories[{index}]: category id {entry['id']} is listed twice")
        categories[entry["id"]] = entry["name"]
    if not categories:
        raise InputFormatError(path, "no categories listed")
    return categories


def read_images(path: Path, entries: list[Any]) -> dict[int, ImageInfo]:
    """Image id -> file name and size."""
    images: dict[int, ImageInfo] = {}
    for index, entry in enumerate(entries):
        valid = (
            isinstance(entry, dict)
            and _is_int(entry.get("id"))
            and isinstance(entry.get("file_name"), str)
            and _is_int(entry.get("width"))
            and _is_int(entry.get("height"))
            and entry["width"] > 0
            and entry["height"] > 0
        )
        if not valid:
            raise InputFormatError(
                path,
                f"images[{index}]: expected an object with integer 'id', string 'file_name' "
                f"and positive integer 'width' and 'height'",
            )
        file_name = entry["file_name"]
        if not file_name or "/" in file_name or file_name.startswith("."):
            raise InputFormatError(path, f"images[{index}]: file_name {file_name!r} is not a plain file name")
        if entry["id"] in images:
            raise InputFormatError(path, f"images[{index}]: image id {entry['id']} is listed twice")
        images[entry["id"]] = ImageInfo(file_name, entry["width"], entry["height"])
    return images


def _parse_annotation(path: Path, index: int, entry: Any) -> tuple[int, int, int, tuple[float, float, float, float]]:
    """(annotation id, image id, category id, bbox) of one annotation, checked."""
    valid = (
        isinstance(entry, dict)
        and _is_int(entry.get("id"))
        and _is_int(entry.get("image_id"))
        and _is_int(entry.get("category_id"))
        and isinstance(entry.get("bbox"), list)
        and len(entry["bbox"]) == 4
        and all(_is_number(v) for v in entry["bbox"])
    )
    if not valid:
        raise InputFormatError(
            path,
            f"annotations[{index}]: expected an object with integer 'id', 'image_id', 'category_id' "
            f"and 'bbox' = [x, y, width, height]",
        )
    x, y, box_w, box_h = (float(v) for v in entry["bbox"])
    if box_w < 0 or box_h < 0:
        raise InputFormatError(path, f"annotations[{index}]: bbox {entry['bbox']} has a negative size")
    return entry["id"], entry["image_id"], entry["category_id"], (x, y, box_w, box_h)


def read_objects(
    path: Path, entries: list[Any], images: dict[int, ImageInfo], categories: dict[int, str]
) -> tuple[dict[int, list[ObjectCrop]], int]:
    """Category id -> its object crops, and how many annotations were skipped as empty crops."""
    objects: dict[int, list[ObjectCrop]] = {category_id: [] for category_id in categories}
    seen: set[int] = set()
    skipped = 0
    for index, entry in enumerate(entries):
        annotation_id, image_id, category_id, bbox = _parse_annotation(path, index, entry)
        if annotation_id in seen:
            raise InputFormatError(path, f"annotations[{index}]: annotation id {annotation_id} is listed twice")
        seen.add(annotation_id)
        if image_id not in images:
            raise InputFormatError(path, f"annotations[{index}]: unknown image id {image_id}")
        if category_id not in categories:
            raise InputFormatError(path, f"annotations[{index}]: unknown category id {category_id}")
        image = images[image_id]
        crop = md_crop_box(bbox, image.width, image.height)
        if crop is None:
            skipped += 1
            continue
        objects[category_id].append(ObjectCrop(image.file_name, annotation_id, image_id, category_id, bbox, crop))
    return objects, skipped


def _class_items(root: Path, crops: list[ObjectCrop]) -> Iterator[SourceItem]:
    """Items by file, then annotation id; made one at a time (a class may hold 262k objects)."""
    for crop in sorted(crops, key=lambda c: (c.file_name, c.annotation_id)):
        yield SourceItem(
            origin=f"{IMAGE_DIR}/{crop.file_name}#ann={crop.annotation_id}",
            path=root / IMAGE_DIR / crop.file_name,
            derivation=Derivation(crop=crop.crop),
            metadata={
                "bbox": list(crop.bbox),
                "category_id": crop.category_id,
                "annotation_id": crop.annotation_id,
                "image_id": crop.image_id,
            },
        )


def plan(input_dir: Path, options: ConverterOptions) -> SourcePlan:
    reject_unused(SOURCE, options, ACCEPTS)
    root = require_dir(Path(input_dir), "input")
    require_dir(root / IMAGE_DIR, "image")
    annotation_path = find_annotation_file(root)
    data = load_json(annotation_path)
    categories = read_categories(annotation_path, data["categories"])
    images = read_images(annotation_path, data["images"])
    objects, skipped = read_objects(annotation_path, data["annotations"], images, categories)
    del data
    builder = PlanBuilder(SOURCE)
    for category_id, name in sorted(categories.items(), key=lambda item: item[1]):
        crops = objects[category_id]
        builder.add(ClassEntry(name, lambda crops=crops: _class_items(root, crops)))
    return builder.build(
        options,
        default_rule="half-valid-half-test",
        notes={"annotations_skipped_empty_crop": skipped},
    )
