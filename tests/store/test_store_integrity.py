"""Record checksums, the manifest's data file size and digest, and truncated data files:
refused with a DataLoss naming the store, never a SIGBUS."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
from conftest import REPO_ROOT, generate_fixture, pack_fixture

from sampler_server.errors import DataLoss
from sampler_server.store.reader import StoreReader
from sampler_server.store.record import Encoding, Record, decode_record, encode_record, read_header
from sampler_server.store.writer import file_digest


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("store_integrity")
    fixture = generate_fixture("image_folder", root, num_classes=4, images_per_class=6)
    return pack_fixture(fixture, root / "data", name="folder").store_dir


def test_every_flipped_byte_of_a_record_is_data_loss():
    value = encode_record(Record(Encoding.JPEG, 7, 5, 3, bytes(range(200)), {"origin": "a/b.jpg"}))
    assert decode_record(value).payload == bytes(range(200))
    for position in range(len(value)):
        for bit in (0x01, 0x80):
            damaged = bytearray(value)
            damaged[position] ^= bit
            with pytest.raises(DataLoss):
                read_header(bytes(damaged))


def test_layout_1_values_still_read():
    v1 = b"SR\x01\x02" + (3).to_bytes(4, "big") + (2).to_bytes(4, "big") + b"\x01" + (2).to_bytes(4, "big") + b"{}PNGDATA"
    assert decode_record(v1) == Record(Encoding.PNG, 3, 2, 1, b"PNGDATA", {})


def test_manifest_records_layout_size_and_digest_of_the_data_file(store):
    storage = json.loads((store / "manifest.json").read_text())["storage"]
    assert storage["record_layout"] == 2
    assert (storage["data_bytes"], storage["data_sha256"]) == file_digest(store / "data.mdb")
    assert StoreReader(store).manifest.verifiable


def test_truncated_data_file_is_refused_at_open(store, tmp_path):
    copy = tmp_path / "folder"
    shutil.copytree(store, copy)
    with open(copy / "data.mdb", "r+b") as handle:
        handle.truncate(os.path.getsize(copy / "data.mdb") // 2)
    reader = StoreReader(copy)
    with pytest.raises(DataLoss, match=r"store 'folder': data.mdb is \d+ bytes, its manifest records \d+ \(truncated"):
        reader.check_data()
    data = json.loads((copy / "manifest.json").read_text())
    del data["storage"]["data_bytes"]  # no recorded size: LMDB's own page count still catches it
    (copy / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(DataLoss, match=r"its LMDB pages need \d+ \(truncated\)"):
        StoreReader(copy).read_values(list(range(StoreReader(copy).num_records)))


def test_data_file_truncated_while_open_is_data_loss_not_sigbus(store, tmp_path):
    """In a child process: a SIGBUS would kill it (the old behaviour), not fail a test."""
    copy = tmp_path / "folder"
    shutil.copytree(store, copy)
    script = textwrap.dedent(f"""
        import os
        from sampler_server.errors import DataLoss
        from sampler_server.store.reader import StoreReader
        reader = StoreReader({str(copy)!r})
        ids = list(range(reader.num_records))
        reader.read_values(ids[:1])
        path = {str(copy / "data.mdb")!r}
        with open(path, "r+b") as handle:
            handle.truncate(os.path.getsize(path) // 4)
        try:
            reader.read_values(ids)
        except DataLoss as error:
            print("DataLoss:", error)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert done.returncode == 0, (done.returncode, done.stderr)
    assert "DataLoss: store 'folder': data.mdb is" in done.stdout and "truncated after it was opened" in done.stdout
