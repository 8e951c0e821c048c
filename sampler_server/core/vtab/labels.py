"""VTAB labels from the per-record attributes the packer stores.

The attribute names are the contract with the packer (``ATTRIBUTE_NAMES``):

- ``label``: the TFDS ``label`` feature (int);
- ``objects_pixel_z``: CLEVR's ``objects.pixel_coords[:, 2]`` (floats, one per object);
- ``label_x_position`` (0..31), ``label_orientation`` (0..39): dSprites;
- ``label_azimuth`` (0..17), ``label_elevation`` (0..8): smallNORB;
- ``objects_type`` (ints), ``objects_location_z`` (floats): KITTI, one per object.

Rules (the reference's, in ``../shared/reference/vtab.md``):

- ``RAW``: the attribute itself;
- ``OBJECT_COUNT``: number of objects - 3 (CLEVR scenes hold 3 to 10);
- ``CLOSEST_OBJECT_BIN``: ``d = min(z)``, label ``max{i : CLEVR_THRESHOLDS[i] < d}``;
- ``COARSE_BIN``: ``floor(value / (source_values / num_classes))``, computed as
  ``value * num_classes // source_values`` (exact integers; the same numbers as the
  reference's float32 ``floordiv`` for every valid value, checked in the tests);
- ``CLOSEST_VEHICLE_BIN``: ``d`` = the least z of objects of type < 3 (car, van,
  truck) and 1000; label ``max{i : KITTI_THRESHOLDS[i] < d}``.

The bins are left-open and right-closed because the comparison is strict. Floats
are compared as given: the packer's float32 values, widened exactly or written as
round-tripping text, fall on the same side of every threshold as in the reference's
float32 arithmetic (the thresholds are float32 numbers).

Where the reference would emit a label outside ``[0, num_classes)`` (a CLEVR
distance <= 0 or > 100, a scene with fewer than 3 objects) this raises instead, as
it does for a missing or malformed attribute: ``DataLoss``, one line naming the
task and the attribute.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import numbers
import operator
from collections.abc import Mapping
from typing import Any

from sampler_server.errors import DataLoss
from sampler_server.quoting import quoted

CLEVR_THRESHOLDS = (0.0, 8.0, 8.5, 9.0, 9.5, 10.0, 100.0)
KITTI_THRESHOLDS = (-100.0, 8.0, 20.0, 999.0)
KITTI_NO_VEHICLE_DISTANCE = 1000.0
"""Joined to the vehicles' distances, so a frame without vehicles falls in the last bin."""
KITTI_VEHICLE_TYPES_BELOW = 3
"""KITTI object types 0, 1, 2 are Car, Van, Truck."""
CLEVR_MIN_OBJECTS = 3

ATTRIBUTE_NAMES = (
    "label",
    "objects_pixel_z",
    "label_x_position",
    "label_orientation",
    "label_azimuth",
    "label_elevation",
    "objects_type",
    "objects_location_z",
)


class RuleKind(enum.Enum):
    """How a label follows from the attributes; see the module docstring."""

    RAW = "raw"
    OBJECT_COUNT = "object_count"
    CLOSEST_OBJECT_BIN = "closest_object_bin"
    COARSE_BIN = "coarse_bin"
    CLOSEST_VEHICLE_BIN = "closest_vehicle_bin"


