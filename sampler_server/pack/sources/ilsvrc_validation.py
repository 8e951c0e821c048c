"""ILSVRC-2012's official validation images and their labels (``pack ilsvrc_2012 --validation``).

The 50,000 validation images (50 per class) come in one of the layouts people have:

- wnid folders (``VAL_DIR/n01440764/ILSVRC2012_val_00000293.JPEG``), as the widely
  used ``valprep.sh`` and torchvision's ``ImageNet`` arrange them: no label file;
- flat (``VAL_DIR/ILSVRC2012_val_00000001.JPEG`` ...), as ``ILSVRC2012_img_val.tar``
  and Kaggle's ``ILSVRC/Data/CLS-LOC/val`` unpack, with ``--validation-labels FILE``:
  - Kaggle's ``LOC_val_solution.csv``: a header ``ImageId,PredictionString``, then one
    row per image whose PredictionString starts with the image's wnid (then boxes:
    ``wnid x_min y_min x_max y_max`` repeated);
  - the devkit's ``ILSVRC2012_validation_ground_truth.txt``: line i holds the
    ILSVRC2012_ID (1..1000) of ``ILSVRC2012_val_<i, 8 digits>``; the ids are mapped to
    wnids by the devkit's ``meta.mat`` (``--devkit-meta FILE``), whose ``synsets``
    struct array has the fields ``ILSVRC2012_ID`` and ``WNID`` (read with SciPy).

Whatever the layout, an image is known by its file name, so the same images packed
from either layout make the same records and the same partition fingerprint. Every
problem is one ``InputFormatError`` naming the file: a label that is not a wnid or a
known id, an image without a label, a label whose image is missing, an image listed
twice, a wnid the train input has no class for.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sampler_server.errors import InputFormatError, InvalidArgument
from sampler_server.pack.sources.common import list_images, require_dir, require_file

LOC_HEADER = ("ImageId", "PredictionString")
_WNID = re.compile(r"n[0-9]{8}")
_SHOWN = 3


@dataclass(frozen=True)
class ValidationImages:
    """The validation images of each wnid (sorted by file name), and where the labels came from."""

    by_wnid: Mapping[str, tuple[Path, ...]]
    labels: str


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:_SHOWN])
    return shown + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")


def _read_lines(path: Path, what: str) -> list[str]:
    require_file(path, what)
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise InputFormatError(path, f"cannot read the {what} ({error})") from None


def parse_loc_solution(path: Path) -> dict[str, str]:
    """Image id (file name without suffix) -> wnid, from Kaggle's ``LOC_val_solution.csv``."""
    lines = _read_lines(path, "validation labels")
    rows = list(csv.reader(lines))
    if not rows or tuple(cell.strip() for cell in rows[0]) != LOC_HEADER:
        raise InputFormatError(path, f"expected the header {','.join(LOC_HEADER)} (LOC_val_solution.csv), "
                               f"got {lines[0][:60]!r}" if lines else "is empty")
    labels: dict[str, str] = {}
    for number, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        if len(row) != 2 or not row[0].strip():
            raise InputFormatError(path, f"line {number}: expected 'ImageId,PredictionString', got {','.join(row)!r}")
        image_id, prediction = row[0].strip(), row[1].split()
        if not prediction or _WNID.fullmatch(prediction[0]) is None:
            shown = prediction[0] if prediction else "nothing"
            raise InputFormatError(path, f"line {number}: PredictionString of {image_id} starts with {shown!r}, "
                                   "expected its wnid ('n' + 8 digits)")
        if image_id in labels:
            raise InputFormatError(path, f"line {number}: {image_id} is listed twice")
        labels[image_id] = prediction[0]
    return labels


def parse_devkit_meta(path: Path) -> dict[int, str]:
    """ILSVRC2012_ID -> wnid of every synset of the devkit's ``meta.mat``."""
    import numpy as np
    import scipy.io

    require_file(path, "devkit meta.mat")
    try:
        synsets = scipy.io.loadmat(str(path), squeeze_me=True).get("synsets")
    except (OSError, ValueError, TypeError, NotImplementedError, scipy.io.matlab.MatReadError) as error:
        raise InputFormatError(path, f"is not a readable MATLAB file (the devkit's data/meta.mat): {error}") from None
    fields = getattr(getattr(synsets, "dtype", None), "names", None) or ()
    if "ILSVRC2012_ID" not in fields or "WNID" not in fields:
        raise InputFormatError(path, "holds no 'synsets' struct array with fields ILSVRC2012_ID and WNID "
                               "(expected the devkit's data/meta.mat)")
    mapping: dict[int, str] = {}
    for raw_id, raw_wnid in zip(np.atleast_1d(synsets["ILSVRC2012_ID"]), np.atleast_1d(synsets["WNID"])):
        try:
            synset_id, wnid = int(np.asarray(raw_id).item()), str(np.asarray(raw_wnid).item())
        except (TypeError, ValueError):
            raise InputFormatError(path, f"synset with ILSVRC2012_ID {raw_id!r} and WNID {raw_wnid!r} is not "
                                   "an integer id and a wnid") from None
        if _WNID.fullmatch(wnid) is None:
            raise InputFormatError(path, f"synset {synset_id} has WNID {wnid!r}, expected 'n' + 8 digits")
        if synset_id in mapping:
            raise InputFormatError(path, f"ILSVRC2012_ID {synset_id} is listed twice")
        mapping[synset_id] = wnid
    return mapping


