"""Framework-free client: connect, stream with prefetch, retry with backoff, resume.

A stream is a cursor over one canonical index space: (request, next index, step,
remaining count). When the connection breaks (server killed, restarted, draining),
the client reconnects with exponential backoff and asks for the stream again from
the next index it has not yet delivered, so the caller sees exactly the sequence an
unbroken stream would have produced: no gap, no repeat. Errors that retrying cannot
fix (a bad request, an unknown source, corrupt data) are raised at once with the
server's message.

Names are the server's: a source is named by its store name or its source kind
(``omniglot``) and a preset by its variant (``md-v1``, ``md-v2``); the client passes
them unchanged and the server resolves them (or refuses them with NOT_FOUND /
INVALID_ARGUMENT naming what it serves). Every episode keeps the request it came
from, so ``SamplerClient.report_episode`` (or a ``Reporter``) can report it after
evaluation without the caller building any protobuf.

Security: against a server with TLS the client is given the CA that signed the
server's certificate (``tls_ca``; plus its own certificate and key where the server
requires client certificates), and against one that checks tokens a bearer token,
sent as ``authorization: Bearer <token>`` metadata on every call and stream. Unset,
they come from ``SAMPLER_TLS_CA`` / ``SAMPLER_TLS_CERT`` / ``SAMPLER_TLS_KEY`` (file
paths) and ``SAMPLER_TOKEN`` (the token itself); with none, the channel is plaintext
and carries no token (the loopback default). UNAUTHENTICATED and PERMISSION_DENIED are
not retried: a token does not become valid by asking again.

Same host: when the client runs on the server's host (and shares its /dev/shm), pixels
need not cross a socket. By default the client asks the server for a probe segment
(OfferSameHost), reads its token and unlinks it; then its requests carry the token and
the server writes each reply's pixels into a shared-memory segment the reply names
(``sampler_common.wire.segments``). The client maps it: its arrays are views of that
mapping (read-only, as always), and when the last of them is gone the segment goes back
to the server, which writes a later reply into the same pages.
Across hosts, for another user, or against an older server, the probe cannot be read
and replies come in the message as before; the arrays are bit-identical either way.
A reply whose segment is gone (reclaimed by the server) is asked for again at its
index; twice in a row, and the client goes back to the plain transport. Opt out with
``SamplerClient(..., same_host=False)`` or ``SAMPLER_SAME_HOST=0``.

Many replicas: an address such as ``dns:///sampler.ns.svc:50051`` or
``ipv4:10.0.0.1:50051,10.0.0.2:50051`` spreads calls and streams over every replica with
gRPC's round_robin (``clients.balancing``); a stream broken by a lost replica resumes at
its next index on another. Keepalive pings and a bounded wait for each message
(``Liveness``) notice a replica that went silent without a reset. Same-host tokens stay
safe: a replica ignores a token it did not issue (its replies come in the message).
"""

from __future__ import annotations

import os
import queue
import threading
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.gen.sampler.v1 import sampler_pb2_grpc as pb_grpc
from sampler_common.wire.segments import SegmentLost, SegmentMaps, SegmentRef, read_probe
from sampler_common.wire.tensors import RawTensor, split_tensors

from clients.balancing import Liveness, channel_options, parse_target, watch_stream
from clients.reporting import PROTOCOL, Reporter, episode_report, run_config_json  # noqa: F401 (public)

RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.ABORTED})
STREAM_RETRYABLE = RETRYABLE | {grpc.StatusCode.CANCELLED}
"""A stream the server cancelled (its client read nothing for the server's idle period,
e.g. a long evaluation pause) is reopened at the next index like a broken one."""
_DTYPES = {pb.DTYPE_UINT8: np.uint8, pb.DTYPE_INT32: np.int32, pb.DTYPE_INT64: np.int64, pb.DTYPE_FLOAT32: np.float32}
_SPLITS = {"train": pb.SPLIT_TRAIN, "valid": pb.SPLIT_VALID, "test": pb.SPLIT_TEST}
_RESIZE = {"bilinear": pb.RESIZE_METHOD_BILINEAR, "antialias": pb.RESIZE_METHOD_ANTIALIAS,
           "fast_bilinear": pb.RESIZE_METHOD_FAST_BILINEAR, "tf2_bilinear": pb.RESIZE_METHOD_TF2_BILINEAR,
           "shorter_bicubic_center_crop": pb.RESIZE_METHOD_SHORTER_BICUBIC_CENTER_CROP,
           "legacy_bilinear": pb.RESIZE_METHOD_LEGACY_BILINEAR}
VTAB_RESIZE = "legacy_bilinear"
"""VTAB's default: the reference's pixels, ``tf.compat.v1.image.resize``'s legacy grid
(task_adaptation's data_loader); "tf2_bilinear" names TF2's half-pixel grid."""


def resize_name(code: int) -> str:
    """The client's name of a served ``ResizeMethod``: "legacy_bilinear", "tf2_bilinear", ..."""
    return pb.ResizeMethod.Name(code).removeprefix("RESIZE_METHOD_").lower()


class _Unreachable(grpc.RpcError):
    """Connecting timed out; treated like UNAVAILABLE (retried, then reported)."""

    def __init__(self, details: str) -> None:
        super().__init__(details)
        self._details = details

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return self._details


