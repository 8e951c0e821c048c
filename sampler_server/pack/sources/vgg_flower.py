"""Oxford 102 Flowers (VGG Flower) converter.

Original layout (``102flowers.tgz`` extracted, ``imagelabels.mat`` beside it)::

    ROOT/jpg/image_00001.jpg ... image_08189.jpg
    ROOT/imagelabels.mat      MATLAB variable 'labels': 1..102, one per image,
                              in image-number order
    ROOT/setid.mat            (optional; the official image splits, not used)

What the converter applies, and why:
- One class per label value, named ``'%03d.%s' % (label, name)`` as in
  Meta-Dataset's split file (``001.pink primrose``). Names come from ``--labels
  FILE`` (``#`` comment lines, then one name per line, label 1 first), else from
  ``--class-splits`` entries matched by their numeric prefix, else the name is
  just ``'%03d'``.
- ``imagelabels.mat`` is read when planning: a file scipy cannot read, a missing
  ``labels`` variable, non-integer or non-positive labels, or a label count that
  disagrees with the number of ``image_NNNNN.jpg`` files (which must be numbered
  1..N) is an input error.
- Images are stored as they are (original JPEG bytes), in file-number order.
- Splits: ``--class-splits`` (Meta-Dataset's file) or the default 70/15/15 rule.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import scipy.io
from scipy.io.matlab import MatReadError

from sampler_server.errors import InputFormatError
from sampler_server.pack.plan import ConverterOptions, SourcePlan
from sampler_server.pack.sources.common import (
    ClassEntry,
    PlanBuilder,
    file_items,
    list_images,
    reject_unused,
    require_dir,
    require_file,
)
from sampler_server.pack.sources.labels import class_namer

SOURCE = "vgg_flower"
DESCRIPTION = "Oxford 102 Flowers: ROOT/jpg/image_NNNNN.jpg + ROOT/imagelabels.mat"
ACCEPTS = ("class_splits", "labels")

LABELS_MAT = "imagelabels.mat"
_IMAGE_NAME = re.compile(r"image_([0-9]{5})\.jpg")


def read_image_labels(path: Path) -> np.ndarray:
    """The 'labels' vector of ``imagelabels.mat`` as int64, validated."""
    require_file(path, f"{LABELS_MAT} (the per-image class labels)")
    try:
        contents = scipy.io.loadmat(str(path))
    except (MatReadError, ValueError, TypeError, OSError, EOFError, NotImplementedError) as error:
        raise InputFormatError(path, f"not a readable MATLAB file ({error})") from None
    if "labels" not in contents:
        found = sorted(k for k in contents if not k.startswith("__"))
        raise InputFormatError(path, f"has no 'labels' variable (found: {found})")
    raw = np.asarray(contents["labels"])
    if raw.size == 0 or not np.issubdtype(raw.dtype, np.number):
        raise InputFormatError(path, f"'labels' must be a non-empty numeric vector, got dtype {raw.dtype}")
    labels = raw.ravel()
    if raw.ndim > 2 or labels.size != max(raw.shape):
        raise InputFormatError(path, f"'labels' must be a vector, got shape {raw.shape}")
    as_int = labels.astype(np.int64)
    if not np.array_equal(as_int, labels) or as_int.min() < 1:
        raise InputFormatError(path, "'labels' must hold integers >= 1")
    return as_int


def _numbered_images(jpg_dir: Path, count: int, labels_path: Path) -> list[Path]:
    """``image_00001.jpg`` ... in number order; they must be exactly 1..count."""
    files = list_images(jpg_dir, (".jpg",))
    if len(files) != count:
        raise InputFormatError(labels_path, f"holds {count} labels but {jpg_dir} holds {len(files)} .jpg images")
    for position, path in enumerate(files, start=1):
        match = _IMAGE_NAME.fullmatch(path.name)
        if match is None or int(match.group(1)) != position:
            raise InputFormatError(path, f"expected image_{position:05d}.jpg here (images must be numbered 1..{count})")
    return files


def plan(input_dir: Path, options: ConverterOptions) -> SourcePlan:
    reject_unused(SOURCE, options, ACCEPTS)
    root = require_dir(Path(input_dir), "input")
    jpg_dir = require_dir(root / "jpg", "jpg")
    labels_path = root / LABELS_MAT
    labels = read_image_labels(labels_path)
    files = _numbered_images(jpg_dir, len(labels), labels_path)
    namer = class_namer(options, width=3, first_label=1)
    builder = PlanBuilder(SOURCE)
    for label in sorted(set(labels.tolist())):
        members = [files[i] for i in np.flatnonzero(labels == label)]
        builder.add(ClassEntry(namer(label), lambda listed=members: file_items(root, listed)))
    return builder.build(options)
