"""FGVCx Fungi 2018 as Meta-Dataset uses it: 1394 species, train and val merged, full images.

Original layout (``fungi_train_val.tgz`` and ``train_val_annotations.tgz`` unpacked into
one ``fungi/`` directory)::

    images/<category folder>/<file>.JPG
    train.json    COCO-style: 'images' [{'id', 'file_name': 'images/<folder>/<file>.JPG', ...}],
    val.json                  'annotations' [{'id', 'image_id', 'category_id'}],
                              'categories' [{'id', 'name', ...}] (the same list in both files)

What the converter applies, and why:

- The competition's train and val images are merged (its test set has no labels); MD
  splits by class instead.
- Class name ``'%04d.%s' % (category id, category name)``, as in MD's split file
  (``'0226.Cortinarius malicorius'``): some categories share a name, the id keeps them apart.
- Every image has exactly one annotation; an image without one, annotated twice, listed
  in both files, or pointing to an unknown category is an input error (the reference
  asserts the same). The two files must list the same categories.
- Files are stored as they are (byte for byte).
- Splits: ``--class-splits`` (MD's ``fungi_splits.json``) or the default 70/15/15 rule.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sampler_server.errors import InputFormatError
from sampler_server.pack.plan import ConverterOptions, SourceItem, SourcePlan
from sampler_server.pack.sources.common import (
    ClassEntry,
    PlanBuilder,
    reject_unused,
    require_dir,
    require_file,
)

SOURCE = "fungi"
DESCRIPTION = "FGVCx Fungi 2018 (fungi/ with images/, train.json, val.json): 1394 species, full images"
ACCEPTS = ("class_splits",)

ANNOTATION_FILES = ("train.json", "val.json")


def class_name(category_id: int, name: str) -> str:
    return "%04d.%s" % (category_id, name)


def load_json(path: Path) -> dict[str, Any]:
    require_file(path, "annotation file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
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


def read_categories(path: Path, data: dict[str, Any]) -> dict[int, str]:
    """Category id -> name."""
    categories: dict[int, str] = {}
    for index, entry in enumerate(data["categories"]):
        if not isinstance(entry, dict) or not _is_int(entry.get("id")) or not isinstance(entry.get("name"), str):
            raise InputFormatError(path, f"categories[{index}]: expected an object with integer 'id' and string 'name'")
        if entry["id"] in categories:
            raise InputFormatError(path, f"categories[{index}]: category id {entry['id']} is listed twice")
        categories[entry["id"]] = entry["name"]
    if not categories:
        raise InputFormatError(path, "no categories listed")
    return categories


def read_images(path: Path, data: dict[str, Any], images: dict[int, str], listed_in: dict[int, Path]) -> None:
    """Add image id -> file name (relative to the root) to ``images``, and where it is listed."""
    for index, entry in enumerate(data["images"]):
        if not isinstance(entry, dict) or not _is_int(entry.get("id")) or not isinstance(entry.get("file_name"), str):
            raise InputFormatError(
                path, f"images[{index}]: expected an object with integer 'id' and string 'file_name'"
            )
        file_name = entry["file_name"]
        if not file_name or file_name.startswith("/") or ".." in file_name.split("/"):
            raise InputFormatError(path, f"images[{index}]: file_name {file_name!r} is not a relative path")
        if entry["id"] in images:
            raise InputFormatError(path, f"images[{index}]: image id {entry['id']} is listed twice")
        images[entry["id"]] = file_name
        listed_in[entry["id"]] = path


def read_annotations(
    path: Path, data: dict[str, Any], images: dict[int, str], categories: dict[int, str], labels: dict[int, int]
) -> None:
    """Add image id -> category id to ``labels``."""
    for index, entry in enumerate(data["annotations"]):
        if not isinstance(entry, dict) or not _is_int(entry.get("image_id")) or not _is_int(entry.get("category_id")):
            raise InputFormatError(
                path, f"annotations[{index}]: expected an object with integer 'image_id' and 'category_id'"
            )
        image_id, category_id = entry["image_id"], entry["category_id"]
        if image_id not in images:
            raise InputFormatError(path, f"annotations[{index}]: unknown image id {image_id}")
        if category_id not in categories:
            raise InputFormatError(path, f"annotations[{index}]: unknown category id {category_id}")
        if image_id in labels:
            raise InputFormatError(path, f"annotations[{index}]: image id {image_id} is annotated twice")
        labels[image_id] = category_id


def _class_items(root: Path, file_names: list[str]) -> list[SourceItem]:
    return [SourceItem(origin=name, path=root / name) for name in sorted(file_names)]


def plan(input_dir: Path, options: ConverterOptions) -> SourcePlan:
    reject_unused(SOURCE, options, ACCEPTS)
    root = require_dir(Path(input_dir), "input")
    require_dir(root / "images", "images")
    paths = [root / name for name in ANNOTATION_FILES]
    documents = [load_json(path) for path in paths]
    categories = read_categories(paths[0], documents[0])
    for path, data in zip(paths[1:], documents[1:]):
        if read_categories(path, data) != categories:
            raise InputFormatError(path, f"its categories differ from those of {paths[0].name}")
    images: dict[int, str] = {}
    listed_in: dict[int, Path] = {}
    labels: dict[int, int] = {}
    for path, data in zip(paths, documents):
        read_images(path, data, images, listed_in)
    for path, data in zip(paths, documents):
        read_annotations(path, data, images, categories, labels)
    unlabelled = sorted(set(images) - set(labels))
    if unlabelled:
        shown = ", ".join(str(i) for i in unlabelled[:5]) + (" ..." if len(unlabelled) > 5 else "")
        raise InputFormatError(listed_in[unlabelled[0]], f"no annotation for image id(s) {shown}")
    members: dict[int, list[str]] = {category_id: [] for category_id in categories}
    for image_id, category_id in labels.items():
        members[category_id].append(images[image_id])
    builder = PlanBuilder(SOURCE)
    for category_id in sorted(categories):
        files = members[category_id]
        name = class_name(category_id, categories[category_id])
        builder.add(ClassEntry(name, lambda files=files: _class_items(root, files)))
    return builder.build(options)
