"""The columnar side file: streaming round trip, ragged rows, integrity checks."""

from __future__ import annotations

import numpy as np
import pytest

from sampler_server.errors import DataLoss, InvalidArgument
from sampler_server.store.columns import ColumnsReader, ColumnSpec, ColumnsWriter

SPECS = (ColumnSpec("index", "<i8"), ColumnSpec("z", "<f4", ragged=True), ColumnSpec("kind", "<i8", ragged=True))


def _rows(n):
    for i in range(n):
        k = i % 4  # every fourth row has no objects
        yield {"index": i * 3, "z": [np.float32(i / 7 + j).item() for j in range(k)], "kind": list(range(k))}


def test_round_trip_across_blocks_with_empty_rows(tmp_path):
    n = 70_000  # more than one write block per section
    writer = ColumnsWriter(tmp_path, "side.bin", SPECS)
    for row in _rows(n):
        writer.append(row)
    description = writer.finish()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["side.bin"]  # temporary parts are gone
    assert description["rows"] == n and description["bytes"] == (tmp_path / "side.bin").stat().st_size
    assert all(section["offset"] % 8 == 0 for section in description["sections"])
    reader = ColumnsReader(tmp_path, description)
    reader.verify_digest()
    assert np.array_equal(reader.scalar("index"), np.arange(n) * 3)
    expected = list(_rows(n))
    picked = [0, 1, 3, 4, 65_535, 65_536, n - 1]
    assert reader.rows_at(picked, ["index", "z", "kind"]) == [expected[i] for i in picked]
    offsets, values = reader.ragged("z")
    assert len(offsets) == n + 1 and values.dtype == np.dtype("<f4")


def test_damage_is_data_loss(tmp_path):
    writer = ColumnsWriter(tmp_path, "side.bin", SPECS)
    for row in _rows(10):
        writer.append(row)
    description = writer.finish()
    path = tmp_path / "side.bin"
    data = bytearray(path.read_bytes())
    data[9] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(DataLoss, match="its manifest records sha256:"):
        ColumnsReader(tmp_path, description).verify_digest()
    path.write_bytes(bytes(data[:-1]))
    with pytest.raises(DataLoss, match="its manifest records"):
        ColumnsReader(tmp_path, description)
    path.unlink()
    with pytest.raises(DataLoss, match="cannot open side.bin"):
        ColumnsReader(tmp_path, description)
    with pytest.raises(DataLoss, match="malformed columns description"):
        ColumnsReader(tmp_path, {**description, "rows": "many"})


def test_specs_are_checked(tmp_path):
    with pytest.raises(InvalidArgument, match="dtype must be one of"):
        ColumnSpec("x", "int64")
    with pytest.raises(InvalidArgument, match="column names must be unique"):
        ColumnsWriter(tmp_path, "side.bin", (ColumnSpec("x", "<i8"), ColumnSpec("x", "<f4")))
    writer = ColumnsWriter(tmp_path, "side.bin", (ColumnSpec("x", "<i8"),))
    writer.append({"x": 1})
    writer.abort()
    assert list(tmp_path.iterdir()) == []
