"""The PyTorch and TensorFlow adapters: sharding without gaps or overlaps, and the
same episodes, pixel for pixel, from both frameworks."""

from __future__ import annotations

import numpy as np
import pytest
from loader_workers import loader_context

from clients.core import EpisodeSpec

import torch
import tensorflow as tf

from clients.tf import episode_dataset  # noqa: E402
from clients.torch import EpisodeDataset  # noqa: E402

SPEC = EpisodeSpec(sources=("folder",), split="train", seed=11, image_size=24)


@pytest.mark.slow
def test_two_workers_times_two_ranks_cover_every_index_once(served):
    seen = []
    for rank in range(2):
        dataset = EpisodeDataset(served.address, SPEC, start=5, count=23, rank=rank, world_size=2)
        loader = torch.utils.data.DataLoader(
            dataset, batch_size=None, num_workers=2, multiprocessing_context=loader_context()
        )
        seen.extend(int(item["index"]) for item in loader)
    assert sorted(seen) == list(range(5, 28))


def test_torch_and_tf_yield_identical_episodes(served):
    torch_items = list(EpisodeDataset(served.address, SPEC, start=3, count=4))
    tf_items = list(episode_dataset(served.address, SPEC, start=3, count=4).as_numpy_iterator())
    assert [item["index"] for item in torch_items] == [3, 4, 5, 6] == [int(item["index"]) for item in tf_items]
    for from_torch, from_tf in zip(torch_items, tf_items):
        assert from_torch["fingerprint"] == from_tf["fingerprint"].decode()
        for key in ("support_images", "support_labels", "query_images", "query_labels"):
            assert np.array_equal(from_torch[key].numpy(), from_tf[key]), key
        assert from_torch["support_images"].dtype == torch.uint8
        assert from_tf["support_images"].shape[1:] == (24, 24, 3)


def test_tf_signature_is_complete(served):
    dataset = episode_dataset(served.address, SPEC, count=1)
    signature = dataset.element_spec
    assert signature["support_images"].shape.as_list() == [None, 24, 24, 3]
    assert signature["query_labels"].dtype == tf.int64
    assert set(signature) == {"support_images", "support_labels", "query_images", "query_labels", "index",
                              "fingerprint", "source", "ways", "request"}


# What a fresh interpreter loads, one per framework (two imports of torch and two of
# TensorFlow fewer than a process per check): the core first, then the framework's adapter,
# then its trainer modules. Each line of the output is one observation.
_TORCH_SIDE = """
import sys
import clients.core
print('core', 'torch' in sys.modules or 'tensorflow' in sys.modules)
import clients.torch
print('adapter', 'tensorflow' in sys.modules)
import clients.md_train, clients.torch.md_train
print('server', sorted(m for m in sys.modules if m == 'sampler_server' or m.startswith('sampler_server.')))
"""
_TF_SIDE = """
import sys
import clients.tf
print('adapter', 'torch' in sys.modules)
import clients.md_train, clients.tf.md_train
print('server', sorted(m for m in sys.modules if m == 'sampler_server' or m.startswith('sampler_server.')))
"""


@pytest.fixture(scope="module")
def fresh_imports() -> dict[str, dict[str, str]]:
    """{"torch": ..., "tf": ...}: each side's observations (name -> printed value), its two
    interpreters run at once."""
    import subprocess
    import sys

    running = {side: subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True)
               for side, code in (("torch", _TORCH_SIDE), ("tf", _TF_SIDE))}
    seen = {}
    for side, process in running.items():
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err[-2000:]
        seen[side] = dict(line.split(" ", 1) for line in out.splitlines())
    return seen


def test_each_adapter_imports_only_its_framework(fresh_imports):
    assert fresh_imports["torch"]["core"] == "False"  # clients.core: neither torch nor tensorflow
    assert fresh_imports["torch"]["adapter"] == "False"  # clients.torch: no tensorflow
    assert fresh_imports["tf"]["adapter"] == "False"  # clients.tf: no torch


def test_clients_import_nothing_of_the_server_package(fresh_imports):
    """Clients install alone: they load no module of ``sampler_server`` (the wire and the
    shared CI function are ``sampler_common``): ``clients.core``, ``clients.md_train`` and
    both frameworks' trainers."""
    assert fresh_imports["torch"]["server"] == fresh_imports["tf"]["server"] == "[]"
