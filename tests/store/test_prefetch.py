"""Large values' pages are asked for before they are copied; reads answer in the order asked."""

from __future__ import annotations

import lmdb
from conftest import generate_fixture, pack_fixture

from sampler_server.store import prefetch
from sampler_server.store.reader import StoreReader


def test_will_need_advises_only_values_larger_than_a_page(tmp_path) -> None:
    env = lmdb.open(str(tmp_path), map_size=1 << 24, readahead=False)
    with env.begin(write=True) as txn:
        txn.put(b"large", bytes(range(256)) * 200)  # 51,200 bytes: overflow pages
        txn.put(b"small", b"x" * 100)
    with env.begin(buffers=True) as txn:
        views = [txn.get(b"large"), txn.get(b"small"), None]
        assert prefetch.will_need(views) == 1
        assert bytes(views[0]) == bytes(range(256)) * 200
    env.close()


def test_values_come_back_in_the_order_asked_whatever_the_key_order(tmp_path) -> None:
    fixture = generate_fixture("image_folder", tmp_path, num_classes=3, images_per_class=4)
    reader = StoreReader(pack_fixture(fixture, tmp_path / "data", name="folder").store_dir)
    ids = [11, 0, 7, 7, 3, 10]
    assert reader.values_or_none(ids) == [reader.values_or_none([i])[0] for i in ids]
    assert len(set(reader.values_or_none([11, 0, 3]))) == 3
