"""Wire tensors as NumPy arrays, and the names of the wire's enums the client takes.

A ``Tensor`` (bytes + shape + dtype) becomes a zero-copy, read-only NumPy view of the
message, or of the shared-memory segment it names (``sampler_common.wire.segments``).
Splits and resize methods are named as the client's users name them ("train",
"legacy_bilinear", ...); a name the wire has no value for, or an image size out of
range, is a ``ValueError`` naming what is allowed (``sampler_common.checks.FieldError``
for the fields every layer checks alike), raised before any request is sent.
"""

from __future__ import annotations

import numpy as np

from sampler_common.checks import check_image_size
from sampler_common.splits import MD
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.segments import SegmentMaps, SegmentRef
from sampler_common.wire.tensors import RawTensor

DTYPES = {pb.DTYPE_UINT8: np.uint8, pb.DTYPE_INT32: np.int32, pb.DTYPE_INT64: np.int64, pb.DTYPE_FLOAT32: np.float32}
SPLITS = {"train": pb.SPLIT_TRAIN, "valid": pb.SPLIT_VALID, "test": pb.SPLIT_TEST}
"""Meta-Dataset's canonical split names (``sampler_common.splits.MD``) as the wire's ``Split``."""
RESIZE_METHODS = {"bilinear": pb.RESIZE_METHOD_BILINEAR, "antialias": pb.RESIZE_METHOD_ANTIALIAS,
                  "fast_bilinear": pb.RESIZE_METHOD_FAST_BILINEAR, "tf2_bilinear": pb.RESIZE_METHOD_TF2_BILINEAR,
                  "shorter_bicubic_center_crop": pb.RESIZE_METHOD_SHORTER_BICUBIC_CENTER_CROP,
                  "legacy_bilinear": pb.RESIZE_METHOD_LEGACY_BILINEAR}


def split_code(split: str) -> int:
    """The wire's ``Split`` of a Meta-Dataset split name ("train", "valid", "test"; "val" and
    "validation" are "valid"); a ``FieldError`` listing the accepted names otherwise."""
    return SPLITS[MD.canonical(split)]


def split_name(code: int) -> str:
    """The client's name of a served ``Split``: "train", "valid" or "test"."""
    return pb.Split.Name(code).removeprefix("SPLIT_").lower()


def check_resize(resize: str) -> int:
    """The wire's ``ResizeMethod`` of a resize name ("bilinear", "legacy_bilinear", ...)."""
    if resize not in RESIZE_METHODS:
        raise ValueError(f"resize: got {resize!r}, expected one of {', '.join(RESIZE_METHODS)}")
    return RESIZE_METHODS[resize]


def resize_name(code: int) -> str:
    """The client's name of a served ``ResizeMethod``: "legacy_bilinear", "tf2_bilinear", ..."""
    return pb.ResizeMethod.Name(code).removeprefix("RESIZE_METHOD_").lower()


def image_options(image_size: int, resize: str, *, encoded: bool = False) -> pb.ImageOptions:
    """The images a request asks for: decoded pixels resized to ``image_size`` by
    ``resize`` (checked here), or with ``encoded`` the stored bytes."""
    mode = pb.IMAGE_MODE_ENCODED if encoded else pb.IMAGE_MODE_DECODED
    size = check_image_size(image_size)  # a user's 0 is refused: on the wire 0 means "unset"
    return pb.ImageOptions(image_size=size, mode=mode, resize=check_resize(resize))


def raw_array(tensor: RawTensor, maps: SegmentMaps | None = None) -> np.ndarray:
    """Zero-copy view of a tensor split out of a serialised reply (``split_tensors``)."""
    data = tensor.data if tensor.segment is None else (maps or SegmentMaps()).view(tensor.segment)
    return np.frombuffer(data, dtype=DTYPES[tensor.dtype]).reshape(tensor.shape)


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
    return np.frombuffer(data, dtype=DTYPES[tensor.dtype]).reshape(tuple(tensor.shape))
