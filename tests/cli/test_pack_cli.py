"""``sampler-server fixtures / pack / inspect`` as a user runs them."""

from __future__ import annotations

import json

import pytest

from sampler_server.cli.main import main


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_fixtures_pack_inspect_round_trip(tmp_path, capsys):
    original = tmp_path / "original"
    code, out, _ = _run(capsys, "fixtures", "image_folder", "--output", str(original), "--classes", "5")
    assert code == 0 and "image_folder: 5 classes, 25 images" in out
    code, out, _ = _run(
        capsys, "pack", "image_folder", "--input", str(original / "image_folder"), "--output", str(tmp_path / "data"),
        "--class-splits", str(original / "image_folder_splits.json"), "--quiet", "--json",
    )
    assert code == 0
    summary = json.loads(out)
    assert summary["images"] == 25 and summary["classes"] == 5
    assert summary["split_counts"] == {"train": 3, "valid": 1, "test": 1}
    code, out, _ = _run(capsys, "inspect", str(tmp_path / "data"), "--json")
    assert code == 0
    (store,) = json.loads(out)["stores"]
    assert store["fingerprint"] == summary["fingerprint"]
    assert store["splits"]["train"] == {"classes": 3, "images": 15}
    assert store["images_per_class"] == {"min": 5, "max": 5}
    code, out, _ = _run(capsys, "inspect", str(tmp_path / "data" / "image_folder"))
    assert code == 0 and "fingerprint  sha256:" in out and "train 3 (15 images)" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["pack", "nosuch", "--input", "{tmp}", "--output", "{tmp}/o"], "unknown source 'nosuch'; allowed: "),
        (["pack", "image_folder", "--input", "{tmp}/missing", "--output", "{tmp}/o"], "missing input directory"),
        (["pack", "image_folder", "--input", "{tmp}", "--output", "{tmp}/o", "--raw-size", "0"], "--raw-size must be in [1, 4096], got 0"),
        (["pack", "image_folder", "--input", "{tmp}", "--output", "{tmp}/o", "--class-splits", "{tmp}/none.json"], "class-splits file not found"),
        (["inspect", "{tmp}/missing"], "no such directory"),
    ],
)
def test_user_errors_are_one_line_and_exit_2(tmp_path, capsys, argv, message):
    (tmp_path / "a_class").mkdir()
    code, out, err = _run(capsys, *[a.format(tmp=tmp_path) for a in argv])
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("sampler-server ")


def test_help_for_every_subcommand(capsys):
    for command in ("pack", "inspect", "fixtures"):
        with pytest.raises(SystemExit) as exit_info:
            main([command, "--help"])
        assert exit_info.value.code == 0
        assert "usage: sampler-server " + command in capsys.readouterr().out


def test_packs_without_the_official_files_warn_that_results_will_not_match(tmp_path, capsys):
    original = tmp_path / "original"
    _run(capsys, "fixtures", "dtd", "ilsvrc_2012", "--output", str(original))
    code, out, err = _run(capsys, "pack", "dtd", "--input", str(original / "dtd"), "--output", str(tmp_path / "a"),
                          "--quiet", "--json")
    assert code == 0
    assert "warning: dtd packed without --class-splits" in err and "will not match published" in err
    assert "meta_dataset/dataset_conversion/splits/dtd_splits.json" in err
    assert json.loads(out)["warnings"] == err.strip().splitlines()
    split_file = next(original.glob("dtd*splits*.json"))
    code, out, err = _run(capsys, "pack", "dtd", "--input", str(original / "dtd"), "--output", str(tmp_path / "b"),
                          "--class-splits", str(split_file), "--quiet", "--json")
    # with the official file: no reference warning (the fixture's few classes per split still get theirs)
    small = [line for line in err.splitlines() if "fewer than the 5 of Meta-Dataset's variable-way episodes" in line]
    assert code == 0 and err.strip().splitlines() == small and json.loads(out)["warnings"] == small
    ilsvrc = next(p for p in original.iterdir() if p.is_dir() and p.name != "dtd")
    code, _, err = _run(capsys, "pack", "ilsvrc_2012", "--input", str(ilsvrc), "--output", str(tmp_path / "c"),
                        "--quiet")
    assert code == 0
    assert "warning: ilsvrc_2012 packed without --duplicates" in err
    assert "ImageNet_CUBirds_duplicates.txt" in err