@dataclasses.dataclass(frozen=True)
class LabelRule:
    """A rule and the attributes it reads (``source_values``: COARSE_BIN's value count)."""

    kind: RuleKind
    attributes: tuple[str, ...]
    source_values: int = 0

    def __post_init__(self) -> None:
        wanted = 2 if self.kind is RuleKind.CLOSEST_VEHICLE_BIN else 1
        unknown = [name for name in self.attributes if name not in ATTRIBUTE_NAMES]
        assert len(self.attributes) == wanted and not unknown, self
        assert (self.kind is RuleKind.COARSE_BIN) == (self.source_values > 0), self

    def apply(self, attrs: Mapping[str, Any], *, task: str, num_classes: int) -> int:
        """The label of one record, checked to lie in ``[0, num_classes)``."""
        if not isinstance(attrs, Mapping):
            raise DataLoss(f"{task}: record attributes must be a mapping, got {quoted(attrs)}")
        first = self.attributes[0]
        if self.kind is RuleKind.RAW:
            label = _int_attribute(attrs, first, task)
        elif self.kind is RuleKind.COARSE_BIN:
            label = _int_attribute(attrs, first, task) * num_classes // self.source_values
        elif self.kind is RuleKind.OBJECT_COUNT:
            label = len(_float_list_attribute(attrs, first, task)) - CLEVR_MIN_OBJECTS
        elif self.kind is RuleKind.CLOSEST_OBJECT_BIN:
            depths = _float_list_attribute(attrs, first, task)
            if not depths:
                raise DataLoss(f"{task}: attribute {first!r} is empty; the closest object needs one")
            label = bin_left_open(min(depths), CLEVR_THRESHOLDS)
        else:
            label = closest_vehicle_bin(
                _int_list_attribute(attrs, first, task), _float_list_attribute(attrs, self.attributes[1], task), task
            )
        if not 0 <= label < num_classes:
            shown = ", ".join(f"{name}={quoted(attrs[name], 80)}" for name in self.attributes)
            raise DataLoss(f"{task}: label {label} from {shown} is outside [0, {num_classes})")
        return label


def bin_left_open(value: float, thresholds: tuple[float, ...]) -> int:
    """``max{i : thresholds[i] < value}`` for increasing thresholds; -1 when there is none."""
    return sum(1 for threshold in thresholds if threshold < value) - 1


def closest_vehicle_bin(types: list[int], depths: list[float], task: str) -> int:
    """KITTI's bin of the closest vehicle's z (``KITTI_NO_VEHICLE_DISTANCE`` when none)."""
    if len(types) != len(depths):
        raise DataLoss(
            f"{task}: attributes 'objects_type' and 'objects_location_z' differ in length "
            f"({len(types)} and {len(depths)})"
        )
    vehicle_depths = [z for kind, z in zip(types, depths) if kind < KITTI_VEHICLE_TYPES_BELOW]
    return bin_left_open(min([*vehicle_depths, KITTI_NO_VEHICLE_DISTANCE]), KITTI_THRESHOLDS)


def _present(attrs: Mapping[str, Any], name: str, task: str) -> Any:
    if name not in attrs:
        raise DataLoss(f"{task}: record lacks attribute {name!r}")
    return attrs[name]


def _as_int(value: Any) -> int:
    if isinstance(value, bool):
        raise TypeError("a bool is not a label")
    return operator.index(value)


def _as_float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError("not a real number")
    return float(value)


def _int_attribute(attrs: Mapping[str, Any], name: str, task: str) -> int:
    value = _present(attrs, name, task)
    try:
        return _as_int(value)
    except TypeError:
        raise DataLoss(f"{task}: attribute {name!r} must be an int, got {quoted(value, 80)}") from None


def _int_list_attribute(attrs: Mapping[str, Any], name: str, task: str) -> list[int]:
    value = _present(attrs, name, task)
    try:
        if isinstance(value, (str, bytes, Mapping)):
            raise TypeError(name)
        return [_as_int(item) for item in value]
    except TypeError:
        raise DataLoss(f"{task}: attribute {name!r} must be a list of ints, got {quoted(value, 80)}") from None


def _float_list_attribute(attrs: Mapping[str, Any], name: str, task: str) -> list[float]:
    value = _present(attrs, name, task)
    try:
        if isinstance(value, (str, bytes, Mapping)):
            raise TypeError(name)
        floats = [_as_float(item) for item in value]
    except (TypeError, ValueError):
        raise DataLoss(f"{task}: attribute {name!r} must be a list of floats, got {quoted(value, 80)}") from None
    if not all(math.isfinite(item) for item in floats):
        raise DataLoss(f"{task}: attribute {name!r} holds a non-finite value: {quoted(value, 80)}")
    return floats
