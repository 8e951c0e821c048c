"""``catalog.replay``: the episodes reports are checked against, and the bound on what it caches."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import generate_fixture, pack_fixture

from sampler_server.catalog.registry import StoreRegistry
from sampler_server.catalog.replay import REPLAY_SAMPLERS, EpisodeReplayer
from sampler_server.core.md import sample_episode
from sampler_server.core.md.config import EpisodeConfig
from sampler_server.core.split import Split
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb


@pytest.fixture(scope="module")
def registry(tmp_path_factory) -> StoreRegistry:
    root = tmp_path_factory.mktemp("replay")
    fixture = generate_fixture("image_folder", root, num_classes=24, images_per_class=6)
    pack_fixture(fixture, root / "data", name="folder")
    return StoreRegistry.from_data_dir(root / "data")


def _request(image_size: int) -> pb.EpisodeRequest:
    """Requests that differ only in image size: distinct cache keys, the same episodes."""
    return pb.EpisodeRequest(sources=["folder"], split=pb.SPLIT_TEST, images=pb.ImageOptions(image_size=image_size))


def test_a_replayed_episode_is_the_sampled_one(registry: StoreRegistry) -> None:
    replayer = EpisodeReplayer(registry)
    spec = registry.spec("folder")
    for index in (0, 7):
        expected = sample_episode(spec, Split.TEST, EpisodeConfig(), seed=5, index=index)
        assert replayer.episode(_request(84), 5, index).fingerprint == expected.fingerprint
        as_stored = {"sources": ["folder"], "split": "SPLIT_TEST", "images": {"image_size": 84}}  # a report's JSON
        assert replayer.episode(as_stored, 5, index).fingerprint == expected.fingerprint


def test_the_sampler_cache_stays_bounded_whatever_the_requests(registry: StoreRegistry) -> None:
    """One sampler per distinct request, but never more than REPLAY_SAMPLERS of them: a server
    taking reports of many distinct requests keeps its memory bounded (the least recently
    used go first, and replay again, identically, when asked for)."""
    replayer = EpisodeReplayer(registry)
    first = replayer.episode(_request(1), 3, 2).fingerprint
    for size in range(2, REPLAY_SAMPLERS + 41):
        assert replayer.episode(_request(size), 3, 2).fingerprint == first
    assert len(replayer) == REPLAY_SAMPLERS
    assert replayer.episode(_request(1), 3, 2).fingerprint == first  # evicted, rebuilt: the same episode
    assert len(replayer) == REPLAY_SAMPLERS


def test_a_capacity_below_one_is_refused(registry: StoreRegistry) -> None:
    with pytest.raises(ValueError, match="capacity: got 0, expected at least 1"):
        EpisodeReplayer(registry, capacity=0)
