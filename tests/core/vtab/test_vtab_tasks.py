"""The VTAB-1k registry against vtab.md's table: builders, versions, 1k splits, test sizes, classes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import require_reference

from sampler_server.core.vtab import (
    DATASETS,
    GROUPS,
    SPLITS,
    TASKS,
    Carving,
    Group,
    SplitLayout,
    attributes_for_dataset,
    get_task,
    group_of,
    resolve,
    tasks_for_dataset,
)
from sampler_server.errors import InvalidArgument

REPO = Path(__file__).resolve().parents[3]

NATURAL = ("caltech101", "cifar100", "dtd", "flowers102", "pets", "sun397", "svhn")
SPECIALIZED = ("camelyon", "eurosat", "resisc45", "retinopathy")
STRUCTURED = (
    "clevr_count", "clevr_distance", "dmlab", "dsprites_location", "dsprites_orientation",
    "kitti_distance", "smallnorb_azimuth", "smallnorb_elevation",
)

TABLE_ROWS = {
    1: "caltech101", 2: "cifar100", 3: "dtd", 4: "flowers102", 5: "pets", 6: "sun397", 7: "svhn",
    8: "camelyon", 9: "eurosat", 10: "resisc45", 11: "retinopathy", 12: "clevr_count", 13: "clevr_distance",
    14: "dsprites_location", 15: "dsprites_orientation", 16: "smallnorb_azimuth", 17: "smallnorb_elevation",
    18: "dmlab", 19: "kitti_distance",
}
"""vtab.md's row number of each task (its rows name the reference's constructor arguments)."""

REFERENCE_SIZES = {
    "caltech101": {"train": 3060, "test": 6084},
    "cifar100": {"train": 50000, "test": 10000},
    "dtd": {"train": 1880, "validation": 1880, "test": 1880},
    "oxford_flowers102": {"train": 1020, "validation": 1020, "test": 6149},
    "oxford_iiit_pet": {"train": 3680, "test": 3669},
    "sun397/tfds": {"train": 76128, "validation": 10875, "test": 21750},
    "svhn_cropped": {"train": 73257, "test": 26032, "extra": 531131},
    "patch_camelyon": {"train": 262144, "validation": 32768, "test": 32768},
    "eurosat/rgb": {"train": 27000},
    "resisc45": {"train": 31500},
    "diabetic_retinopathy_detection/btgraham-300": {"train": 35126, "validation": 10906, "test": 42670},
    "clevr": {"train": 70000, "validation": 15000, "test": 15000},
    "dsprites": {"train": 737280},
    "smallnorb": {"train": 24300, "test": 24300},
    "dmlab": {"train": 65550, "validation": 22628, "test": 22735},
    "kitti": {"train": 6347, "validation": 423, "test": 711},
}
"""The prepared TFDS split sizes vtab.md quotes (svhn's unused ``extra`` and clevr's ``test`` included)."""


def _table() -> dict[str, dict[str, str]]:
    """vtab.md's task table, one dict per task (a "same" cell repeats the row above)."""
    text = require_reference("vtab.md").read_text(encoding="utf-8")
    rows: dict[str, dict[str, str]] = {}
    previous: dict[str, str] = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not cells[0].isdigit():
            continue
        columns = dict(zip(("row", "task", "builder", "train800", "val200", "train800val200", "test", "label"), cells))
        for key, value in columns.items():
            if value == "same" or value.startswith("same as"):
                columns[key] = previous[key]
        rows[TABLE_ROWS[int(columns["row"])]] = columns
        previous = columns
    assert len(rows) == 19
    return rows


def _cell_spec(cell: str) -> str:
    return "+".join(part.strip() for part in cell.replace("*", "").split("+"))


def test_names_groups_and_order() -> None:
    assert tuple(TASKS) == NATURAL + SPECIALIZED + STRUCTURED
    assert GROUPS == {Group.NATURAL: NATURAL, Group.SPECIALIZED: SPECIALIZED, Group.STRUCTURED: STRUCTURED}
    for name, task in TASKS.items():
        assert task.name == name
        assert group_of(name) is task.group
        assert task.group == {**dict.fromkeys(NATURAL, "natural"), **dict.fromkeys(SPECIALIZED, "specialized"),
                              **dict.fromkeys(STRUCTURED, "structured")}[name]


