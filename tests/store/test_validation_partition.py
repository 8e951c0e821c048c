"""The held-out validation partition of an ILSVRC-2012 store (``pack ilsvrc_2012 --validation``):
Meta-Dataset never reads it (specs, episodes, batches and every golden fingerprint are those
of the train input alone), the manifest describes it consistently or is refused, and
``verify`` checks its records."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest
from conftest import generate_fixture, pack_fixture

from sampler_server.core.md.batches import BatchSampler
from sampler_server.core.md.config import EpisodeConfig
from sampler_server.core.md.imagenet_spec import imagenet_spec
from sampler_server.core.md import sample_episode
from sampler_server.core.split import Split
from sampler_server.errors import DataLoss
from sampler_server.pack.pipeline import PackSummary
from sampler_server.store.manifest import VALIDATION, HeldOutPartition, Manifest, load_manifest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))
from episode_checks import ilsvrc_manifest  # noqa: E402

GOLDEN_EPISODES = Path(__file__).resolve().parents[1] / "core" / "golden_episodes.json"


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> tuple[PackSummary, PackSummary]:
    """The same 24-class ILSVRC input packed with its validation images and without."""
    root = tmp_path_factory.mktemp("ilsvrc-validation")
    fixture = generate_fixture("ilsvrc_2012", root, num_classes=24, images_per_class=4)
    with_validation = pack_fixture(fixture, root / "with")
    alone = pack_fixture(fixture, root / "alone", converter_overrides={"validation": None})
    assert with_validation.manifest.validation is not None and alone.manifest.validation is None
    return with_validation, alone


def _with_validation(manifest: object, per_class: int) -> Manifest:
    """``manifest``'s classes with a validation partition of ``per_class`` records each,
    written to JSON and read back as a store's manifest is."""
    classes = tuple(manifest.classes)  # type: ignore[attr-defined]
    end = classes[-1].end
    ranges = tuple((end + per_class * i, end + per_class * (i + 1)) for i in range(len(classes)))
    built = Manifest(source="ilsvrc_2012", name="ilsvrc_2012", classes=classes, split_rule="wordnet-hierarchy",
                     fingerprint=manifest.fingerprint,  # type: ignore[attr-defined]
                     validation=HeldOutPartition(VALIDATION, ranges, "sha256:validation", "wnid folders"))
    return Manifest.from_json(json.loads(json.dumps(built.to_json())))


def test_golden_md_episodes_of_ilsvrc_are_unchanged_with_a_validation_partition() -> None:
    """golden_episodes.json's ILSVRC case, from the 1000 real classes plus 50 validation
    images each stored after them: the same episodes, fingerprints included."""
    manifest = _with_validation(ilsvrc_manifest(), 50)
    assert manifest.total_records == manifest.num_records + 50_000
    spec = imagenet_spec(manifest)
    assert spec.num_records == manifest.num_records
    for entry in json.loads(GOLDEN_EPISODES.read_text())["ilsvrc_md_test"]:
        episode = sample_episode(spec, Split.TEST, EpisodeConfig(), entry["seed"], entry["index"])
        assert (episode.fingerprint, list(episode.class_ids), list(episode.shots)) == (
            entry["fingerprint"], entry["class_ids"], entry["shots"])
        assert max(r for ids in episode.support + episode.query for r in ids) < manifest.num_records


def test_md_specs_episodes_and_batches_of_a_packed_store_ignore_its_validation_images(stores) -> None:
    with_validation, alone = stores
    assert with_validation.manifest.fingerprint == alone.manifest.fingerprint
    assert with_validation.manifest.classes == alone.manifest.classes
    assert with_validation.manifest.total_records > with_validation.manifest.num_records == alone.manifest.num_records
    specs = [imagenet_spec(load_manifest(summary.store_dir)) for summary in stores]
    assert specs[0].content_hash() == specs[1].content_hash()
    for split in (Split.TRAIN, Split.VALID, Split.TEST):
        config = EpisodeConfig.fixed(2, 1, 1)
        for index in range(5):
            first, second = (sample_episode(spec, split, config, 11, index) for spec in specs)
            assert first == second
            assert max(r for ids in first.support + first.query for r in ids) < alone.manifest.num_records
    batches = [BatchSampler(spec, Split.TRAIN, 7) for spec in specs]
    for index in range(6):
        first, second = (sampler.sample(3, index) for sampler in batches)
        assert first == second and max(first.record_ids) < alone.manifest.num_records


@pytest.mark.parametrize("change, message", [
    (lambda v: v["classes"].pop(), r"validation lists 23 classes; expected one per class \(24\)"),
    (lambda v: v["classes"][0].update(start=v["classes"][0]["start"] + 1), "expected a range starting at 96"),
    (lambda v: v["classes"][3].update(end=v["classes"][3]["start"] - 1), "has records"),
    (lambda v: v.update(num_records=1), "validation num_records 1 disagrees with its ranges"),
    (lambda v: v.pop("fingerprint"), "malformed manifest"),
])
def test_an_inconsistent_validation_block_is_refused(stores, change, message) -> None:
    data = json.loads((stores[0].store_dir / "manifest.json").read_text())
    change(data["validation"])
    with pytest.raises(DataLoss, match=message):
        Manifest.from_json(data)


def test_the_manifest_round_trips_the_partition(stores) -> None:
    manifest = load_manifest(stores[0].store_dir)
    again = Manifest.from_json(json.loads(json.dumps(manifest.to_json())))
    assert again == manifest and again.validation == manifest.validation
    assert dataclasses.replace(manifest, validation=None).to_json().get("validation") is None


def test_verify_checks_validation_records_and_finds_records_the_manifest_lost(stores, tmp_path, capsys) -> None:
    import shutil

    from sampler_server.cli.main import main

    store = tmp_path / "ilsvrc_2012"
    shutil.copytree(stores[0].store_dir, store)
    manifest = load_manifest(store)
    held = manifest.validation.num_records
    assert main(["verify", str(store), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["stores"][0]
    assert report["records_checked"] == manifest.total_records and report["validation_records_checked"] == held
    data = json.loads((store / "manifest.json").read_text())
    del data["validation"]
    (store / "manifest.json").write_text(json.dumps(data))
    assert main(["verify", str(store)]) == 1
    assert (f"the data holds {manifest.total_records} records, {held} past the {manifest.num_records} its "
            "manifest describes") in capsys.readouterr().out
