"""Meta-Dataset: episodes and plain batches as NumPy arrays, their requests, their calls.

Names are the server's: a source is named by its store name or its source kind
(``omniglot``) and a preset by its variant (``md-v1``, ``md-v2``); the client passes
them unchanged and the server resolves them (or refuses them with NOT_FOUND /
INVALID_ARGUMENT naming what it serves). Every episode keeps the request it came
from, so ``report_episode`` (or a ``clients.reporting.Reporter``) can report it after
evaluation without the caller building any protobuf.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from sampler_common.checks import check_batch_size, check_count, check_index, check_seed
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.segments import SegmentMaps
from sampler_common.wire.tensors import split_tensors

from clients.protocols import Rpc, check_window
from clients.reporting import episode_report, run_config_json
from clients.tensors import check_resize, image_options, raw_array, resize_name, split_code, split_name, to_array

_SUPPORT_IMAGES = pb.Episode.DESCRIPTOR.fields_by_name["support_images"].number
_QUERY_IMAGES = pb.Episode.DESCRIPTOR.fields_by_name["query_images"].number
_EPISODE_TENSORS = frozenset({_SUPPORT_IMAGES, _QUERY_IMAGES})
_BATCH_IMAGES = pb.Batch.DESCRIPTOR.fields_by_name["images"].number
_BATCH_TENSORS = frozenset({_BATCH_IMAGES})


def _episode_arrays(values: dict[str, Any], request: bytes | None) -> "EpisodeArrays":
    """``EpisodeArrays.__reduce__``'s inverse."""
    return EpisodeArrays(**values, request=None if request is None else pb.EpisodeRequest.FromString(request))


@dataclass(frozen=True)
class EpisodeArrays:
    """One episode as NumPy arrays; labels index ``class_ids`` / ``class_names``.

    ``support_images`` / ``query_images``: uint8 [N, S, S, 3] RGB, values 0..255, S =
    ``image_size``; ``support_labels`` / ``query_labels``: int64 [N], values 0 ..
    ways - 1 (label l is class ``class_ids[l]``). ``request`` is the request the
    episode came from (what a report of it carries); ``preset`` the variant whose
    class splits were used.
    """

    source: str
    split: str
    seed: int
    index: int
    fingerprint: str
    class_ids: tuple[int, ...]
    class_names: tuple[str, ...]
    support_images: np.ndarray  # uint8 [Ns, S, S, 3]
    support_labels: np.ndarray  # int64 [Ns]
    query_images: np.ndarray
    query_labels: np.ndarray
    support_record_ids: tuple[int, ...]
    query_record_ids: tuple[int, ...]
    image_size: int
    resize: str
    preset: str = ""
    request: pb.EpisodeRequest | None = None

    @property
    def ways(self) -> int:
        return len(self.class_ids)

    def __reduce__(self) -> tuple[Any, tuple[dict[str, Any], bytes | None]]:
        """Pickles with its request as bytes: the generated message class is recorded under a
        module name that does not import (a child process receives episodes: ``clients.receiver``)."""
        values = {item.name: getattr(self, item.name) for item in fields(self) if item.name != "request"}
        return _episode_arrays, (values, None if self.request is None else self.request.SerializeToString())

    @classmethod
    def from_bytes(cls, data: bytes, request: pb.EpisodeRequest | None = None) -> "EpisodeArrays":
        """Parse a serialised Episode; pixel arrays are zero-copy views of ``data``."""
        rest, tensors = split_tensors(data, _EPISODE_TENSORS)
        message = pb.Episode.FromString(rest)
        maps = SegmentMaps()
        arrays = {number: raw_array(tensor, maps) for number, tensor in tensors.items()}
        empty = np.empty((0, message.image_size, message.image_size, 3), dtype=np.uint8)
        return cls._build(message, arrays.get(_SUPPORT_IMAGES, empty), arrays.get(_QUERY_IMAGES, empty), request)

    @classmethod
    def from_message(cls, message: pb.Episode, request: pb.EpisodeRequest | None = None) -> "EpisodeArrays":
        maps = SegmentMaps()
        return cls._build(message, to_array(message.support_images, maps), to_array(message.query_images, maps),
                          request)

    @classmethod
    def _build(cls, message: pb.Episode, support: np.ndarray, query: np.ndarray,
               request: pb.EpisodeRequest | None) -> "EpisodeArrays":
        return cls(
            source=message.source,
            split=split_name(message.split),
            seed=message.seed,
            index=message.index,
            fingerprint=message.fingerprint,
            class_ids=tuple(c.class_id for c in message.classes),
            class_names=tuple(c.name for c in message.classes),
            support_images=support,
            support_labels=to_array(message.support_labels),
            query_images=query,
            query_labels=to_array(message.query_labels),
            support_record_ids=tuple(message.support_record_ids),
            query_record_ids=tuple(message.query_record_ids),
            image_size=message.image_size,
            resize=resize_name(message.resize),
            preset=message.preset,
            request=request,
        )


