"""Through real gRPC servers: the CoG demo's IN-21K data packed unsharded and packed as 3
shards serve the same levels, split records, labels, fingerprints, stored bytes and
pixels (the shard count never shows). Both pack the run's shared IN-21K layout (``served_cog``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from served_cog import cog_layout

from clients.core import SamplerClient
from sampler_server.cli.main import main
from sampler_server.fixtures.cog_counts import LEVEL_SIZE, MIN_IMAGES
from sampler_server.service.server import RunningServer, ServerConfig

CONFIG = {"level_size": LEVEL_SIZE, "min_images": MIN_IMAGES}


@pytest.fixture(scope="module")
def clients(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("sharded-cog")
    source = cog_layout(tmp_path_factory)
    layouts = {"whole": [None], "sharded": ["0/3", "1/3", "2/3"]}
    servers, out = [], {}
    try:
        for name, shards in layouts.items():
            for shard in shards:
                argv = ["pack", "imagenet21k", "--input", str(source), "--output", str(root / name), "--quiet",
                        "--workers", "2"]
                assert main(argv + (["--shard", shard] if shard else [])) == 0
            server = RunningServer(ServerConfig(data_dir=root / name, port=0, workers=2, grace_seconds=0.5)).start()
            servers.append(server)
            out[name] = SamplerClient(server.address)
        assert sorted(p.name for p in (root / "sharded").iterdir() if p.is_dir()) == [
            "imagenet21k-00000-of-00003", "imagenet21k-00001-of-00003", "imagenet21k-00002-of-00003",
        ]
        yield out
    finally:
        for client in out.values():
            client.close()
        for server in servers:
            server.stop(grace=0.2)


def test_levels_and_sources_do_not_show_the_sharding(clients) -> None:
    whole, sharded = clients["whole"], clients["sharded"]
    assert sharded.cog_levels_response(**CONFIG) == whole.cog_levels_response(**CONFIG)
    assert [s.name for s in sharded.list_sources()] == ["imagenet21k"]
    assert sharded.list_sources() == whole.list_sources()


@pytest.mark.parametrize("level, split, shots, seed", [("L1", "test", 0, 0), ("L3", "train", 8, 2), ("L5", "val", 0, 4)])
def test_splits_and_their_bytes_and_pixels_are_the_same(clients, level: str, split: str, shots: int, seed: int) -> None:
    whole, sharded = clients["whole"], clients["sharded"]
    expected = whole.cog_split(level, split, shots, seed, **CONFIG)
    assert sharded.cog_split(level, split, shots, seed, **CONFIG) == expected
    assert len(expected.record_ids) > 0
    for encoded in (True, False):
        batches = {name: list(client.stream_cog_batches(level, split, shots, seed, batch_size=64, image_size=24,
                                                         encoded=encoded, **CONFIG))
                   for name, client in clients.items()}
        for left, right in zip(batches["whole"], batches["sharded"], strict=True):
            assert left.record_ids == right.record_ids and left.fingerprint == right.fingerprint
            assert np.array_equal(left.labels, right.labels)
            if encoded:
                assert left.encoded == right.encoded and len(left.encoded.data) == len(left.record_ids)
            else:
                assert np.array_equal(left.images, right.images) and left.images.shape[1:] == (24, 24, 3)
        assert sum(len(b.record_ids) for b in batches["sharded"]) == len(expected.record_ids)
