"""``sampler-server regime`` on a packed CLEVR store: records against ``vtab split``, blind guess, errors."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from tfds_builders import tfds_dir  # noqa: F401  (the shared prepared datasets)

from sampler_server.cli.main import main
from sampler_server.core.regimes import default_regimes, val_count


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def data(tfds_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("regime-cli") / "data"
    assert main(["pack", "vtab", "--tfds-name", "clevr", "--tfds-data-dir", str(tfds_dir),
                 "--output", str(root), "--quiet", "--workers", "1"]) == 0
    return root


def _listing(capsys, data, split):
    code, out, err = _run(capsys, "vtab", "split", "--data", data, "--task", "clevr_count", "--split", split, "--json")
    assert code == 0, err
    return json.loads(out)


def _regime(capsys, data, n, seed, split):
    code, out, err = _run(capsys, "regime", "--data", data, "--task", "clevr_count", "--n", n, "--seed", seed,
                          "--split", split, "--json")
    assert code == 0, err
    return json.loads(out)


def test_regime_records_come_from_the_train_split_nested_and_with_the_blind_guess(data, capsys):
    pool = {r["record_id"]: r for r in _listing(capsys, data, "train")["records"]}
    test_labels = [r["label"] for r in _listing(capsys, data, "test")["records"]]
    train = _regime(capsys, data, 30, 7, "train")
    val = _regime(capsys, data, 30, 7, "val")
    assert (train["task"], train["n"], train["seed"], train["split"], train["store"]) == (
        "clevr_count", 30, 7, "train", "tfds_clevr")
    assert (train["pool_split"], train["pool_size"], train["num_classes"]) == ("train", 63, 8)
    assert train["count"] == 30 - val_count(30) == len(train["records"]) and val["count"] == val_count(30)
    for record in train["records"] + val["records"]:
        assert pool[record["record_id"]] == record  # same TFDS location and label as `vtab split`
    members = {r["record_id"] for r in train["records"] + val["records"]}
    assert len(members) == 30
    larger = _regime(capsys, data, 50, 7, "train")["records"] + _regime(capsys, data, 50, 7, "val")["records"]
    assert members <= {r["record_id"] for r in larger}
    assert {r["label"] for r in val["records"]} <= {r["label"] for r in train["records"]}
    counts = Counter(r["label"] for r in train["records"])
    label = min(c for c, k in counts.items() if k == max(counts.values()))
    accuracy = sum(1 for t in test_labels if t == label) / len(test_labels)
    assert train["blind"] == {"label": label, "test_accuracy": accuracy, "test_error": 1 - accuracy,
                              "test_examples": len(test_labels)} == val["blind"]
    assert train["default_regimes"] == list(default_regimes(8, 63))
    assert train["fingerprint"] != val["fingerprint"]
    assert train == _regime(capsys, data, 30, 7, "train")  # deterministic
    assert train["fingerprint"] != _regime(capsys, data, 30, 8, "train")["fingerprint"]


def test_n_zero_gives_the_whole_pool_blind_guess_and_the_text_form(data, capsys):
    whole = _regime(capsys, data, 0, 1, "train")
    pool_labels = Counter(r["label"] for r in _listing(capsys, data, "train")["records"])
    assert whole["records"] == [] and whole["blind"]["label"] == min(
        c for c, k in pool_labels.items() if k == max(pool_labels.values()))
    code, out, err = _run(capsys, "regime", "--data", data, "--task", "clevr_count", "--n", 12, "--seed", 1)
    assert code == 0, err
    assert out.startswith("clevr_count: pool train 63 records, 8 classes, store tfds_clevr; default regimes 16, ")
    assert "blind guess (regime 12 train part): label " in out and "regime n=12 seed 1 train: 10 records" in out


@pytest.mark.parametrize(("argv", "message"), [
    (("--n", 64, "--seed", 1), "task clevr_count: regime n=64 is larger than its train split (63 examples)"),
    (("--n", 5, "--seed", 1, "--split", "test"), "--split: got 'test', expected one of train, val"),
    (("--n", -1, "--seed", 1), "--n: got -1, expected an integer >= 0 (0: only the default regimes)"),
    (("--n", 5, "--seed", -1), "seed: got -1, expected an integer in [0, 18446744073709551615]"),
])
def test_bad_input_is_one_line_and_exit_2(data, capsys, argv, message):
    code, out, err = _run(capsys, "regime", "--data", data, "--task", "clevr_count", *argv)
    assert code == 2 and out == ""
    assert err == f"sampler-server regime: error: {message}\n"
