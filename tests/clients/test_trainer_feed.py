"""The trainers' background feed (``clients.feed``): it starts receiving before the
model is built, so the first training episode is already staged when the first step
asks for it; several receive streams merge in index order; errors arrive in order;
``close`` ends the thread and the streams under it."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest

import torch

from clients.feed import Feed  # noqa: E402
from clients.md_train import run_main  # noqa: E402
from clients.torch.md_train import TorchFramework  # noqa: E402

FIXED = ["--ways", "5", "--shots", "5", "--query", "5"]


@pytest.fixture(autouse=True)
def _two_threads():
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(threads)


class _Watched(TorchFramework):
    """Records whether a training episode was staged before the model was built."""

    streams = 1

    def __init__(self, args) -> None:
        super().__init__(args)
        self.receive_streams = self.streams
        self.staged = threading.Event()
        self.staged_before_build: bool | None = None

    def stage(self, item):
        staged = super().stage(item)
        self.staged.set()
        return staged

    def build(self, num_classes: int) -> None:
        # waits (up to 60 s) for the feed: only a feed started before the build can satisfy it
        self.staged_before_build = self.staged.wait(timeout=60)
        super().build(num_classes)


def _run(served, tmp_path: Path, run_id: str, framework: type, *extra: str) -> tuple[dict, TorchFramework]:
    made: list[TorchFramework] = []

    def make(args):
        made.append(framework(args))
        return made[-1]

    summary = tmp_path / f"{run_id}.json"
    argv = ["--server", served.address, "--run", run_id, "--sources", "folder", "--image-size", "16",
            "--eval-episodes", "0", "--json-summary", str(summary), *extra]
    assert run_main("torch", make, argv) == 0
    return json.loads(summary.read_text()), made[0]


def test_first_episode_is_received_while_the_model_is_built(served, tmp_path):
    summary, framework = _run(served, tmp_path, "feed-first", _Watched, *FIXED, "--train-episodes", "3")
    assert framework.staged_before_build is True
    train = summary["train"]
    assert train["steps"] == 3
    assert train["first_wait_seconds"] < 1.0  # already staged: the bound is generous


class _ThreeStreams(_Watched):
    streams = 3


def test_streams_merge_in_index_order(served, tmp_path):
    """Three receive streams (indices taken round robin) train on exactly the episodes
    one stream gives, in the same order: the same losses, bit for bit, on CPU."""
    common = [*FIXED, "--train-episodes", "7", "--log-every", "1", "--seed", "3"]
    one, _ = _run(served, tmp_path, "feed-one", _Watched, *common)
    three, framework = _run(served, tmp_path, "feed-three", _ThreeStreams, *common)
    assert framework.receive_streams == 3
    assert np.array(three["train"]["curve"]).tolist() == np.array(one["train"]["curve"]).tolist()
    assert three["train"]["final_loss"] == one["train"]["final_loss"] is not None


def test_feed_keeps_order_and_raises_errors_in_order():
    def items():
        for index in range(4):
            yield index, index * 10, 1
        raise RuntimeError("stream broke after index 3")

    feed = Feed(items(), stage=lambda item: item + 1)
    assert [next(feed) for _ in range(4)] == [(i, i * 10 + 1, 1) for i in range(4)]
    with pytest.raises(RuntimeError, match="after index 3"):
        next(feed)
    feed.close()

    done = Feed(iter([(0, "a", 1)]), stage=str.upper)
    assert list(done) == [(0, "A", 1)] and list(done) == []


def test_close_ends_the_thread_and_the_stream():
    closed = threading.Event()

    def endless():
        try:
            index = 0
            while True:
                yield index, index, 1
                index += 1
        finally:
            closed.set()

    feed = Feed(endless(), stage=lambda item: item, depth=2)
    assert next(feed) == (0, 0, 1)  # the thread is now blocked on a full queue
    feed.close()
    assert not feed._thread.is_alive() and closed.is_set()


def test_summary_says_what_to_change_when_training_waited_for_data():
    from clients.md_train import TrainSummary, data_wait_hint

    def summary(steps: int, seconds: float, wait: float, first: float) -> TrainSummary:
        return TrainSummary(unit="episode", start_index=0, next_index=steps, steps=steps, seconds=seconds,
                            data_wait_seconds=wait, first_wait_seconds=first)

    hint = data_wait_hint(summary(600, 30.0, 12.0, 2.0))  # 10 of the 28 s after the first episode
    assert hint is not None and "36%" in hint and "--lookahead-mb 128" in hint and "--workers" in hint
    assert data_wait_hint(summary(600, 30.0, 4.0, 2.0)) is None  # 7%: fed fast enough
    assert data_wait_hint(summary(600, 30.0, 2.5, 2.0)) is None  # start-up is not a feeding problem
    assert data_wait_hint(summary(20, 30.0, 12.0, 2.0)) is None  # too short a run to tell
