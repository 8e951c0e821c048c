"""Quick, Draw! converter (the official ``numpy_bitmap`` files).

Original layout (``gsutil cp gs://quickdraw_dataset/full/numpy_bitmap/*.npy``)::

    ROOT/<category>.npy     e.g. ``airplane.npy``, ``police car.npy``

Each file is one category: a ``(N, 784)`` uint8 array, one 28x28 greyscale drawing
per row (strokes bright on a black background).

What the converter applies, and why:
- One class per file, named by the file name before its first ``.`` (the
  reference's names, which the official split file uses).
- One record per row (``Derivation(npy_row=i)``, origin ``<file>#<i>``), in row
  order; the pipeline turns the row into a 28x28 image on a worker, stored as the
  reference stores it (RGB JPEG at quality 75; greyscale PNG with
  ``--lossless-derived``). Pixels are NOT inverted: the reference keeps the bitmaps'
  polarity.
- Only each file's .npy header is read when planning, so listing a class never
  loads its array; a file whose header is not a 2-D uint8 (or bool) array of
  square bitmaps is an input error. A truncated data section fails row by row when
  packing (``--on-error`` decides), as a corrupt image file does elsewhere.
- Splits: ``--class-splits`` (Meta-Dataset's file) or the default 70/15/15 rule.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

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

SOURCE = "quickdraw"
DESCRIPTION = "Quick, Draw! numpy_bitmap: ROOT/<category>.npy, (N, 784) uint8 per file"
ACCEPTS = ("class_splits",)


def class_name(file_name: str) -> str:
    """The reference's class name: the file name up to its first '.'."""
    return file_name.split(".", 1)[0]


def row_count(path: Path) -> int:
    """Rows of a bitmap file, from its .npy header alone (no data is read or mapped).

    A file whose header is not a 2-D uint8 (or bool) array of square bitmaps is an
    input error now; a data section cut short (an interrupted download) is found
    row by row when packing, so ``--on-error skip`` can leave such a class out.
    """
    try:
        with path.open("rb") as handle:
            version = np.lib.format.read_magic(handle)
            if version == (1, 0):
                shape, _fortran_order, dtype = np.lib.format.read_array_header_1_0(handle)
            elif version == (2, 0):
                shape, _fortran_order, dtype = np.lib.format.read_array_header_2_0(handle)
            else:
                raise InputFormatError(path, f".npy format version {version} is not supported (expected 1.0 or 2.0)")
    except (OSError, ValueError, EOFError) as error:
        raise InputFormatError(path, f"not a readable .npy array ({error})") from None
    if len(shape) != 2 or dtype not in (np.uint8, np.bool_):
        raise InputFormatError(path, f"expected a 2-D uint8 bitmap array, got shape {shape} dtype {dtype}")
    side = int(round(shape[1] ** 0.5))
    if side * side != shape[1]:
        raise InputFormatError(path, f"rows of {shape[1]} values are not square bitmaps")
    return int(shape[0])


def _row_items(path: Path, rows: int) -> Iterator[SourceItem]:
    """A generator: a class of 300k rows never exists as a list."""
    for row in range(rows):
        yield SourceItem(origin=f"{path.name}#{row}", path=path, derivation=Derivation(npy_row=row))


def _npy_files(root: Path) -> list[Path]:
    files = sorted(
        p for p in root.iterdir() if p.is_file() and not p.name.startswith(".") and p.suffix.lower() == ".npy"
    )
    if not files:
        raise InputFormatError(root, "holds no .npy files (expected one <category>.npy per class)")
    return files


def plan(input_dir: Path, options: ConverterOptions) -> SourcePlan:
    reject_unused(SOURCE, options, ACCEPTS)
    root = require_dir(Path(input_dir), "input")
    builder = PlanBuilder(SOURCE)
    for path in _npy_files(root):
        rows = row_count(path)
        builder.add(ClassEntry(class_name(path.name), lambda p=path, n=rows: _row_items(p, n)))
    return builder.build(options)
