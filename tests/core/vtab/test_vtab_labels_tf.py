"""Labels side by side with the reference's TensorFlow arithmetic, on float32 inputs as TFDS stores them.

The reference (task_adaptation's preprocessing) is re-expressed here with the same
TF ops: ``tf.reduce_min`` of the depths, ``tf.reduce_max(tf.where((thrs - d) < 0))``
with float64 numpy thresholds against a float32 tensor, ``tf.gather`` of the vehicles'
z joined to ``[[1000.0]]``, and ``floordiv`` of the float32-cast attribute by
``float(num_values) / num_classes``. Where the reference gives a label inside
``[0, num_classes)`` ours is equal; where it gives one outside, ours refuses.
Subnormal floats are left out: TF's CPU kernels flush them to zero (a depth of 1e-45
compares as 0 there), and no CLEVR or KITTI depth lies within 1e-38 of a threshold.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from conftest import examples
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from sampler_server.core.vtab import get_task  # noqa: E402
from sampler_server.errors import DataLoss  # noqa: E402

import tensorflow as tf

CLEVR_THRS = np.array([0.0, 8.0, 8.5, 9.0, 9.5, 10.0, 100.0])
KITTI_THRS = np.array([-100.0, 8.0, 20.0, 999.0])


def reference_clevr_distance(pixel_z: np.ndarray) -> int:
    dist = tf.reduce_min(tf.constant(pixel_z, tf.float32))
    return int(tf.reduce_max(tf.where((CLEVR_THRS - dist) < 0)))


def reference_kitti_distance(types: np.ndarray, location_z: np.ndarray) -> int:
    vehicles = tf.where(tf.constant(types, tf.int64) < 3)
    vehicle_z = tf.gather(params=tf.constant(location_z, tf.float32), indices=vehicles)
    vehicle_z = tf.concat([vehicle_z, tf.constant([[1000.0]])], axis=0)
    dist = tf.reduce_min(vehicle_z)
    return int(tf.reduce_max(tf.where((KITTI_THRS - dist) < 0)))


def reference_coarse_bin(value: int, num_values: int, num_classes: int) -> int:
    factor = float(num_values) / num_classes
    return int(tf.cast(tf.math.floordiv(tf.cast(tf.constant(value, tf.int64), tf.float32), factor), tf.int64))


def _agree(task_name: str, attrs: dict, reference: int) -> None:
    task = get_task(task_name)
    if 0 <= reference < task.num_classes:
        assert task.label(attrs) == reference, attrs
    else:
        with pytest.raises(DataLoss):
            task.label(attrs)


def _near_thresholds(thresholds: np.ndarray) -> list[float]:
    """Each threshold and its float32 neighbours: where a float64 re-statement could slip."""
    values = []
    for threshold in thresholds.astype(np.float32):
        values += [np.nextafter(threshold, np.float32(-np.inf)), threshold, np.nextafter(threshold, np.float32(np.inf))]
    tiny = np.finfo(np.float32).tiny
    return [float(value) for value in values if value == 0 or abs(value) >= tiny]  # no subnormals


_float32 = st.floats(width=32, allow_nan=False, allow_infinity=False, allow_subnormal=False)


@settings(max_examples=examples(150), deadline=None)
@given(depths=st.lists(st.one_of(st.sampled_from(_near_thresholds(CLEVR_THRS)),
                                 st.floats(-5, 120, width=32, allow_subnormal=False)), min_size=1, max_size=10))
def test_clevr_distance_matches_the_reference(depths: list[float]) -> None:
    pixel_z = np.array(depths, np.float32)
    _agree("clevr_distance", {"objects_pixel_z": pixel_z.tolist()}, reference_clevr_distance(pixel_z))


@settings(max_examples=examples(150), deadline=None)
@given(objects=st.lists(st.tuples(st.integers(0, 8),
                                  st.one_of(st.sampled_from(_near_thresholds(KITTI_THRS)),
                                            st.floats(-120, 1200, width=32, allow_subnormal=False), _float32)),
                        max_size=8))
def test_kitti_distance_matches_the_reference(objects: list[tuple[int, float]]) -> None:
    types = np.array([kind for kind, _ in objects], np.int64)
    location_z = np.array([z for _, z in objects], np.float32)
    attrs = {"objects_type": types.tolist(), "objects_location_z": location_z.tolist()}
    _agree("kitti_distance", attrs, reference_kitti_distance(types, location_z))


def test_vtab_md_kitti_facts_hold_in_the_reference_too() -> None:
    for types, z, label in (([0], [1.0], 0), ([0], [10.0], 1), ([0], [30.0], 2), ([4], [1.0], 3)):
        assert reference_kitti_distance(np.array(types), np.array(z)) == label
        assert get_task("kitti_distance").label({"objects_type": types, "objects_location_z": z}) == label


@pytest.mark.parametrize(("task_name", "attribute", "num_values"),
                         [("dsprites_location", "label_x_position", 32),
                          ("dsprites_orientation", "label_orientation", 40)])
def test_dsprites_bins_match_the_reference_for_every_value(task_name: str, attribute: str, num_values: int) -> None:
    for value in range(-3, num_values + 3):
        _agree(task_name, {attribute: value}, reference_coarse_bin(value, num_values, 16))


def test_clevr_count_matches_the_reference() -> None:
    for count in range(0, 13):
        sizes = tf.zeros([count], tf.int64)  # the reference counts objects.size
        _agree("clevr_count", {"objects_pixel_z": [9.0] * count}, int(tf.size(sizes)) - 3)