def parse_ground_truth(path: Path, id_to_wnid: Mapping[int, str], meta: Path) -> dict[str, str]:
    """Image id -> wnid from the devkit's ``ILSVRC2012_validation_ground_truth.txt``
    (line i: the ILSVRC2012_ID of ``ILSVRC2012_val_<i:08d>``)."""
    labels: dict[str, str] = {}
    for number, line in enumerate(_read_lines(path, "validation ground truth"), start=1):
        text = line.strip()
        try:
            synset_id = int(text)
        except ValueError:
            raise InputFormatError(path, f"line {number}: expected an ILSVRC2012_ID (an integer), got {text!r}") from None
        if synset_id not in id_to_wnid:
            raise InputFormatError(path, f"line {number}: ILSVRC2012_ID {synset_id} is not a synset of {meta}")
        labels[f"ILSVRC2012_val_{number:08d}"] = id_to_wnid[synset_id]
    if not labels:
        raise InputFormatError(path, "is empty (expected one ILSVRC2012_ID per validation image)")
    return labels


def _folder_layout(root: Path) -> dict[str, tuple[Path, ...]]:
    folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    loose = list_images(root)
    if loose and not folders:
        raise InputFormatError(root, f"holds images but no wnid folders (e.g. {loose[0].name}); for the flat "
                               "download pass --validation-labels LOC_val_solution.csv or the devkit's "
                               "ILSVRC2012_validation_ground_truth.txt")
    if loose:
        raise InputFormatError(loose[0], "lies beside the wnid folders; every validation image belongs in its "
                               "class's folder")
    if not folders:
        raise InputFormatError(root, "holds no validation images (expected wnid folders, e.g. n01440764/, or the "
                               "flat download with --validation-labels)")
    by_wnid: dict[str, tuple[Path, ...]] = {}
    for folder in folders:
        if _WNID.fullmatch(folder.name) is None:
            raise InputFormatError(folder, "folder name is not a WordNet id (expected 'n' followed by 8 digits)")
        by_wnid[folder.name] = tuple(list_images(folder))
    return by_wnid


def _flat_layout(root: Path, labels: Mapping[str, str], labels_path: Path) -> dict[str, tuple[Path, ...]]:
    files = list_images(root)
    if not files:
        raise InputFormatError(root, "holds no images directly (the flat download with --validation-labels; wnid "
                               "folders need no labels file)")
    by_wnid: dict[str, list[Path]] = {}
    seen: set[str] = set()
    for path in files:
        image_id = path.stem
        if image_id in seen:
            raise InputFormatError(path, f"a second file of image {image_id}")
        seen.add(image_id)
        wnid = labels.get(image_id)
        if wnid is None:
            raise InputFormatError(path, f"has no label in {labels_path} (no row {image_id})")
        by_wnid.setdefault(wnid, []).append(path)
    missing = sorted(set(labels) - seen)
    if missing:
        raise InputFormatError(labels_path, f"labels {len(missing)} images that {root} lacks: {_listed(missing)}")
    return {wnid: tuple(paths) for wnid, paths in sorted(by_wnid.items())}


def find_validation(root: Path, labels: Path | None, devkit_meta: Path | None) -> ValidationImages:
    """The validation images of ``root`` by wnid, in either layout (see the module docstring)."""
    root = require_dir(Path(root), "validation")
    if labels is None:
        if devkit_meta is not None:
            raise InvalidArgument("--devkit-meta maps the ground truth's ids to wnids; it needs "
                                  "--validation-labels ILSVRC2012_validation_ground_truth.txt")
        by_wnid = _folder_layout(root)
        description = "wnid folders"
    else:
        labels = Path(labels)
        lines = _read_lines(labels, "validation labels")
        if lines and lines[0].strip().startswith(LOC_HEADER[0]):
            if devkit_meta is not None:
                raise InvalidArgument(f"--devkit-meta does not apply to {labels.name} (its rows name wnids)")
            parsed = parse_loc_solution(labels)
            description = labels.name
        else:
            if devkit_meta is None:
                raise InvalidArgument(f"--validation-labels {labels}: a ground-truth file of ILSVRC2012_IDs needs "
                                      "--devkit-meta (the devkit's data/meta.mat) to map them to wnids")
            parsed = parse_ground_truth(labels, parse_devkit_meta(Path(devkit_meta)), Path(devkit_meta))
            description = f"{labels.name} + {Path(devkit_meta).name}"
        by_wnid = _flat_layout(root, parsed, labels)
    names: dict[str, Path] = {}
    for paths in by_wnid.values():
        for path in paths:
            if path.name in names:
                raise InputFormatError(path, f"has the file name of {names[path.name]} (validation images are "
                                       "known by their file name)")
            names[path.name] = path
    return ValidationImages(by_wnid, description)


def check_classes(images: ValidationImages, train_wnids: list[str], root: Path) -> None:
    """Every validation wnid is a train class, and every train class has validation images."""
    unknown = sorted(set(images.by_wnid) - set(train_wnids))
    if unknown:
        raise InputFormatError(root, f"validation images of {len(unknown)} wnids the train input has no folder "
                               f"for: {_listed(unknown)} (pack the same classes in --input and --validation)")
    lacking = [w for w in train_wnids if not images.by_wnid.get(w)]
    if lacking:
        raise InputFormatError(root, f"no validation images of {len(lacking)} train classes: {_listed(lacking)} "
                               "(every class's test images are its validation images)")