@pytest.mark.parametrize("name", list(TASKS))
def test_builder_version_splits_and_classes_match_the_table(name: str) -> None:
    row = _table()[name]
    task = get_task(name)
    assert task.builder == re.search(r"`([^`]+)`", row["builder"])[1]
    assert task.builder == f"{task.tfds_name}:{task.version}"
    sizes = REFERENCE_SIZES[task.tfds_name]
    for split in ("train800", "val200", "train800val200"):
        assert task.spec(split, sizes) == _cell_spec(row[split].split(" ")[0]), split
    test_spec, test_size = re.fullmatch(r"\**(\S+?)\** \((\d+)\)", row["test"]).groups()
    assert task.spec("test", sizes) == test_spec
    assert len(resolve(task, "test", sizes)) == int(test_size)
    assert task.num_classes == int(re.search(r"→ (\d+)", row["label"])[1])


@pytest.mark.parametrize("name", list(TASKS))
def test_1k_splits_hold_800_200_and_1000_examples_at_reference_sizes(name: str) -> None:
    task = get_task(name)
    sizes = REFERENCE_SIZES[task.tfds_name]
    train800, val200, both = (resolve(task, split, sizes) for split in ("train800", "val200", "train800val200"))
    assert (len(train800), len(val200)) == (800, 200)
    assert both == train800 + val200
    assert not set(train800) & set(val200)
    assert set(val200) <= set(resolve(task, "val", sizes))
    assert set(train800) <= set(resolve(task, "train", sizes))
    assert not set(both) & set(resolve(task, "test", sizes))
    assert resolve(task, "trainval1000-canonical", sizes) == resolve(task, "trainval", sizes)[:1000]


FULL_SPLITS = {
    "caltech101": ("train[:2754]", "train[2754:]", "train"),
    "cifar100": ("train[:45000]", "train[45000:]", "train"),
    "pets": ("train[:2944]", "train[2944:]", "train"),
    "svhn": ("train[:65931]", "train[65931:]", "train"),
    "clevr_count": ("train[:63000]", "train[63000:]", "train"),
    "dtd": ("train", "validation", "train+validation"),
    "kitti_distance": ("train", "validation", "train+validation"),
    "eurosat": ("train[:16200]", "train[16200:21600]", "train[:21600]"),
    "resisc45": ("train[:18900]", "train[18900:25200]", "train[:25200]"),
    "dsprites_orientation": ("train[:589824]", "train[589824:663552]", "train[:663552]"),
    "smallnorb_elevation": ("train", "test[:50%]", "train+test[:50%]"),
}
"""vtab.md's "Full splits" note at the reference sizes: (train, val, trainval)."""


@pytest.mark.parametrize("name", list(FULL_SPLITS))
def test_full_splits_match_the_notes(name: str) -> None:
    task = get_task(name)
    sizes = REFERENCE_SIZES[task.tfds_name]
    assert tuple(task.spec(split, sizes) for split in ("train", "val", "trainval")) == FULL_SPLITS[name]
    train, val, trainval = (resolve(task, split, sizes) for split in ("train", "val", "trainval"))
    assert train + val == trainval


def test_trainval1000_canonical_differs_from_train800val200_where_val_is_carved_late() -> None:
    sizes = REFERENCE_SIZES["caltech101"]
    assert get_task("caltech101").slices("trainval1000-canonical", sizes) == ("train[:1000]",)
    assert resolve("caltech101", "trainval1000-canonical", sizes) != resolve("caltech101", "train800val200", sizes)
    small = {"train": 600, "validation": 900, "test": 10}
    assert get_task("dtd").slices("trainval1000-canonical", small) == ("train", "validation[:400]")
    assert get_task("dtd").slices("trainval1000-canonical", {"train": 300, "validation": 200, "test": 1}) == (
        "train", "validation")


