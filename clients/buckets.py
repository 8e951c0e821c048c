"""Shape buckets: an episode's images padded to one of a few batch sizes, exactly.

Why: Meta-Dataset's variable episodes come in hundreds of shapes (600 episodes had
515 distinct support/query pairs), and a GPU pays for every new shape (cuDNN plans
and autotuning in both frameworks, per-shape tf.function traces or oneDNN
primitives). Padding to a small set of sizes lets every step after warm-up reuse
what the first steps of that size built.

The layout both trainers use (``PackedEpisode``): ONE image batch of B rows, support
rows [0, Ns), query rows [Ns, Ns + Nq), zero rows [Ns + Nq, B); labels likewise (0 on
padding). The masks are these prefixes, so every operation after the backbone slices
out exactly the unpadded tensors, and batch normalisation takes its batch statistics
(and its running-statistics update) from the first Ns + Nq rows only (see
``clients.torch.models.RowBatchNorm2d`` and ``clients.tf.models.RowBatchNormalization``).
Only the convolutions run on B rows, and a convolution treats rows independently:
padding changes no valid row's value, only the summation order of weight gradients
(float tolerance, not bits). The backbone sees one shape per bucket, not one per
(support, query) pair: buckets are taken over the total Ns + Nq.

Sizes (``Ladder``): multiples of ``multiple`` (8) up to 8 * ``multiple``, then a
geometric grid of ratio ``ratio`` (1.125) rounded up to multiples of ``multiple``, and
finally the cap: the most images an episode of the request can hold
(``EpisodeBounds``). Padding wastes at most a factor ``ratio`` plus ``multiple`` rows;
MD's default episodes (at most 500 support + 500 query) use at most 29 sizes.

Bounds come from the request alone (Meta-Dataset Sec. 3.2 and Appendix .2, as the
server's ``EpisodeConfig`` implements them): ways <= ``max_ways_upper_bound`` (50;
ImageNet nodes give min(leaves, 50)) or the fixed ``num_ways``; query per class <=
``max_num_query`` (10) or the fixed ``num_query``; support <= ``max_support_set_size``
(500) or ways x the fixed ``num_support``. An all-classes request has no ways bound
the client can know; its ladder is unbounded (the same grid, never capped).

Pure: NumPy and the wire's generated protobuf only; no torch, no tensorflow.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from clients.backbone_contract import NAMED_BACKBONES
from clients.errors import UsageError
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb

DEFAULT_RATIO = 1.125
"""The grid's ratio unless a trainer's ``--bucket-ratio`` says otherwise: a finer grid pads
less and meets more shapes (each new one costs its first step's plans or traces)."""

SHAPE_BUCKETS = ("auto", "on", "off")
"""``--shape-buckets``: auto = on where the trainer runs on a GPU, off on CPU."""

# The server's EpisodeConfig defaults (Meta-Dataset's published values); a test checks they agree.
MD_MAX_WAYS = 50
MD_MAX_QUERY_PER_CLASS = 10
MD_MAX_SUPPORT = 500


def resolve_buckets(setting: str, accelerated: bool) -> bool:
    """Whether to bucket: ``setting`` is one of ``SHAPE_BUCKETS``; ``accelerated``: a GPU trains."""
    if setting not in SHAPE_BUCKETS:
        raise ValueError(f"shape buckets: got {setting!r}, expected one of {', '.join(SHAPE_BUCKETS)}")
    return setting == "on" or (setting == "auto" and accelerated)


def resolve_buckets_for(backbone: str, setting: str, accelerated: bool) -> bool:
    """``resolve_buckets`` for the trainer's ``--backbone``: buckets need our batch norms (they
    count the valid rows), so a user's backbone trains on unpadded episodes (auto: off; on:
    refused in one line)."""
    if backbone in NAMED_BACKBONES:
        return resolve_buckets(setting, accelerated)
    if setting == "on":
        raise UsageError(f"argument --shape-buckets: got on, but --backbone {backbone} is not one of ours "
                         f"({', '.join(NAMED_BACKBONES)}): padding rows would enter its batch norms' statistics; "
                         "use auto or off")
    return False


@dataclass(frozen=True)
class EpisodeBounds:
    """The most support images, query images and ways an episode of a request can have
    (None: no bound the client can know)."""

    max_support: int | None
    max_query: int | None
    max_ways: int | None

    @classmethod
    def of_config(cls, config: pb.EpisodeConfig) -> "EpisodeBounds":
        """Bounds of the episodes a request with this ``EpisodeConfig`` can produce."""
        def get(name: str, default: int | None) -> int | None:
            return int(getattr(config, name)) if config.HasField(name) else default

        ways = get("num_ways", None)
        if ways is None and not config.all_classes:
            ways = get("max_ways_upper_bound", MD_MAX_WAYS)
        per_class_query = get("num_query", None) or get("max_num_query", MD_MAX_QUERY_PER_CLASS)
        shots = get("num_support", None)
        if shots is not None:
            support = ways * shots if ways is not None else None
        else:
            support = get("max_support_set_size", MD_MAX_SUPPORT)
        query = ways * per_class_query if ways is not None and per_class_query is not None else None
        return cls(max_support=support, max_query=query, max_ways=ways)

    @classmethod
    def of_request(cls, request: pb.EpisodeRequest) -> "EpisodeBounds":
        return cls.of_config(request.config)

    @property
    def max_images(self) -> int | None:
        """The most images (support + query) of one episode, or None."""
        if self.max_support is None or self.max_query is None:
            return None
        return self.max_support + self.max_query


@dataclass(frozen=True)
class Ladder:
    """Bucket sizes: ``size(n)`` is the smallest size >= n (see the module docstring)."""

    ratio: float = DEFAULT_RATIO
    multiple: int = 8
    cap: int | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.ratio, (int, float)) and math.isfinite(self.ratio) and self.ratio > 1.0):
            raise ValueError(f"ratio: got {self.ratio!r}, expected a finite number above 1")
        if isinstance(self.multiple, bool) or not isinstance(self.multiple, int) or self.multiple < 1:
            raise ValueError(f"multiple: got {self.multiple!r}, expected an integer >= 1")
        if self.cap is not None and (isinstance(self.cap, bool) or not isinstance(self.cap, int) or self.cap < 1):
            raise ValueError(f"cap: got {self.cap!r}, expected an integer >= 1 or None")

    def _next(self, size: int) -> int:
        step = self.multiple
        return max(size + step, -(-math.ceil(size * self.ratio) // step) * step)

    @functools.cached_property
    def _grid(self) -> tuple[int, ...]:
        """The sizes up to the cap (the cap itself last); empty when unbounded."""
        if self.cap is None:
            return ()
        sizes = [self.multiple]
        while sizes[-1] < self.cap:
            sizes.append(self._next(sizes[-1]))
        sizes[-1] = self.cap  # the last grid size would only waste rows above the cap
        return tuple(sizes)

    def size(self, n: int) -> int:
        """The bucket of an episode of ``n`` images: the smallest size >= n. Above the cap
        (a request whose bounds were not known) the uncapped grid continues."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"images: got {n!r}, expected an integer >= 1")
        n = int(n)
        if self.cap is not None and n <= self.cap:
            grid = self._grid
            return grid[int(np.searchsorted(grid, n))]
        size = self.multiple
        while size < n:
            size = self._next(size)
        return size

    def sizes(self) -> tuple[int, ...]:
        """Every size an episode within the cap can get (ascending)."""
        if self.cap is None:
            raise ValueError("sizes: the ladder has no cap, so its sizes are unbounded")
        return self._grid

    @classmethod
    def for_bounds(cls, bounds: EpisodeBounds, ratio: float = DEFAULT_RATIO) -> "Ladder":
        """The ladder of a request's episodes: capped at the most images they can hold."""
        return cls(ratio=ratio, cap=bounds.max_images)


@dataclass(frozen=True)
class PackedEpisode:
    """An episode in the bucketed layout (see the module docstring): ``images`` uint8
    [B, S, S, 3], ``labels`` int64 [B]; ``support`` and ``query`` count the valid rows."""

    images: np.ndarray
    labels: np.ndarray
    support: int
    query: int
    ways: int
    index: int = -1

    @property
    def rows(self) -> int:
        """Valid rows (support + query); rows beyond are padding."""
        return self.support + self.query

    @property
    def padded(self) -> bool:
        return len(self.images) > self.rows


def pack_into(images: np.ndarray, labels: np.ndarray, support_images: np.ndarray, support_labels: np.ndarray,
              query_images: np.ndarray, query_labels: np.ndarray) -> None:
    """Write support then query into the first rows of ``images`` / ``labels`` and zero
    the rest (``images`` may be a view of pinned host memory)."""
    ns, nq = len(support_images), len(query_images)
    if len(images) < ns + nq or len(labels) != len(images):
        raise ValueError(f"pack: got {len(images)} image rows and {len(labels)} labels for {ns} support + {nq} query, "
                         "expected at least that many rows and one label per row")
    images[:ns] = support_images
    images[ns:ns + nq] = query_images
    images[ns + nq:] = 0
    labels[:ns] = support_labels
    labels[ns:ns + nq] = query_labels
    labels[ns + nq:] = 0


def pack_episode(episode: Any, ladder: Ladder | None) -> PackedEpisode:
    """``episode`` (anything with support/query images and labels and ``ways``, e.g.
    ``EpisodeArrays``) packed to its bucket (``ladder`` None: no padding rows)."""
    support, query = episode.support_images, episode.query_images
    rows = len(support) + len(query)
    size = ladder.size(rows) if ladder is not None else rows
    images = np.empty((size, *support.shape[1:]), dtype=np.uint8)
    labels = np.empty((size,), dtype=np.int64)
    pack_into(images, labels, support, episode.support_labels, query, episode.query_labels)
    return PackedEpisode(images, labels, len(support), len(query), int(episode.ways),
                         int(getattr(episode, "index", -1)))
