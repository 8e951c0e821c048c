"""``sampler-server regime`` on packed CLEVR and dSprites stores: records against ``vtab split``, blind guess,
regression blind guess (against the TFDS values), errors."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
import tfds_builders as tb
from tfds_builders import tfds_dir  # noqa: F401  (the shared prepared datasets)

from sampler_server.cli.main import main
from sampler_server.core.baselines import default_regimes, val_count


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


def _regime(capsys, data, n, seed, split, *extra):
    code, out, err = _run(capsys, "regime", "--data", data, "--task", "clevr_count", "--n", n, "--seed", seed,
                          "--split", split, "--json", *extra)
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
    assert len(members) == 30 and train["sampling"] == "uniform"
    larger = _regime(capsys, data, 50, 7, "train")["records"] + _regime(capsys, data, 50, 7, "val")["records"]
    assert members <= {r["record_id"] for r in larger}
    counts = Counter(r["label"] for r in train["records"])
    label = min(c for c, k in counts.items() if k == max(counts.values()))
    accuracy = sum(1 for t in test_labels if t == label) / len(test_labels)
    assert train["blind"] == {"label": label, "test_accuracy": accuracy, "test_error": 1 - accuracy,
                              "test_examples": len(test_labels)} == val["blind"]
    assert train["default_regimes"] == list(default_regimes(8, 63))
    assert train["fingerprint"] != val["fingerprint"]
    assert train == _regime(capsys, data, 30, 7, "train")  # deterministic
    assert train["fingerprint"] != _regime(capsys, data, 30, 8, "train")["fingerprint"]


def test_regime_sampling_one_per_class_first_covers_every_class_in_the_train_part(data, capsys):
    train = _regime(capsys, data, 30, 7, "train", "--regime-sampling", "one-per-class-first")
    val = _regime(capsys, data, 30, 7, "val", "--regime-sampling", "one-per-class-first")
    assert (train["sampling"], val["sampling"]) == ("one-per-class-first", "one-per-class-first")
    pool_labels = {r["label"] for r in _listing(capsys, data, "train")["records"]}
    assert {r["label"] for r in train["records"]} == pool_labels  # n = 30 >= 2 x 8 classes
    assert {r["label"] for r in val["records"]} <= pool_labels
    assert train["fingerprint"] != _regime(capsys, data, 30, 7, "train")["fingerprint"]


def test_regime_sampling_stratified_is_sklearns_split_of_the_pool(data, capsys):
    """The reference's draw: StratifiedShuffleSplit(n_splits=1, train_size, test_size, random_state=seed)."""
    from sklearn.model_selection import StratifiedShuffleSplit

    pool = _listing(capsys, data, "train")["records"]
    labels = [r["label"] for r in pool]
    split = StratifiedShuffleSplit(n_splits=1, train_size=40, test_size=10, random_state=7)
    expected_train, expected_val = next(split.split(np.zeros(len(labels)), labels))
    train = _regime(capsys, data, 50, 7, "train", "--regime-sampling", "stratified")
    val = _regime(capsys, data, 50, 7, "val", "--regime-sampling", "stratified")
    assert (train["sampling"], train["count"], val["count"]) == ("stratified", 40, 10)
    assert [r["record_id"] for r in train["records"]] == [pool[i]["record_id"] for i in expected_train]
    assert [r["record_id"] for r in val["records"]] == [pool[i]["record_id"] for i in expected_val]


def test_n_zero_gives_the_whole_pool_blind_guess_and_the_text_form(data, capsys):
    whole = _regime(capsys, data, 0, 1, "train")
    pool_labels = Counter(r["label"] for r in _listing(capsys, data, "train")["records"])
    assert whole["records"] == [] and whole["blind"]["label"] == min(
        c for c, k in pool_labels.items() if k == max(pool_labels.values()))
    code, out, err = _run(capsys, "regime", "--data", data, "--task", "clevr_count", "--n", 12, "--seed", 1)
    assert code == 0, err
    assert out.startswith("clevr_count: pool train 63 records, 8 classes, store tfds_clevr; default regimes 16, ")
    assert "blind guess (regime 12 train part): label " in out and "regime n=12 seed 1 (uniform) train: 10 records" in out


@pytest.mark.parametrize(("argv", "message"), [
    (("--n", 64, "--seed", 1), "task clevr_count: regime n=64 is larger than its train split (63 examples)"),
    (("--n", 5, "--seed", 1, "--split", "test"), "split: got 'test', expected one of train, val (or valid, validation for val)"),
    (("--n", -1, "--seed", 1), "--n: got -1, expected an integer >= 0 (0: only the default regimes)"),
    (("--n", 5, "--seed", -1), "seed: got -1, expected an integer in [0, 18446744073709551615]"),
    (("--n", 5, "--seed", 1, "--regime-sampling", "random"),
     "--regime-sampling: got 'random', expected one of uniform, stratified, one-per-class-first"),
    (("--n", 30, "--seed", 1, "--regime-sampling", "stratified"),
     "task clevr_count: regime n=30 drawn stratified (24 train, 6 val): The test_size = 6 should be greater or "
     "equal to the number of classes = 8"),
])
def test_bad_input_is_one_line_and_exit_2(data, capsys, argv, message):
    code, out, err = _run(capsys, "regime", "--data", data, "--task", "clevr_count", *argv)
    assert code == 2 and out == ""
    assert err == f"sampler-server regime: error: {message}\n"