def test_dataset_lookups() -> None:
    assert len(DATASETS) == 16
    assert [task.name for task in tasks_for_dataset("clevr")] == ["clevr_count", "clevr_distance"]
    assert [task.name for task in tasks_for_dataset("dsprites")] == ["dsprites_location", "dsprites_orientation"]
    assert [task.name for task in tasks_for_dataset("smallnorb")] == ["smallnorb_azimuth", "smallnorb_elevation"]
    assert [task.name for task in tasks_for_dataset("eurosat/rgb")] == ["eurosat"]
    assert attributes_for_dataset("kitti") == ("objects_type", "objects_location_z")
    assert attributes_for_dataset("dsprites") == ("label_x_position", "label_orientation")
    assert attributes_for_dataset("clevr") == ("objects_pixel_z",)
    assert attributes_for_dataset("smallnorb") == ("label_azimuth", "label_elevation")
    assert attributes_for_dataset("dmlab") == ("label",)
    with pytest.raises(InvalidArgument, match=r"'eurosat'.*known: caltech101, .*eurosat/rgb"):
        tasks_for_dataset("eurosat")


def test_unknown_task_names_the_name_and_lists_the_allowed() -> None:
    with pytest.raises(InvalidArgument) as caught:
        get_task("cifar")
    message = str(caught.value)
    assert "'cifar'" in message and ", ".join(TASKS) in message and "\n" not in message
    with pytest.raises(InvalidArgument):
        group_of("imagenet")
    with pytest.raises(InvalidArgument):
        get_task(None)  # type: ignore[arg-type]


def test_unknown_split_lists_the_splits() -> None:
    with pytest.raises(InvalidArgument, match="unknown VTAB split 'val1k'; allowed: " + ", ".join(SPLITS)):
        get_task("dtd").slices("val1k", REFERENCE_SIZES["dtd"])


@pytest.mark.parametrize(
    ("name", "split", "sizes", "missing"),
    [
        ("dtd", "val200", {"train": 1880, "test": 1880}, "validation"),
        ("dtd", "test", {"train": 1880, "validation": 1880}, "test"),
        ("clevr_count", "test", {"train": 70000, "test": 15000}, "validation"),
        ("caltech101", "val200", {"test": 6084}, "train"),
        ("smallnorb_azimuth", "test", {"train": 24300}, "test"),
        ("eurosat", "trainval1000-canonical", {}, "train"),
    ],
)
def test_a_missing_tfds_split_is_named_with_the_dataset(name: str, split: str, sizes: dict, missing: str) -> None:
    task = get_task(name)
    with pytest.raises(InvalidArgument, match=rf"^{re.escape(task.tfds_name)}: needs the TFDS split '{missing}'"):
        task.slices(split, sizes)


def test_a_slice_past_the_end_is_refused_not_clamped() -> None:
    past_the_end = r"oxford_flowers102: .*'validation\[:200\]'.*'validation', which has 150"
    with pytest.raises(InvalidArgument, match=past_the_end):
        resolve("flowers102", "val200", {"train": 1020, "validation": 150, "test": 10})
    with pytest.raises(InvalidArgument, match="has 700 examples"):
        resolve("dtd", "train800", {"train": 700, "validation": 700, "test": 700})


@pytest.mark.parametrize("bad", [{"train": -1}, {"train": 1.5}, {"train": True}, [("train", 3)]])
def test_bad_sizes_are_refused(bad: object) -> None:
    with pytest.raises(InvalidArgument):
        resolve("dsprites_location", "train800", bad)  # type: ignore[arg-type]


def test_package_is_pure_at_import() -> None:
    probe = (
        "import sys\n"
        "import sampler_server.core.vtab\n"
        "heavy = ('lmdb', 'grpc', 'torch', 'tensorflow', 'tensorflow_datasets', 'numpy')\n"
        "bad = [m for m in heavy if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", probe], cwd=REPO, check=True)


@pytest.mark.parametrize(
    "fields",
    [{"carving": Carving.TAIL_OF_TRAIN}, {"carving": Carving.THREE_WAY, "train_percent": 80, "val_percent": 30},
     {"carving": Carving.VALIDATION_SPLIT, "train_percent": 90}, {"carving": Carving.HALF_OF_TEST, "val_percent": 5}],
)
def test_layouts_refuse_percents_that_do_not_fit(fields: dict) -> None:
    with pytest.raises(InvalidArgument, match="got"):
        SplitLayout(**fields)
