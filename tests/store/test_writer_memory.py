"""Packing memory stays flat in the number of records: the writer's mapped pages are let go.

LMDB reads the pages it appends to through its map; before the writer re-opened its
environment, every page so mapped stayed resident (file-backed RSS grew by 321 MB over
1.2 M appended 1.4 KB records; bench/scale_bench.py's 1.28 M ILSVRC pack peaked at 512 MB).
"""

from __future__ import annotations

import os

import pytest

from sampler_server.store import writer as writer_module
from sampler_server.store.record import Encoding, Record
from sampler_server.store.writer import StoreWriter


def resident_file_kb() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssFile:"):
                return int(line.split()[1])
    raise AssertionError("no RssFile in /proc/self/status")


def test_file_backed_memory_stays_flat_while_records_are_appended(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(writer_module, "_REMAP_RECORDS", 4096, raising=False)
    payload = os.urandom(1400)
    with StoreWriter(tmp_path, "flat") as writer:
        for number in range(8192):  # past the first re-open: what stays mapped is the steady state
            writer.append(Record(Encoding.JPEG, 32, 32, 3, payload, {"origin": f"c/{number}.JPEG"}))
        before = resident_file_kb()
        for number in range(8192, 90_000):
            writer.append(Record(Encoding.JPEG, 32, 32, 3, payload, {"origin": f"c/{number}.JPEG"}))
        grown = resident_file_kb() - before
        writer.abort()
    assert grown < 6 * 1024, f"file-backed RSS grew by {grown} KB over 81,808 appended records"
