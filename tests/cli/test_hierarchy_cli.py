"""``sampler-server hierarchy imagenet``: the MD figures from WordNet 3.0, via the CLI."""

from __future__ import annotations

import json

from sampler_server.cli.main import main


def test_imagenet_split_figures_from_a_wnid_list(shared_reference, capsys):
    wnid_file = shared_reference / "md_specs" / "ilsvrc_2012_num_leaf_images.json"
    assert main(["hierarchy", "imagenet", "--wnids", str(wnid_file), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["classes"], report["graph_nodes"], report["graph_internal_nodes"]) == (1000, 1397, 397)
    figures = {
        name: (s["classes"], s["nodes"], s["internal_nodes"], s["eligible_nodes"], s["eligible_nodes_over_50_leaves"])
        for name, s in report["splits"].items()
    }
    assert figures == {
        "train": (712, 1011, 299, 113, 16),
        "valid": (158, 200, 42, 18, 4),
        "test": (130, 180, 50, 15, 1),
    }
    assert report["splits"]["valid"]["root"] == "n02075296"
    assert report["splits"]["test"]["root"] == "n03183080"
    assert all(not s["uncovered_leaves"] for s in report["splits"].values())
    wnids = [w for s in report["splits"].values() for w in s["wnids"]]
    assert sorted(wnids) == sorted(json.loads(wnid_file.read_text()))


def test_imagenet_md_v2_puts_every_class_in_train(shared_reference, capsys):
    wnid_file = shared_reference / "md_specs" / "ilsvrc_2012_num_leaf_images.json"
    assert main(["hierarchy", "imagenet", "--wnids", str(wnid_file), "--variant", "md_v2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [report["splits"][s]["classes"] for s in ("train", "valid", "test")] == [1000, 0, 0]


MD_V2_UNCOVERED = [
    {"wnid": "n03814906", "name": "necklace"},
    {"wnid": "n03938244", "name": "pillow"},
    {"wnid": "n04296562", "name": "stage"},
    {"wnid": "n04399382", "name": "teddy"},
    {"wnid": "n11939491", "name": "daisy"},
    {"wnid": "n12057211", "name": "yellow_lady's_slipper"},
]


def test_coverage_per_variant_and_the_smallest_covering_cap(shared_reference, capsys):
    wnid_file = shared_reference / "md_specs" / "ilsvrc_2012_num_leaf_images.json"
    assert main(["hierarchy", "imagenet", "--wnids", str(wnid_file), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["max_span_leaves"] == 392
    coverage = report["coverage"]
    assert {v: sorted(splits) for v, splits in coverage.items()} == {"md": ["test", "train", "valid"], "md_v2": ["train"]}
    assert all(not info["uncovered_leaves"] for info in coverage["md"].values())
    assert [coverage["md"][s]["smallest_covering_max_span"] for s in ("train", "valid", "test")] == [392, 158, 130]
    v2 = coverage["md_v2"]["train"]
    assert v2["classes"] == 1000 and v2["uncovered_leaves"] == MD_V2_UNCOVERED
    smallest = v2["smallest_covering_max_span"]
    assert smallest == 522
    # At the printed cap nothing is left out.
    assert main(["hierarchy", "imagenet", "--wnids", str(wnid_file), "--json", "--max-span-leaves", str(smallest)]) == 0
    wide = json.loads(capsys.readouterr().out)
    assert all(not info["uncovered_leaves"] for splits in wide["coverage"].values() for info in splits.values())
    # The text output says the same.
    assert main(["hierarchy", "imagenet", "--wnids", str(wnid_file)]) == 0
    text = capsys.readouterr().out
    assert "md_v2  train 1000 leaves: 6 under no eligible node; smallest covering max_span_leaves 522" in text
    assert "md     train  712 leaves: all under an eligible node; smallest covering max_span_leaves 392" in text
    for leaf in MD_V2_UNCOVERED:
        assert f"      {leaf['wnid']} {leaf['name']}\n" in text


def test_bad_inputs_exit_2_with_a_reason(tmp_path, capsys):
    assert main(["hierarchy", "imagenet"]) == 2
    assert "exactly one of --data DIR" in capsys.readouterr().err
    bad = tmp_path / "wnids.txt"
    bad.write_text("n01440764\nn99999999\n")
    assert main(["hierarchy", "imagenet", "--wnids", str(bad)]) == 2
    assert "n99999999" in capsys.readouterr().err
    assert main(["hierarchy", "omniglot", "--data", str(tmp_path)]) == 2
    assert "no store named 'omniglot'" in capsys.readouterr().err
    assert main(["hierarchy", "imagenet", "--wnids", str(bad), "--max-span-leaves", "4"]) == 2
    assert "--max-span-leaves: got 4, expected an integer in [5, 2147483647]" in capsys.readouterr().err
