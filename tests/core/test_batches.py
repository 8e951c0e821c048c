"""Plain batches: every record once per epoch, random access, stable labels, O(batch) memory.

Golden batches are pinned in golden_batches.json, generated once by running this
module as a script (``python tests/core/test_batches.py``); regenerate it only for a
deliberate change of the batch algorithm, together with a new
``BATCH_CONFIG_KIND``.
"""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from sampler_server.core.md.batches import BATCH_CONFIG_KIND, BatchSampler
from sampler_server.core.spec import DatasetSpec
from sampler_server.core.split import Split
from sampler_server.errors import FailedPrecondition, InvalidArgument

SPEC = DatasetSpec.from_counts("toy", [5, 7, 3, 9], [Split.TRAIN, Split.TEST, Split.TRAIN, Split.TRAIN])
TRAIN_RECORDS = list(range(0, 5)) + list(range(12, 15)) + list(range(15, 24))
GOLDEN = Path(__file__).resolve().parent / "golden_batches.json"


def _virtual_quickdraw(records: int = 50_000_000, classes: int = 345) -> DatasetSpec:
    counts = [records // classes + (1 if i < records % classes else 0) for i in range(classes)]
    return DatasetSpec.from_counts("quickdraw", counts, [Split.TRAIN] * classes, fingerprint="virtual")


@given(batch_size=st.integers(1, 40), seed=st.integers(0, 2**64 - 1), start_epoch=st.integers(0, 10**6))
@settings(max_examples=examples(60), deadline=None)
def test_consecutive_batches_cover_each_epoch_exactly_once(batch_size: int, seed: int, start_epoch: int) -> None:
    sampler = BatchSampler(SPEC, "train", batch_size)
    size = len(TRAIN_RECORDS)
    # Batches whose steps cover whole epochs start_epoch .. start_epoch + 2 (batch starts need not align).
    first_step = start_epoch * size
    first_index = first_step // batch_size
    steps: list[int] = []
    index = first_index
    while index * batch_size < first_step + 3 * size:
        steps.extend(sampler.sample(seed, index).record_ids)
        index += 1
    skip = first_step - first_index * batch_size
    for epoch in range(3):
        chunk = steps[skip + epoch * size : skip + (epoch + 1) * size]
        assert sorted(chunk) == TRAIN_RECORDS


def test_batch_epoch_field_and_straddling() -> None:
    sampler = BatchSampler(SPEC, "train", 4)
    assert [sampler.sample(1, i).epoch for i in range(10)] == [0, 0, 0, 0, 0, 1, 1, 1, 1, 2]
    wide = BatchSampler(SPEC, "train", 40).sample(3, 0)  # steps 0..39 span epochs 0, 1 and 2
    assert sorted(wide.record_ids[:17]) == sorted(wide.record_ids[17:34]) == TRAIN_RECORDS


def test_labels_are_class_positions_within_the_split_and_access_is_random():
    sampler = BatchSampler(SPEC, Split.TRAIN, 4)
    batch = sampler.sample(3, 10)
    for record_id, label in zip(batch.record_ids, batch.labels):
        expected = 0 if record_id < 5 else 1 if 12 <= record_id < 15 else 2
        assert label == expected
    fresh = BatchSampler(SPEC, Split.TRAIN, 4)
    assert fresh.sample(3, 10) == batch
    assert sampler.sample(4, 10).fingerprint != batch.fingerprint
    assert batch.num_classes == 3


def test_preset_enters_the_fingerprint_not_the_composition() -> None:
    v1 = BatchSampler(SPEC, "train", 4).sample(7, 0)
    v2 = BatchSampler(SPEC, "train", 4, preset="md-v2").sample(7, 0)
    assert v1.preset == "md-v1" and v2.preset == "md-v2"
    assert (v1.record_ids, v1.labels) == (v2.record_ids, v2.labels)
    assert v1.fingerprint != v2.fingerprint
    assert BatchSampler(SPEC, "train", 4, preset="").sample(7, 0) == v1  # empty = the default, as on the wire


def test_a_batch_of_a_50_million_record_split_costs_o_batch_memory() -> None:
    sampler = BatchSampler(_virtual_quickdraw(), "train", 256)
    tracemalloc.start()
    try:
        for index in (0, 195_312, 390_624, 585_936):  # epochs 0 to 2, two of them straddling
            sampler.sample(11, index)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 << 20, f"peak {peak} bytes: a permutation of 50M records would be 400 MB"


def test_bad_batch_requests():
    with pytest.raises(InvalidArgument, match="batch_size: got 0"):
        BatchSampler(SPEC, "train", 0)
    with pytest.raises(FailedPrecondition, match="no valid classes"):
        BatchSampler(SPEC, "valid", 4)
    with pytest.raises(InvalidArgument, match="index"):
        BatchSampler(SPEC, "train", 4).sample(0, -1)
    with pytest.raises(InvalidArgument, match="preset: got 'md-v3', expected one of md-v1, md-v2"):
        BatchSampler(SPEC, "train", 4, preset="md-v3")
    sampler = BatchSampler(SPEC, "train", 65536)
    sampler.sample(0, sampler.max_index)
    with pytest.raises(InvalidArgument, match=f"index: got {sampler.max_index + 1}, expected at most {sampler.max_index}"):
        sampler.sample(0, sampler.max_index + 1)


# ---- golden batches ------------------------------------------------------------------

CASES: dict[str, tuple[DatasetSpec, int, str, list[tuple[int, int]]]] = {
    "toy_4": (SPEC, 4, "md-v1", [(7, 0), (7, 4), (2**64 - 1, 12345)]),
    "toy_4_md_v2": (SPEC, 4, "md-v2", [(7, 0)]),
    "toy_40_three_epochs": (SPEC, 40, "md-v1", [(3, 1)]),
    "quickdraw_50m_8": (_virtual_quickdraw(), 8, "md-v1", [(7, 0), (7, 6_250_000)]),
}


def _compute(name: str) -> list[dict[str, Any]]:
    spec, batch_size, preset, keys = CASES[name]
    sampler = BatchSampler(spec, "train", batch_size, preset=preset)
    out = []
    for seed, index in keys:
        batch = sampler.sample(seed, index)
        out.append({"seed": seed, "index": index, "epoch": batch.epoch, "record_ids": list(batch.record_ids),
                    "labels": list(batch.labels), "fingerprint": batch.fingerprint})
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_batch(name: str) -> None:
    golden = json.loads(GOLDEN.read_text())
    assert golden["kind"] == BATCH_CONFIG_KIND, "a new batch algorithm needs a new BATCH_CONFIG_KIND and new goldens"
    assert _compute(name) == golden["cases"][name]


def test_no_stale_golden_cases() -> None:
    assert set(json.loads(GOLDEN.read_text())["cases"]) == set(CASES)


if __name__ == "__main__":
    cases = {name: _compute(name) for name in sorted(CASES)}
    blocks = [
        f"    {json.dumps(name)}: [\n" + ",\n".join("      " + json.dumps(entry) for entry in entries) + "\n    ]"
        for name, entries in cases.items()
    ]
    GOLDEN.write_text('{\n  "kind": ' + json.dumps(BATCH_CONFIG_KIND) + ',\n  "cases": {\n' + ",\n".join(blocks) + "\n  }\n}\n")
    print(f"wrote {GOLDEN}")
