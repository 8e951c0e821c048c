"""``tf.data.Dataset`` sources over the service, with a full output signature.

Elements (dicts of tensors):

- episodes: ``support_images`` / ``query_images`` tf.uint8 [N, S, S, 3] (NHWC, RGB,
  values 0..255, S = the spec's ``image_size``), ``support_labels`` /
  ``query_labels`` tf.int64 [N] with values 0 .. ways - 1, ``index`` tf.int64,
  ``fingerprint`` / ``source`` tf.string, ``ways`` tf.int32 and ``request``
  tf.string (the serialised request: an element can be passed to
  ``SamplerClient.report_episode`` as it is).
- episodes with ``shape_buckets=True`` (``packed_episode_signature``): the episode in
  the bucketed layout (``clients.buckets``): ``images`` tf.uint8 [B, S, S, 3] (support
  rows, query rows, zero padding up to one of a few sizes), ``labels`` tf.int64 [B],
  ``support`` / ``query`` tf.int32 (the valid rows), ``query_labels`` (for reports) and
  the scalars above; a step that slices the valid rows (and counts only them in batch
  norm: ``clients.tf.models.valid_rows``) learns exactly what the unpadded one would.
- batches: ``images`` tf.uint8 [B, S, S, 3], ``labels`` tf.int64 [B] with values
  0 .. num_classes - 1, ``index`` tf.int64, ``num_classes`` tf.int32.
- VTAB task batches (``task_batch_dataset``): ``images`` tf.uint8 [B, S, S, 3] by default
  (0..255: convert on the device), tf.float32 in [0, 1] with ``dtype="float32"``;
  ``labels`` tf.int64 [B], ``index`` tf.int64.

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

from clients.buckets import EpisodeBounds, Ladder, pack_episode
from clients.client import SamplerClient
from clients.image_dtype import check_image_dtype
from clients.protocols.md import EpisodeSpec, batch_request
from clients.state import StreamCursor, shard_window


def episode_signature(image_size: int) -> dict[str, tf.TensorSpec]:
    image = tf.TensorSpec(shape=(None, image_size, image_size, 3), dtype=tf.uint8)
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


def packed_episode_signature(image_size: int) -> dict[str, tf.TensorSpec]:
    """Elements of ``EpisodeSource(..., shape_buckets=True)``."""
    scalars = {key: spec for key, spec in episode_signature(image_size).items() if not spec.shape.rank}
    return {
        "images": tf.TensorSpec(shape=(None, image_size, image_size, 3), dtype=tf.uint8),
        "labels": tf.TensorSpec(shape=(None,), dtype=tf.int64),
        "support": tf.TensorSpec(shape=(), dtype=tf.int32),
        "query": tf.TensorSpec(shape=(), dtype=tf.int32),
        "query_labels": tf.TensorSpec(shape=(None,), dtype=tf.int64),
        **scalars,
    }


def batch_signature(image_size: int) -> dict[str, tf.TensorSpec]:
    return {
        "images": tf.TensorSpec(shape=(None, image_size, image_size, 3), dtype=tf.uint8),
        "labels": tf.TensorSpec(shape=(None,), dtype=tf.int64),
        "index": tf.TensorSpec(shape=(), dtype=tf.int64),
        "num_classes": tf.TensorSpec(shape=(), dtype=tf.int32),
    }


class _Source:
    """A window of one request, this shard's part of it, and its resume state."""

    kind = ""

    def __init__(self, address: str, request: Any, start: int, count: int, shard: int, num_shards: int,
                 client_options: Mapping[str, Any] | None) -> None:
        shard_window(0, 0, shard, num_shards)  # validates the shard
        self.address = address
        self.shard, self.num_shards = shard, num_shards
        self.client_options = dict(client_options or {})
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
    ``shape_buckets``: elements in the bucketed layout (see the module docstring)."""

    kind = "episodes"

    def __init__(self, address: str, spec: EpisodeSpec, *, start: int = 0, count: int = 0, shard: int = 0,
                 num_shards: int = 1, prefetch: int = 2, client_options: Mapping[str, Any] | None = None,
                 shape_buckets: bool = False) -> None:
        self.spec = spec
        self.prefetch = prefetch
        self.ladder = Ladder.for_bounds(EpisodeBounds.of_request(spec.to_request())) if shape_buckets else None
        super().__init__(address, spec.to_request(), start, count, shard, num_shards, client_options)

    def dataset(self) -> tf.data.Dataset:
        first, mine, step = self._window()
        address, spec, prefetch, options = self.address, self.spec, self.prefetch, self.client_options
        request = spec.to_request().SerializeToString()
        ladder = self.ladder

        def generate() -> Iterator[dict[str, Any]]:
            if mine < 0:
                return
            with SamplerClient(address, prefetch=prefetch, **options) as client:
                for episode in client.episodes(spec, first, mine, step):
                    scalars = {"index": np.int64(episode.index), "fingerprint": episode.fingerprint.encode(),
                               "source": episode.source.encode(), "ways": np.int32(episode.ways), "request": request}
                    if ladder is not None:
                        packed = pack_episode(episode, ladder)
                        yield {"images": packed.images, "labels": packed.labels, "support": np.int32(packed.support),
                               "query": np.int32(packed.query), "query_labels": episode.query_labels, **scalars}
                        continue
                    yield {
                        "support_images": episode.support_images,
                        "support_labels": episode.support_labels,
                        "query_images": episode.query_images,
                        "query_labels": episode.query_labels,
                        **scalars,
                    }

        signature = (episode_signature if ladder is None else packed_episode_signature)(spec.image_size)
        return tf.data.Dataset.from_generator(generate, output_signature=signature)


class BatchSource(_Source):
    """Plain labelled batches of a split (non-episodic training). ``source``: a store
    name or source kind; ``preset``: whose class splits apply."""

    kind = "batches"

    def __init__(self, address: str, source: str, split: str, batch_size: int, *, seed: int = 0, start: int = 0,
                 count: int = 0, image_size: int = 84, resize: str = "bilinear", preset: str = "", shard: int = 0,
                 num_shards: int = 1, client_options: Mapping[str, Any] | None = None) -> None:
        self.source, self.split, self.batch_size = source, split, batch_size
        self.seed, self.image_size, self.resize, self.preset = seed, image_size, resize, preset
        request = batch_request(source, split, batch_size, seed=seed, image_size=image_size, resize=resize,
                                preset=preset)
        super().__init__(address, request, start, count, shard, num_shards, client_options)

    def dataset(self) -> tf.data.Dataset:
        first, mine, step = self._window()
        options = self.client_options
        address, source, split, batch_size, seed = self.address, self.source, self.split, self.batch_size, self.seed
        image_size, resize, preset = self.image_size, self.resize, self.preset

        def generate() -> Iterator[dict[str, Any]]:
            if mine < 0:
                return
            with SamplerClient(address, **options) as client:
                for batch in client.batches(source, split, batch_size, seed, first, mine, step, image_size=image_size,
                                            resize=resize, preset=preset):
                    yield {"images": batch.images, "labels": batch.labels, "index": np.int64(batch.index),
                           "num_classes": np.int32(batch.num_classes)}

        return tf.data.Dataset.from_generator(generate, output_signature=batch_signature(image_size))


def episode_dataset(address: str, spec: EpisodeSpec, *, start: int = 0, count: int = 0, shard: int = 0,
                    num_shards: int = 1, prefetch: int = 2, client_options: Mapping[str, Any] | None = None,
                    shape_buckets: bool = False) -> tf.data.Dataset:
    """Episodes start .. start + count - 1 (count 0 = unbounded) of this shard
    (``EpisodeSource(...).dataset()``; use ``EpisodeSource`` to resume)."""
    return EpisodeSource(address, spec, start=start, count=count, shard=shard, num_shards=num_shards,
                         prefetch=prefetch, client_options=client_options, shape_buckets=shape_buckets).dataset()


def batch_dataset(address: str, source: str, split: str, batch_size: int, *, seed: int = 0, start: int = 0,
                  count: int = 0, image_size: int = 84, resize: str = "bilinear", preset: str = "", shard: int = 0,
                  num_shards: int = 1, client_options: Mapping[str, Any] | None = None) -> tf.data.Dataset:
    """Plain labelled batches of a split (``BatchSource(...).dataset()``)."""
    return BatchSource(address, source, split, batch_size, seed=seed, start=start, count=count,
                       image_size=image_size, resize=resize, preset=preset, shard=shard, num_shards=num_shards,
                       client_options=client_options).dataset()


def task_batch_dataset(address: str, task: str, split: str, batch_size: int, *, shuffle: bool, seed: int = 0,
                       start: int = 0, count: int = 0, image_size: int = 224, resize: str = "legacy_bilinear",
                       dtype: str = "uint8") -> tf.data.Dataset:
    """VTAB task batches: ``images`` [B, S, S, 3] (NHWC, RGB) in ``dtype``, ``labels`` tf.int64,
    ``index`` tf.int64; ``shuffle=False`` is the evaluation form (every example once, in order).

    ``dtype="uint8"`` (default): the served pixels, 0..255, for the model to convert on its
    device in its first op (four times fewer bytes through tf.data and to the device);
    ``"float32"``: the reference's ``/ 255`` in [0, 1], a ``map`` on the host
    (``clients.image_dtype``). The same option as ``clients.torch.TaskBatchDataset``'s."""
    check_image_dtype(dtype)

    def generate() -> Iterator[dict[str, Any]]:
        with SamplerClient(address) as client:
            if shuffle:
                batches = client.task_batches(task, split, batch_size, seed, start, count, image_size, resize)
            else:
                batches = client.eval_batches(task, split, batch_size, start, image_size, resize)
            for batch in batches:
                yield {"images": batch.images, "labels": batch.labels, "index": batch.index}

    signature = {"images": tf.TensorSpec([None, image_size, image_size, 3], tf.uint8),
                 "labels": tf.TensorSpec([None], tf.int64), "index": tf.TensorSpec([], tf.int64)}
    dataset = tf.data.Dataset.from_generator(generate, output_signature=signature)
    if dtype == "uint8":
        return dataset
    return dataset.map(lambda item: {**item, "images": _unit(item["images"])})


def _unit(images: Any) -> tf.Tensor:
    """uint8 pixels as float32 in [0, 1]: the reference's ``tf.cast(image, tf.float32) / 255.0``."""
    return tf.cast(images, tf.float32) / 255.0


def task_episode_to_tf(episode: Any, dtype: str = "uint8") -> dict[str, tf.Tensor]:
    """A VTAB full-way episode (``SamplerClient.task_episode``) as tensors: images uint8 0..255
    by default, ``dtype="float32"`` for [0, 1] (see ``task_batch_dataset``)."""
    images = tf.constant if check_image_dtype(dtype) == "uint8" else _unit
    return {"support_images": images(episode.support_images),
            "support_labels": tf.constant(episode.support_labels),
            "query_images": images(episode.query_images),
            "query_labels": tf.constant(episode.query_labels)}
