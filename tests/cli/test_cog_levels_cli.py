"""``sampler-server cog levels`` end to end: --counts and --data, JSON byte for byte, bad input."""

from __future__ import annotations

import hashlib
import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from sampler_server.cli.cog_levels_cmd import counts_from_data
from sampler_server.cli.main import main
from sampler_server.core.cog import SOURCE, compute_levels
from sampler_server.fixtures import cog_counts
from sampler_server.store.manifest import DATA_NAME, ClassInfo, Manifest, write_manifest

SMALL = ["--level-size", "4", "--min-images", "60"]


def _run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def counts_file(tmp_path: Path) -> Path:
    path = tmp_path / "counts.json"
    path.write_text(json.dumps(cog_counts.cog_counts()))
    return path


def _store(data: Path, name: str, source: str, counts: dict[str, int]) -> None:
    """A published store as far as manifests go (its LMDB is an empty file: never read)."""
    classes, start = [], 0
    for i, (wnid, count) in enumerate(sorted(counts.items())):
        classes.append(ClassInfo(id=i, name=wnid, start=start, end=start + count, wnid=wnid))
        start += count
    directory = data / name
    directory.mkdir(parents=True)
    (directory / DATA_NAME).write_bytes(b"")
    write_manifest(directory, Manifest(source=source, name=name, classes=tuple(classes), split_rule="none",
                                       fingerprint="sha256:test"))


