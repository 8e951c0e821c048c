"""``tf.data.Dataset`` sources over the service, with a full output signature.

Elements (dicts of tensors), per protocol the same keys as the PyTorch adapter's items
(``clients.torch.dataset``, ``docs/api.md``); images are tf.uint8 NHWC by default and
tf.float32 in [0, 1] with ``dtype="float32"`` (``clients.adapter_options``):

- episodes: ``support_images`` / ``query_images`` tf.uint8 [N, S, S, 3] (NHWC, RGB,
  values 0..255, S = the spec's ``image_size``), ``support_labels`` /
  ``query_labels`` tf.int64 [N] with values 0 .. ways - 1, ``index`` tf.int64,
  ``fingerprint`` / ``source`` tf.string, ``ways`` tf.int32 and ``request``
  tf.string (the serialised request: an element can be passed to
  ``SamplerClient.report_episode`` as it is).
- episodes with ``shape_buckets=True`` (``packed_episode_signature``): the episode in
  the bucketed layout (``clients.buckets``): ``images`` tf.uint8 [B, S, S, 3] (support
  rows, query rows, zero padding up to one of a few sizes), ``labels`` tf.int64 [B],
  ``support`` / ``query`` tf.int32 (the valid rows), ``support_images``,
  ``support_labels``, ``query_images``, ``query_labels`` (the valid rows, sliced) and
  the scalars above; a step that slices the valid rows (and counts only them in batch
  norm: ``clients.tf.models.valid_rows``) learns exactly what the unpadded one would.
- batches: ``images`` tf.uint8 [B, S, S, 3], ``labels`` tf.int64 [B] with values
  0 .. num_classes - 1, ``index`` tf.int64, ``fingerprint`` tf.string, ``num_classes`` tf.int32.
- VTAB task batches (``task_batch_dataset``): ``images`` tf.uint8 [B, S, S, 3] by default
  (0..255: convert on the device), tf.float32 in [0, 1] with ``dtype="float32"``;
  ``labels`` / ``record_ids`` tf.int64 [B], ``index`` tf.int64, ``fingerprint`` /
  ``split_fingerprint`` tf.string, ``num_classes`` tf.int32, ``last`` tf.bool. Training
  splits (``train...``) come shuffled (unbounded unless ``count`` is set), evaluation
  splits once in order, as the VTAB reference reads them; ``shuffle=True|False`` overrides.

Shards take indices exactly as the PyTorch adapter's ranks do (``clients.state.shard_window``),
so for the same request both adapters yield the same episodes, pixel for pixel.

Resume (``clients.state``): ``EpisodeSource`` / ``BatchSource`` hold the window's next
index. tf.data reads ahead, so the consumer says what it consumed:
``source.state_dict(last_index=int(element["index"]))``; a source of the same request
and window that loads the state makes a dataset of the rest of the window. The state
is the PyTorch datasets' state: either adapter resumes the other's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from clients.buckets import DEFAULT_RATIO, EpisodeBounds, Ladder, pack_episode
from clients.client import SamplerClient
from clients.adapter_options import check_image_dtype, connection_options, images_as, vtab_shuffles
from clients.protocols.md import EpisodeSpec, batch_request
from clients.protocols.vtab import TaskEpisodeArrays
from clients.state import StreamCursor, shard_window


def _image_spec(image_size: int, dtype: str) -> tf.TensorSpec:
    return tf.TensorSpec(shape=(None, image_size, image_size, 3), dtype=tf.as_dtype(check_image_dtype(dtype)))


def episode_signature(image_size: int, dtype: str = "uint8") -> dict[str, tf.TensorSpec]:
    """Elements of ``EpisodeSource(...).dataset()``."""
    image = _image_spec(image_size, dtype)
    label = tf.TensorSpec(shape=(None,), dtype=tf.int64)
    return {
        "support_images": image,
        "support_labels": label,
        "query_images": image,
        "query_labels": label,
        "index": tf.TensorSpec(shape=(), dtype=tf.int64),
        "fingerprint": tf.TensorSpec(shape=(), dtype=tf.string),
        "source": tf.TensorSpec(shape=(), dtype=tf.string),
        "ways": tf.TensorSpec(shape=(), dtype=tf.int32),
        "request": tf.TensorSpec(shape=(), dtype=tf.string),
    }


_VALID_ROWS = ("support_images", "support_labels", "query_images")
"""Keys of a bucketed element sliced out of ``images`` / ``labels`` after the generator."""


def packed_episode_signature(image_size: int, dtype: str = "uint8") -> dict[str, tf.TensorSpec]:
    """Elements of ``EpisodeSource(..., shape_buckets=True)``: the unbucketed keys plus
    ``images``, ``labels``, ``support``, ``query``."""
    return {
        "images": _image_spec(image_size, dtype),
        "labels": tf.TensorSpec(shape=(None,), dtype=tf.int64),
        "support": tf.TensorSpec(shape=(), dtype=tf.int32),
        "query": tf.TensorSpec(shape=(), dtype=tf.int32),
        **episode_signature(image_size, dtype),
    }


def _with_valid_rows(element: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    """A bucketed element with its support and query rows as their own tensors (slices
    along the first axis: TensorFlow shares the buffer, no copy)."""
    support, rows = element["support"], element["support"] + element["query"]
    return {**element, "support_images": element["images"][:support], "support_labels": element["labels"][:support],
            "query_images": element["images"][support:rows]}


def batch_signature(image_size: int, dtype: str = "uint8") -> dict[str, tf.TensorSpec]:
    """Elements of ``BatchSource(...).dataset()``."""
    return {
        "images": _image_spec(image_size, dtype),
        "labels": tf.TensorSpec(shape=(None,), dtype=tf.int64),
        "index": tf.TensorSpec(shape=(), dtype=tf.int64),
        "fingerprint": tf.TensorSpec(shape=(), dtype=tf.string),
        "num_classes": tf.TensorSpec(shape=(), dtype=tf.int32),
    }


def task_batch_signature(image_size: int, dtype: str = "uint8") -> dict[str, tf.TensorSpec]:
    """Elements of ``task_batch_dataset``."""
    return {
        "images": _image_spec(image_size, dtype),
        "labels": tf.TensorSpec(shape=(None,), dtype=tf.int64),
        "record_ids": tf.TensorSpec(shape=(None,), dtype=tf.int64),
        "index": tf.TensorSpec(shape=(), dtype=tf.int64),
        "fingerprint": tf.TensorSpec(shape=(), dtype=tf.string),
        "split_fingerprint": tf.TensorSpec(shape=(), dtype=tf.string),
        "num_classes": tf.TensorSpec(shape=(), dtype=tf.int32),
        "last": tf.TensorSpec(shape=(), dtype=tf.bool),
    }


class _Source:
    """A window of one request, this shard's part of it, and its resume state."""

    kind = ""

    def __init__(self, address: str, request: Any, start: int, count: int, shard: int, num_shards: int,
                 client_options: Mapping[str, Any] | None) -> None:
        shard_window(0, 0, shard, num_shards)  # validates the shard
        self.address = address
        self.shard, self.num_shards = shard, num_shards
        self.client_options = connection_options(client_options)
        self.cursor = StreamCursor(self.kind, request, start, count)

    def _window(self) -> tuple[int, int, int]:
        first, left = self.cursor.begin_pass()
        return shard_window(first, left, self.shard, self.num_shards)

    def state_dict(self, last_index: int) -> dict[str, Any]:
        """The resume state (JSON-able) once the element with ``index`` ``last_index`` is
        consumed (shards in lockstep)."""
        return self.cursor.state_dict(int(last_index), self.num_shards)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Datasets made from now on start at the state's next index."""
        self.cursor.load_state_dict(state)


