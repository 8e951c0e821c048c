"""A ``torch.utils.data.IterableDataset`` over one ImageNet-CoG level split, in split order.

Items (use ``DataLoader(dataset, batch_size=None)``: one item is one served batch):
``images`` torch.uint8 [B, S, S, 3] (NHWC, RGB, 0..255, preprocessed by the server as
the CoG reference does: shorter side to S bicubic, S x S centre crop), ``labels``
torch.int64 [B] (label i = the level's i-th concept in sorted wnid order),
``record_ids`` torch.int64 [B], ``index`` (the batch index), ``fingerprint`` (the
batch's), ``split_fingerprint`` (equal to ``sampler-server cog split``'s),
``split_size``, ``num_classes`` and ``last``: the keys of
``clients.tf.cog_dataset.cog_batch_dataset``'s elements. The images stay uint8 by
default (normalising them is the backbone's business); ``dtype="float32"`` gives
float32 in [0, 1], the option every adapter takes (``clients.adapter_options``).

Every image of the split comes once per iteration, from batch ``start`` to the last
(``count`` batches when given); a broken stream resumes at the next batch
(``SamplerClient.stream_cog_batches``). To resume a pass yourself, make a dataset with
``start`` = the next batch index. One stream per iteration: the server decodes, the
client only receives, so DataLoader workers beyond one would repeat every batch and
are refused.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from clients.adapter_options import check_image_dtype, connection_options, images_as
from clients.client import SamplerClient
from clients.protocols.cog import CogBatchArrays


def cog_batch_to_torch(batch: CogBatchArrays, dtype: str = "uint8") -> dict[str, Any]:
    """A CoG batch as the dict ``CogBatchDataset`` yields (arrays copied out of the message)."""
    return {
        "images": torch.from_numpy(images_as(batch.images, dtype)),
        "labels": torch.from_numpy(np.array(batch.labels, dtype=np.int64, copy=True)),
        "record_ids": torch.tensor(batch.record_ids, dtype=torch.int64),
        "index": batch.index,
        "fingerprint": batch.fingerprint,
        "split_fingerprint": batch.split_fingerprint,
        "split_size": batch.split_size,
        "num_classes": batch.num_classes,
        "last": batch.last,
    }


class CogBatchDataset(IterableDataset):
    """The batches of one level split (``level`` "IN-1K" or "L1".."L5"; ``split`` "train",
    "val" or "test"; ``shots`` > 0 with a ``seed`` for a few-shot subset) in split order."""

    def __init__(self, address: str, level: str, split: str, *, shots: int = 0, seed: int = 0,
                 batch_size: int = 256, start: int = 0, count: int = 0, image_size: int = 224,
                 resize: str = "shorter_bicubic_center_crop", level_size: int = 0, min_images: int = 0,
                 client_options: Mapping[str, Any] | None = None, dtype: str = "uint8") -> None:
        super().__init__()
        self.dtype = check_image_dtype(dtype)
        if start < 0 or count < 0:
            raise ValueError(f"start, count: got {start}, {count}, expected integers >= 0")
        self.address, self.level, self.split, self.shots, self.seed = address, level, split, shots, seed
        self.batch_size, self.start, self.count = batch_size, start, count
        self.image_size, self.resize = image_size, resize
        self.level_size, self.min_images = level_size, min_images
        self.client_options = connection_options(client_options)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = get_worker_info()
        if info is not None and info.num_workers > 1:
            raise ValueError(f"CogBatchDataset: DataLoader num_workers={info.num_workers} would repeat every batch; "
                             "use num_workers 0 or 1 (the server decodes, the client only receives)")
        with SamplerClient(self.address, **self.client_options) as client:
            for batch in client.stream_cog_batches(
                    self.level, self.split, self.shots, self.seed, self.batch_size, self.start, self.count,
                    self.image_size, self.resize, self.level_size, self.min_images):
                yield cog_batch_to_torch(batch, self.dtype)
