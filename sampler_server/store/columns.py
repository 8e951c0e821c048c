"""A columnar side file of a store: one fixed-width value per record, or a ragged list.

Why a side file: listing a split's labels must not read images, and per-record JSON
for 737,280 dSprites records would not fit the "memory does not grow" rule. Writing
streams: each column goes to its own temporary file in small blocks, and ``finish``
concatenates them into ONE file (8-byte aligned sections) whose size and SHA-256
the manifest records. The manifest also describes every section (name, dtype,
offset, count), so the file needs no header and stays readable with ``numpy``.

A scalar column holds ``rows`` values; a ragged column holds ``rows + 1`` int64
offsets (``offsets[i]:offsets[i+1]`` are row i's values) and the concatenated values.
Dtypes are explicit little-endian (``<i8``, ``<f4``), so the bytes mean the same
everywhere. Reading uses ``numpy.fromfile`` (no memory map: a file truncated under a
running server raises, never SIGBUS).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sampler_server.errors import DataLoss, InvalidArgument

_ALIGN = 8
_BLOCK_ROWS = 1 << 16
_DTYPES = ("<i8", "<f4", "<f8")


@dataclass(frozen=True)
class ColumnSpec:
    """One column: its name, little-endian dtype, and whether a row holds a list."""

    name: str
    dtype: str
    ragged: bool = False

    def __post_init__(self) -> None:
        if self.dtype not in _DTYPES:
            raise InvalidArgument(f"column {self.name!r}: dtype must be one of {_DTYPES}, got {self.dtype!r}")


class _Sink:
    """Values of one section, buffered in blocks and appended to a temporary file."""

    def __init__(self, path: Path, dtype: str) -> None:
        self.path = path
        self.dtype = np.dtype(dtype)
        self.count = 0
        self._block: list[Any] = []
        self._handle = open(path, "wb")

    def extend(self, values: Sequence[Any]) -> None:
        self._block.extend(values)
        if len(self._block) >= _BLOCK_ROWS:
            self.flush()

    def flush(self) -> None:
        if self._block:
            self._handle.write(np.asarray(self._block, dtype=self.dtype).tobytes())
            self.count += len(self._block)
            self._block = []

    def close(self) -> None:
        self.flush()
        self._handle.close()


class ColumnsWriter:
    """Append rows in record-id order; ``finish`` writes the file and returns its description."""

    def __init__(self, directory: Path, file_name: str, specs: Sequence[ColumnSpec]) -> None:
        names = [spec.name for spec in specs]
        if len(set(names)) != len(names):
            raise InvalidArgument(f"column names must be unique, got {names}")
        self.directory = Path(directory)
        self.file_name = file_name
        self.specs = tuple(specs)
        self.rows = 0
        self._sinks: dict[str, _Sink] = {}
        self._ends: dict[str, int] = {}
        for spec in self.specs:
            if spec.ragged:
                self._sinks[spec.name + ".offsets"] = self._sink(spec.name + ".offsets", "<i8")
                self._sinks[spec.name + ".offsets"].extend([0])
                self._ends[spec.name] = 0
            self._sinks[_values(spec)] = self._sink(_values(spec), spec.dtype)

    def _sink(self, section: str, dtype: str) -> _Sink:
        return _Sink(self.directory / f".{self.file_name}.{section}.part", dtype)

    def append(self, row: Mapping[str, Any]) -> None:
        """One row: a number per scalar column, a sequence per ragged column (all present)."""
        for spec in self.specs:
            value = row[spec.name]
            if spec.ragged:
                items = list(value)
                self._sinks[_values(spec)].extend(items)
                self._ends[spec.name] += len(items)
                self._sinks[spec.name + ".offsets"].extend([self._ends[spec.name]])
            else:
                self._sinks[_values(spec)].extend([value])
        self.rows += 1

    def finish(self) -> dict[str, Any]:
        """Write ``directory/file_name`` (synced) and remove the temporary files.

        Returns the manifest's description: file, bytes, sha256, rows and sections."""
        digest = hashlib.sha256()
        sections: list[dict[str, Any]] = []
        offset = 0
        path = self.directory / self.file_name
        with open(path, "wb") as out:
            for section, sink in self._sinks.items():
                sink.close()
                padding = (-offset) % _ALIGN
                out.write(bytes(padding))
                digest.update(bytes(padding))
                offset += padding
                sections.append({"name": section, "dtype": sink.dtype.str, "offset": offset, "count": sink.count})
                with open(sink.path, "rb") as part:
                    while block := part.read(1 << 20):
                        out.write(block)
                        digest.update(block)
                        offset += len(block)
                sink.path.unlink()
            out.flush()
            os.fsync(out.fileno())
        return {
            "file": self.file_name,
            "bytes": offset,
            "sha256": "sha256:" + digest.hexdigest(),
            "rows": self.rows,
            "columns": [{"name": s.name, "dtype": s.dtype, "ragged": s.ragged} for s in self.specs],
            "sections": sections,
        }

    def abort(self) -> None:
        """Close and remove what was written (the store's partial directory goes too)."""
        for sink in self._sinks.values():
            sink._handle.close()
            sink.path.unlink(missing_ok=True)


