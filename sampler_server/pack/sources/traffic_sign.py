"""German Traffic Sign Recognition Benchmark (GTSRB) converter, Final_Training set.

Original layout (``GTSRB_Final_Training_Images.zip`` extracted)::

    GTSRB/Final_Training/Images/00000/00000_00000.ppm ...   (track_image.ppm)
    GTSRB/Final_Training/Images/00000/GT-00000.csv
    ...
    GTSRB/Final_Training/Images/00042/...

``GT-<class>.csv`` is semicolon-separated with the header
``Filename;Width;Height;Roi.X1;Roi.Y1;Roi.X2;Roi.Y2;ClassId``, one row per image.
``--input`` may be ``GTSRB/`` or ``GTSRB/Final_Training/Images``; origins are always
relative to ``GTSRB/``, so both give the same store.

What the converter applies, and why:
- One class per class folder, named ``'%02d.%s' % (class id, label name)`` as in
  Meta-Dataset's split file (``00.Speed limit (20km/h)``). Label names come from
  ``--labels FILE`` (``#`` comment lines, then one name per line in class-id
  order), else from ``--class-splits`` entries matched by their numeric prefix,
  else the name is just ``'%02d'``.
- Whole images, not cropped to the region of interest (Meta-Dataset does not crop).
  The reference re-encodes every non-JPEG file as RGB JPEG at quality 75, so the
  PPMs are stored that way; ``--lossless-derived`` keeps the PPM bytes. The ROI from the CSV goes into each record's metadata
  (``roi`` = [x1, y1, x2, y2]) for anyone who wants it.
- All classes are test by default (Traffic Signs is evaluation-only in MD).
- The CSV is read when planning: a missing or malformed one, a row naming an
  absent image, or an image without a row is an input error.
- Images come in tracks of the same physical sign, so the reference shuffles each
  class once with a fixed seed. Here: the class's files sorted by name, then
  permuted by ``numpy.random.RandomState(s).permutation(n)`` (legacy RandomState,
  frozen across NumPy releases) with ``s`` = the first 4 bytes, big-endian, of
  ``sha256(b'traffic_sign/<class id>')``, class id in decimal without padding.

This module also holds the label-name helpers VGG Flower shares.
"""

from __future__ import annotations

import csv
import hashlib
import re
from pathlib import Path

import numpy as np

from sampler_server.errors import InputFormatError
from sampler_server.pack.plan import ConverterOptions, SourceItem, SourcePlan
from sampler_server.pack.sources.common import (
    ClassEntry,
    PlanBuilder,
    list_images,
    reject_unused,
    require_dir,
    require_file,
)
from sampler_server.pack.sources.labels import class_namer

SOURCE = "traffic_sign"
DESCRIPTION = "GTSRB Final_Training: GTSRB/Final_Training/Images/<class>/*.ppm + GT-<class>.csv"
ACCEPTS = ("class_splits", "labels")

IMAGES_SUBDIR = Path("Final_Training") / "Images"
CSV_HEADER = ("Filename", "Width", "Height", "Roi.X1", "Roi.Y1", "Roi.X2", "Roi.Y2", "ClassId")
_CLASS_DIR = re.compile(r"[0-9]{5}")


# ---- GTSRB layout ---------------------------------------------------------------


Roi = tuple[int, int, int, int]  # Roi.X1, Roi.Y1, Roi.X2, Roi.Y2 as GTSRB gives them


def images_dir(input_dir: Path) -> tuple[Path, Path]:
    """(GTSRB root that origins are relative to, the Images folder)."""
    root = require_dir(Path(input_dir), "input")
    if (root / IMAGES_SUBDIR).is_dir():
        return root, root / IMAGES_SUBDIR
    if root.name == "Images" and root.parent.name == "Final_Training":
        return root.parent.parent, root
    raise InputFormatError(root / IMAGES_SUBDIR, "missing Final_Training/Images directory (pass GTSRB/ as --input)")


