"""Manifest validation: a manifest that does not describe a consistent store is refused."""

from __future__ import annotations

import json

import pytest

from sampler_server.errors import DataLoss, InvalidArgument, NotFound
from sampler_server.store.manifest import ClassInfo, Manifest, Split, load_manifest, write_manifest


def _manifest(classes):
    return Manifest(source="s", name="s", classes=tuple(classes), split_rule="r", fingerprint="sha256:x")


def test_round_trip_through_json(tmp_path):
    manifest = _manifest([ClassInfo(0, "a", 0, 3, Split.TRAIN), ClassInfo(1, "b", 3, 5, None, wnid="n01", group="g")])
    write_manifest(tmp_path, manifest)
    (tmp_path / "data.mdb").write_bytes(b"")
    loaded = load_manifest(tmp_path)
    assert loaded == manifest
    assert loaded.num_records == 5
    assert [c.name for c in loaded.classes_in(Split.TRAIN)] == ["a"]


@pytest.mark.parametrize(
    "classes, message",
    [
        ([ClassInfo(1, "a", 0, 3)], "has id 1, expected 0"),
        ([ClassInfo(0, "a", 1, 3)], "expected a non-empty range starting at 0"),
        ([ClassInfo(0, "a", 0, 3), ClassInfo(1, "b", 4, 6)], "starting at 3"),
        ([ClassInfo(0, "a", 0, 0)], "non-empty"),
    ],
)
def test_inconsistent_class_ranges_are_refused(tmp_path, classes, message):
    data = _manifest([ClassInfo(0, "x", 0, 1)]).to_json()
    data["classes"] = [c.to_json() for c in classes]
    data["num_records"] = None
    with pytest.raises(DataLoss, match=message):
        Manifest.from_json(data)


def test_missing_manifest_is_not_found_and_wrong_version_is_refused(tmp_path):
    with pytest.raises(NotFound, match="not a packed store"):
        load_manifest(tmp_path)
    data = _manifest([ClassInfo(0, "x", 0, 1)]).to_json()
    data["format_version"] = 99
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(DataLoss, match="format_version 99"):
        load_manifest(tmp_path)


def test_split_parse_names_allowed_values():
    assert Split.parse("validation") is Split.VALID and Split.parse("val") is Split.VALID
    with pytest.raises(InvalidArgument) as refused:
        Split.parse("dev")
    assert str(refused.value) == "split: got 'dev', expected one of train, valid, test (or val, validation for valid)"