class EpisodeSource(_Source):
    """Episodes ``start .. start + count - 1`` (count 0 = unbounded) of one request;
    ``dataset()`` makes the ``tf.data.Dataset`` of this shard from the next index;
    ``shape_buckets``: elements in the bucketed layout (see the module docstring), on the grid
    of ``bucket_ratio`` (the trainers' ``--bucket-ratio``)."""

    kind = "episodes"

    def __init__(self, address: str, spec: EpisodeSpec, *, start: int = 0, count: int = 0, shard: int = 0,
                 num_shards: int = 1, prefetch: int = 2, client_options: Mapping[str, Any] | None = None,
                 shape_buckets: bool = False, dtype: str = "uint8", bucket_ratio: float = DEFAULT_RATIO) -> None:
        self.spec = spec
        self.prefetch = prefetch
        self.dtype = check_image_dtype(dtype)
        self.ladder = (Ladder.for_bounds(EpisodeBounds.of_request(spec.to_request()), bucket_ratio) if shape_buckets
                       else None)
        super().__init__(address, spec.to_request(), start, count, shard, num_shards, client_options)

    def dataset(self) -> tf.data.Dataset:
        first, mine, step = self._window()
        address, spec, prefetch, options = self.address, self.spec, self.prefetch, self.client_options
        request = spec.to_request().SerializeToString()
        ladder, dtype = self.ladder, self.dtype

        def generate() -> Iterator[dict[str, Any]]:
            if mine < 0:
                return
            with SamplerClient(address, prefetch=prefetch, **options) as client:
                for episode in client.episodes(spec, first, mine, step):
                    scalars = {"index": np.int64(episode.index), "fingerprint": episode.fingerprint.encode(),
                               "source": episode.source.encode(), "ways": np.int32(episode.ways), "request": request}
                    if ladder is not None:
                        packed = pack_episode(episode, ladder)
                        images = packed.images if dtype == "uint8" else images_as(packed.images, dtype)
                        yield {"images": images, "labels": packed.labels, "support": np.int32(packed.support),
                               "query": np.int32(packed.query), "query_labels": episode.query_labels, **scalars}
                        continue
                    yield {
                        "support_images": _pixels(episode.support_images, dtype),
                        "support_labels": episode.support_labels,
                        "query_images": _pixels(episode.query_images, dtype),
                        "query_labels": episode.query_labels,
                        **scalars,
                    }

        if ladder is None:
            return tf.data.Dataset.from_generator(generate, output_signature=episode_signature(spec.image_size, dtype))
        signature = packed_episode_signature(spec.image_size, dtype)
        generated = {key: value for key, value in signature.items() if key not in _VALID_ROWS}
        return tf.data.Dataset.from_generator(generate, output_signature=generated).map(_with_valid_rows)