@dataclass(frozen=True)
class BatchArrays:
    """One plain batch: ``images`` uint8 [B, S, S, 3] (0..255), ``labels`` int64 [B] with
    values 0 .. num_classes - 1 (the class's position among the split's classes)."""

    source: str
    index: int
    epoch: int
    fingerprint: str
    images: np.ndarray
    labels: np.ndarray
    record_ids: tuple[int, ...]
    num_classes: int

    @classmethod
    def from_bytes(cls, data: bytes) -> "BatchArrays":
        """Parse a serialised Batch; the image array is a zero-copy view of ``data``."""
        rest, tensors = split_tensors(data, _BATCH_TENSORS)
        message = pb.Batch.FromString(rest)
        maps = SegmentMaps()
        images = raw_array(tensors[_BATCH_IMAGES], maps) if _BATCH_IMAGES in tensors else to_array(message.images, maps)
        return cls(message.source, message.index, message.epoch, message.fingerprint, images,
                   to_array(message.labels), tuple(message.record_ids), message.num_classes)


@dataclass(frozen=True)
class EpisodeSpec:
    """What to ask for (everything but the indices); a value, so it can cross processes.

    ``sources``: store names or source kinds (several = MD multi-source episodes);
    empty = the preset's sources for ``split``. ``preset``: the benchmark variant whose
    class splits apply ("md-v1", the server's default when empty, or "md-v2"); it may
    be combined with ``sources``. ``ways`` / ``shots`` / ``query`` fix the episode shape
    (None = Meta-Dataset's variable ways and shots); ``config`` sets any other
    ``EpisodeConfig`` field by name.
    """

    sources: tuple[str, ...] = ()
    preset: str = ""
    split: str = "train"
    seed: int = 0
    image_size: int = 84
    resize: str = "bilinear"
    ways: int | None = None
    shots: int | None = None
    query: int | None = None
    config: Mapping[str, Any] = field(default_factory=dict)

    def to_request(self) -> pb.EpisodeRequest:
        """The request; every field the server checks alike is checked here first
        (``sampler_common.checks``: ``FieldError`` naming the field, the value and the range;
        ``ways`` / ``shots`` / ``query`` are named as the wire names them, ``num_ways`` ...)."""
        split = split_code(self.split)
        check_resize(self.resize)
        seed = check_seed(self.seed)
        config = pb.EpisodeConfig(**dict(self.config))
        for name, value in (("num_ways", self.ways), ("num_support", self.shots), ("num_query", self.query)):
            if value is not None:
                setattr(config, name, check_count(name, value))
        return pb.EpisodeRequest(sources=list(self.sources), preset=self.preset, split=split, config=config,
                                 seed=seed, images=image_options(self.image_size, self.resize))


def batch_request(source: str, split: str, batch_size: int, *, seed: int = 0, image_size: int = 84,
                  resize: str = "bilinear", preset: str = "") -> pb.StreamBatchesRequest:
    """The StreamBatches request of a split (without its index window); names checked by the server."""
    code = split_code(split)
    return pb.StreamBatchesRequest(source=source, split=code, seed=check_seed(seed),
                                   batch_size=check_batch_size(batch_size), preset=preset,
                                   images=image_options(image_size, resize))


