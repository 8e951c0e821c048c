"""The wire's enums and options as core values, and back (no I/O, no gRPC).

Validation of wire-level fields happens here and raises the project's errors with the
field's wire name; the status mapping turns them into gRPC codes. The service's
handlers and the replay of reported episodes (``catalog.replay``) read requests
through these, so a stored request replays exactly as it was served.
"""

from __future__ import annotations

from dataclasses import dataclass

from sampler_common.checks import check_image_size
from sampler_server.core.md.config import EpisodeConfig
from sampler_server.core.split import Split
from sampler_server.errors import InvalidArgument, field_checks
from sampler_server.imaging import ResizeMethod
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb

DEFAULT_IMAGE_SIZE = 84

_SPLITS = {pb.SPLIT_TRAIN: Split.TRAIN, pb.SPLIT_VALID: Split.VALID, pb.SPLIT_TEST: Split.TEST}
_SPLITS_BACK = {value: key for key, value in _SPLITS.items()}
_RESIZE = {
    pb.RESIZE_METHOD_UNSPECIFIED: ResizeMethod.BILINEAR,
    pb.RESIZE_METHOD_BILINEAR: ResizeMethod.BILINEAR,
    pb.RESIZE_METHOD_ANTIALIAS: ResizeMethod.ANTIALIAS,
    pb.RESIZE_METHOD_FAST_BILINEAR: ResizeMethod.FAST_BILINEAR,
    pb.RESIZE_METHOD_TF2_BILINEAR: ResizeMethod.TF2_BILINEAR,
    pb.RESIZE_METHOD_SHORTER_BICUBIC_CENTER_CROP: ResizeMethod.SHORTER_BICUBIC_CENTER_CROP,
    pb.RESIZE_METHOD_LEGACY_BILINEAR: ResizeMethod.LEGACY_BILINEAR,
}
_RESIZE_BACK = {method: code for code, method in _RESIZE.items() if code != pb.RESIZE_METHOD_UNSPECIFIED}
_CONFIG_FIELDS = (
    "num_ways", "num_support", "num_query", "min_ways", "max_ways_upper_bound", "max_num_query",
    "max_support_set_size", "max_support_size_contrib_per_class", "min_log_weight", "max_log_weight",
    "min_examples_in_class", "ignore_hierarchy_probability", "max_span_leaves",
)


def split_from_wire(value: int, field: str = "split") -> Split:
    if value not in _SPLITS:
        raise InvalidArgument(f"{field}: got {pb.Split.Name(value) if value in pb.Split.values() else value}, "
                              "expected SPLIT_TRAIN, SPLIT_VALID or SPLIT_TEST")
    return _SPLITS[value]


def split_to_wire(split: Split | None) -> int:
    return _SPLITS_BACK[split] if split is not None else pb.SPLIT_UNSPECIFIED


def resize_to_wire(method: ResizeMethod) -> int:
    """The wire's ``ResizeMethod`` code of a resize method (never UNSPECIFIED)."""
    return _RESIZE_BACK[method]


def config_from_wire(message: pb.EpisodeConfig) -> EpisodeConfig:
    kwargs = {name: getattr(message, name) for name in _CONFIG_FIELDS if message.HasField(name)}
    return EpisodeConfig(all_classes=message.all_classes, **kwargs)


@dataclass(frozen=True)
class ImageRequest:
    size: int
    encoded: bool
    resize: ResizeMethod


def images_from_wire(message: pb.ImageOptions) -> ImageRequest:
    """The images a request asks for. A wire ``image_size`` of 0 is the field left unset (the
    protocol's default; the client never sends a user's 0, it refuses it); any other size is
    checked as the client and the CLI check it (``sampler_common.checks.check_image_size``)."""
    with field_checks():
        size = check_image_size(message.image_size or DEFAULT_IMAGE_SIZE)
    if message.mode not in (pb.IMAGE_MODE_UNSPECIFIED, pb.IMAGE_MODE_DECODED, pb.IMAGE_MODE_ENCODED):
        raise InvalidArgument(f"images.mode: got {message.mode}, expected IMAGE_MODE_DECODED or IMAGE_MODE_ENCODED")
    if message.resize not in _RESIZE:
        allowed = [pb.ResizeMethod.Name(code) for code in _RESIZE_BACK.values()]
        raise InvalidArgument(f"images.resize: got {message.resize}, "
                              f"expected {', '.join(allowed[:-1])} or {allowed[-1]}")
    return ImageRequest(size, message.mode == pb.IMAGE_MODE_ENCODED, _RESIZE[message.resize])
