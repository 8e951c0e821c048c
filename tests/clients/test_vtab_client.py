"""VTAB through the framework-free client and both adapters: same arrays as the wire."""

from __future__ import annotations

import numpy as np
import pytest
from loader_workers import loader_context, loader_iterator
from tfds_builders import tfds_dir  # noqa: F401  (the shared prepared datasets)

from clients.core import SamplerClient
from sampler_server.cli.main import main


@pytest.fixture(scope="module")
def address(tfds_dir, tmp_path_factory):
    from sampler_server.service.server import RunningServer, ServerConfig

    data = tmp_path_factory.mktemp("vtab-client") / "data"
    assert main(["pack", "vtab", "--tfds-name", "clevr", "--tfds-data-dir", str(tfds_dir), "--output", str(data),
                 "--quiet", "--workers", "1"]) == 0
    server = RunningServer(ServerConfig(data_dir=data, port=0, workers=1, threads=8, grace_seconds=0.5)).start()
    yield server.address
    server.stop(grace=0.5)


def test_client_batches_episode_and_report(address):
    with SamplerClient(address) as client:
        assert [t.task for t in client.list_tasks()] == ["clevr_count", "clevr_distance"]
        evaluation = list(client.eval_batches("clevr_count", "test", 16, image_size=12))
        assert [len(b.record_ids) for b in evaluation] == [16, 16, 8] and evaluation[-1].last
        resumed = list(client.eval_batches("clevr_count", "test", 16, start=1, image_size=12))
        assert [b.fingerprint for b in resumed] == [b.fingerprint for b in evaluation[1:]]
        shuffled = list(client.task_batches("clevr_count", "train", 10, seed=3, count=4, image_size=12))
        assert [b.index for b in shuffled] == [0, 1, 2, 3] and shuffled[0].images.shape == (10, 12, 12, 3)
        episode = client.task_episode("clevr_count", image_size=12, chunk_size=9, support_split="val",
                                      query_split="test")
        assert episode.support_record_ids == evaluation[0].record_ids[:0] + tuple(
            r for b in client.eval_batches("clevr_count", "val", 100, image_size=12) for r in b.record_ids)
        assert episode.query_record_ids == tuple(r for b in evaluation for r in b.record_ids)
        assert np.array_equal(episode.query_images, np.concatenate([b.images for b in evaluation]))
        reply = client.report_task("client-run", "clevr_count", "test", 0.5, 40, run_config={"lr": 0.1})
        assert reply.stored == 1
        assert "clevr_count" in client.get_vtab_report(["client-run"])


def test_torch_and_tf_adapters_give_the_served_uint8_by_default(address):
    from clients.torch import dataset as torch_dataset
    from clients.tf import dataset as tf_dataset
    import tensorflow as tf
    import torch

    with SamplerClient(address) as client:
        wire = list(client.eval_batches("clevr_distance", "test", 16, image_size=12))
        episode = client.task_episode("clevr_distance", image_size=12, support_split="val", query_split="test")
    from_torch = list(torch_dataset.TaskBatchDataset(address, "clevr_distance", "test", 16, shuffle=False,
                                                     image_size=12))
    tf_batches = tf_dataset.task_batch_dataset(address, "clevr_distance", "test", 16, shuffle=False, image_size=12)
    assert tf_batches.element_spec["images"].dtype == tf.uint8
    from_tf = list(tf_batches.as_numpy_iterator())
    assert len(wire) == len(from_torch) == len(from_tf) == 3
    for batch, t, f in zip(wire, from_torch, from_tf):
        assert t["images"].dtype == torch.uint8 and f["images"].dtype == np.uint8
        assert np.array_equal(t["images"].numpy(), batch.images) and np.array_equal(f["images"], batch.images)
        assert np.array_equal(t["labels"].numpy(), batch.labels) and np.array_equal(f["labels"], batch.labels)
    assert np.array_equal(torch_dataset.task_batch_to_torch(wire[0])["images"].numpy(), wire[0].images)
    torch_episode, tf_episode = torch_dataset.task_episode_to_torch(episode), tf_dataset.task_episode_to_tf(episode)
    for key in ("support_images", "query_images"):
        assert torch_episode[key].dtype == torch.uint8 and tf_episode[key].dtype == tf.uint8
        assert np.array_equal(torch_episode[key].numpy(), getattr(episode, key))
        assert np.array_equal(tf_episode[key].numpy(), getattr(episode, key))