class BatchSource(_Source):
    """Plain labelled batches of a split (non-episodic training). ``source``: a store
    name or source kind; ``preset``: whose class splits apply."""

    kind = "batches"

    def __init__(self, address: str, source: str, split: str, batch_size: int, *, seed: int = 0, start: int = 0,
                 count: int = 0, image_size: int = 84, resize: str = "bilinear", preset: str = "", shard: int = 0,
                 num_shards: int = 1, client_options: Mapping[str, Any] | None = None, dtype: str = "uint8") -> None:
        self.dtype = check_image_dtype(dtype)
        self.source, self.split, self.batch_size = source, split, batch_size
        self.seed, self.image_size, self.resize, self.preset = seed, image_size, resize, preset
        request = batch_request(source, split, batch_size, seed=seed, image_size=image_size, resize=resize,
                                preset=preset)
        super().__init__(address, request, start, count, shard, num_shards, client_options)

    def dataset(self) -> tf.data.Dataset:
        first, mine, step = self._window()
        options = self.client_options
        address, source, split, batch_size, seed = self.address, self.source, self.split, self.batch_size, self.seed
        image_size, resize, preset, dtype = self.image_size, self.resize, self.preset, self.dtype

        def generate() -> Iterator[dict[str, Any]]:
            if mine < 0:
                return
            with SamplerClient(address, **options) as client:
                for batch in client.batches(source, split, batch_size, seed, first, mine, step, image_size=image_size,
                                            resize=resize, preset=preset):
                    yield {"images": _pixels(batch.images, dtype), "labels": batch.labels,
                           "index": np.int64(batch.index), "fingerprint": batch.fingerprint.encode(),
                           "num_classes": np.int32(batch.num_classes)}

        return tf.data.Dataset.from_generator(generate, output_signature=batch_signature(image_size, dtype))


def _pixels(images: np.ndarray, dtype: str) -> np.ndarray:
    """The served uint8 as they are (``from_generator`` copies them into the tensor), or
    ``clients.adapter_options.images_as``'s float32 in [0, 1]."""
    return images if dtype == "uint8" else images_as(images, dtype)