def _values(spec: ColumnSpec) -> str:
    return spec.name + ".values" if spec.ragged else spec.name


class ColumnsReader:
    """Columns of a finished file; each section is read (and cached) on first use."""

    def __init__(self, directory: Path, description: Mapping[str, Any], where: str = "columns") -> None:
        self.where = where
        try:
            self.path = Path(directory) / str(description["file"])
            self.size = int(description["bytes"])
            self.sha256 = str(description["sha256"])
            self.rows = int(description["rows"])
            self.specs = tuple(
                ColumnSpec(str(c["name"]), str(c["dtype"]), bool(c["ragged"])) for c in description["columns"]
            )
            self._sections = {
                str(s["name"]): (np.dtype(str(s["dtype"])), int(s["offset"]), int(s["count"]))
                for s in description["sections"]
            }
        except (KeyError, TypeError, ValueError, InvalidArgument) as error:
            raise DataLoss(f"{where}: malformed columns description ({error!r})") from None
        for dtype, offset, count in self._sections.values():
            if offset < 0 or count < 0 or offset + count * dtype.itemsize > self.size:
                raise DataLoss(f"{where}: a section runs past the recorded file size {self.size}")
        self._cache: dict[str, np.ndarray] = {}
        self.check_size()

    def check_size(self) -> None:
        """The file is there and as long as packed (cheap; ``verify_digest`` reads it all)."""
        try:
            actual = self.path.stat().st_size
        except OSError as error:
            raise DataLoss(f"{self.where}: cannot open {self.path.name} ({error.strerror})") from None
        if actual != self.size:
            raise DataLoss(f"{self.where}: {self.path.name} is {actual} bytes, its manifest records {self.size}")

    def verify_digest(self) -> None:
        digest = hashlib.sha256()
        with open(self.path, "rb") as handle:
            while block := handle.read(1 << 20):
                digest.update(block)
        actual = "sha256:" + digest.hexdigest()
        if actual != self.sha256:
            raise DataLoss(f"{self.where}: {self.path.name} has {actual}, its manifest records {self.sha256}")

    def _section(self, name: str) -> np.ndarray:
        cached = self._cache.get(name)
        if cached is None:
            if name not in self._sections:
                raise DataLoss(f"{self.where}: no section {name!r} in {self.path.name}")
            dtype, offset, count = self._sections[name]
            self.check_size()
            cached = np.fromfile(self.path, dtype=dtype, count=count, offset=offset)
            if len(cached) != count:
                raise DataLoss(f"{self.where}: section {name!r} of {self.path.name} is short")
            cached.setflags(write=False)
            self._cache[name] = cached
        return cached

    def spec(self, name: str) -> ColumnSpec:
        for spec in self.specs:
            if spec.name == name:
                return spec
        raise DataLoss(f"{self.where}: no column {name!r}; columns: {[s.name for s in self.specs]}")

    def scalar(self, name: str) -> np.ndarray:
        """A scalar column: one value per row."""
        if self.spec(name).ragged:
            raise InvalidArgument(f"column {name!r} is ragged; use ragged()")
        values = self._section(name)
        if len(values) != self.rows:
            raise DataLoss(f"{self.where}: column {name!r} has {len(values)} values for {self.rows} rows")
        return values

    def ragged(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """A ragged column: (offsets, values); row i is ``values[offsets[i]:offsets[i+1]]``."""
        if not self.spec(name).ragged:
            raise InvalidArgument(f"column {name!r} is not ragged; use scalar()")
        offsets, values = self._section(name + ".offsets"), self._section(name + ".values")
        if len(offsets) != self.rows + 1 or offsets[0] != 0 or offsets[-1] != len(values) or np.any(np.diff(offsets) < 0):
            raise DataLoss(f"{self.where}: column {name!r} has inconsistent offsets")
        return offsets, values

    def rows_at(self, rows: Sequence[int], names: Sequence[str]) -> list[dict[str, Any]]:
        """Plain-Python dicts of the given rows (ints, floats, lists), in the order asked."""
        out: list[dict[str, Any]] = [{} for _ in rows]
        index = np.asarray(rows, dtype=np.int64)
        if len(index) and (index.min() < 0 or index.max() >= self.rows):
            raise InvalidArgument(f"rows must lie in [0, {self.rows}), got {index.min()}..{index.max()}")
        for name in names:
            if self.spec(name).ragged:
                offsets, values = self.ragged(name)
                for position, row in enumerate(index):
                    out[position][name] = values[offsets[row]:offsets[row + 1]].tolist()
            else:
                for position, value in enumerate(self.scalar(name)[index].tolist()):
                    out[position][name] = value
        return out
