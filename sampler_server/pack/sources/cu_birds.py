"""CUB-200-2011 (Caltech-UCSD Birds) as Meta-Dataset uses it: 200 species, full images.

Original layout (``CUB_200_2011.tgz`` unpacks to ``CUB_200_2011/``)::

    images/<NNN.Name>/<file>.jpg     e.g. images/001.Black_footed_Albatross/Black_Footed_Albatross_0046_18.jpg
    classes.txt                      '<class id> <NNN.Name>'
    images.txt                       '<image id> <NNN.Name>/<file>.jpg'
    image_class_labels.txt           '<image id> <class id>'
    bounding_boxes.txt               '<image id> <x> <y> <width> <height>' (floats, pixels)
    train_test_split.txt, parts/, attributes/   (not read)

What the converter applies, and why:

- Classes are the folder names of ``classes.txt`` (``'001.Black_footed_Albatross'``),
  the names MD's split file uses. Images come from ``images.txt`` with their label from
  ``image_class_labels.txt``; a label that disagrees with the image's folder is an error.
- MD uses the full images, not the bird boxes ("a harder challenge"), so files are
  stored as they are (byte for byte). The box of ``bounding_boxes.txt``, when that file
  is there, travels as label-side metadata ``bbox`` = [x, y, width, height].
- Splits: ``--class-splits`` (MD's ``cu_birds_splits.json``) or the default 70/15/15 rule.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from sampler_server.errors import InputFormatError
from sampler_server.pack.plan import ConverterOptions, SourceItem, SourcePlan
from sampler_server.pack.sources.common import (
    ClassEntry,
    PlanBuilder,
    reject_unused,
    require_dir,
    require_file,
)

SOURCE = "cu_birds"
DESCRIPTION = "CUB-200-2011 birds (CUB_200_2011/): 200 species, full images"
ACCEPTS = ("class_splits",)


def _fields(path: Path, count: int, layout: str) -> Iterable[tuple[int, list[str]]]:
    """(line number, the ``count`` whitespace-separated fields) of each non-blank line."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise InputFormatError(path, f"not UTF-8 text ({error})") from None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != count:
            raise InputFormatError(path, f"line {number}: expected '{layout}', got {line.strip()!r}")
        yield number, parts


def _integer(path: Path, number: int, value: str, what: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise InputFormatError(path, f"line {number}: {what} must be an integer, got {value!r}") from None


def read_classes(path: Path) -> dict[int, str]:
    """Class id -> folder name."""
    classes: dict[int, str] = {}
    for number, (class_id, name) in _fields(require_file(path, "class list"), 2, "<class id> <NNN.Name>"):
        key = _integer(path, number, class_id, "class id")
        if key in classes:
            raise InputFormatError(path, f"line {number}: class id {key} is listed twice")
        if name in classes.values():
            raise InputFormatError(path, f"line {number}: class {name!r} is listed twice")
        classes[key] = name
    if not classes:
        raise InputFormatError(path, "no classes listed")
    return classes


def read_images(path: Path) -> dict[int, str]:
    """Image id -> path relative to ``images/``."""
    images: dict[int, str] = {}
    lines = _fields(require_file(path, "image list"), 2, "<image id> <class folder>/<file>")
    for number, (image_id, relative) in lines:
        key = _integer(path, number, image_id, "image id")
        if key in images:
            raise InputFormatError(path, f"line {number}: image id {key} is listed twice")
        if relative.startswith("/") or ".." in relative.split("/") or relative.count("/") != 1:
            raise InputFormatError(path, f"line {number}: expected '<class folder>/<file>', got {relative!r}")
        images[key] = relative
    return images


def read_labels(path: Path, images: dict[int, str], classes: dict[int, str]) -> dict[int, str]:
    """Image id -> class name; every listed image needs exactly one known label."""
    labels: dict[int, str] = {}
    for number, (image_id, class_id) in _fields(require_file(path, "image-label list"), 2, "<image id> <class id>"):
        image_key = _integer(path, number, image_id, "image id")
        class_key = _integer(path, number, class_id, "class id")
        if image_key not in images:
            raise InputFormatError(path, f"line {number}: image id {image_key} is not in images.txt")
        if class_key not in classes:
            raise InputFormatError(path, f"line {number}: class id {class_key} is not in classes.txt")
        if image_key in labels:
            raise InputFormatError(path, f"line {number}: image id {image_key} is labelled twice")
        folder = images[image_key].split("/", 1)[0]
        if folder != classes[class_key]:
            raise InputFormatError(
                path, f"line {number}: image {images[image_key]!r} is labelled {classes[class_key]!r}"
            )
        labels[image_key] = classes[class_key]
    unlabelled = sorted(set(images) - set(labels))
    if unlabelled:
        more = " ..." if len(unlabelled) > 5 else ""
        raise InputFormatError(path, f"no label for image id(s) {unlabelled[:5]}{more}")
    return labels


def read_boxes(path: Path, images: dict[int, str]) -> dict[int, list[float]]:
    """Image id -> [x, y, width, height]; every listed image needs a box."""
    boxes: dict[int, list[float]] = {}
    for number, parts in _fields(path, 5, "<image id> <x> <y> <width> <height>"):
        key = _integer(path, number, parts[0], "image id")
        try:
            box = [float(value) for value in parts[1:]]
        except ValueError:
            raise InputFormatError(path, f"line {number}: box values must be numbers, got {parts[1:]}") from None
        if key in boxes:
            raise InputFormatError(path, f"line {number}: image id {key} has two boxes")
        boxes[key] = box
    missing = sorted(set(images) - set(boxes))
    if missing:
        more = " ..." if len(missing) > 5 else ""
        raise InputFormatError(path, f"no box for image id(s) {missing[:5]}{more}")
    return boxes


def _class_items(root: Path, entries: list[tuple[str, list[float] | None]]) -> list[SourceItem]:
    items = []
    for relative, box in sorted(entries, key=lambda entry: entry[0]):
        path = root / "images" / relative
        metadata = {"bbox": box} if box is not None else {}
        items.append(SourceItem(origin=f"images/{relative}", path=path, metadata=metadata))
    return items


def plan(input_dir: Path, options: ConverterOptions) -> SourcePlan:
    reject_unused(SOURCE, options, ACCEPTS)
    root = require_dir(Path(input_dir), "input")
    require_dir(root / "images", "images")
    classes = read_classes(root / "classes.txt")
    images = read_images(root / "images.txt")
    labels = read_labels(root / "image_class_labels.txt", images, classes)
    box_path = root / "bounding_boxes.txt"
    boxes = read_boxes(box_path, images) if box_path.is_file() else {}
    members: dict[str, list[tuple[str, list[float] | None]]] = {name: [] for name in classes.values()}
    for image_id, class_name in labels.items():
        members[class_name].append((images[image_id], boxes.get(image_id)))
    builder = PlanBuilder(SOURCE)
    for class_name in sorted(members):
        entries = members[class_name]
        builder.add(ClassEntry(class_name, lambda entries=entries: _class_items(root, entries)))
    return builder.build(options)
