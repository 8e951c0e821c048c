"""``pack`` and ``inspect`` say what they see (issue 27, item 3): a pack whose default split
rule leaves a split empty warns in one line naming the split, the class count and the
flag that decides instead; ``inspect`` of a TFDS (VTAB) store calls its sizes per split."""

from __future__ import annotations

import json

from tfds_builders import tfds_dir  # noqa: F401  (the shared prepared datasets)

from sampler_server.cli.main import main


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _pack_folder(capsys, tmp_path, classes: int, *extra: str):
    original = tmp_path / "original"
    code, _, err = _run(capsys, "fixtures", "image_folder", "--output", original, "--classes", classes)
    assert code == 0, err
    return _run(capsys, "pack", "image_folder", "--input", original / "image_folder", "--output", tmp_path / "data",
                "--quiet", *extra)


def test_three_classes_by_the_default_rule_warn_that_valid_is_empty(tmp_path, capsys):
    code, out, err = _pack_folder(capsys, tmp_path, 3, "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["split_counts"] == {"train": 2, "valid": 0, "test": 1}
    (line,) = [line for line in err.splitlines() if "split valid" in line]
    assert line.startswith("warning: image_folder: split valid is empty: the default rule (default-70-15-15) gives "
                           "it none of the 3 classes (train 2, valid 0, test 1)"), line
    assert "pack at least 4 classes, or give --class-splits FILE" in line, line
    assert line in summary["warnings"]  # --json carries it too


def test_a_default_split_with_every_split_filled_warns_of_none(tmp_path, capsys):
    code, _, err = _pack_folder(capsys, tmp_path, 4)
    assert code == 0, err
    assert "is empty" not in err, err


def test_inspect_of_a_tfds_store_gives_sizes_per_split(tfds_dir, tmp_path, capsys):  # noqa: F811
    code, _, err = _run(capsys, "pack", "vtab", "--tfds-name", "clevr", "--tfds-data-dir", tfds_dir,
                        "--output", tmp_path, "--quiet", "--workers", "1")
    assert code == 0, err
    code, out, err = _run(capsys, "inspect", tmp_path / "tfds_clevr")
    assert code == 0, err
    (line,) = [line for line in out.splitlines() if line.lstrip().startswith("images")]
    assert "per split min 40, max 70" in line and "per class" not in line, line


def test_inspect_of_a_class_store_still_gives_sizes_per_class(tmp_path, capsys):
    code, _, err = _pack_folder(capsys, tmp_path, 5)
    assert code == 0, err
    code, out, _ = _run(capsys, "inspect", tmp_path / "data" / "image_folder")
    assert "per class min 5, max 5" in out, out