def episode_dataset(address: str, spec: EpisodeSpec, *, start: int = 0, count: int = 0, shard: int = 0,
                    num_shards: int = 1, prefetch: int = 2, client_options: Mapping[str, Any] | None = None,
                    shape_buckets: bool = False, dtype: str = "uint8", bucket_ratio: float = DEFAULT_RATIO
                    ) -> tf.data.Dataset:
    """Episodes start .. start + count - 1 (count 0 = unbounded) of this shard
    (``EpisodeSource(...).dataset()``; use ``EpisodeSource`` to resume)."""
    return EpisodeSource(address, spec, start=start, count=count, shard=shard, num_shards=num_shards,
                         prefetch=prefetch, client_options=client_options, shape_buckets=shape_buckets,
                         dtype=dtype, bucket_ratio=bucket_ratio).dataset()


def batch_dataset(address: str, source: str, split: str, batch_size: int, *, seed: int = 0, start: int = 0,
                  count: int = 0, image_size: int = 84, resize: str = "bilinear", preset: str = "", shard: int = 0,
                  num_shards: int = 1, client_options: Mapping[str, Any] | None = None,
                  dtype: str = "uint8") -> tf.data.Dataset:
    """Plain labelled batches of a split (``BatchSource(...).dataset()``)."""
    return BatchSource(address, source, split, batch_size, seed=seed, start=start, count=count,
                       image_size=image_size, resize=resize, preset=preset, shard=shard, num_shards=num_shards,
                       client_options=client_options, dtype=dtype).dataset()


def task_batch_dataset(address: str, task: str, split: str, batch_size: int, *, shuffle: bool | None = None,
                       seed: int = 0, start: int = 0, count: int = 0, image_size: int = 224,
                       resize: str = "legacy_bilinear", dtype: str = "uint8",
                       client_options: Mapping[str, Any] | None = None) -> tf.data.Dataset:
    """VTAB task batches (``task_batch_signature``): ``images`` [B, S, S, 3] (NHWC, RGB) in
    ``dtype``, ``labels`` tf.int64, ... as ``clients.torch.TaskBatchDataset`` yields them.

    ``shuffle``: None (default) as the VTAB reference reads the split: a training split
    (``train...``) shuffled by ``seed``, ``count`` batches (0: unbounded); ``val200``, ``val``,
    ``test`` in the evaluation form (every example once, in order). True or False overrides.
    ``dtype="uint8"`` (default): the served pixels, 0..255, for the model to convert on its
    device in its first op (four times fewer bytes through tf.data and to the device);
    ``"float32"``: the reference's ``/ 255`` in [0, 1], on the host (``clients.adapter_options``)."""
    check_image_dtype(dtype)
    shuffled = vtab_shuffles(split, shuffle)
    options = connection_options(client_options)

    def generate() -> Iterator[dict[str, Any]]:
        with SamplerClient(address, **options) as client:
            if shuffled:
                batches = client.task_batches(task, split, batch_size, seed, start, count, image_size, resize)
            else:
                batches = client.eval_batches(task, split, batch_size, start, image_size, resize)
            for batch in batches:
                yield {"images": _pixels(batch.images, dtype), "labels": batch.labels,
                       "record_ids": np.asarray(batch.record_ids, dtype=np.int64), "index": np.int64(batch.index),
                       "fingerprint": batch.fingerprint.encode(), "split_fingerprint": batch.split_fingerprint.encode(),
                       "num_classes": np.int32(batch.num_classes), "last": np.bool_(batch.last)}

    return tf.data.Dataset.from_generator(generate, output_signature=task_batch_signature(image_size, dtype))


def task_episode_to_tf(episode: TaskEpisodeArrays, dtype: str = "uint8") -> dict[str, tf.Tensor]:
    """A VTAB full-way episode (``SamplerClient.task_episode``) as tensors, the keys of
    ``clients.torch.task_episode_to_torch``: images uint8 0..255 by default,
    ``dtype="float32"`` for [0, 1] (see ``task_batch_dataset``)."""
    check_image_dtype(dtype)
    return {"support_images": tf.constant(_pixels(episode.support_images, dtype)),
            "support_labels": tf.constant(episode.support_labels),
            "query_images": tf.constant(_pixels(episode.query_images, dtype)),
            "query_labels": tf.constant(episode.query_labels),
            "fingerprint": tf.constant(episode.fingerprint), "num_classes": tf.constant(episode.num_classes, tf.int32),
            "task": tf.constant(episode.task)}
