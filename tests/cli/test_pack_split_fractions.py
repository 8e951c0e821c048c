"""``pack image_folder --split-fractions TRAIN VALID TEST``: a small folder's classes cut at the
user's shares (the default rule's permutation, the manifest naming the rule), so a 12-class
folder can hold the 5 test classes Meta-Dataset's variable-way episodes need; bad shares, the
flag beside --class-splits or on another source are one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

from sampler_server.cli.main import main
from sampler_server.pack.splits import default_split


def _folder(root: Path, classes: int = 12) -> Path:
    for c in range(classes):
        (root / f"class_{c:02d}").mkdir(parents=True)
        for i in range(2):
            Image.fromarray(np.full((8, 8, 3), c * 20 + i, np.uint8)).save(root / f"class_{c:02d}" / f"{i}.png")
    return root


def _pack(capsys, tmp_path: Path, *extra: str) -> tuple[int, str, str]:
    code = main(["pack", "image_folder", "--input", str(tmp_path / "in"), "--output", str(tmp_path / "out"),
                 "--quiet", "--workers", "1", "--json", "--overwrite", *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_shares_cut_the_default_permutation_and_name_the_rule(tmp_path, capsys):
    _folder(tmp_path / "in")
    code, out, err = _pack(capsys, tmp_path, "--split-fractions", "0.4", "0.2", "0.4")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["split_counts"] == {"train": 4, "valid": 3, "test": 5}
    assert summary["split_rule"] == "fractions-0.4-0.2-0.4"
    warned = [w.split(" has ")[0] for w in summary["warnings"]]
    assert warned == ["warning: image_folder: split train", "warning: image_folder: split valid"]  # test has 5
    # the classes' order is the default rule's: the first 4 of its permutation are train either way
    names = [f"class_{c:02d}" for c in range(12)]
    default = default_split("image_folder", names)
    cut = default_split("image_folder", names, (0.4, 0.2, 0.4))
    assert {n for n, s in cut.items() if s.value == "train"} <= {n for n, s in default.items() if s.value == "train"}


def test_bad_shares_and_flags_that_clash_are_one_line(tmp_path, capsys):
    _folder(tmp_path / "in")
    splits = tmp_path / "splits.json"
    splits.write_text(json.dumps({"train": [], "valid": [], "test": [f"class_{c:02d}" for c in range(12)]}))
    for extra, named in ((["--split-fractions", "0.5", "0.5", "0.5"], "summing to 1"),
                         (["--split-fractions", "0.4", "0.2", "0.4", "--class-splits", str(splits)],
                          "not with --class-splits")):
        code, _, err = _pack(capsys, tmp_path, *extra)
        assert code == 2 and len(err.strip().splitlines()) == 1 and "--split-fractions" in err and named in err, err