class SamplerClientError(RuntimeError):
    """A request the server refused, or a server that stayed unreachable; names both."""

    def __init__(self, message: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        self.code = code


_SUPPORT_IMAGES = pb.Episode.DESCRIPTOR.fields_by_name["support_images"].number
_QUERY_IMAGES = pb.Episode.DESCRIPTOR.fields_by_name["query_images"].number
_EPISODE_TENSORS = frozenset({_SUPPORT_IMAGES, _QUERY_IMAGES})
_BATCH_IMAGES = pb.Batch.DESCRIPTOR.fields_by_name["images"].number
_BATCH_TENSORS = frozenset({_BATCH_IMAGES})


def _raw_array(tensor: RawTensor, maps: SegmentMaps | None = None) -> np.ndarray:
    data = tensor.data if tensor.segment is None else (maps or SegmentMaps()).view(tensor.segment)
    return np.frombuffer(data, dtype=_DTYPES[tensor.dtype]).reshape(tensor.shape)


def to_array(tensor: pb.Tensor, maps: SegmentMaps | None = None) -> np.ndarray:
    """Zero-copy view of a wire tensor (read-only; copy it to modify): of the message, or
    of the shared-memory segment it names (mapped and released through ``maps``, which
    the tensors of one reply share).

    Raises:
        SegmentLost: the tensor's segment is gone (the reply must be asked for again).
    """
    if tensor.HasField("segment"):
        segment = tensor.segment
        data = (maps or SegmentMaps()).view(SegmentRef(segment.name, segment.offset, segment.size))
    else:
        data = tensor.data
    return np.frombuffer(data, dtype=_DTYPES[tensor.dtype]).reshape(tuple(tensor.shape))


class _LostReply:
    """What a reply whose shared-memory segment was gone parses to: its stream is reopened
    at that index (a deserializer must not raise: gRPC would end the call as INTERNAL)."""

    def __init__(self, detail: str) -> None:
        self.detail = detail


def _guarded(parse: Any) -> Any:
    def run(data: bytes) -> Any:
        try:
            return parse(data)
        except SegmentLost as error:
            return _LostReply(str(error))

    return run


def _same_host_setting(value: bool | None) -> bool:
    """``same_host`` as given, else ``SAMPLER_SAME_HOST`` (unset: auto, i.e. on where it works)."""
    if value is not None:
        return bool(value)
    raw = os.environ.get("SAMPLER_SAME_HOST", "").strip().lower()
    if raw in ("", "auto", "1", "on", "true", "yes"):
        return True
    if raw in ("0", "off", "false", "no"):
        return False
    raise ValueError(f"SAMPLER_SAME_HOST: got {raw!r}, expected auto, on or off (or 1 / 0)")


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

    @classmethod
    def from_bytes(cls, data: bytes, request: pb.EpisodeRequest | None = None) -> "EpisodeArrays":
        """Parse a serialised Episode; pixel arrays are zero-copy views of ``data``."""
        rest, tensors = split_tensors(data, _EPISODE_TENSORS)
        message = pb.Episode.FromString(rest)
        maps = SegmentMaps()
        arrays = {field: _raw_array(tensor, maps) for field, tensor in tensors.items()}
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
            split=pb.Split.Name(message.split).removeprefix("SPLIT_").lower(),
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
        images = _raw_array(tensors[_BATCH_IMAGES], maps) if _BATCH_IMAGES in tensors else to_array(message.images, maps)
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
        if self.split not in _SPLITS:
            raise ValueError(f"split: got {self.split!r}, expected one of {', '.join(_SPLITS)}")
        if self.resize not in _RESIZE:
            raise ValueError(f"resize: got {self.resize!r}, expected one of {', '.join(_RESIZE)}")
        config = pb.EpisodeConfig(**dict(self.config))
        for name, value in (("num_ways", self.ways), ("num_support", self.shots), ("num_query", self.query)):
            if value is not None:
                setattr(config, name, value)
        return pb.EpisodeRequest(
            sources=list(self.sources), preset=self.preset, split=_SPLITS[self.split], config=config, seed=self.seed,
            images=pb.ImageOptions(image_size=self.image_size, mode=pb.IMAGE_MODE_DECODED, resize=_RESIZE[self.resize]),
        )


def batch_request(source: str, split: str, batch_size: int, *, seed: int = 0, image_size: int = 84,
                  resize: str = "bilinear", preset: str = "") -> pb.StreamBatchesRequest:
    """The StreamBatches request of a split (without its index window); names checked by the server."""
    if split not in _SPLITS:
        raise ValueError(f"split: got {split!r}, expected one of {', '.join(_SPLITS)}")
    if resize not in _RESIZE:
        raise ValueError(f"resize: got {resize!r}, expected one of {', '.join(_RESIZE)}")
    return pb.StreamBatchesRequest(
        source=source, split=_SPLITS[split], seed=seed, batch_size=batch_size, preset=preset,
        images=pb.ImageOptions(image_size=image_size, mode=pb.IMAGE_MODE_DECODED, resize=_RESIZE[resize]),
    )


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 8          # consecutive failed attempts before giving up
    initial_backoff: float = 0.2   # seconds
    max_backoff: float = 5.0
    multiplier: float = 2.0


def _tls_material(ca: str | Path | None, cert: str | Path | None,
                  key: str | Path | None) -> tuple[bytes, bytes | None, bytes | None] | None:
    """(CA, key, certificate chain) as PEM bytes, or None for plaintext. Bytes, not
    credentials, so that a client pickles into DataLoader workers."""
    if ca is None:
        if cert is not None or key is not None:
            raise ValueError("tls_cert/tls_key: a client certificate needs tls_ca (the CA of the server's certificate)")
        return None
    if (cert is None) != (key is None):
        raise ValueError("tls_cert and tls_key: give both or neither")

    def read(path: str | Path, what: str) -> bytes:
        try:
            return Path(path).read_bytes()
        except OSError as error:
            raise ValueError(f"{what}: cannot read {path} ({error.strerror or error})") from None

    return (read(ca, "tls_ca"), read(key, "tls_key") if key is not None else None,
            read(cert, "tls_cert") if cert is not None else None)


# ---- VTAB-1k ------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskBatchArrays:
    """One VTAB task batch: ``images`` uint8 [B, S, S, 3] (0..255), ``labels`` int64 [B]
    task labels; ``split_fingerprint`` is the split's, as ``sampler-server vtab split`` prints."""

    task: str
    split: str
    index: int
    epoch: int
    fingerprint: str
    split_fingerprint: str
    images: np.ndarray
    labels: np.ndarray
    record_ids: tuple[int, ...]
    num_classes: int
    last: bool
    image_size: int = 0
    resize: str = ""  # the resize the server applied, e.g. "legacy_bilinear"

    @classmethod
    def from_bytes(cls, data: bytes) -> "TaskBatchArrays":
        message = pb.TaskBatch.FromString(data)
        maps = SegmentMaps()
        return cls(message.task, message.split, message.index, message.epoch, message.fingerprint,
                   message.split_fingerprint, to_array(message.images, maps), to_array(message.labels, maps),
                   tuple(message.record_ids), message.num_classes, message.last, message.image_size,
                   resize_name(message.resize))


@dataclass(frozen=True)
class TaskEpisodeArrays:
    """A VTAB task as one full-way episode: the support split then the query split, whole,
    assembled from the server's chunks (uint8 images, int64 task labels)."""

    task: str
    fingerprint: str
    support_fingerprint: str
    query_fingerprint: str
    support_images: np.ndarray
    support_labels: np.ndarray
    support_record_ids: tuple[int, ...]
    query_images: np.ndarray
    query_labels: np.ndarray
    query_record_ids: tuple[int, ...]
    num_classes: int
    image_size: int = 0
    resize: str = ""  # the resize the server applied, e.g. "legacy_bilinear"


@dataclass(frozen=True)
class _Chunk:
    """One TaskEpisodeChunk with its arrays (mapped on receipt, as every reply is)."""

    message: pb.TaskEpisodeChunk
    images: np.ndarray
    labels: np.ndarray

    @property
    def index(self) -> int:
        return self.message.index


def _chunk(data: bytes) -> _Chunk:
    message = pb.TaskEpisodeChunk.FromString(data)
    maps = SegmentMaps()
    return _Chunk(message, to_array(message.images, maps), to_array(message.labels, maps))


def task_batch_request(task: str, split: str, batch_size: int, *, shuffle: bool, seed: int = 0,
                       image_size: int = 224, resize: str = VTAB_RESIZE, store: str = "", regime: int = 0,
                       regime_seed: int = 0, regime_sampling: str = "") -> pb.StreamTaskBatchesRequest:
    """The StreamTaskBatches request of a task split (without its index window); names checked by the server.
    With ``regime`` > 0, ``split`` names a part of that data regime ("train", "val", or "trainval": the
    whole regime) drawn with ``regime_seed`` and ``regime_sampling`` (see ``get_regime``)."""
    if resize not in _RESIZE:
        raise ValueError(f"resize: got {resize!r}, expected one of {', '.join(_RESIZE)}")
    return pb.StreamTaskBatchesRequest(
        task=task, split=split, seed=seed, batch_size=batch_size, shuffle=shuffle, store=store,
        images=pb.ImageOptions(image_size=image_size, mode=pb.IMAGE_MODE_DECODED, resize=_RESIZE[resize]),
        regime=regime, regime_seed=regime_seed, regime_sampling=regime_sampling,
    )


class VtabClientMixin:
    """VTAB-1k calls of ``SamplerClient`` (resumable streams, retried unary calls)."""

    def list_tasks(self, task: str = "") -> list[pb.TaskSummary]:
        """The VTAB tasks served (one entry per task and store), with split sizes and availability."""
        return list(self._call("ListTasks", pb.ListTasksRequest(task=task)).tasks)  # type: ignore[attr-defined]

    def _open(self, method: str, request_type: Any, parse: Any, request: Any) -> Iterator[Any]:
        self._connect()  # type: ignore[attr-defined]
        if request.HasField("images"):
            request.images.same_host_token = self._same_host_token()  # type: ignore[attr-defined]
        call = self._channel.unary_stream(  # type: ignore[attr-defined]
            f"/sampler.v1.Sampler/{method}", request_serializer=request_type.SerializeToString,
            response_deserializer=_guarded(parse))
        return call(request, metadata=self._metadata)  # type: ignore[attr-defined]

    def _task_batches(self, base: pb.StreamTaskBatchesRequest, start: int, count: int) -> Iterator[TaskBatchArrays]:
        def open_stream(next_index: int, remaining: int) -> Iterator[TaskBatchArrays]:
            request = pb.StreamTaskBatchesRequest()
            request.CopyFrom(base)
            request.start_index, request.count = next_index, remaining
            return self._open("StreamTaskBatches", pb.StreamTaskBatchesRequest, TaskBatchArrays.from_bytes, request)

        for batch in self._resumable(open_stream, start, count, 1, "StreamTaskBatches"):  # type: ignore[attr-defined]
            yield batch
            if batch.last and not base.shuffle:
                return

    def task_batches(self, task: str, split: str, batch_size: int, seed: int = 0, start: int = 0, count: int = 0,
                     image_size: int = 224, resize: str = VTAB_RESIZE, store: str = "", regime: int = 0,
                     regime_seed: int = 0, regime_sampling: str = "") -> Iterator[TaskBatchArrays]:
        """Shuffled batches of a VTAB task split (training), resumable by batch index; count 0 = unbounded.
        With ``regime`` > 0: of that part of the data regime (``get_regime``)."""
        base = task_batch_request(task, split, batch_size, shuffle=True, seed=seed, image_size=image_size,
                                  resize=resize, store=store, regime=regime, regime_seed=regime_seed,
                                  regime_sampling=regime_sampling)
        return self._task_batches(base, start, count)

    def eval_batches(self, task: str, split: str, batch_size: int, start: int = 0, image_size: int = 224,
                     resize: str = VTAB_RESIZE, store: str = "", regime: int = 0,
                     regime_seed: int = 0, regime_sampling: str = "") -> Iterator[TaskBatchArrays]:
        """Every example of a VTAB task split (or, with ``regime`` > 0, of that part of the data
        regime) once, in order (the last batch short)."""
        base = task_batch_request(task, split, batch_size, shuffle=False, image_size=image_size, resize=resize,
                                  store=store, regime=regime, regime_seed=regime_seed,
                                  regime_sampling=regime_sampling)
        return self._task_batches(base, start, 0)

    def get_regime(self, task: str, n: int, seed: int, split: str = "train", store: str = "", target: str = "",
                   loss: str = "", sampling: str = "") -> pb.Regime:
        """A data regime of a task without images: the record ids and labels of its ``split``
        ("train" or "val"), its fingerprint, the blind guess and the task's default regimes
        (``n`` = 0: only the default regimes). ``target`` (a numeric attribute of the store)
        adds its regression blind guess under ``loss`` ("l2", the default, or "l1"). ``sampling``:
        "uniform" (the server's default) or "stratified" draw (RegimeRequest.sampling)."""
        request = pb.RegimeRequest(task=task, n=n, seed=seed, split=split, store=store, target=target, loss=loss,
                                   sampling=sampling)
        return self._call("GetRegime", request)  # type: ignore[attr-defined]

    def task_episode(self, task: str, image_size: int = 224, resize: str = VTAB_RESIZE, chunk_size: int = 0,
                     support_split: str = "", query_split: str = "", store: str = "") -> TaskEpisodeArrays:
        """A VTAB task as one full-way episode (support = train800val200, query = test by default),
        assembled from chunks; a broken stream resumes at the next chunk."""
        if resize not in _RESIZE:
            raise ValueError(f"resize: got {resize!r}, expected one of {', '.join(_RESIZE)}")
        base = pb.StreamTaskEpisodeRequest(
            task=task, chunk_size=chunk_size, support_split=support_split, query_split=query_split, store=store,
            images=pb.ImageOptions(image_size=image_size, mode=pb.IMAGE_MODE_DECODED, resize=_RESIZE[resize]))

        def open_stream(next_index: int, remaining: int) -> Iterator[_Chunk]:
            request = pb.StreamTaskEpisodeRequest()
            request.CopyFrom(base)
            request.start_index = next_index
            return self._open("StreamTaskEpisode", pb.StreamTaskEpisodeRequest, _chunk, request)

        parts: dict[int, list[_Chunk]] = {pb.EPISODE_PART_SUPPORT: [], pb.EPISODE_PART_QUERY: []}
        first = None
        for chunk in self._resumable(open_stream, 0, 0, 1, "StreamTaskEpisode"):  # type: ignore[attr-defined]
            first = first or chunk.message
            parts[chunk.message.part].append(chunk)
            if chunk.message.last:
                break
        assert first is not None

        def join(chunks: list[_Chunk], what: str) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
            empty = np.zeros((0, image_size, image_size, 3), np.uint8)
            images = np.concatenate([c.images for c in chunks]) if chunks else empty
            labels = np.concatenate([c.labels for c in chunks]) if chunks else np.zeros(0, np.int64)
            return images, labels, tuple(r for c in chunks for r in c.message.record_ids)

        support = join(parts[pb.EPISODE_PART_SUPPORT], "support")
        query = join(parts[pb.EPISODE_PART_QUERY], "query")
        return TaskEpisodeArrays(first.task, first.fingerprint, first.support_fingerprint, first.query_fingerprint,
                                 *support, *query, first.num_classes, first.image_size,
                                 resize_name(first.resize))

    def report_task(self, run_id: str, task: str, split: str, accuracy: float, examples: int, *,
                    run_config: Mapping[str, Any] | None = None, role: str = "", regime: int = 0,
                    regime_seed: int = 0) -> pb.ReportMetricsResponse:
        """Report one VTAB task's top-1 ``accuracy`` (in [0, 1]) over ``examples`` of ``split``; idempotent.
        ``role`` ("model", "scratch", "max"; empty = "model") and the data ``regime`` (0 = the task's
        usual training split) with its ``regime_seed`` key the result (control baselines)."""
        report = pb.MetricReport(run_id=run_id, protocol="vtab-task", task=task, task_split=split,
                                 examples=examples, metrics={"accuracy": float(accuracy)}, role=role,
                                 regime=regime, regime_seed=regime_seed)
        return self.report([report], run_config_json=run_config_json(run_config))  # type: ignore[attr-defined]

    def get_vtab_report(self, run_ids: Sequence[str], table: str = "vtab", fmt: str = "table",
                        benchmark: str = "", split: str = "") -> str:
        """The VTAB ("vtab") or VTAB+MD ("vtab-md") table of runs."""
        request = pb.GetReportRequest(run_ids=list(run_ids), format=fmt, table=table, vtab_benchmark=benchmark,
                                      vtab_split=split)
        return self._call("GetReport", request).text  # type: ignore[attr-defined]


# ---- ImageNet-CoG -------------------------------------------------------------------------


_COG_IMAGES = pb.CogBatch.DESCRIPTOR.fields_by_name["images"].number


@dataclass(frozen=True)
class CogBatchArrays:
    """One batch of a CoG level split, named as the CogBatch message names its fields:
    ``images`` uint8 [B, S, S, 3] (0..255; [0, S, S, 3] when ``encoded``), ``labels``
    int64 [B] (label i = the split's wnids[i]), ``record_ids`` in split order;
    ``encoded`` holds the stored bytes when they were asked for, else None."""

    level: str
    split: str
    shots: int
    seed: int
    index: int
    fingerprint: str
    split_fingerprint: str
    split_size: int
    images: np.ndarray
    labels: np.ndarray
    record_ids: tuple[int, ...]
    num_classes: int
    last: bool
    store: str
    image_size: int
    encoded: pb.EncodedImages | None = None

    @classmethod
    def from_bytes(cls, data: bytes) -> "CogBatchArrays":
        """Parse a serialised CogBatch; the image array is a zero-copy view of ``data``."""
        rest, tensors = split_tensors(data, frozenset({_COG_IMAGES}))
        message = pb.CogBatch.FromString(rest)
        if _COG_IMAGES in tensors:
            images = _raw_array(tensors[_COG_IMAGES])
        elif message.HasField("images"):
            images = to_array(message.images)
        else:
            images = np.zeros((0, message.image_size, message.image_size, 3), np.uint8)
        labels = to_array(message.labels) if message.HasField("labels") else np.zeros(0, np.int64)
        return cls(message.level, message.split, message.shots, message.seed, message.index, message.fingerprint,
                   message.split_fingerprint, message.split_size, images, labels,
                   tuple(message.record_ids), message.num_classes, message.last, message.store, message.image_size,
                   message.encoded if message.HasField("encoded") else None)


def cog_split_request(level: str, split: str, shots: int = 0, seed: int = 0, level_size: int = 0,
                      min_images: int = 0, levels_file: str = "", concepts_split_file: str = "") -> pb.CogSplitRequest:
    """The request naming one CoG level split; names and values are checked by the server
    (level_size / min_images 0 = the paper's 1000 / 782; levels_file / concepts_split_file:
    naver/cog's files, as paths on the server, absolute or relative to its data directory)."""
    return pb.CogSplitRequest(level=level, split=split, shots=shots, seed=seed, level_size=level_size,
                              min_images=min_images, levels_file=levels_file, concepts_split_file=concepts_split_file)


class CogClientMixin:
    """ImageNet-CoG calls of ``SamplerClient``: the levels, one level split's record ids and
    labels, and its images in split order (a broken stream resumes at the next batch)."""

    def cog_levels(self, level_size: int = 0, min_images: int = 0, levels_file: str = "",
                   concepts_split_file: str = "") -> list[pb.CogLevelSummary]:
        """IN-1K (when an ILSVRC store is served) then L1..L5 (when an IN-21K store is), with
        their concepts, sizes and similarity ranges, for the level configuration (or naver/cog's
        files: paths on the server)."""
        return list(self.cog_levels_response(level_size, min_images, levels_file, concepts_split_file).levels)

    def cog_levels_response(self, level_size: int = 0, min_images: int = 0, levels_file: str = "",
                            concepts_split_file: str = "") -> pb.ListCogLevelsResponse:
        """The whole ListCogLevels reply: the levels plus the configuration as the server
        resolved it, the number of eligible concepts and the levels' fingerprint."""
        request = pb.ListCogLevelsRequest(level_size=level_size, min_images=min_images, levels_file=levels_file,
                                          concepts_split_file=concepts_split_file)
        return self._call("ListCogLevels", request)  # type: ignore[attr-defined]

    def cog_split(self, level: str, split: str, shots: int = 0, seed: int = 0, level_size: int = 0,
                  min_images: int = 0, levels_file: str = "", concepts_split_file: str = "") -> pb.CogSplit:
        """One level split without images: record ids, labels (label i = wnids[i]) and the
        fingerprint ``sampler-server cog split`` prints for it."""
        request = cog_split_request(level, split, shots, seed, level_size, min_images, levels_file,
                                    concepts_split_file)
        return self._call("GetCogSplit", request)  # type: ignore[attr-defined]

    def stream_cog_batches(self, level: str, split: str, shots: int = 0, seed: int = 0, batch_size: int = 256,
                           start_index: int = 0, count: int = 0, image_size: int = 224,
                           resize: str = "shorter_bicubic_center_crop", level_size: int = 0, min_images: int = 0,
                           encoded: bool = False, levels_file: str = "",
                           concepts_split_file: str = "") -> Iterator[CogBatchArrays]:
        """Batches start_index, start_index + 1, ... of a level split (count of them; 0 = to
        the end, which is the batch with ``last`` set), every image once in split order,
        ``batch_size`` per batch (the last one short). Images are uint8 [B, S, S, 3], or
        the stored bytes in ``batch.encoded`` when ``encoded``. An empty split (the val
        split of a 1-shot subset) is one empty batch with ``last`` set."""
        if resize not in _RESIZE:
            raise ValueError(f"resize: got {resize!r}, expected one of {', '.join(_RESIZE)}")
        mode = pb.IMAGE_MODE_ENCODED if encoded else pb.IMAGE_MODE_DECODED
        base = pb.StreamCogBatchesRequest(
            split=cog_split_request(level, split, shots, seed, level_size, min_images, levels_file,
                                    concepts_split_file), batch_size=batch_size,
            images=pb.ImageOptions(image_size=image_size, mode=mode, resize=_RESIZE[resize]))

        def open_stream(next_index: int, remaining: int) -> Iterator[CogBatchArrays]:
            request = pb.StreamCogBatchesRequest()
            request.CopyFrom(base)
            request.start_index, request.count = next_index, remaining
            return self._open("StreamCogBatches", pb.StreamCogBatchesRequest,  # type: ignore[attr-defined]
                              CogBatchArrays.from_bytes, request)

        return self._resumable(open_stream, start_index, count, 1, "StreamCogBatches",  # type: ignore[attr-defined]
                               until_last=True)


class SamplerClient(VtabClientMixin, CogClientMixin):
    """One channel to a server; safe to use from one thread per stream."""

    def __init__(
        self,
        address: str,
        *,
        retry: RetryPolicy = RetryPolicy(),
        prefetch: int = 2,
        max_message_mb: int = 1024,
        connect_timeout: float = 10.0,
        call_timeout: float = 120.0,
        tls_ca: str | Path | None = None,
        tls_cert: str | Path | None = None,
        tls_key: str | Path | None = None,
        token: str | None = None,
        same_host: bool | None = None,
        liveness: Liveness | None = None,
    ) -> None:
        """Args (beyond the connection's tuning):
            tls_ca: PEM file of the CA that signed the server's certificate; given, the
                channel uses TLS (default: ``SAMPLER_TLS_CA``; neither: plaintext).
            tls_cert, tls_key: this client's certificate and key (PEM files), for a server
                that requires client certificates (default: ``SAMPLER_TLS_CERT`` / ``_KEY``).
            token: the bearer token sent with every call (default: ``SAMPLER_TOKEN``).
            same_host: receive pixels through shared memory when the server is on this
                host (True, the default: where the server's probe shows it works, else
                plainly; False: always in the messages). Default: ``SAMPLER_SAME_HOST``
                (``0`` / ``off`` turns it off).
            liveness: keepalive and the wait for each stream message, which notice a
                silent server (``clients.balancing.Liveness``; default 10 + 5 s, 60 s).

        Raises:
            ValueError: an address that is not HOST:PORT or a replicas target
                (``clients.balancing.parse_target``), a TLS file that cannot be read, a
                certificate without its key, either without a CA, or a
                ``SAMPLER_SAME_HOST`` that is not on or off.
        """
        try:
            self._target = parse_target(address)
        except ValueError as error:
            raise ValueError(f"address: {error}") from None
        self.address = address
        self.liveness = liveness if liveness is not None else Liveness()
        self._tls = _tls_material(
            tls_ca or os.environ.get("SAMPLER_TLS_CA") or None,
            tls_cert or os.environ.get("SAMPLER_TLS_CERT") or None,
            tls_key or os.environ.get("SAMPLER_TLS_KEY") or None,
        )
        token = token or os.environ.get("SAMPLER_TOKEN", "").strip() or None
        self._metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()
        self.call_timeout = call_timeout
        self.retry = retry
        self.prefetch = max(1, prefetch)
        self.connect_timeout = connect_timeout
        self._options = [
            ("grpc.max_receive_message_length", max_message_mb << 20),
            ("grpc.max_send_message_length", 64 << 20),
            *channel_options(self._target, self.liveness),
        ]
        self._channel: grpc.Channel | None = None
        self._stub: pb_grpc.SamplerStub | None = None
        self.same_host = _same_host_setting(same_host)
        self._same_host: str | None = None  # the server's probe token ("" = plain); None = not asked yet
        self._lost_in_a_row = 0

    def _connect(self) -> pb_grpc.SamplerStub:
        """A stub on a channel that is connected now (never waits past connect_timeout)."""
        if self._stub is None:
            if self._tls is None:
                channel = grpc.insecure_channel(self.address, options=self._options)
            else:
                ca, key, chain = self._tls
                credentials = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=chain)
                channel = grpc.secure_channel(self.address, credentials, options=self._options)
            try:
                grpc.channel_ready_future(channel).result(timeout=self.connect_timeout)
            except grpc.FutureTimeoutError:
                channel.close()
                tls = " over TLS (is the CA the one that signed the server's certificate? does the server use TLS?)"
                raise _Unreachable(f"no server answered at {self.address} within {self.connect_timeout:g} s"
                                   f"{tls if self._tls is not None else ''}") from None
            self._channel = channel
            self._stub = pb_grpc.SamplerStub(channel)
        return self._stub

    def _reset(self) -> None:
        if self._channel is not None:
            self._channel.close()
        self._channel = None
        self._stub = None
        self._same_host = None  # another server may answer now: ask again

    # ---- same-host transport -----------------------------------------------------------

    def _same_host_token(self) -> str:
        """The token that asks for pixels in shared memory, or "" (plain messages)."""
        if not self.same_host:
            return ""
        token = self._same_host
        if token is None:
            token = self._negotiate()
        return token or ""

    def _negotiate(self) -> str | None:
        """Open the server's probe segment: its token where that works from here, "" where
        it cannot (another host, another user, an older server), None when the server did
        not answer (ask again next time)."""
        try:
            offer = self._connect().OfferSameHost(pb.SameHostRequest(), timeout=self.call_timeout,
                                                  metadata=self._metadata)
        except grpc.RpcError as error:
            if error.code() in STREAM_RETRYABLE:
                return None
            offer = pb.SameHostOffer()  # UNIMPLEMENTED (an older server), refused: plain
        token = read_probe(offer.probe_segment) if offer.probe_segment else None
        self._same_host = token or ""
        return self._same_host

    @property
    def transport(self) -> str:
        """"same-host" or "grpc": how pixels come from this server to this process."""
        return "same-host" if self._same_host_token() else "grpc"

    def _lost_reply(self, detail: str, what: str) -> None:
        """A reply's segment was gone; twice in a row, segments are not reliable from here."""
        self._lost_in_a_row += 1
        if self._lost_in_a_row >= 2 and self.same_host:
            self.same_host = False
            warnings.warn(f"{what} on {self.address}: {detail}, twice in a row; receiving pixels in the messages "
                          "from now on (same_host=False)", RuntimeWarning, stacklevel=2)

    def close(self) -> None:
        self._reset()

    def __enter__(self) -> "SamplerClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_channel"] = None
        state["_stub"] = None
        state["_same_host"] = None  # a process elsewhere must open the probe itself
        return state

    # ---- unary calls, retried --------------------------------------------------------

    def _call(self, method: str, request: Any) -> Any:
        attempt = 0
        while True:
            try:
                return getattr(self._connect(), method)(request, timeout=self.call_timeout, metadata=self._metadata)
            except grpc.RpcError as error:
                attempt = self._after_failure(error, attempt, method)

    def _after_failure(self, error: grpc.RpcError, attempt: int, what: str,
                       retryable: frozenset[grpc.StatusCode] = RETRYABLE) -> int:
        code = error.code()
        if code not in retryable:
            raise SamplerClientError(f"{what} on {self.address}: {code.name}: {error.details()}", code) from None
        attempt += 1
        if attempt >= self.retry.max_attempts:
            raise SamplerClientError(
                f"{what}: server {self.address} unreachable after {attempt} attempts ({code.name}: {error.details()})",
                code,
            ) from None
        self._reset()
        delay = min(self.retry.max_backoff, self.retry.initial_backoff * self.retry.multiplier ** (attempt - 1))
        time.sleep(delay)
        return attempt

    def list_sources(self, preset: str = "") -> list[pb.SourceSummary]:
        """Every served store, its class counts under ``preset``'s class splits."""
        return list(self._call("ListSources", pb.ListSourcesRequest(preset=preset)).sources)

    def preset_sources(self, preset: str, split: str) -> tuple[str, ...]:
        """The source kinds ``preset`` uses for ``split``, as the server knows them (sorted by name)."""
        if split not in _SPLITS:
            raise ValueError(f"split: got {split!r}, expected one of {', '.join(_SPLITS)}")
        reply = self._call("ListSources", pb.ListSourcesRequest(preset=preset, split=_SPLITS[split]))
        return tuple(reply.preset_sources)

    def describe_source(self, name: str, preset: str = "") -> pb.SourceDescription:
        """One source (a store name or source kind, resolved by the server) with its classes."""
        return self._call("DescribeSource", pb.DescribeSourceRequest(name=name, preset=preset))

    def episode(self, spec: EpisodeSpec, index: int) -> EpisodeArrays:
        """Episode ``index`` of ``spec``'s request (it keeps the request, for reporting)."""
        request = spec.to_request()
        while True:
            sent = pb.GetEpisodeRequest(request=request, index=index)
            sent.request.images.same_host_token = self._same_host_token()
            try:
                return EpisodeArrays.from_message(self._call("GetEpisode", sent), request)
            except SegmentLost as error:
                self._lost_reply(str(error), "GetEpisode")

    def report(self, reports: Sequence[pb.MetricReport], run_config_json: str = "") -> pb.ReportMetricsResponse:
        """Idempotent on the server, so retrying after a lost reply is safe."""
        return self._call("ReportMetrics", pb.ReportMetricsRequest(reports=list(reports), run_config_json=run_config_json))

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

    def get_report(self, run_ids: Sequence[str], fmt: str = "table") -> str:
        return self._call("GetReport", pb.GetReportRequest(run_ids=list(run_ids), format=fmt)).text

    # ---- streams, resumable ------------------------------------------------------------

    def episodes(self, spec: EpisodeSpec, start: int = 0, count: int = 0, step: int = 1) -> Iterator[EpisodeArrays]:
        """Episodes start, start + step, ... (count of them; 0 = unbounded), resumed across failures."""
        request = spec.to_request()

        def parse(data: bytes) -> EpisodeArrays:
            return EpisodeArrays.from_bytes(data, request)

        def open_stream(next_index: int, remaining: int) -> Iterator[EpisodeArrays]:
            self._connect()
            assert self._channel is not None
            call = self._channel.unary_stream(
                "/sampler.v1.Sampler/StreamEpisodes",
                request_serializer=pb.StreamEpisodesRequest.SerializeToString,
                response_deserializer=_guarded(parse),
            )
            sent = pb.StreamEpisodesRequest(request=request, start_index=next_index, count=remaining, index_step=step)
            sent.request.images.same_host_token = self._same_host_token()  # never in ``request``: reports keep it out
            return call(sent, metadata=self._metadata)

        yield from self._resumable(open_stream, start, count, step, "StreamEpisodes")

    def batches(
        self, source: str, split: str, batch_size: int, seed: int = 0, start: int = 0, count: int = 0, step: int = 1,
        image_size: int = 84, resize: str = "bilinear", preset: str = "",
    ) -> Iterator[BatchArrays]:
        """Plain labelled batches of a split, resumed across failures like ``episodes``.
        ``source``: a store name or source kind; ``preset``: whose class splits apply."""
        base = batch_request(source, split, batch_size, seed=seed, image_size=image_size, resize=resize,
                             preset=preset)

        def open_stream(next_index: int, remaining: int) -> Iterator[BatchArrays]:
            self._connect()
            assert self._channel is not None
            call = self._channel.unary_stream(
                "/sampler.v1.Sampler/StreamBatches",
                request_serializer=pb.StreamBatchesRequest.SerializeToString,
                response_deserializer=_guarded(BatchArrays.from_bytes),
            )
            request = pb.StreamBatchesRequest()
            request.CopyFrom(base)
            request.start_index, request.count, request.index_step = next_index, remaining, step
            request.images.same_host_token = self._same_host_token()
            return call(request, metadata=self._metadata)

        yield from self._resumable(open_stream, start, count, step, "StreamBatches")

    def _resumable(self, open_stream: Any, start: int, count: int, step: int, what: str,
                   until_last: bool = False) -> Iterator[Any]:
        """Yield messages in index order with prefetch; reopen after retryable failures.
        ``until_last``: the stream is finite and ends with the message that has ``last`` set."""
        buffer: queue.Queue = queue.Queue(maxsize=self.prefetch)
        stop = threading.Event()
        done = object()

        def pump() -> None:
            next_index, delivered, attempt = start, 0, 0
            try:
                while not stop.is_set() and (not count or delivered < count):
                    try:
                        call = open_stream(next_index, count - delivered if count else 0)
                        stream = watch_stream(call, self.liveness, what=what, address=self.address,
                                              start=next_index, step=step)
                        lost = False
                        for message in stream:
                            if isinstance(message, _LostReply):  # reclaimed before we mapped it: ask again
                                stream.cancel()
                                self._lost_reply(message.detail, what)  # type: ignore[attr-defined]
                                lost = True
                                break
                            if message.index != next_index:
                                raise SamplerClientError(
                                    f"{what}: server sent index {message.index}, expected {next_index}"
                                )
                            attempt = 0
                            while not stop.is_set():
                                try:
                                    buffer.put(message, timeout=0.1)
                                    break
                                except queue.Full:
                                    continue
                            if stop.is_set():
                                stream.cancel()
                                return
                            delivered += 1
                            next_index += step
                            self._lost_in_a_row = 0  # type: ignore[attr-defined]
                            if until_last and message.last:
                                buffer.put(done)
                                return
                        if lost:
                            continue
                        if count and delivered < count:
                            raise SamplerClientError(f"{what}: stream ended after {delivered} of {count} items")
                        if not count:
                            continue  # an unbounded stream never ends normally; reopen
                    except grpc.RpcError as error:
                        if stop.is_set():
                            return
                        attempt = self._after_failure(error, attempt, what, STREAM_RETRYABLE)
                buffer.put(done)
            except BaseException as error:  # delivered to the consumer, raised there
                buffer.put(error)

        worker = threading.Thread(target=pump, name="sampler-prefetch", daemon=True)
        worker.start()
        try:
            while True:
                item = buffer.get()
                if item is done:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()
            worker.join(timeout=5)


def shard_window(start: int, count: int, shard: int, num_shards: int) -> tuple[int, int, int]:
    """(start, count, step) of shard ``shard`` of indices [start, start + count): every
    index i with (i - start) % num_shards == shard, in order. ``count`` 0 = unbounded;
    a bounded window with no index for this shard returns count -1 (nothing to do)."""
    if not 0 <= shard < num_shards:
        raise ValueError(f"shard: got {shard}, expected 0 to {num_shards - 1}")
    if count == 0:
        return start + shard, 0, num_shards
    mine = max(0, -(-(count - shard) // num_shards))
    return start + shard, (mine if mine else -1), num_shards