def _class_dirs(images: Path) -> list[Path]:
    dirs = sorted(p for p in images.iterdir() if p.is_dir() and not p.name.startswith("."))
    for directory in dirs:
        if _CLASS_DIR.fullmatch(directory.name) is None:
            raise InputFormatError(directory, "class folder name is not a 5-digit class id (e.g. 00000)")
    if not dirs:
        raise InputFormatError(images, "holds no class folders (expected 00000/ ... 00042/)")
    return dirs


def _int_fields(csv_path: Path, line: int, values: list[str]) -> list[int]:
    try:
        numbers = [int(v) for v in values]
    except ValueError:
        raise InputFormatError(csv_path, f"line {line}: expected integers after Filename, got {values}") from None
    if any(n < 0 for n in numbers):
        raise InputFormatError(csv_path, f"line {line}: negative value in {values}")
    return numbers


def read_annotations(csv_path: Path, class_id: int) -> dict[str, Roi]:
    """File name -> its region of interest, from one ``GT-<class>.csv`` (checked row by row)."""
    require_file(csv_path, f"annotation file GT-{class_id:05d}.csv")
    try:
        with csv_path.open(newline="", encoding="utf-8-sig") as handle:
            rows = list(csv.reader(handle, delimiter=";"))
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise InputFormatError(csv_path, f"cannot read the annotation CSV ({error})") from None
    if not rows or tuple(field.strip() for field in rows[0]) != CSV_HEADER:
        raise InputFormatError(csv_path, f"expected the header {';'.join(CSV_HEADER)}")
    out: dict[str, Roi] = {}
    for line, fields in enumerate(rows[1:], start=2):
        if not fields:
            continue
        if len(fields) != len(CSV_HEADER):
            raise InputFormatError(csv_path, f"line {line}: expected {len(CSV_HEADER)} fields, got {len(fields)}")
        _width, _height, x1, y1, x2, y2, label = _int_fields(csv_path, line, fields[1:])
        if label != class_id:
            raise InputFormatError(csv_path, f"line {line}: ClassId {label} in the folder of class {class_id}")
        if fields[0] in out:
            raise InputFormatError(csv_path, f"line {line}: {fields[0]!r} is listed twice")
        out[fields[0]] = (x1, y1, x2, y2)
    return out


def shuffle_seed(class_id: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{SOURCE}/{class_id}".encode()).digest()[:4], "big")


def shuffled(files: list[Path], class_id: int) -> list[Path]:
    """The documented fixed permutation of a class's files (sorted by name first)."""
    ordered = sorted(files, key=lambda p: p.name)
    order = np.random.RandomState(shuffle_seed(class_id)).permutation(len(ordered))
    return [ordered[int(i)] for i in order]


def _class_items(root: Path, class_dir: Path, class_id: int) -> list[SourceItem]:
    csv_path = class_dir / f"GT-{class_id:05d}.csv"
    rows = read_annotations(csv_path, class_id)
    files = list_images(class_dir, (".ppm",))
    unlisted = [p.name for p in files if p.name not in rows]
    if unlisted:
        raise InputFormatError(csv_path, f"has no row for {len(unlisted)} image(s), e.g. {unlisted[0]!r}")
    missing = sorted(set(rows) - {p.name for p in files})
    if missing:
        raise InputFormatError(csv_path, f"lists {len(missing)} missing image(s), e.g. {missing[0]!r}")
    return [
        SourceItem(origin=path.relative_to(root).as_posix(), path=path, metadata={"roi": list(rows[path.name])})
        for path in shuffled(files, class_id)
    ]


def plan(input_dir: Path, options: ConverterOptions) -> SourcePlan:
    reject_unused(SOURCE, options, ACCEPTS)
    root, images = images_dir(Path(input_dir))
    namer = class_namer(options, width=2, first_label=0)
    builder = PlanBuilder(SOURCE)
    for class_dir in _class_dirs(images):
        class_id = int(class_dir.name)
        items = _class_items(root, class_dir, class_id)  # annotations are checked now, not mid-pack
        builder.add(ClassEntry(namer(class_id), lambda listed=items: listed))
    return builder.build(options, default_rule="all-test")
