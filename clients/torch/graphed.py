"""Frozen-feature forward passes replayed as captured CUDA graphs, one per batch shape.

Why: under bf16 a ResNet-50 batch of 128 keeps an H200 busy for about 9 ms, and launching
its few hundred kernels one by one from Python costs the launching thread about as long, so
the thread that also writes the features and takes the next batch fell behind the GPU. A
replayed graph launches all of them in one call.

Only our own backbones are captured (``features_stream`` decides): a user's model may wait
on the host, draw random numbers or change between calls, none of which a replay would see.
A shape is captured the second time it comes (a stream's batches share one shape; a split's
short last batch runs eager), at most ``MAX_GRAPHS`` shapes, each graph holding its own
activation memory.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, Hashable, TypeVar

import torch

MAX_GRAPHS = 4  # captured shapes kept per extractor
WARMUPS = 2  # eager passes on a side stream before a capture (cuDNN's algorithm choice, lazy initialisation)

Runner = TypeVar("Runner")


class GraphedForward:
    """``forward`` captured for the shape and dtype of ``example``. Calling it copies the
    batch into the graph's own input and replays; the returned tensor is the graph's own
    output, overwritten by the next replay, so copy it out (in stream order) first."""

    def __init__(self, forward: Callable[[torch.Tensor], torch.Tensor], example: torch.Tensor) -> None:
        self._input = example.clone()
        side = torch.cuda.Stream(example.device)
        side.wait_stream(torch.cuda.current_stream(example.device))
        with torch.cuda.stream(side):
            for _ in range(WARMUPS):
                forward(self._input)
        torch.cuda.current_stream(example.device).wait_stream(side)
        self._graph = torch.cuda.CUDAGraph()
        # thread_local: the staging threads' copies on their own streams go on during the capture
        with torch.cuda.graph(self._graph, capture_error_mode="thread_local"):
            self._output = forward(self._input)

    def __call__(self, batch: torch.Tensor) -> torch.Tensor:
        self._input.copy_(batch)
        self._graph.replay()
        return self._output


class ShapeGraphs(Generic[Runner]):
    """Which batch shapes get a captured runner: the second sighting of a shape captures it
    (``capture()``), up to ``limit`` shapes; a capture that fails leaves its shape eager for
    good. ``runner`` gives the captured runner, or None: run eager."""

    def __init__(self, limit: int = MAX_GRAPHS) -> None:
        self._limit = limit
        self._seen: set[Hashable] = set()
        self._runners: dict[Hashable, Runner] = {}
        self._eager: dict[Hashable, str] = {}  # shape -> why it stays eager

    def runner(self, key: Hashable, capture: Callable[[], Runner]) -> Runner | None:
        if key in self._runners:
            return self._runners[key]
        if key in self._eager:
            return None
        if key not in self._seen:
            self._seen.add(key)
            return None
        if len(self._runners) >= self._limit:
            return None
        try:
            self._runners[key] = capture()
        except RuntimeError as error:  # an operation a graph cannot hold: this shape stays eager
            self._eager[key] = " ".join(str(error).split())[:200]
            return None
        return self._runners[key]

    @property
    def captured(self) -> int:
        return len(self._runners)

    @property
    def refused(self) -> dict[Hashable, str]:
        return dict(self._eager)


__all__ = ["MAX_GRAPHS", "GraphedForward", "ShapeGraphs"]
