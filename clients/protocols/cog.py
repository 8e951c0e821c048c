"""ImageNet-CoG: level splits' batches as NumPy arrays, their requests, their calls.

The server resolves the levels (IN-1K, L1..L5) and their splits; the client asks for
the levels, one level split's record ids and labels (``cog_split``), and its images in
split order (``stream_cog_batches``; a broken stream resumes at the next batch).
naver/cog's level and split files, where used, are paths on the server.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from sampler_common.checks import MAX_COG_BATCH_SIZE, check_batch_size, check_seed
from sampler_common.splits import COG
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.tensors import split_tensors

from clients.protocols import Rpc, check_window
from clients.tensors import image_options, raw_array, to_array

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
            images = raw_array(tensors[_COG_IMAGES])
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
    """The request naming one CoG level split. The split name and the seed are checked here as
    the server checks them (``sampler_common``: "valid" and "validation" read as "val"); the level,
    shots and sizes by the server (level_size / min_images 0 = the paper's 1000 / 782;
    levels_file / concepts_split_file: naver/cog's files, as paths on the server, absolute or
    relative to its data directory)."""
    return pb.CogSplitRequest(level=level, split=COG.canonical(split), shots=shots, seed=check_seed(seed),
                              level_size=level_size, min_images=min_images, levels_file=levels_file,
                              concepts_split_file=concepts_split_file)


class CogCalls(Rpc):
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
        return self.call("ListCogLevels", request)

    def cog_split(self, level: str, split: str, shots: int = 0, seed: int = 0, level_size: int = 0,
                  min_images: int = 0, levels_file: str = "", concepts_split_file: str = "") -> pb.CogSplit:
        """One level split without images: record ids, labels (label i = wnids[i]) and the
        fingerprint ``sampler-server cog split`` prints for it."""
        request = cog_split_request(level, split, shots, seed, level_size, min_images, levels_file,
                                    concepts_split_file)
        return self.call("GetCogSplit", request)

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
        base = pb.StreamCogBatchesRequest(
            split=cog_split_request(level, split, shots, seed, level_size, min_images, levels_file,
                                    concepts_split_file),
            batch_size=check_batch_size(batch_size, upper=MAX_COG_BATCH_SIZE),
            images=image_options(image_size, resize, encoded=encoded))
        check_window(start_index, count)

        def window(next_index: int, remaining: int, token: str) -> pb.StreamCogBatchesRequest:
            request = pb.StreamCogBatchesRequest()
            request.CopyFrom(base)
            request.start_index, request.count = next_index, remaining
            request.images.same_host_token = token
            return request

        return self.stream("StreamCogBatches", window, CogBatchArrays.from_bytes, start=start_index, count=count,
                           until_last=True)
