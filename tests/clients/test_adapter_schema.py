"""Every adapter of a protocol, in both frameworks, yields one item schema: the same keys,
images uint8 NHWC [B, S, S, 3] by default, and ``dtype="float32"`` (the one float option,
same name and values everywhere) giving float32 in [0, 1] equal to the uint8 / 255.

One item is pulled from each adapter (dataset, tf.data source and the array-to-item
function) against a real server: Meta-Dataset episodes (plain and bucketed) and batches
from ``served``, VTAB task batches and full-way episodes from ``kitti_served``, CoG level
batches from a small ILSVRC-2012 store packed here."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pytest
from conftest import generate_fixture, pack_fixture

from clients.core import EpisodeSpec, SamplerClient

import torch
import tensorflow as tf

import clients.tf as tf_adapter  # noqa: E402
import clients.torch as torch_adapter  # noqa: E402

SIZE = 16
MD_SPEC = EpisodeSpec(sources=("folder",), split="train", seed=3, image_size=SIZE)
VTAB_TASK = "kitti_distance"

Pull = Callable[[str], Mapping[str, Any]]
"""One item of an adapter, given the image dtype ("uint8" or "float32")."""


def _first(items: Any) -> Mapping[str, Any]:
    """The first of a bounded stream, read to its end (a stream left open takes seconds to close)."""
    return list(items)[0]


def _tf_first(dataset: Any) -> Mapping[str, Any]:
    return _first(dataset.as_numpy_iterator())


def _numpy(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.numpy()
    if isinstance(value, tf.Tensor):
        return value.numpy()
    return value


def _images(item: Mapping[str, Any]) -> dict[str, np.ndarray]:
    return {key: _numpy(value) for key, value in item.items() if key == "images" or key.endswith("_images")}


def check_one_schema(adapters: dict[str, Pull]) -> None:
    """All ``adapters`` give the same keys; images uint8 NHWC by default and the float option
    float32 in [0, 1], equal to the uint8 / 255 of the same adapter."""
    keys = {name: sorted(pull("uint8")) for name, pull in adapters.items()}
    first = next(iter(keys.values()))
    assert all(found == first for found in keys.values()), keys
    for name, pull in adapters.items():
        as_uint8, as_float = _images(pull("uint8")), _images(pull("float32"))
        assert as_uint8 and sorted(as_uint8) == sorted(as_float), (name, sorted(as_uint8))
        for key, pixels in as_uint8.items():
            assert pixels.dtype == np.uint8, (name, key, pixels.dtype)
            assert pixels.ndim == 4 and pixels.shape[1:] == (SIZE, SIZE, 3), (name, key, pixels.shape)  # NHWC
            unit = as_float[key]
            assert unit.dtype == np.float32 and unit.shape == pixels.shape, (name, key, unit.dtype)
            assert 0.0 <= unit.min() and unit.max() <= 1.0, (name, key)
            assert np.array_equal(unit, pixels.astype(np.float32) / np.float32(255.0)), (name, key)


@pytest.fixture(scope="module")
def cog_address(tmp_path_factory):
    from sampler_server.service.server import RunningServer, ServerConfig

    root = tmp_path_factory.mktemp("adapter-schema-cog")
    pack_fixture(generate_fixture("ilsvrc_2012", root, num_classes=3, images_per_class=3, validation_images=4),
                 root / "data", name="ilsvrc_2012")
    server = RunningServer(ServerConfig(data_dir=root / "data", port=0, workers=1, threads=8,
                                        grace_seconds=0.5)).start()
    yield server.address
    server.stop(grace=0.5)


def test_md_episode_adapters_yield_one_schema(served):
    address = served.address
    with SamplerClient(address) as client:
        episode = _first(client.episodes(MD_SPEC, 0, 1))
    check_one_schema({
        "torch EpisodeDataset": lambda dtype: _first(torch_adapter.EpisodeDataset(address, MD_SPEC, count=1,
                                                                                  dtype=dtype)),
        "torch episode_to_torch": lambda dtype: torch_adapter.episode_to_torch(episode, dtype=dtype),
        "tf episode_dataset": lambda dtype: _tf_first(tf_adapter.episode_dataset(address, MD_SPEC, count=1,
                                                                                 dtype=dtype)),
        "tf EpisodeSource": lambda dtype: _tf_first(tf_adapter.EpisodeSource(address, MD_SPEC, count=1,
                                                                             dtype=dtype).dataset()),
    })


def test_md_bucketed_episode_adapters_yield_one_schema(served):
    address = served.address
    check_one_schema({
        "torch EpisodeDataset(shape_buckets=True)": lambda dtype: _first(torch_adapter.EpisodeDataset(
            address, MD_SPEC, count=1, shape_buckets=True, dtype=dtype)),
        "tf EpisodeSource(shape_buckets=True)": lambda dtype: _tf_first(tf_adapter.EpisodeSource(
            address, MD_SPEC, count=1, shape_buckets=True, dtype=dtype).dataset()),
    })


def test_md_batch_adapters_yield_one_schema(served):
    address = served.address
    with SamplerClient(address) as client:
        batch = _first(client.batches("folder", "train", 6, count=1, image_size=SIZE))
    check_one_schema({
        "torch BatchDataset": lambda dtype: _first(torch_adapter.BatchDataset(address, "folder", "train", 6, count=1,
                                                                              image_size=SIZE, dtype=dtype)),
        "torch batch_to_torch": lambda dtype: torch_adapter.batch_to_torch(batch, dtype=dtype),
        "tf BatchSource": lambda dtype: _tf_first(tf_adapter.BatchSource(address, "folder", "train", 6, count=1,
                                                                          image_size=SIZE, dtype=dtype).dataset()),
        "tf batch_dataset": lambda dtype: _tf_first(tf_adapter.batch_dataset(address, "folder", "train", 6, count=1,
                                                                             image_size=SIZE, dtype=dtype)),
    })


def test_vtab_task_batch_adapters_yield_one_schema(kitti_served):
    address = kitti_served.address
    with SamplerClient(address) as client:
        batch = _first(client.eval_batches(VTAB_TASK, "test", 8, image_size=SIZE))
    check_one_schema({
        "torch TaskBatchDataset": lambda dtype: _first(torch_adapter.TaskBatchDataset(
            address, VTAB_TASK, "test", 16, shuffle=False, image_size=SIZE, dtype=dtype)),
        "torch task_batch_to_torch": lambda dtype: torch_adapter.task_batch_to_torch(batch, dtype=dtype),
        "tf task_batch_dataset": lambda dtype: _tf_first(tf_adapter.task_batch_dataset(
            address, VTAB_TASK, "test", 16, shuffle=False, image_size=SIZE, dtype=dtype)),
    })


def test_vtab_task_episode_converters_yield_one_schema(kitti_served):
    with SamplerClient(kitti_served.address) as client:
        episode = client.task_episode(VTAB_TASK, image_size=SIZE, support_split="val200", query_split="test")
    check_one_schema({
        "torch task_episode_to_torch": lambda dtype: torch_adapter.task_episode_to_torch(episode, dtype=dtype),
        "tf task_episode_to_tf": lambda dtype: tf_adapter.task_episode_to_tf(episode, dtype=dtype),
    })


def test_cog_batch_adapters_yield_one_schema(cog_address):
    with SamplerClient(cog_address) as client:
        batch = _first(client.stream_cog_batches("IN-1K", "test", batch_size=5, image_size=SIZE))
    check_one_schema({
        "torch CogBatchDataset": lambda dtype: _first(torch_adapter.CogBatchDataset(
            cog_address, "IN-1K", "test", batch_size=5, count=1, image_size=SIZE, dtype=dtype)),
        "torch cog_batch_to_torch": lambda dtype: torch_adapter.cog_batch_to_torch(batch, dtype=dtype),
        "tf cog_batch_dataset": lambda dtype: _tf_first(tf_adapter.cog_batch_dataset(
            cog_address, "IN-1K", "test", batch_size=5, count=1, image_size=SIZE, dtype=dtype)),
    })


def test_vtab_adapters_order_splits_as_the_reference_without_a_shuffle_argument(kitti_served):
    """No ``shuffle=`` needed: a training split comes shuffled by ``seed`` (task_adaptation reads
    its train split shuffled), an evaluation split once in order (its eval split)."""
    address = kitti_served.address
    with SamplerClient(address) as client:
        shuffled = [b.record_ids for b in client.task_batches(VTAB_TASK, "train800", 8, seed=2, count=2,
                                                               image_size=SIZE)]
        in_order = [b.record_ids for b in client.eval_batches(VTAB_TASK, "test", 8, image_size=SIZE)]
    assert shuffled[0] != tuple(sorted(shuffled[0]))  # the shuffled form really differs from the order
    by_torch = {split: [tuple(item["record_ids"].tolist()) for item in torch_adapter.TaskBatchDataset(
        address, VTAB_TASK, split, 8, seed=2, count=2, image_size=SIZE)] for split in ("train800", "test")}
    by_tf = {split: [tuple(item["record_ids"].tolist()) for item in tf_adapter.task_batch_dataset(
        address, VTAB_TASK, split, 8, seed=2, count=2, image_size=SIZE).as_numpy_iterator()]
        for split in ("train800", "test")}
    assert by_torch == by_tf == {"train800": shuffled, "test": in_order}
    with pytest.raises(ValueError, match="shuffle: got 'yes', expected True, False or None"):
        torch_adapter.TaskBatchDataset(address, VTAB_TASK, "test", 8, shuffle="yes")
    with pytest.raises(ValueError, match="shuffle: got 'yes', expected True, False or None"):
        tf_adapter.task_batch_dataset(address, VTAB_TASK, "test", 8, shuffle="yes")


def test_every_adapter_refuses_an_unknown_dtype_before_connecting():
    nowhere = "127.0.0.1:1"  # nothing is asked of it: the refusal comes first
    makers = [
        lambda: torch_adapter.EpisodeDataset(nowhere, MD_SPEC, dtype="float16"),
        lambda: torch_adapter.BatchDataset(nowhere, "folder", "train", 4, dtype="float16"),
        lambda: torch_adapter.TaskBatchDataset(nowhere, VTAB_TASK, "test", 4, dtype="float16"),
        lambda: torch_adapter.CogBatchDataset(nowhere, "IN-1K", "test", dtype="float16"),
        lambda: tf_adapter.EpisodeSource(nowhere, MD_SPEC, dtype="float16"),
        lambda: tf_adapter.BatchSource(nowhere, "folder", "train", 4, dtype="float16"),
        lambda: tf_adapter.task_batch_dataset(nowhere, VTAB_TASK, "test", 4, dtype="float16"),
        lambda: tf_adapter.cog_batch_dataset(nowhere, "IN-1K", "test", dtype="float16"),
    ]
    for make in makers:
        with pytest.raises(ValueError, match="dtype: got 'float16', expected one of uint8, float32"):
            make()