def test_float32_option_is_the_uint8_over_255_in_both_adapters(address):
    from clients.torch import dataset as torch_dataset
    from clients.tf import dataset as tf_dataset
    import tensorflow as tf
    import torch

    with SamplerClient(address) as client:
        wire = list(client.eval_batches("clevr_distance", "test", 16, image_size=12))
        episode = client.task_episode("clevr_distance", image_size=12, support_split="val", query_split="test")
    from_torch = list(torch_dataset.TaskBatchDataset(address, "clevr_distance", "test", 16, shuffle=False,
                                                     image_size=12, dtype="float32"))
    from_tf = list(tf_dataset.task_batch_dataset(address, "clevr_distance", "test", 16, shuffle=False, image_size=12,
                                                 dtype="float32").as_numpy_iterator())
    assert len(wire) == len(from_torch) == len(from_tf) == 3
    for batch, t, f in zip(wire, from_torch, from_tf):
        expected = batch.images.astype(np.float32) / np.float32(255.0)
        assert t["images"].dtype == torch.float32 and f["images"].dtype == np.float32
        assert np.array_equal(t["images"].numpy(), expected) and np.array_equal(f["images"], expected)
        assert np.array_equal(t["labels"].numpy(), batch.labels) and np.array_equal(f["labels"], batch.labels)
    as_float = torch_dataset.task_batch_to_torch(wire[0], dtype="float32")["images"].numpy()
    assert np.array_equal(as_float, wire[0].images.astype(np.float32) / np.float32(255.0))
    torch_episode = torch_dataset.task_episode_to_torch(episode, dtype="float32")
    tf_episode = tf_dataset.task_episode_to_tf(episode, dtype="float32")
    for key in ("support_images", "query_images"):
        expected = getattr(episode, key).astype(np.float32) / np.float32(255.0)
        assert torch_episode[key].dtype == torch.float32 and tf_episode[key].dtype == tf.float32
        assert np.array_equal(torch_episode[key].numpy(), expected)
        assert np.array_equal(tf_episode[key].numpy(), expected)


def test_adapters_refuse_an_unknown_dtype_before_connecting(address):
    from clients.torch import dataset as torch_dataset
    from clients.tf import dataset as tf_dataset
    with pytest.raises(ValueError, match="dtype: got 'float16', expected one of uint8, float32"):
        torch_dataset.TaskBatchDataset(address, "clevr_distance", "test", 16, shuffle=False, dtype="float16")
    with pytest.raises(ValueError, match="dtype: got 'float16', expected one of uint8, float32"):
        tf_dataset.task_batch_dataset(address, "clevr_distance", "test", 16, shuffle=False, dtype="float16")


def test_task_batch_dataset_refuses_workers_that_would_repeat_batches(address):
    from clients.torch import dataset as torch_dataset
    from torch.utils.data import DataLoader

    # The server runs in this process: forking beside its gRPC threads can crash the worker,
    # so the workers come from a forkserver (loader_workers)
    dataset = torch_dataset.TaskBatchDataset(address, "clevr_distance", "test", 16, shuffle=False, image_size=12)
    loader = DataLoader(dataset, batch_size=None, num_workers=1, multiprocessing_context=loader_context())
    one = [b["index"] for b in loader]
    assert one == [0, 1, 2]  # one worker reads the stream once
    two = DataLoader(dataset, batch_size=None, num_workers=2, multiprocessing_context=loader_context())
    with loader_iterator(two) as batches, pytest.raises(ValueError, match="num_workers=2 would repeat every batch"):
        list(batches)