# ---- regression blind guess (--target / --loss) on a packed dSprites store ---------------------

DSPRITES = "dsprites_location"


@pytest.fixture(scope="module")
def dsprites(tfds_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("regime-cli-dsprites") / "data"
    assert main(["pack", "vtab", "--tfds-name", "dsprites", "--tfds-data-dir", str(tfds_dir),
                 "--output", str(root), "--quiet", "--workers", "1"]) == 0
    return root


def tfds_values(tfds_dir, records, target):
    """``target`` of each listed record read from the TFDS dataset itself (not the store)."""
    version_dir = next((tfds_dir / "dsprites").iterdir())
    assert {r["tfds_split"] for r in records} == {"train"}
    examples = tb.slice_examples(version_dir, "train", [r["tfds_index"] for r in records])
    return np.array([float(e[target]) for e in examples])


def direct_regression(train, test, loss):
    prediction = train.mean() if loss == "l2" else np.median(train)
    errors = test - prediction
    return prediction, float(np.mean(errors ** 2) if loss == "l2" else np.mean(np.abs(errors)))


@pytest.mark.parametrize(("n", "split", "target", "loss"), [
    (20, "train", "label_x_position", "l2"), (20, "val", "label_x_position", "l1"),
    (33, "train", "label_orientation", "l1"), (0, "train", "label_orientation", "l2"),
])
def test_regression_blind_guess_equals_numpy_over_the_tfds_values(dsprites, tfds_dir, capsys, n, split, target, loss):
    def regime(*extra):
        code, out, err = _run(capsys, "regime", "--data", dsprites, "--task", DSPRITES, "--n", n, "--seed", 4,
                              *extra)
        assert code == 0, err
        return out

    got = json.loads(regime("--split", split, "--target", target, "--loss", loss, "--json"))
    if n:
        train_records = json.loads(regime("--split", "train", "--json"))["records"]
        assert len(train_records) == n - val_count(n)
    else:
        train_records = _vtab_split(capsys, dsprites, "train")["records"]
    test_records = _vtab_split(capsys, dsprites, "test")["records"]
    prediction, risk = direct_regression(tfds_values(tfds_dir, train_records, target),
                                         tfds_values(tfds_dir, test_records, target), loss)
    assert got["regression"] == {"target": target, "loss": loss, "prediction": pytest.approx(prediction, rel=1e-12),
                                 "test_risk": pytest.approx(risk, rel=1e-12), "test_examples": len(test_records)}
    assert risk > 0 and len(set(tfds_values(tfds_dir, train_records, target))) > 1  # not a degenerate case
    assert "regression" not in json.loads(regime("--split", split, "--json"))
    text = regime("--split", split, "--target", target, "--loss", loss)
    estimate = "mean" if loss == "l2" else "median"
    assert (f"regression blind guess ({'whole train split' if n == 0 else f'regime {n} train part'}): "
            f"target {target}, loss {loss}, prediction ({estimate}) {got['regression']['prediction']:.6g}, ") in text


def test_regression_loss_defaults_to_l2_and_l1_differs(dsprites, capsys):
    def regression(*extra):
        code, out, err = _run(capsys, "regime", "--data", dsprites, "--task", DSPRITES, "--n", 20, "--seed", 4,
                              "--target", "label_x_position", "--json", *extra)
        assert code == 0, err
        return json.loads(out)["regression"]

    assert regression() == regression("--loss", "l2") != regression("--loss", "l1")


def _vtab_split(capsys, data, split):
    code, out, err = _run(capsys, "vtab", "split", "--data", data, "--task", DSPRITES, "--split", split, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize(("store", "argv", "message"), [
    ("dsprites", ("--target", "label_y_position"),
     "--target: 'label_y_position' is not an attribute stored in store 'tfds_dsprites'; "
     "numeric attributes: label_orientation, label_x_position"),
    ("dsprites", ("--target", "label_x_position", "--loss", "l3"), "--loss: got 'l3', expected one of l2, l1"),
    ("dsprites", ("--loss", "l1"), "--loss: got 'l1' without --target, expected --target ATTR with it"),
    ("dsprites", ("--target", ""), "--target: empty, expected a numeric attribute of the store"),
    ("clevr", ("--target", "objects_pixel_z"),
     "--target: attribute 'objects_pixel_z' of store 'tfds_clevr' holds a list per record, not one number; "
     "numeric attributes: none"),
])
def test_bad_regression_input_is_one_line_and_exit_2(data, dsprites, capsys, store, argv, message):
    where, task = (dsprites, DSPRITES) if store == "dsprites" else (data, "clevr_count")
    code, out, err = _run(capsys, "regime", "--data", where, "--task", task, "--n", 20, "--seed", 1, *argv)
    assert code == 2 and out == ""
    assert err == f"sampler-server regime: error: {message}\n"
