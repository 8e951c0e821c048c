"""The readers' shared base: one store's reader answers reads and errors as the base
writes them (the sharded reader's are in tests/service/test_sharded.py)."""

from __future__ import annotations

import os
import shutil

import pytest
from conftest import generate_fixture, pack_fixture

from sampler_server.errors import DataLoss, InvalidArgument
from sampler_server.store.reader import StoreReader, StoreUnreadable
from sampler_server.store.record import decode_record
from sampler_server.store.record_reader import RecordReader
from sampler_server.store.sharded_reader import ShardedReader


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("record_reader")
    fixture = generate_fixture("image_folder", root, num_classes=3, images_per_class=4)
    return pack_fixture(fixture, root / "data", name="folder").store_dir


def test_both_readers_share_the_base() -> None:
    assert issubclass(StoreReader, RecordReader) and issubclass(ShardedReader, RecordReader)


def test_reads_agree_and_a_bad_id_names_the_range(store) -> None:
    reader = StoreReader(store)
    ids = [5, 0, 11]
    assert reader.read_values(ids) == [reader.read_value(i) for i in ids]
    assert [reader.read(i) for i in ids] == [decode_record(v) for v in reader.values_or_none(ids)]
    with pytest.raises(InvalidArgument, match=r"record id 12 is out of range for store 'folder'; allowed: 0 to 11"):
        reader.read(12)


def test_read_of_an_unreadable_store_is_store_unreadable_naming_it(store, tmp_path) -> None:
    """The server quarantines a store by ``StoreUnreadable.store``: ``read`` must not hide it
    inside a plain DataLoss (it did for one store; the sharded reader kept it)."""
    copy = tmp_path / "folder"
    shutil.copytree(store, copy)
    with open(copy / "data.mdb", "r+b") as handle:
        handle.truncate(os.path.getsize(copy / "data.mdb") // 2)
    with pytest.raises(StoreUnreadable) as caught:
        StoreReader(copy).read(0)
    assert caught.value.store == "folder"
    assert str(caught.value).startswith("store 'folder': data.mdb is ")
    assert isinstance(caught.value, DataLoss)
