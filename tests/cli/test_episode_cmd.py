"""``sampler-server episode`` on real packed stores: output, consistency with the library, errors."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO_ROOT, generate_fixture, pack_fixture

from sampler_server.cli.main import main
from sampler_server.core.md.config import EpisodeConfig
from sampler_server.core.md.imagenet_spec import imagenet_spec
from sampler_server.core.md import sample_episode
from sampler_server.core.spec import DatasetSpec
from sampler_server.core.split import Split
from sampler_server.fixtures import ilsvrc as ilsvrc_fixture
from sampler_server.store.manifest import load_manifest

HEX64 = re.compile(r"^[0-9a-f]{64}$")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """image_folder packed twice (encoded and raw 32x32) plus an Omniglot store, in one data directory."""
    root = tmp_path_factory.mktemp("episode_cli")
    folder = generate_fixture("image_folder", root, num_classes=24, images_per_class=12)
    out = root / "data"
    pack_fixture(folder, out, name="folder")
    pack_fixture(folder, out, name="folder_raw32", raw_size=32)
    pack_fixture(generate_fixture("omniglot", root, num_classes=60, images_per_class=4), out)
    pack_fixture(generate_fixture("ilsvrc_2012", root, num_classes=48, images_per_class=4), out)
    return out


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _json_lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines()]


def test_human_readable(data: Path, capsys) -> None:
    code, out, err = _run(capsys, "episode", "--data", str(data), "--source", "folder", "--split", "test",
                          "--seed", "7", "--index", "42")
    assert code == 0 and not err
    lines = out.splitlines()
    assert lines[0] == "episode 42  source image_folder  split test  seed 7"
    assert re.match(r"  ways \d+  support \d+  query \d+ per class \(\d+\)$", lines[1])
    assert HEX64.match(lines[2].split()[-1]) and lines[2].startswith("  fingerprint ")
    ways = int(lines[1].split()[1])
    assert sum(1 for line in lines if re.match(r"  \[\d+\] class \d+ class_\d\d: \d+ shots$", line)) == ways
    assert sum(1 for line in lines if line.startswith("      support ")) == ways


def test_json_matches_the_library_and_the_manifest(data: Path, capsys) -> None:
    code, out, _ = _run(capsys, "episode", "--data", str(data), "--source", "folder", "--split", "test",
                        "--seed", "7", "--index", "42", "--count", "3", "--json")
    assert code == 0
    records = _json_lines(out)
    assert [r["index"] for r in records] == [42, 43, 44]
    manifest = load_manifest(data / "folder")
    spec = DatasetSpec.from_manifest(manifest)
    for record in records:
        episode = sample_episode(spec, Split.TEST, EpisodeConfig(), 7, record["index"])
        assert record["fingerprint"] == episode.fingerprint
        assert record["store_fingerprint"] == manifest.fingerprint
        assert record["config_hash"] == EpisodeConfig().config_hash() and record["config"]["min_ways"] == 5
        assert record["ways"] == len(record["classes"]) == episode.ways
        for entry in record["classes"]:
            info = manifest.classes[entry["id"]]
            assert info.split is Split.TEST and entry["name"] == info.name
            assert not set(entry["support"]) & set(entry["query"])
            assert all(info.start <= r < info.end for r in entry["support"] + entry["query"])
        assert len({len(entry["query"]) for entry in record["classes"]}) == 1


def test_encodings_do_not_change_episodes(data: Path, capsys) -> None:
    outputs = []
    for store in ("folder", "folder_raw32"):
        code, out, _ = _run(capsys, "episode", "--data", str(data), "--source", store, "--split", "train",
                            "--seed", "3", "--count", "5", "--json")
        assert code == 0
        outputs.append([r["fingerprint"] for r in _json_lines(out)])
    assert outputs[0] == outputs[1]


def test_a_source_kind_names_the_store_the_server_would_pick(data: Path, capsys) -> None:
    from sampler_server.catalog.registry import StoreRegistry

    registry = StoreRegistry.from_data_dir(data)
    for size, resize in ((84, "bilinear"), (32, "bilinear"), (32, "antialias")):
        expected = registry.get("image_folder", size, resize).name
        code, out, _ = _run(capsys, "episode", "--data", str(data), "--source", "image_folder", "--split", "train",
                            "--seed", "2", "--image-size", str(size), "--resize", resize, "--json")
        by_kind = _json_lines(out)
        code, out, _ = _run(capsys, "episode", "--data", str(data), "--source", expected, "--split", "train",
                            "--seed", "2", "--json")
        assert code == 0 and by_kind == _json_lines(out)
    assert registry.get("image_folder", 32, "bilinear").name == "folder_raw32"
    assert registry.get("image_folder", 32, "antialias").name == "folder"


def test_preset_sets_the_class_splits_of_named_sources(data: Path, capsys) -> None:
    common = ["episode", "--data", str(data), "--source", "ilsvrc_2012", "--seed", "4", "--split", "train", "--json"]
    assert _run(capsys, *common, "--preset", "md-v2")[1] == _run(capsys, *common, "--imagenet-split", "md_v2")[1]
    assert _run(capsys, *common, "--preset", "md-v1")[1] == _run(capsys, *common)[1]


def test_fixed_ways_shots_query(data: Path, capsys) -> None:
    code, out, _ = _run(capsys, "episode", "--data", str(data), "--source", "folder", "--split", "train",
                        "--seed", "1", "--ways", "5", "--shots", "3", "--query", "4", "--count", "4", "--json")
    assert code == 0
    for record in _json_lines(out):
        assert record["ways"] == 5 and record["shots"] == [3] * 5 and record["query_per_class"] == 4


def test_omniglot_episodes_stay_in_one_alphabet(data: Path, capsys) -> None:
    manifest = load_manifest(data / "omniglot")
    code, out, _ = _run(capsys, "episode", "--data", str(data), "--source", "omniglot", "--split", "test",
                        "--seed", "5", "--count", "20", "--json")
    assert code == 0
    for record in _json_lines(out):
        alphabets = {manifest.classes[entry["id"]].group for entry in record["classes"]}
        # Kannada has 4 characters, fewer than min_ways = 5: only Angelic (9) can be drawn.
        assert alphabets == {record["group"]} == {"Angelic"}
        assert 5 <= record["ways"] <= 9


@pytest.mark.parametrize("split", list(Split))
def test_ilsvrc_split_by_wordnet_and_one_node_per_episode(data: Path, capsys, split: Split) -> None:
    manifest = load_manifest(data / "ilsvrc_2012")
    assert all(c.split is None for c in manifest.classes)
    spec = imagenet_spec(manifest)
    nodes = {node.id: set(node.leaves) for node in spec.nodes_in(split)}
    code, out, _ = _run(capsys, "episode", "--data", str(data), "--source", "ilsvrc_2012", "--split", split.value,
                        "--seed", "4", "--count", "10", "--json")
    assert code == 0
    expected_split = {wnid: s for wnid, _, s in ilsvrc_fixture.WNIDS}
    for record in _json_lines(out):
        ids = {entry["id"] for entry in record["classes"]}
        assert ids <= nodes[record["group"]]
        assert {expected_split[manifest.classes[i].wnid] for i in ids} == {split}


def test_md_v2_imagenet_is_train_only(data: Path, capsys) -> None:
    argv = ["episode", "--data", str(data), "--source", "ilsvrc_2012", "--seed", "4", "--imagenet-split", "md_v2"]
    code, out, _ = _run(capsys, *argv, "--split", "train", "--json", "--count", "5")
    assert code == 0 and len(_json_lines(out)) == 5
    code, _, err = _run(capsys, *argv, "--split", "test")
    assert code == 2 and "split: got 'test', but source 'ilsvrc_2012' has no classes in it; expected one of: train (48 classes)" in err


def test_multisource(data: Path, capsys) -> None:
    code, out, _ = _run(capsys, "episode", "--data", str(data), "--source", "omniglot,folder", "--split", "test",
                        "--seed", "2", "--count", "30", "--json", "--ways", "3", "--shots", "1", "--query", "1")
    assert code == 0
    sources = {r["source"] for r in _json_lines(out)}
    assert sources == {"omniglot", "image_folder"}


def test_reads_no_images(data: Path, tmp_path: Path, capsys) -> None:
    store = tmp_path / "folder"
    shutil.copytree(data / "folder", store)
    (store / "data.mdb").write_bytes(b"")  # any image read would fail
    argv = ["--split", "test", "--seed", "7", "--count", "2", "--json"]
    code, out, _ = _run(capsys, "episode", "--data", str(store), "--source", "image_folder", *argv)
    assert code == 0
    _, reference, _ = _run(capsys, "episode", "--data", str(data), "--source", "folder", *argv)
    assert out == reference


def test_independent_of_python_hash_seed(data: Path) -> None:
    argv = [sys.executable, "-m", "sampler_server", "episode", "--data", str(data), "--source", "omniglot,folder",
            "--split", "test", "--seed", "9", "--count", "10", "--json", "--ways", "3", "--shots", "1", "--query", "1"]
    outs = {
        subprocess.run(argv, env=dict(os.environ, PYTHONHASHSEED=seed), cwd=REPO_ROOT, capture_output=True,
                       text=True, check=True).stdout
        for seed in ("1", "2")
    }
    assert len(outs) == 1


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--source", "folder", "--ways", "99"], "num_ways: got 99, expected at most 6 (the classes of store 'folder' (image_folder) split 'test')"),
        (["--source", "folder", "--ways", "5", "--shots", "10", "--query", "5"], "num_support + num_query: got 10 + 5 = 15, expected at most 12"),
        (["--source", "folder", "--min-ways", "7"], "min_ways: got 7, expected at most 6"),
        (["--source", "folder", "--min-ways", "0"], "min_ways: got 0, expected an integer in [1, 2147483647]"),
        (["--source", "folder", "--shots", "-2"], "num_support: got -2, expected an integer in [1, 2147483647]"),
        (["--source", "folder", "--ignore-hierarchy-probability", "2"], "ignore_hierarchy_probability: got 2.0, expected a number in [0.0, 1.0]"),
        (["--source", "folder", "--split", "nosuch"], "split: got 'nosuch', expected one of train, valid, test"),
        (["--source", "folder", "--seed", "-1"], "seed: got -1, expected an integer in [0, 18446744073709551615]"),
        (["--source", "folder", "--index", "-1"], "index: got -1, expected an integer in [0, 9223372036854775807]"),
        (["--source", "folder", "--count", "0"], "--count: got 0, expected an integer in [1, 100000]"),
        (["--source", "nosuch"], "source 'nosuch' is not served under"),
        (["--source", "foldr"], "; did you mean 'folder'?; stores: "),
        (["--source", "md-v1"], "source 'aircraft' is not served under"),
        (["--source", "md-v1", "--preset", "md-v2"], "--preset: got 'md-v2' with --source 'md-v1', expected the same or none"),
        (["--source", "folder,folder_raw32"], "--source: source 'image_folder' is selected more than once"),
        (["--source", "omniglot", "--ways", "10"], "num_ways: got 10, expected at most 9 (the most candidate classes any group of source 'omniglot' split 'test'"),
        (["--source", "folder", "--imagenet-split", "v3"], "imagenet split: got 'v3', expected one of md, md_v2"),
    ],
)
def test_bad_input_is_one_line_exit_2(data: Path, capsys, extra: list[str], message: str) -> None:
    argv = ["episode", "--data", str(data), "--split", "test", "--seed", "7", *extra]
    if "--split" in extra:
        argv[3:5] = []
    code, out, err = _run(capsys, *argv)
    assert code == 2 and not out
    assert err.startswith("sampler-server episode: error: ")
    assert len(err.strip().splitlines()) == 1
    assert message in err, err


def test_missing_data_dir(tmp_path: Path, capsys) -> None:
    code, _, err = _run(capsys, "episode", "--data", str(tmp_path / "none"), "--source", "x", "--split", "test", "--seed", "1")
    assert code == 2 and "no such directory" in err


def test_help(capsys) -> None:
    with pytest.raises(SystemExit) as done:
        main(["episode", "--help"])
    assert done.value.code == 0
    out, _ = capsys.readouterr()
    for flag in ("--data", "--source", "--split", "--seed", "--index", "--count", "--ways", "--shots", "--query", "--json"):
        assert flag in out


# ---- --png ---------------------------------------------------------------------------


def _png_episode(capsys, data: Path, png: Path, *extra: str) -> tuple[dict, str]:
    code, out, err = _run(capsys, "episode", "--data", str(data), "--split", "train", "--seed", "5", "--index", "3",
                          "--json", "--png", str(png), *extra)
    assert code == 0, err
    (record,) = _json_lines(out)
    return record, err


@pytest.mark.parametrize("resize", ["bilinear", "antialias"])
def test_png_tiles_are_the_served_pixels(data: Path, tmp_path: Path, capsys, resize: str) -> None:
    from PIL import Image

    from sampler_server.assembly.assembler import decode_records
    from sampler_server.cli.episode_cmd import PngLayout
    from sampler_server.imaging import ResizeMethod
    from sampler_server.store.reader import StoreReader

    png = tmp_path / "episode.png"
    record, err = _png_episode(capsys, data, png, "--source", "folder", "--ways", "3", "--shots", "2", "--query", "3",
                               "--image-size", "32", "--resize", resize)
    picture = np.asarray(Image.open(png).convert("RGB"))
    # The size follows from ways, shots and query: 3 rows; 2 support + 3 query columns of 32 px.
    layout = PngLayout(ways=3, support_columns=2, query_columns=3, size=32)
    width = layout.MARGIN + 2 * (32 + layout.GAP) - layout.GAP + layout.SEPARATOR + 3 * (32 + layout.GAP) - layout.GAP + layout.PAD
    height = layout.HEADER + 3 * (max(32, layout.TEXT_HEIGHT) + layout.ROW_GAP) - layout.ROW_GAP + layout.PAD
    assert picture.shape == (height, width, 3) == (layout.height, layout.width, 3)
    assert f"wrote {png} ({width}x{height})" in err
    reader = StoreReader(data / "folder")
    for row, entry in enumerate(record["classes"]):
        for part, ids in (("support", entry["support"]), ("query", entry["query"])):
            served = decode_records(reader, ids, 32, ResizeMethod(resize))
            for column, pixels in enumerate(served):
                x, y = layout.tile(row, column, query=part == "query")
                assert np.array_equal(picture[y : y + 32, x : x + 32], pixels), (row, part, column)


def test_png_caps_wide_rows(data: Path, tmp_path: Path, capsys) -> None:
    from PIL import Image

    from sampler_server.cli.episode_cmd import PngLayout

    png = tmp_path / "wide.png"
    record, _ = _png_episode(capsys, data, png, "--source", "folder", "--ways", "2", "--shots", "7", "--query", "5",
                             "--png-max-tiles", "4")
    assert record["shots"] == [7, 7]
    with Image.open(png) as picture:
        layout = PngLayout(ways=2, support_columns=4, query_columns=4, size=84)  # default image size 84
        assert picture.size == (layout.width, layout.height)


def test_png_of_a_raw_store_needs_its_size(data: Path, tmp_path: Path, capsys) -> None:
    png = tmp_path / "raw.png"
    argv = ["episode", "--data", str(data), "--source", "folder_raw32", "--split", "train", "--seed", "1", "--png", str(png)]
    code, _, err = _run(capsys, *argv)
    assert code == 2 and "--image-size: got 84, but store 'folder_raw32' holds raw 32x32 pixels" in err
    assert not png.exists()
    code, _, _ = _run(capsys, *argv, "--image-size", "32")
    assert code == 0 and png.is_file()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--count", "2"], "--png: got --count 2, expected 1 (one episode per picture)"),
        (["--image-size", "0"], "image_size: got 0, expected an integer in [1, 1024]"),
        (["--png-max-tiles", "0"], "--png-max-tiles: got 0, expected at least 1"),
    ],
)
def test_bad_png_options(data: Path, tmp_path: Path, capsys, extra: list[str], message: str) -> None:
    code, out, err = _run(capsys, "episode", "--data", str(data), "--source", "folder", "--split", "test",
                          "--seed", "1", "--png", str(tmp_path / "x.png"), *extra)
    assert code == 2 and not out and message in err


def test_max_span_leaves_option_reaches_the_config(data: Path, capsys) -> None:
    argv = ["episode", "--data", str(data), "--source", "ilsvrc_2012", "--split", "train", "--seed", "4", "--json"]
    code, out, _ = _run(capsys, *argv)
    assert code == 0 and "max_span_leaves" not in _json_lines(out)[0]["config"]
    code, out, _ = _run(capsys, *argv, "--max-span-leaves", "40")
    assert code == 0 and _json_lines(out)[0]["config"]["max_span_leaves"] == 40
    code, _, err = _run(capsys, *argv, "--max-span-leaves", "4")
    assert code == 2 and "max_span_leaves: got 4, expected an integer in [5, " in err
