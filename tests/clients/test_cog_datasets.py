"""The CoG level-split datasets (torch and tf) give the client's batches: same fingerprints,
record ids, labels and uint8 pixels, in split order, from any start batch."""

from __future__ import annotations

import numpy as np
import pytest
from loader_workers import loader_context, loader_iterator
from conftest import generate_fixture, pack_fixture

from clients.core import SamplerClient

IMAGES, VALIDATION = 3, 50  # per class: 3 train images, 50 validation images (IN-1K's test set)


@pytest.fixture(scope="module")
def address(tmp_path_factory):
    from sampler_server.service.server import RunningServer, ServerConfig

    root = tmp_path_factory.mktemp("cog-datasets")
    pack_fixture(generate_fixture("ilsvrc_2012", root, num_classes=3, images_per_class=IMAGES,
                                  validation_images=VALIDATION), root / "data", name="ilsvrc_2012")
    server = RunningServer(ServerConfig(data_dir=root / "data", port=0, workers=1, threads=8,
                                        grace_seconds=0.5)).start()
    yield server.address
    server.stop(grace=0.5)


def test_torch_and_tf_datasets_equal_the_client_stream(address):
    from clients.torch import cog_dataset as torch_dataset
    from clients.tf import cog_dataset as tf_dataset
    with SamplerClient(address) as client:
        split = client.cog_split("IN-1K", "test")
        wire = list(client.stream_cog_batches("IN-1K", "test", batch_size=40, image_size=24))
    assert [len(b.record_ids) for b in wire] == [40, 40, 40, 30] and wire[-1].last
    from_torch = list(torch_dataset.CogBatchDataset(address, "IN-1K", "test", batch_size=40, image_size=24))
    from_tf = list(tf_dataset.cog_batch_dataset(address, "IN-1K", "test", batch_size=40,
                                                image_size=24).as_numpy_iterator())
    assert len(from_torch) == len(from_tf) == len(wire)
    for batch, t, f in zip(wire, from_torch, from_tf):
        assert t["fingerprint"] == f["fingerprint"].decode() == batch.fingerprint
        assert t["split_fingerprint"] == f["split_fingerprint"].decode() == split.fingerprint
        assert t["index"] == f["index"] == batch.index and t["last"] == f["last"] == batch.last
        assert str(t["images"].dtype) == "torch.uint8" and f["images"].dtype == np.uint8
        assert np.array_equal(t["images"].numpy(), batch.images) and np.array_equal(f["images"], batch.images)
        assert np.array_equal(t["labels"].numpy(), batch.labels) and np.array_equal(f["labels"], batch.labels)
        assert t["record_ids"].tolist() == f["record_ids"].tolist() == list(batch.record_ids)
        assert t["num_classes"] == f["num_classes"] == 3 and t["split_size"] == f["split_size"] == 150
    assert [r for t in from_torch for r in t["record_ids"].tolist()] == list(split.record_ids)


def test_datasets_start_at_a_batch_and_take_count_few_shot_subsets_included(address):
    from clients.torch import cog_dataset as torch_dataset
    from clients.tf import cog_dataset as tf_dataset
    with SamplerClient(address) as client:
        wire = list(client.stream_cog_batches("IN-1K", "train", 2, 4, batch_size=2, image_size=8))
        subset = client.cog_split("IN-1K", "train", 2, 4)
    assert [r for b in wire for r in b.record_ids] == list(subset.record_ids) and len(subset.record_ids) == 6
    tail_torch = list(torch_dataset.CogBatchDataset(address, "IN-1K", "train", shots=2, seed=4, batch_size=2,
                                                    start=1, count=1, image_size=8))
    tail_tf = list(tf_dataset.cog_batch_dataset(address, "IN-1K", "train", shots=2, seed=4, batch_size=2, start=1,
                                                image_size=8).as_numpy_iterator())
    assert [t["fingerprint"] for t in tail_torch] == [wire[1].fingerprint]
    assert [f["fingerprint"].decode() for f in tail_tf] == [b.fingerprint for b in wire[1:]]


def test_cog_batch_dataset_refuses_workers_that_would_repeat_batches(address):
    from clients.torch import cog_dataset as torch_dataset
    from torch.utils.data import DataLoader

    # The server runs in this process: forking beside its gRPC threads can crash the worker,
    # so the workers come from a forkserver (loader_workers)
    dataset = torch_dataset.CogBatchDataset(address, "IN-1K", "test", batch_size=64, image_size=8)
    one = DataLoader(dataset, batch_size=None, num_workers=1, multiprocessing_context=loader_context())
    assert [b["index"] for b in one] == [0, 1, 2]
    assert [b["index"] for b in DataLoader(dataset, batch_size=None)] == [0, 1, 2]  # each pass is whole
    two = DataLoader(dataset, batch_size=None, num_workers=2, multiprocessing_context=loader_context())
    with loader_iterator(two) as batches, pytest.raises(ValueError, match="num_workers=2 would repeat every batch"):
        list(batches)