class MdCalls(Rpc):
    """Meta-Dataset calls of ``SamplerClient``: sources, episodes, batches, episode reports."""

    def list_sources(self, preset: str = "") -> list[pb.SourceSummary]:
        """Every served store, its class counts under ``preset``'s class splits."""
        return list(self.call("ListSources", pb.ListSourcesRequest(preset=preset)).sources)

    def preset_sources(self, preset: str, split: str) -> tuple[str, ...]:
        """The source kinds ``preset`` uses for ``split``, as the server knows them (sorted by name)."""
        reply = self.call("ListSources", pb.ListSourcesRequest(preset=preset, split=split_code(split)))
        return tuple(reply.preset_sources)

    def describe_source(self, name: str, preset: str = "") -> pb.SourceDescription:
        """One source (a store name or source kind, resolved by the server) with its classes."""
        return self.call("DescribeSource", pb.DescribeSourceRequest(name=name, preset=preset))

    def episode(self, spec: EpisodeSpec, index: int) -> EpisodeArrays:
        """Episode ``index`` of ``spec``'s request (it keeps the request, for reporting)."""
        request = spec.to_request()
        index = check_index(index)

        def sent(token: str) -> pb.GetEpisodeRequest:
            message = pb.GetEpisodeRequest(request=request, index=index)
            message.request.images.same_host_token = token  # never in ``request``: reports keep it out
            return message

        return self.call_with_pixels("GetEpisode", sent, lambda reply: EpisodeArrays.from_message(reply, request))

    def episodes(self, spec: EpisodeSpec, start: int = 0, count: int = 0,
                 step: int = 1) -> Generator[EpisodeArrays, None, None]:
        """Episodes start, start + step, ... (count of them; 0 = unbounded), resumed across failures."""
        request = spec.to_request()
        check_window(start, count, step)

        def window(next_index: int, remaining: int, token: str) -> pb.StreamEpisodesRequest:
            sent = pb.StreamEpisodesRequest(request=request, start_index=next_index, count=remaining, index_step=step)
            sent.request.images.same_host_token = token  # never in ``request``: reports keep it out
            return sent

        yield from self.stream("StreamEpisodes", window, lambda data: EpisodeArrays.from_bytes(data, request),
                               start=start, count=count, step=step)

    def batches(
        self, source: str, split: str, batch_size: int, seed: int = 0, start: int = 0, count: int = 0, step: int = 1,
        image_size: int = 84, resize: str = "bilinear", preset: str = "",
    ) -> Generator[BatchArrays, None, None]:
        """Plain labelled batches of a split, resumed across failures like ``episodes``.
        ``source``: a store name or source kind; ``preset``: whose class splits apply."""
        base = batch_request(source, split, batch_size, seed=seed, image_size=image_size, resize=resize,
                             preset=preset)
        check_window(start, count, step)

        def window(next_index: int, remaining: int, token: str) -> pb.StreamBatchesRequest:
            request = pb.StreamBatchesRequest()
            request.CopyFrom(base)
            request.start_index, request.count, request.index_step = next_index, remaining, step
            request.images.same_host_token = token
            return request

        yield from self.stream("StreamBatches", window, BatchArrays.from_bytes, start=start, count=count, step=step)

    def report_episode(
        self,
        run_id: str,
        episode: EpisodeArrays | Mapping[str, Any],
        predictions: Any,
        metrics: Mapping[str, float] | None = None,
        *,
        run_config: Mapping[str, Any] | None = None,
    ) -> pb.ReportMetricsResponse:
        """Report one evaluated episode under ``run_id``: the server checks its fingerprint
        and stores it once (resending the same result is acknowledged as a duplicate).

        Args:
            run_id: the run the report belongs to (1 to 200 printable characters).
            episode: the episode as this client delivered it (it carries its request), or
                an item of ``clients.torch.EpisodeDataset`` / ``clients.tf.EpisodeSource``.
            predictions: the predicted label of each query image, in query order (a
                sequence of ints, a NumPy array or a CPU tensor; values 0 .. ways - 1).
            metrics: further per-episode metrics (e.g. ``{"loss": 0.41}``); "accuracy" is
                computed from ``predictions`` unless given.
            run_config: JSON-able configuration of the run, stored once per run on the
                server (send the same one with every report of a run, or only the first).

        Returns:
            The server's counts: ``stored`` (new) and ``duplicates`` (already held).

        Raises:
            ValueError: predictions or metrics that do not fit the episode.
            SamplerClientError: the server refused the report (e.g. FAILED_PRECONDITION:
                another result for this episode, or another configuration for this run).
        """
        report = episode_report(run_id, episode, predictions, metrics)
        return self.report([report], run_config_json=run_config_json(run_config))
