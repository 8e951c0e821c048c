"""VTAB label rules: exact bin edges, vtab.md's KITTI facts, ranges, monotonicity, refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sampler_server.core.vtab import ATTRIBUTE_NAMES, TASKS, get_task
from sampler_server.core.vtab.labels import CLEVR_THRESHOLDS, KITTI_THRESHOLDS
from sampler_server.errors import DataLoss

clevr_count = get_task("clevr_count")
clevr_distance = get_task("clevr_distance")
kitti = get_task("kitti_distance")


def _clevr(*depths: float) -> dict[str, list[float]]:
    return {"objects_pixel_z": list(depths)}


def _kitti(*objects: tuple[int, float]) -> dict[str, list]:
    return {"objects_type": [kind for kind, _ in objects], "objects_location_z": [z for _, z in objects]}


def test_attribute_names_are_the_packer_contract() -> None:
    assert ATTRIBUTE_NAMES == ("label", "objects_pixel_z", "label_x_position", "label_orientation",
                               "label_azimuth", "label_elevation", "objects_type", "objects_location_z")
    wanted = {
        "clevr_count": ("objects_pixel_z",), "clevr_distance": ("objects_pixel_z",),
        "dsprites_location": ("label_x_position",), "dsprites_orientation": ("label_orientation",),
        "smallnorb_azimuth": ("label_azimuth",), "smallnorb_elevation": ("label_elevation",),
        "kitti_distance": ("objects_type", "objects_location_z"),
    }
    for name, task in TASKS.items():
        assert task.attributes == wanted.get(name, ("label",)), name


@pytest.mark.parametrize(
    ("depth", "label"),
    [(0.0001, 0), (8.0, 0), (8.0000001, 1), (8.5, 1), (8.500001, 2), (9.0, 2), (9.5, 3), (9.75, 4), (10.0, 4),
     (10.000001, 5), (50.0, 5), (100.0, 5)],
)
def test_clevr_distance_bins_are_left_open_right_closed(depth: float, label: int) -> None:
    assert clevr_distance.label(_clevr(12.0, depth, 40.0)) == label


@pytest.mark.parametrize("depth", [0.0, -1.0, 100.0001, 1e9])
def test_clevr_distance_outside_the_bins_is_refused(depth: float) -> None:
    with pytest.raises(DataLoss, match=r"^clevr_distance: label -?\d+ from objects_pixel_z=.* is outside \[0, 6\)$"):
        clevr_distance.label(_clevr(depth, 100.5))


def test_clevr_count_is_objects_minus_three() -> None:
    assert [clevr_count.label(_clevr(*[9.0] * n)) for n in range(3, 11)] == list(range(8))
    for n in (0, 2, 11):
        with pytest.raises(DataLoss, match="clevr_count: label"):
            clevr_count.label(_clevr(*[9.0] * n))


@pytest.mark.parametrize(
    ("objects", "label"),
    [
        (((0, 1.0),), 0), (((0, 10.0),), 1), (((0, 30.0),), 2), (((4, 1.0),), 3),  # vtab.md's unit-test facts
        ((), 3), (((0, 8.0),), 0), (((1, 8.000001),), 1), (((2, 20.0),), 1), (((2, 20.00001),), 2),
        (((0, 999.0),), 2), (((0, 999.5),), 3), (((0, 30.0), (1, 7.0), (3, 1.0), (7, 0.5)), 0),
        (((3, 1.0), (2, 15.0)), 1), (((0, -99.0),), 0),
    ],
)
def test_kitti_closest_vehicle_distance(objects: tuple[tuple[int, float], ...], label: int) -> None:
    assert kitti.label(_kitti(*objects)) == label


def test_kitti_refuses_a_vehicle_at_or_behind_minus_100_and_unequal_lists() -> None:
    with pytest.raises(DataLoss, match=r"kitti_distance: label -1 "):
        kitti.label(_kitti((0, -100.0)))
    with pytest.raises(DataLoss, match="'objects_type' and 'objects_location_z' differ in length"):
        kitti.label({"objects_type": [0, 1], "objects_location_z": [5.0]})


def test_dsprites_bins_follow_float_floordiv() -> None:
    location, orientation = get_task("dsprites_location"), get_task("dsprites_orientation")
    assert [location.label({"label_x_position": x}) for x in range(32)] == [math.floor(x / 2.0) for x in range(32)]
    assert [orientation.label({"label_orientation": o}) for o in range(40)] == [math.floor(o / 2.5) for o in range(40)]
    assert orientation.label({"label_orientation": 5}) == 2 and orientation.label({"label_orientation": 4}) == 1
    for bad in (-1, 32):
        with pytest.raises(DataLoss, match="dsprites_location: label"):
            location.label({"label_x_position": bad})


@pytest.mark.parametrize("name", [name for name, task in TASKS.items() if task.rule.kind.value == "raw"])
def test_raw_labels_pass_through_within_range(name: str) -> None:
    task = get_task(name)
    (attribute,) = task.attributes
    assert [task.label({attribute: value}) for value in range(task.num_classes)] == list(range(task.num_classes))
    assert task.label({attribute: np.int64(task.num_classes - 1)}) == task.num_classes - 1
    for bad in (-1, task.num_classes):
        with pytest.raises(DataLoss, match=rf"^{name}: label {bad} from {attribute}={bad} is outside"):
            task.label({attribute: bad})


@pytest.mark.parametrize(
    ("name", "attrs", "message"),
    [
        ("cifar100", {}, "cifar100: record lacks attribute 'label'"),
        ("cifar100", {"label": 3.0}, "cifar100: attribute 'label' must be an int, got 3.0"),
        ("cifar100", {"label": True}, "cifar100: attribute 'label' must be an int"),
        ("cifar100", {"label": "3"}, "cifar100: attribute 'label' must be an int"),
        ("clevr_distance", {"label": 1}, "clevr_distance: record lacks attribute 'objects_pixel_z'"),
        ("clevr_distance", _clevr(), "clevr_distance: attribute 'objects_pixel_z' is empty"),
        ("clevr_distance", {"objects_pixel_z": 9.0}, "attribute 'objects_pixel_z' must be a list of floats"),
        ("clevr_distance", {"objects_pixel_z": "9"}, "attribute 'objects_pixel_z' must be a list of floats"),
        ("clevr_distance", _clevr(9.0, math.nan), "'objects_pixel_z' holds a non-finite value"),
        ("kitti_distance", {"objects_type": [0]}, "kitti_distance: record lacks attribute 'objects_location_z'"),
        ("kitti_distance", {"objects_type": [0.5], "objects_location_z": [1.0]}, "must be a list of ints"),
        ("dmlab", None, "dmlab: record attributes must be a mapping"),
    ],
)
def test_malformed_records_are_data_loss_naming_task_and_attribute(name: str, attrs: object, message: str) -> None:
    with pytest.raises(DataLoss) as caught:
        get_task(name).label(attrs)  # type: ignore[arg-type]
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_numpy_attributes_are_accepted() -> None:
    assert clevr_distance.label({"objects_pixel_z": np.array([9.2, 11.0], np.float32)}) == 3
    assert kitti.label({"objects_type": np.array([4, 0]), "objects_location_z": np.array([1.0, 15.0])}) == 1


_depth = st.floats(min_value=1e-6, max_value=100.0, allow_nan=False)


@given(depths=st.lists(_depth, min_size=3, max_size=10), extra=_depth)
def test_clevr_distance_is_in_range_and_monotone(depths: list[float], extra: float) -> None:
    label = clevr_distance.label(_clevr(*depths))
    assert 0 <= label < 6
    assert CLEVR_THRESHOLDS[label] < min(depths) <= CLEVR_THRESHOLDS[label + 1]
    nearer = min(min(depths), extra)
    assert clevr_distance.label(_clevr(*depths, extra)) == clevr_distance.label(_clevr(nearer)) <= label


@given(objects=st.lists(st.tuples(st.integers(0, 8), st.floats(-99.9, 1e4, allow_nan=False)), max_size=12),
       shift=st.floats(0.0, 500.0, allow_nan=False))
def test_kitti_distance_is_in_range_and_monotone(objects: list[tuple[int, float]], shift: float) -> None:
    label = kitti.label(_kitti(*objects))
    assert 0 <= label < 4
    vehicles = [z for kind, z in objects if kind < 3]
    d = min([*vehicles, 1000.0])
    assert KITTI_THRESHOLDS[label] < d and (label == 3 or d <= KITTI_THRESHOLDS[label + 1])
    farther = [(kind, z + shift) for kind, z in objects]
    assert kitti.label(_kitti(*farther)) >= label
    assert kitti.label(_kitti(*[(kind, z) for kind, z in objects if kind >= 3])) == 3
