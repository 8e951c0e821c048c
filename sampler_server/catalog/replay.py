"""Recompute the episode a request names: (request, seed, index) -> composition.

Used to check a report's fingerprint and to recover the composition (ways, shots,
query labels) of reported episodes for the robustness plots. Samplers are cached per
canonical request, so checking many reports of one run costs one validation; the cache
keeps the ``REPLAY_SAMPLERS`` most recently used, so a server taking reports of many
distinct requests (one per client config, image size, source list) holds a bounded
number of samplers, whatever it is sent.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Mapping
from typing import Any

from google.protobuf import json_format

from sampler_server.catalog.registry import StoreRegistry
from sampler_server.catalog.wire_values import config_from_wire, images_from_wire, split_from_wire
from sampler_server.core.md.episode import Episode
from sampler_server.core.md.multisource import MultiSourceSampler
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb

REPLAY_SAMPLERS = 256
"""Samplers kept, least recently used out first (a sampler holds its sources' specs by
reference: a few KB of its own)."""


class EpisodeReplayer:
    def __init__(self, registry: StoreRegistry, capacity: int = REPLAY_SAMPLERS) -> None:
        if capacity < 1:
            raise ValueError(f"capacity: got {capacity}, expected at least 1")
        self.registry = registry
        self.capacity = capacity
        self._samplers: collections.OrderedDict[bytes, MultiSourceSampler] = collections.OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """Samplers cached now (at most ``capacity``)."""
        with self._lock:
            return len(self._samplers)

    def _sampler(self, request: pb.EpisodeRequest) -> MultiSourceSampler:
        key = request.SerializeToString(deterministic=True)
        with self._lock:
            sampler = self._samplers.get(key)
            if sampler is not None:
                self._samplers.move_to_end(key)
                return sampler
        split = split_from_wire(request.split, "request.split")
        images = images_from_wire(request.images)
        config = config_from_wire(request.config)
        specs, stores = self.registry.resolve(list(request.sources), request.preset, split, images.size,
                                              images.resize.value)
        sampler = MultiSourceSampler(specs, list(specs), split, config,
                                     {source: store.name for source, store in stores.items()})
        with self._lock:
            self._samplers[key] = sampler
            self._samplers.move_to_end(key)
            while len(self._samplers) > self.capacity:
                self._samplers.popitem(last=False)
        return sampler

    def episode(self, request: pb.EpisodeRequest | Mapping[str, Any], seed: int, index: int) -> Episode:
        if not isinstance(request, pb.EpisodeRequest):
            request = json_format.ParseDict(dict(request), pb.EpisodeRequest())
        return self._sampler(request).sample(seed, index)
