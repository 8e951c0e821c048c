"""Resume in a user's own loop: a loop that stops after k items, saves the dataset's
state, builds a new dataset, loads the state and gets exactly items k.. of an
unbroken run (compared by index and fingerprint), for the PyTorch episode and batch
datasets (with and without DataLoader workers) and the TensorFlow sources; a state
from another request or window is refused with a message naming what differs."""

from __future__ import annotations

import json
import threading
import time

import pytest
from loader_workers import loader_context, loader_iterator

from clients.core import EpisodeSpec

import torch
import tensorflow as tf

from clients.tf import BatchSource, EpisodeSource  # noqa: E402
from clients.torch import BatchDataset, EpisodeDataset  # noqa: E402

SPEC = EpisodeSpec(sources=("folder",), split="train", seed=4, image_size=16)
COUNT = 9
STOP = 4  # items consumed before the "crash"


def _key(item) -> tuple[int, str]:
    return int(item["index"]), item["fingerprint"] if isinstance(item["fingerprint"], str) else item[
        "fingerprint"].decode()


def test_episode_dataset_resumes_at_the_exact_next_index(served):
    unbroken = [_key(item) for item in EpisodeDataset(served.address, SPEC, start=2, count=COUNT)]
    assert [index for index, _ in unbroken] == list(range(2, 2 + COUNT))

    first = EpisodeDataset(served.address, SPEC, start=2, count=COUNT)
    seen = []
    for item in first:
        seen.append(_key(item))
        if len(seen) == STOP:
            break
    state = json.loads(json.dumps(first.state_dict()))  # JSON-able
    assert state["next_index"] == 2 + STOP

    resumed = EpisodeDataset(served.address, SPEC, start=2, count=COUNT)
    resumed.load_state_dict(state)
    rest = [_key(item) for item in resumed]
    assert seen + rest == unbroken


@pytest.mark.slow
def test_episode_dataset_resumes_with_dataloader_workers(served):
    unbroken = [_key(item) for item in EpisodeDataset(served.address, SPEC, count=COUNT)]
    dataset = EpisodeDataset(served.address, SPEC, count=COUNT)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2,
                                         multiprocessing_context=loader_context())
    seen = []
    with loader_iterator(loader) as items:
        for item in items:  # items come from worker processes: the consumer says what it took
            seen.append(_key(item))
            if len(seen) == STOP:
                state = dataset.state_dict(last_index=int(item["index"]))
                break
    assert seen == unbroken[:STOP] and state["next_index"] == STOP

    again = EpisodeDataset(served.address, SPEC, count=COUNT)
    again.load_state_dict(state)
    loader = torch.utils.data.DataLoader(again, batch_size=None, num_workers=2,
                                         multiprocessing_context=loader_context())
    assert seen + [_key(item) for item in loader] == unbroken


def _assert_no_reader_left() -> None:
    """A loop that stopped early (close(), a break) leaves no prefetch thread reading its
    stream: before, one blocked on the server's next message, or on a full buffer, outlived
    close() (which waited 5 s for it first)."""
    deadline = time.monotonic() + 1.0  # a thread already told to stop may take a moment to end
    while any(t.name == "sampler-prefetch" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert [t.name for t in threading.enumerate() if t.name == "sampler-prefetch"] == []


def test_two_ranks_in_lockstep_resume_from_one_state(served):
    """Rank r takes indices start + r, start + r + W, ...: after k steps of both ranks the
    window's first 2k indices are consumed, whatever the rank, and either rank's state says so."""
    ranks = [EpisodeDataset(served.address, SPEC, count=COUNT, rank=r, world_size=2) for r in range(2)]
    streams = [iter(dataset) for dataset in ranks]
    for _ in range(2):
        for stream in streams:
            next(stream)
    states = [dataset.state_dict() for dataset in ranks]
    for stream in streams:
        stream.close()
    assert states[0] == states[1] and states[0]["next_index"] == 4
    _assert_no_reader_left()
    single = EpisodeDataset(served.address, SPEC, count=COUNT)  # resumed on one process: the rest, in order
    single.load_state_dict(states[0])
    assert [int(item["index"]) for item in single] == list(range(4, COUNT))


def test_batch_dataset_resumes_at_the_exact_next_index(served):
    def build() -> BatchDataset:
        return BatchDataset(served.address, "folder", "train", 8, seed=3, count=7, image_size=16)

    unbroken = [_key(item) for item in build()]
    first = build()
    seen = []
    for item in first:
        seen.append(_key(item))
        if len(seen) == 3:
            break
    resumed = build()
    resumed.load_state_dict(first.state_dict())
    assert seen + [_key(item) for item in resumed] == unbroken


def test_state_of_another_request_or_window_is_refused(served):
    dataset = EpisodeDataset(served.address, SPEC, count=COUNT)
    state = dataset.state_dict()
    other_seed = EpisodeDataset(served.address, EpisodeSpec(sources=("folder",), split="train", seed=5,
                                                            image_size=16), count=COUNT)
    with pytest.raises(ValueError, match="another request.*seed"):
        other_seed.load_state_dict(state)
    with pytest.raises(ValueError, match="count"):
        EpisodeDataset(served.address, SPEC, count=COUNT + 1).load_state_dict(state)
    batches = BatchDataset(served.address, "folder", "train", 8, count=3, image_size=16)
    with pytest.raises(ValueError, match="episodes.*batches|batches.*episodes"):
        batches.load_state_dict(state)
    with pytest.raises(ValueError, match="next_index"):
        dataset.load_state_dict({**state, "next_index": COUNT + 5})


def test_tf_episode_source_resumes_and_shares_the_torch_state(served):
    unbroken = [_key(item) for item in EpisodeSource(served.address, SPEC, count=COUNT).dataset().as_numpy_iterator()]
    source = EpisodeSource(served.address, SPEC, count=COUNT)
    seen = []
    for item in source.dataset().as_numpy_iterator():
        seen.append(_key(item))
        if len(seen) == STOP:
            state = source.state_dict(last_index=int(item["index"]))
            break
    resumed = EpisodeSource(served.address, SPEC, count=COUNT)
    resumed.load_state_dict(state)
    assert seen + [_key(item) for item in resumed.dataset().as_numpy_iterator()] == unbroken
    # the same state resumes the PyTorch dataset: one canonical index space
    torch_resumed = EpisodeDataset(served.address, SPEC, count=COUNT)
    torch_resumed.load_state_dict(state)
    assert [_key(item) for item in torch_resumed] == unbroken[STOP:]


def test_tf_batch_source_resumes(served):
    def build() -> BatchSource:
        return BatchSource(served.address, "folder", "train", 8, seed=3, count=5, image_size=16)

    unbroken = [int(item["index"]) for item in build().dataset().as_numpy_iterator()]
    source = build()
    state = source.state_dict(last_index=1)
    resumed = build()
    resumed.load_state_dict(state)
    assert [int(item["index"]) for item in resumed.dataset().as_numpy_iterator()] == unbroken[2:] == [2, 3, 4]
