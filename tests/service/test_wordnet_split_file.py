"""The WordNet split a pack writes beside an ILSVRC store, and the server's use of it.

The ILSVRC fixture (48 real wnids) is packed once; the data directory also holds two
copies of that store: one without ``wordnet_split.json`` (a store packed before it
existed) and one whose file has a flipped byte. All three serve the same episodes
through a real server; the first never builds its split from WordNet, the second is
named in one warning at start-up, the third in one error line when first read.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time

import numpy as np
import pytest
from conftest import generate_fixture, pack_fixture

from clients.core import EpisodeSpec, SamplerClient
from sampler_server.catalog import registry as registry_module
from sampler_server.catalog.registry import StoreRegistry
from sampler_server.core.hierarchy.imagenet import ImageNetVariant
from sampler_server.core.md.imagenet_spec import imagenet_spec, precompute_split, precomputed_spec
from sampler_server.service.server import RunningServer, ServerConfig
from sampler_server.store.manifest import load_manifest
from sampler_server.store.wordnet_split import SPLIT_FILE_NAME

PACKED, WITHOUT, DAMAGED = "ilsvrc_2012", "ilsvrc_without", "ilsvrc_damaged"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("wordnet_split")
    fixture = generate_fixture("ilsvrc_2012", root, num_classes=48, images_per_class=2)
    data = root / "data"
    packed = pack_fixture(fixture, data).store_dir
    shutil.copytree(packed, data / WITHOUT)
    (data / WITHOUT / SPLIT_FILE_NAME).unlink()
    shutil.copytree(packed, data / DAMAGED)
    damaged = bytearray((data / DAMAGED / SPLIT_FILE_NAME).read_bytes())
    damaged[-100] ^= 0x04
    (data / DAMAGED / SPLIT_FILE_NAME).write_bytes(bytes(damaged))
    return data


def test_the_pack_writes_the_split_wordnet_gives(data, tmp_path):
    manifest = load_manifest(data / PACKED)
    blob = (data / PACKED / SPLIT_FILE_NAME).read_bytes()
    assert blob == precompute_split(manifest)
    for variant in ImageNetVariant:
        assert precomputed_spec(manifest, blob, variant=variant) == imagenet_spec(manifest, variant=variant)
    # only stores split by WordNet get one
    omniglot = pack_fixture(generate_fixture("omniglot", tmp_path), tmp_path / "data").store_dir
    assert (omniglot / "manifest.json").is_file() and not (omniglot / SPLIT_FILE_NAME).exists()


def _episodes(address: str, store: str, preset: str, split: str) -> list:
    spec = EpisodeSpec(sources=(store,), preset=preset, split=split, seed=5, image_size=16)
    with SamplerClient(address) as client:
        return list(client.episodes(spec, start=0, count=3))


def test_every_copy_serves_the_same_episodes_and_says_why_once(data, caplog):
    caplog.set_level(logging.INFO, logger="sampler_server.service")
    server = RunningServer(ServerConfig(data_dir=data, port=0, workers=1, threads=8, grace_seconds=0.5)).start()
    try:
        started = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert [m for m in started if SPLIT_FILE_NAME in m] == [m for m in started if repr(WITHOUT) in m]
        assert len([m for m in started if repr(WITHOUT) in m]) == 1
        for preset, split in (("md-v1", "test"), ("md-v2", "train"), ("md-v1", "train")):
            served = {store: _episodes(server.address, store, preset, split) for store in (PACKED, WITHOUT, DAMAGED)}
            for store in (WITHOUT, DAMAGED):
                for mine, theirs in zip(served[PACKED], served[store], strict=True):
                    assert mine.fingerprint == theirs.fingerprint and mine.class_names == theirs.class_names
                    assert np.array_equal(mine.support_images, theirs.support_images)
                    assert np.array_equal(mine.query_labels, theirs.query_labels)
    finally:
        server.stop(grace=0.5)
    refused = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(refused) == 1, refused  # both variants were asked for: still one line
    assert refused[0].startswith(f"store {DAMAGED!r}: {SPLIT_FILE_NAME}: damaged") and "\n" not in refused[0]


def test_a_store_with_the_file_never_builds_from_wordnet(data, monkeypatch):
    def from_wordnet(manifest, *, variant):
        raise AssertionError(f"built from WordNet ({variant})")

    monkeypatch.setattr(registry_module, "imagenet_spec", from_wordnet)
    registry = StoreRegistry.from_data_dir(data)
    v1, v2 = registry.spec(PACKED, "md-v1"), registry.spec(PACKED, "md-v2")
    assert v1.has_splits and v1 != v2 and registry.spec(PACKED, "md-v1") is v1
    with pytest.raises(AssertionError, match="built from WordNet"):
        registry.spec(WITHOUT, "md-v1")


def test_concurrent_first_requests_build_once(data, monkeypatch):
    calls: list[str] = []

    def slow_build(manifest, *, variant):
        calls.append(variant)
        time.sleep(0.2)
        return imagenet_spec(manifest, variant=variant)

    monkeypatch.setattr(registry_module, "imagenet_spec", slow_build)
    registry = StoreRegistry.from_data_dir(data)
    results: list = []
    threads = [threading.Thread(target=lambda: results.append(registry.spec(WITHOUT, "md-v1"))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert calls == ["md"] and len(results) == 4 and all(spec is results[0] for spec in results)
    assert results[0] == registry.spec(PACKED, "md-v1")  # the same content as the copy read from its file
