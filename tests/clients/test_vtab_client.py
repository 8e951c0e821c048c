"""VTAB through the framework-free client and both adapters: same arrays as the wire."""

from __future__ import annotations

import numpy as np
import pytest
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


def test_torch_and_tf_adapters_give_the_same_unit_scaled_arrays(address):
    torch_dataset = pytest.importorskip("clients.torch.dataset")
    tf_dataset = pytest.importorskip("clients.tf.dataset")
    with SamplerClient(address) as client:
        wire = list(client.eval_batches("clevr_distance", "test", 16, image_size=12))
    from_torch = list(torch_dataset.TaskBatchDataset(address, "clevr_distance", "test", 16, shuffle=False,
                                                     image_size=12))
    from_tf = list(tf_dataset.task_batch_dataset(address, "clevr_distance", "test", 16, shuffle=False,
                                                 image_size=12).as_numpy_iterator())
    assert len(wire) == len(from_torch) == len(from_tf) == 3
    for batch, t, f in zip(wire, from_torch, from_tf):
        expected = batch.images.astype(np.float32) / 255.0
        assert np.allclose(t["images"].numpy(), expected) and np.allclose(f["images"], expected)
        assert np.array_equal(t["images"].numpy(), f["images"])
        assert np.array_equal(t["labels"].numpy(), batch.labels) and np.array_equal(f["labels"], batch.labels)


def test_task_batch_dataset_refuses_workers_that_would_repeat_batches(address):
    torch_dataset = pytest.importorskip("clients.torch.dataset")
    from torch.utils.data import DataLoader

    # The server runs in this process: forking beside its gRPC threads can crash the worker.
    SPAWN = "spawn"  # noqa: N806

    dataset = torch_dataset.TaskBatchDataset(address, "clevr_distance", "test", 16, shuffle=False, image_size=12)
    one = [b["index"] for b in DataLoader(dataset, batch_size=None, num_workers=1, multiprocessing_context=SPAWN)]
    assert one == [0, 1, 2]  # one worker reads the stream once
    with pytest.raises(ValueError, match="num_workers=2 would repeat every batch"):
        list(DataLoader(dataset, batch_size=None, num_workers=2, multiprocessing_context=SPAWN))