def test_json_equals_the_core_and_is_reproducible_byte_for_byte(
    counts_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One run in a fresh interpreter, the same and the shuffled counts in this one: two
    processes (two hash seeds) and two input orders print the same bytes."""
    argv = ["cog", "levels", "--counts", str(counts_file), *SMALL, "--json"]
    first = subprocess.run([sys.executable, "-m", "sampler_server", *argv], capture_output=True, check=True).stdout
    code, second, _ = _run(capsys, *argv)
    assert code == 0
    shuffled = tmp_path / "shuffled.json"
    shuffled.write_text(json.dumps(dict(reversed(list(cog_counts.cog_counts().items()))), indent=2))
    argv[argv.index(str(counts_file))] = str(shuffled)
    code, third, _ = _run(capsys, *argv)
    assert code == 0
    assert first.decode("ascii") == second == third
    expected = compute_levels(cog_counts.cog_counts(), level_size=4, min_images=60).to_json_text()
    assert first.decode("ascii") == expected


def test_summary_names_rules_eligible_and_levels(counts_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "cog", "levels", "--counts", counts_file, *SMALL)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[1] == "removed: in1k 40, in1k_ancestor 6, too_few_images 103, person 4, not_leaf 3, listed 3"
    assert lines[2] == "eligible: 30"
    assert lines[3].startswith("L1: ranks [0, 4)  Lin similarity to IN-1K 0.7639 .. 0.8968")
    assert [line.split(":")[0] for line in lines[3:8]] == ["L1", "L2", "L3", "L4", "L5"]


def test_data_sums_the_imagenet21k_shards_and_ignores_other_stores(
    tmp_path: Path, counts_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    counts = cog_counts.cog_counts()
    wnids = sorted(counts)
    data = tmp_path / "data"
    _store(data, f"{SOURCE}-00000-of-00002", SOURCE, {w: counts[w] for w in wnids[:100]})
    _store(data, f"{SOURCE}-00001-of-00002", SOURCE, {w: counts[w] for w in wnids[100:]})
    _store(data, "ilsvrc_2012", "ilsvrc_2012", {"n01440764": 1300})
    assert counts_from_data(data) == counts
    code, from_data, _ = _run(capsys, "cog", "levels", "--data", data, *SMALL, "--json")
    code_counts, from_counts, _ = _run(capsys, "cog", "levels", "--counts", counts_file, *SMALL, "--json")
    assert code == code_counts == 0 and from_data == from_counts


def _error(capsys: pytest.CaptureFixture[str], *argv: object) -> str:
    code, out, err = _run(capsys, "cog", "levels", *argv)
    assert code == 2 and out == "" and len(err.splitlines()) == 1, err
    return err.strip()


def test_bad_input_is_one_line_naming_it(tmp_path: Path, counts_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.json"
    assert _error(capsys, "--counts", missing) == f"sampler-server cog: error: --counts: {missing} does not exist"
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert _error(capsys, "--counts", bad).startswith(f"sampler-server cog: error: --counts {bad}: not JSON")
    bad.write_text(json.dumps({"n01440764": 2, "n99999999": 3, "n00000042": 1}))
    assert _error(capsys, "--counts", bad) == (
        f"sampler-server cog: error: --counts {bad}: 'n00000042' is not a WordNet 3.0 noun synset (1 more unknown)"
    )
    assert _error(capsys, "--counts", counts_file) == (
        f"sampler-server cog: error: --counts {counts_file}: 0 of 189 concepts are eligible, the levels need 5000 "
        "(5 x level_size 1000); removed: in1k 40, in1k_ancestor 6, too_few_images 143, person 0, not_leaf 0, listed 0; "
        "a smaller store needs smaller levels: lower level_size and min_images (the demo's store takes level_size 4, "
        "min_images 60)"
    )
    assert _error(capsys, "--counts", counts_file, "--level-size", "0").endswith(
        "--level-size: got 0, expected an integer >= 1"
    )
    assert _error(capsys, "--counts", counts_file, "--min-images", "-1").endswith(
        "--min-images: got -1, expected an integer >= 0"
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _error(capsys, "--data", empty) == (
        f"sampler-server cog: error: --data {empty}: no {SOURCE} store (pack one with `sampler-server pack {SOURCE}`)"
    )
    assert _error(capsys, "--data", tmp_path / "nowhere").endswith("no such directory")


def test_data_and_counts_are_exclusive_and_one_is_required(counts_file: Path) -> None:
    with pytest.raises(SystemExit):
        main(["cog", "levels"])
    with pytest.raises(SystemExit):
        main(["cog", "levels", "--counts", str(counts_file), "--data", str(counts_file.parent)])


# ---- naver/cog's levels file: --levels-file and --compare ---------------------------------------


def _official_levels(tmp_path: Path) -> tuple[Path, list[list[str]], dict[str, str]]:
    """A levels file made from our computed levels with changes: L1 and L2 trade a concept,
    and L5 holds an IN-1K concept (never eligible) instead of one of ours."""
    computed = compute_levels(cog_counts.cog_counts(), level_size=4, min_images=60)
    levels = [list(level.concepts) for level in computed.levels]
    moved = {"l1": levels[0][0], "l2": levels[1][0], "l5": levels[4][-1]}
    levels[0][0], levels[1][0] = moved["l2"], moved["l1"]
    levels[4][-1] = "n01440764"  # tench, an IN-1K concept
    path = tmp_path / "cog_levels_mapping_file.pkl"
    path.write_bytes(pickle.dumps([list(reversed(level)) for level in levels]))
    return path, levels, moved


def test_compare_prints_per_level_what_ours_holds_and_the_wnids_that_differ(
    tmp_path: Path, counts_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _, moved = _official_levels(tmp_path)
    code, out, err = _run(capsys, "cog", "levels", "--counts", counts_file, *SMALL, "--compare", path, "--json")
    assert code == 0 and err == ""
    levels = json.loads(out)["levels"]
    assert [levels[name]["common"] for name in ("L1", "L2", "L3", "L4", "L5")] == [3, 3, 4, 4, 3]
    assert levels["L1"]["only_file"] == [moved["l2"]] and levels["L1"]["only_computed"] == [moved["l1"]]
    assert levels["L1"]["only_file_in_computed_level"] == {moved["l2"]: "L2"}
    assert levels["L2"]["only_file"] == [moved["l1"]] and levels["L2"]["only_computed"] == [moved["l2"]]
    assert levels["L3"]["only_file"] == levels["L3"]["only_computed"] == []
    assert levels["L5"]["only_file"] == ["n01440764"] and levels["L5"]["only_file_not_eligible"] == ["n01440764"]
    assert levels["L5"]["only_computed"] == [moved["l5"]]
    code, out, _ = _run(capsys, "cog", "levels", "--counts", counts_file, *SMALL, "--compare", path)
    assert code == 0 and f"L1: ours holds 3 of the file's 4 concepts; only the file's: {moved['l2']}" in out


def test_levels_file_lists_the_files_levels_checked_against_the_counts(
    tmp_path: Path, counts_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, levels, _ = _official_levels(tmp_path)
    code, out, err = _run(capsys, "cog", "levels", "--counts", counts_file, "--levels-file", path, "--json")
    assert code == 0 and err == ""
    printed = json.loads(out)
    assert [entry["wnids"] for entry in printed["levels"]] == [sorted(level) for level in levels]
    assert printed["levels_file_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert printed["fingerprint"] != compute_levels(cog_counts.cog_counts(), level_size=4, min_images=60).fingerprint
    unknown = tmp_path / "unknown.pkl"
    unknown.write_bytes(pickle.dumps([level + ["n09999999"] for level in levels]))
    assert _error(capsys, "--counts", counts_file, "--levels-file", unknown) == (
        f"sampler-server cog: error: --levels-file {unknown}: 1 of its 21 concepts are not in store --counts "
        f"{counts_file}: n09999999"
    )
    assert _error(capsys, "--counts", counts_file, "--concepts-split-file", path).endswith(
        "--concepts-split-file: given without --levels-file; its images are of the levels file's concepts")
