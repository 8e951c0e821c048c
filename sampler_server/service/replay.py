"""Recompute the episode a request names: (request, seed, index) -> composition.

Used to check a report's fingerprint and to recover the composition (ways, shots,
query labels) of reported episodes for the robustness plots. Samplers are cached per
canonical request, so checking many reports of one run costs one validation.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from google.protobuf import json_format

from sampler_server.core.md.episode import Episode
from sampler_server.core.md.multisource import MultiSourceSampler
from sampler_server.service import messages
from sampler_server.service.registry import StoreRegistry
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb


class EpisodeReplayer:
    def __init__(self, registry: StoreRegistry) -> None:
        self.registry = registry
        self._samplers: dict[bytes, MultiSourceSampler] = {}
        self._lock = threading.Lock()

    def _sampler(self, request: pb.EpisodeRequest) -> MultiSourceSampler:
        key = request.SerializeToString(deterministic=True)
        with self._lock:
            sampler = self._samplers.get(key)
        if sampler is None:
            split = messages.split_from_wire(request.split, "request.split")
            images = messages.images_from_wire(request.images)
            config = messages.config_from_wire(request.config)
            specs, _ = self.registry.resolve(list(request.sources), request.preset, split, images.size,
                                             images.resize.value)
            sampler = MultiSourceSampler(specs, list(specs), split, config)
            with self._lock:
                self._samplers[key] = sampler
        return sampler

    def episode(self, request: pb.EpisodeRequest | Mapping[str, Any], seed: int, index: int) -> Episode:
        if not isinstance(request, pb.EpisodeRequest):
            request = json_format.ParseDict(dict(request), pb.EpisodeRequest())
        return self._sampler(request).sample(seed, index)
