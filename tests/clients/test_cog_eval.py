"""The ImageNet-CoG evaluation's own logic (clients.cog_eval, clients.cog_cache) and its torch
backend, over a stand-in client (tests/clients/cog_eval_fake.py): the schedule and the
grid, the linear classifier learning a separable problem, the search's choice on val
and its fits on the search set, determinism, and the feature cache (reused, resumed,
refused when it disagrees with the split)."""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from cog_eval_fake import SMALL, FakeCogClient, fit_toy, results_of, separable

from clients import cog_eval
from clients.cog_cache import FeatureCacheError, feature_key
from clients.cog_eval import CogRun, HParams, choose, cosine_lr, log_points, search_grid
from clients.torch.cog_eval import TorchCogBackend
from clients.torch.cog_eval import main as torch_main
from clients.torch.models import Tiny
from clients.trainer_args import parse_cog_args
from clients.errors import UsageError


def _args(tmp_path: Path, *extra: str) -> object:
    return parse_cog_args("torch", [*SMALL, "--feature-cache", str(tmp_path / "cache"), *extra])


def _run(tmp_path: Path, client: FakeCogClient, *extra: str, backend: type = TorchCogBackend) -> dict:
    return CogRun(backend(_args(tmp_path, *extra)), client, lambda _: None).execute()


# ---- pure parts --------------------------------------------------------------------------------


def test_grid_covers_the_reference_ranges_log_spaced_learning_rate_major():
    assert log_points(0.1, 100.0, 4) == pytest.approx((0.1, 1.0, 10.0, 100.0))
    assert log_points(1e-12, 1e-4, 1) == pytest.approx((1e-8,))
    grid = search_grid(6, 5)
    assert len(grid) == 30 and grid[0] == HParams(0.1, 1e-12) and grid[-1].lr == pytest.approx(100.0)
    assert grid[-1].wd == pytest.approx(1e-4)
    assert [hp.lr for hp in grid[:5]] == [0.1] * 5  # learning rate major


def test_cosine_schedule_is_stepped_after_each_epoch_as_the_reference_does():
    assert cosine_lr(2.0, 0, 10) == 2.0 and cosine_lr(2.0, 1, 10) == 2.0
    assert cosine_lr(2.0, 6, 10) == pytest.approx(2.0 * 0.5 * (1 + math.cos(math.pi * 5 / 10)))
    assert cosine_lr(2.0, 9, 10) > 0


def test_choose_takes_the_best_and_the_first_of_ties():
    grid = search_grid(2, 2)
    assert choose([0.1, 0.7, 0.3, 0.2], grid) == grid[1]
    assert choose([0.5, 0.7, 0.7, 0.2], grid) == grid[1]


def test_l2_normalise_as_torch_does():
    x = np.random.RandomState(0).normal(size=(5, 7)).astype(np.float32)
    x[2] = 0
    assert np.allclose(cog_eval.l2_normalise(x), torch.nn.functional.normalize(torch.from_numpy(x), dim=1).numpy())


# ---- the linear classifier ---------------------------------------------------------------------


def test_torch_linear_classifier_learns_a_separable_problem_deterministically(tmp_path):
    backend = TorchCogBackend(_args(tmp_path))
    outcome, acc = fit_toy(backend)
    assert not outcome.diverged and acc >= 0.98
    weight = backend.linear.weight.detach().clone()
    again, acc2 = fit_toy(backend)
    assert again.loss == outcome.loss and acc2 == acc and torch.equal(backend.linear.weight, weight)


def test_torch_step_is_torch_sgd_with_momentum_and_coupled_weight_decay(tmp_path):
    """Two steps by hand: g + wd * w into the buffer, then w -= lr * buffer."""
    backend = TorchCogBackend(_args(tmp_path))
    x, y = separable(classes=3, per_class=4, dim=5)
    data = backend.classifier_data(x, y)
    rng = np.random.RandomState(1)
    w, b = rng.normal(size=(3, 5)).astype(np.float32), rng.normal(size=3).astype(np.float32)
    backend.reset(w, b, 0.01)
    rows = np.arange(len(y))
    W, B = torch.tensor(w, requires_grad=True), torch.tensor(b, requires_grad=True)
    bw, bb = torch.zeros_like(W), torch.zeros_like(B)
    for lr in (0.5, 0.25):
        backend.train_step(data, rows, lr)
        loss = torch.nn.functional.cross_entropy(torch.from_numpy(x) @ W.T + B, torch.from_numpy(y))
        gw, gb = torch.autograd.grad(loss, [W, B])
        with torch.no_grad():
            bw = 0.9 * bw + gw + 0.01 * W
            bb = 0.9 * bb + gb + 0.01 * B
            W -= lr * bw
            B -= lr * bb
    assert torch.allclose(backend.linear.weight, W, atol=1e-6) and torch.allclose(backend.linear.bias, B, atol=1e-6)


def test_a_diverging_fit_stops_and_says_it_diverged(tmp_path):
    backend = TorchCogBackend(_args(tmp_path))
    x, y = separable()
    x = x * 1e30  # logits overflow at once
    outcome = cog_eval.fit(backend, backend.classifier_data(x, y), len(y), x.shape[1], 4, HParams(100.0, 0.0), 3, 32, 0)
    assert outcome.diverged


# ---- the run over the stand-in client ----------------------------------------------------------


def test_run_reports_every_level_n_and_seed_with_the_best_val_setting(tmp_path):
    client = FakeCogClient()
    summary = _run(tmp_path, client, "--shots", "all", "8", "--seeds", "1", "2")
    assert [(r.cog_level, r.shots, r.seed) for r in client.reports] == [
        (level, shots, seed) for level in ("L1", "L2") for seed in (1, 2) for shots in (0, 8)]
    grid = search_grid(2, 2)
    for level, entry in summary["levels"].items():
        assert entry["test_size"] == len(client.colours[level]) * 6 and entry["feature_dim"] == Tiny.out_dim
        for result in entry["results"]:
            scores = [point["val_accuracy"] for point in result["search"]]
            best = choose(scores, grid)
            assert (result["learning_rate"], result["weight_decay"]) == (best.lr, best.wd)
            assert result["val_accuracy"] == max(scores)
            assert 0.0 <= result["accuracy"] <= 1.0 and result["test_examples"] == entry["test_size"]
    report = client.reports[0]
    assert report.protocol == "cog" and report.examples == summary["levels"]["L1"]["test_size"]
    assert set(report.metrics) == {"accuracy", "val_accuracy", "learning_rate", "weight_decay"}
    config = json.loads(client.configs[0])
    assert config["framework"] == "torch" and config["backbone"] == "tiny" and "levels" not in config
    assert len(set(client.configs)) == 1
    # colours are separable even through a random-init network
    assert summary["levels"]["L1"]["results"][0]["accuracy"] >= 0.9


def test_every_n_searches_on_its_own_search_set_scored_on_the_seeds_val(tmp_path):
    client = FakeCogClient()
    summary = _run(tmp_path, client, "--levels", "L1", "--shots", "1", "8", "all", "--seeds", "3")
    one, eight, every = summary["levels"]["L1"]["results"]
    assert (one["search_examples"], one["train_examples"], one["val_examples"]) == (3, 3, 12)
    assert (eight["search_examples"], eight["train_examples"], eight["val_examples"]) == (24, 24, 12)
    assert (every["search_examples"], every["train_examples"], every["val_examples"]) == (48, 60, 12)
    assert [r.shots for r in client.reports] == [1, 8, 0] and "val_accuracy" in client.reports[0].metrics


def test_a_level_too_small_to_hold_val_out_is_one_line(tmp_path):
    with pytest.raises(UsageError, match="level L1, seed 1: the val split is empty"):
        _run(tmp_path, FakeCogClient(train_per_concept=1), "--levels", "L1", "--shots", "1", "--seeds", "1")


def test_same_arguments_same_accuracies(tmp_path):
    first = _run(tmp_path / "a", FakeCogClient(), "--shots", "all", "2", "--seeds", "1")
    second = _run(tmp_path / "b", FakeCogClient(), "--shots", "all", "2", "--seeds", "1")
    assert results_of(first) == results_of(second)


def test_levels_the_server_does_not_serve_are_one_line(tmp_path):
    with pytest.raises(UsageError, match="argument --levels: got 'L9', expected levels this server serves"):
        _run(tmp_path, FakeCogClient(), "--levels", "L9")


# ---- the feature cache -------------------------------------------------------------------------


def test_cache_is_reused_by_a_second_run(tmp_path, monkeypatch):
    client = FakeCogClient()
    first = _run(tmp_path, client, "--shots", "4", "--seeds", "1")
    assert first["extracted"] == client.streamed == (3 + 4) * 26
    calls = []
    monkeypatch.setattr(TorchCogBackend, "extract", lambda self, images: calls.append(1))
    second_client = FakeCogClient()
    second = _run(tmp_path, second_client, "--shots", "4", "--seeds", "2")
    assert second["extracted"] == 0 and second_client.streamed == 0 and calls == []
    paths = [{e["cache"]["train"] for e in summary["levels"].values()} for summary in (first, second)]
    assert paths[0] == paths[1]


def test_cache_is_keyed_by_image_size_and_checkpoint(tmp_path):
    client = FakeCogClient()
    _run(tmp_path, client, "--levels", "L1", "--shots", "4", "--seeds", "1")
    streamed = client.streamed
    _run(tmp_path, client, "--levels", "L1", "--shots", "4", "--seeds", "1", "--image-size", "20")
    assert client.streamed == 2 * streamed
    torch.save(Tiny().state_dict(), tmp_path / "other.pt")  # other random weights
    _run(tmp_path, client, "--levels", "L1", "--shots", "4", "--seeds", "1", "--weights", str(tmp_path / "other.pt"))
    assert client.streamed == 3 * streamed


def test_precision_is_recorded_and_keys_the_cache(tmp_path):
    client = FakeCogClient()
    first = _run(tmp_path, client, "--levels", "L1", "--shots", "4", "--seeds", "1")
    streamed = client.streamed
    assert first["config"]["precision"] == "float32" == json.loads(client.configs[0])["precision"]  # the reference's
    bf16_client = FakeCogClient()
    second = _run(tmp_path, bf16_client, "--levels", "L1", "--shots", "4", "--seeds", "1", "--precision", "bf16")
    assert bf16_client.streamed == streamed and second["extracted"] == first["extracted"]  # not float32's entry
    assert second["config"]["precision"] == "bf16" == json.loads(bf16_client.configs[0])["precision"]
    paths = [summary["levels"]["L1"]["cache"]["train"] for summary in (first, second)]
    assert paths[0] != paths[1]
    assert (feature_key("w", "s", "p", "bicubic", "float32") != feature_key("w", "s", "p", "bicubic", "bf16"))
    third = _run(tmp_path, FakeCogClient(), "--levels", "L1", "--shots", "4", "--seeds", "1", "--precision", "bf16")
    assert third["extracted"] == 0 and third["levels"]["L1"]["cache"]["train"] == paths[1]  # bf16 reads bf16's


def test_cache_entry_that_disagrees_with_the_split_is_refused(tmp_path):
    summary = _run(tmp_path, FakeCogClient(), "--levels", "L1", "--shots", "4", "--seeds", "1")
    entry = Path(summary["levels"]["L1"]["cache"]["train"])
    with pytest.raises(FeatureCacheError, match="its labels disagree with split L1/train"):
        _run(tmp_path, FakeCogClient(label_shift=1), "--levels", "L1", "--shots", "4", "--seeds", "1")
    ids = np.load(entry / "record_ids.npy")
    np.save(entry / "record_ids.npy", ids[::-1].copy())
    with pytest.raises(FeatureCacheError, match=f"feature cache {entry}: its record ids disagree"):
        _run(tmp_path, FakeCogClient(), "--levels", "L1", "--shots", "4", "--seeds", "1")


def test_an_extraction_that_broke_resumes_at_the_next_batch(tmp_path):
    client = FakeCogClient(fail_after=2)
    with pytest.raises(ConnectionError):
        _run(tmp_path, client, "--levels", "L1", "--shots", "4", "--seeds", "1")
    assert client.streamed_of("L1", "train") == 2 * 16
    summary = _run(tmp_path, client, "--levels", "L1", "--shots", "4", "--seeds", "1")
    assert summary["levels"]["L1"]["extracted"] == {"train": 60 - 32, "test": 18}
    clean = _run(tmp_path / "clean", FakeCogClient(), "--levels", "L1", "--shots", "4", "--seeds", "1")
    a = np.load(Path(summary["levels"]["L1"]["cache"]["train"]) / "features.npy")
    b = np.load(Path(clean["levels"]["L1"]["cache"]["train"]) / "features.npy")
    assert np.array_equal(a, b) and results_of(summary) == results_of(clean)



def test_the_cache_records_its_writes_by_time_and_every_write_before_an_error(tmp_path, monkeypatch):
    """Batches are synced and counted in progress.json every ``RECORD_SECONDS`` (not after each
    batch): a stream that breaks still records every batch written before it, and a batch
    that cannot be written (features of another width) is refused in one line and not counted."""
    from clients import cog_cache
    from clients.cog_cache import FeatureCache, SplitIds

    ids = np.arange(8, dtype=np.int64)
    split = SplitIds("L1", "train", "f" * 64, ids, ids % 2)
    flushes = []
    synced = cog_cache._FeaturesFile.sync
    monkeypatch.setattr(cog_cache._FeaturesFile, "sync", lambda self: (flushes.append(1), synced(self)))

    def batches(rows_of, broken_at):
        def read(start):
            for index in range(start, 4):
                if index == broken_at:
                    raise ConnectionError(f"broke at batch {index}")
                part = slice(2 * index, 2 * index + 2)
                yield index, ids[part], ids[part] % 2, rows_of(index)
        return read

    cache = FeatureCache(tmp_path)
    with pytest.raises(ConnectionError, match="batch 3"):
        cache.get_or_extract({"k": 1}, split, 2, batches(lambda i: np.full((2, 3), i, np.float32), 3))
    assert len(flushes) == 1 and cache.resume_point({"k": 1}, split, 2) == 3  # one record, at the break

    wrong = batches(lambda i: np.zeros((2, 5 if i == 1 else 3), np.float32), None)
    with pytest.raises(FeatureCacheError, match=r"batch 1's features have shape \(2, 5\), expected \(2, 3\)"):
        cache.get_or_extract({"k": 2}, split, 2, wrong)
    assert cache.resume_point({"k": 2}, split, 2) == 1  # batch 0, written before it

    found = cache.get_or_extract({"k": 1}, split, 2, batches(lambda i: np.full((2, 3), i, np.float32), None))
    assert found.extracted == 2 and np.array_equal(found.features[:, 0], np.repeat(np.arange(4), 2))

# ---- backbones and the command line -------------------------------------------------------------


def test_torchscript_exported_and_module_callable_backbones_give_the_named_ones_features(tmp_path):
    named = TorchCogBackend(_args(tmp_path))
    images = FakeCogClient().image("L1", 100_001, 16)[None]
    expected = named.extract(images)
    script = tmp_path / "net.pt"
    torch.jit.script(named.backbone.model).save(str(script))  # keeps the declared input_range, mean, std
    program = tmp_path / "net.pt2"
    batch = torch.export.Dim("batch")
    torch.export.save(torch.export.export(named.backbone.model, (torch.rand(2, 3, 16, 16),),
                                          dynamic_shapes=({0: batch},)), str(program))
    scaling = ["--input-range", "-1", "1", "--mean", "0", "0", "0", "--std", "1", "1", "1"]  # a program declares none
    for path, flags in ((script, []), (program, scaling)):
        from_file = parse_cog_args("torch", [*SMALL, "--feature-cache", str(tmp_path), "--backbone", str(path), *flags])
        assert np.allclose(TorchCogBackend(from_file).extract(np.repeat(images, 3, 0)), expected, atol=1e-6), path
    weights = tmp_path / "tiny.pt"
    torch.save(named.backbone.model.state_dict(), weights)
    sys.path.insert(0, str(tmp_path))
    try:
        (tmp_path / "cog_user_net.py").write_text(
            "from clients.torch.models import Tiny\n\n"
            "def build():\n    net = Tiny()\n    net.input_range, net.mean, net.std = (-1, 1), 0, 1\n    return net\n")
        args = parse_cog_args("torch", [*SMALL, "--feature-cache", str(tmp_path), "--backbone",
                                        "cog_user_net:build", "--weights", str(weights)])
        backend = TorchCogBackend(args)
        assert backend.backbone.spec.target == "cog_user_net:build"
        assert backend.backbone.fingerprint == named.backbone.fingerprint  # the same weights
        assert np.allclose(backend.extract(images), expected, atol=1e-6)
    finally:
        sys.path.remove(str(tmp_path))


@pytest.mark.parametrize("flags, message", [
    (["--shots", "0"], "argument --shots: got 0, expected 'all' or an integer >= 1"),
    (["--shots", "all", "all"], "argument --shots: got all all, expected each value once"),
    (["--grid", "3"], "argument --grid: got '3', expected LRxWD"),
    (["--backbone", "nowhere/net.pt"], "argument --backbone: got 'nowhere/net.pt', expected a named backbone"),
    (["--backbone", "os:getcwd"], "argument --backbone: os:getcwd() returned a str, expected an nn.Module"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, flags, message):
    assert torch_main([*SMALL, "--feature-cache", str(tmp_path), *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_a_file_that_is_not_torchscript_is_one_line(tmp_path, capsys):
    (tmp_path / "junk.pt").write_bytes(b"not a model")
    assert torch_main([*SMALL, "--feature-cache", str(tmp_path), "--backbone", str(tmp_path / "junk.pt")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "expected a TorchScript file" in err, err


def test_two_runs_extracting_one_entry_take_turns_and_the_second_reads_the_first(tmp_path):
    import threading
    import time

    from clients.cog_cache import FeatureCache, SplitIds

    ids = np.arange(10, dtype=np.int64)
    split = SplitIds("L1", "train", "f" * 64, ids, ids % 2)
    calls = []

    def batches(start):
        calls.append(start)
        for index in range(start, 5):
            time.sleep(0.02)
            part = slice(2 * index, 2 * index + 2)
            yield index, ids[part], ids[part] % 2, np.full((2, 3), index, np.float32)

    cache, found = FeatureCache(tmp_path), []
    workers = [threading.Thread(target=lambda: found.append(cache.get_or_extract({"k": 1}, split, 2, batches)))
               for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert calls == [0] and sorted(f.extracted for f in found) == [0, 10]
    assert found[0].path == found[1].path and np.array_equal(found[0].features[:, 0], np.repeat(np.arange(5), 2))
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == [found[0].path.name]


def test_the_next_splits_streams_open_while_one_is_extracted(tmp_path, monkeypatch):
    """The next two splits' streams, across levels, are opened and read from before their
    extraction asks for them (a stream's start waits for the server's first batch); none is
    opened again, and a split whose features are cached is not opened at all."""
    events: list[str] = []
    opened = CogRun._stream
    extract = cog_eval.FeatureCache.get_or_extract

    def stream(self, split, start):
        events.append(f"open {split.level}/{split.split} at {start}")
        return opened(self, split, start)

    def get_or_extract(self, fields, split, *rest, **named):
        events.append(f"extract {split.level}/{split.split}")
        return extract(self, fields, split, *rest, **named)

    monkeypatch.setattr(CogRun, "_stream", stream)
    monkeypatch.setattr(cog_eval.FeatureCache, "get_or_extract", get_or_extract)
    client = FakeCogClient()
    first = _run(tmp_path, client, "--levels", "L1", "--shots", "4", "--seeds", "1")
    assert events == ["open L1/test at 0", "extract L1/train", "open L1/train at 0", "extract L1/test"]
    assert first["levels"]["L1"]["extracted"] == {"train": 60, "test": 18} and client.streamed == 78

    events.clear()
    again = FakeCogClient()
    _run(tmp_path, again, "--levels", "L1", "--shots", "4", "--seeds", "1")
    assert events == ["extract L1/train", "extract L1/test"] and again.streamed == 0  # both cached

    events.clear()  # two levels: the next two splits open ahead, the next level's train split among them
    both = FakeCogClient()
    _run(tmp_path / "two", both, "--levels", "L1", "L2", "--shots", "4", "--seeds", "1")
    assert events == ["open L1/test at 0", "open L2/train at 0", "extract L1/train", "open L1/train at 0",
                      "open L2/test at 0", "extract L1/test", "extract L2/train", "extract L2/test"]


def test_the_splits_opened_ahead_are_the_next_ones_in_extraction_order():
    order = cog_eval.extraction_order(["L1", "L2", "L3"])
    assert order[:3] == [("L1", "train"), ("L1", "test"), ("L2", "train")] and len(order) == 6
    assert cog_eval.splits_after(order, ("L1", "train")) == [("L1", "test"), ("L2", "train")]
    assert cog_eval.splits_after(order, ("L3", "train")) == [("L3", "test")]
    assert cog_eval.splits_after(order, ("L3", "test")) == [] and cog_eval.splits_after(order, ("L1", "test"), 1) == [
        ("L2", "train")]


def test_a_split_opened_ahead_whose_extraction_resumes_later_is_opened_at_its_batch(tmp_path):
    broken = FakeCogClient(fail_after=1, fail_split="test")
    with pytest.raises(ConnectionError):
        _run(tmp_path, broken, "--levels", "L1", "--shots", "4", "--seeds", "1")
    resumed = FakeCogClient()
    summary = _run(tmp_path, resumed, "--levels", "L1", "--shots", "4", "--seeds", "1")
    assert summary["levels"]["L1"]["extracted"] == {"train": 0, "test": 18 - 16}
    assert resumed.streamed_of("L1", "test") == 2
    clean = _run(tmp_path / "clean", FakeCogClient(), "--levels", "L1", "--shots", "4", "--seeds", "1")
    assert results_of(summary) == results_of(clean)


class OneAheadBackend(TorchCogBackend):
    """A backend whose ``extract_many`` takes one batch ahead of the features it gives, as a
    device queue does, and counts the images it took."""

    calls: list[int] = []
    taken = [0]

    def extract_many(self, batches):
        OneAheadBackend.calls.append(1)
        pending = []
        for images in batches:
            OneAheadBackend.taken[0] += len(images)
            pending.append(self.extract(images))
            if len(pending) == 2:
                yield pending.pop(0)
        yield from pending


def test_the_next_split_is_taken_before_this_ones_cache_entry_is_closed(tmp_path, monkeypatch):
    """One extraction runs across the splits and levels: the next split's first batch is on its
    way before this split's entry is closed (fsynced and renamed; with one extraction per split
    the device idled for that time), and the features and results are those of split-by-split."""
    closed: dict[str, int] = {}
    rename = cog_eval.FeatureCache._extract

    def extract(self, fields, split, *rest, **named):
        done = rename(self, fields, split, *rest, **named)
        closed[f"{split.level}/{split.split}"] = OneAheadBackend.taken[0]
        return done

    monkeypatch.setattr(cog_eval.FeatureCache, "_extract", extract)
    OneAheadBackend.calls.clear()
    OneAheadBackend.taken[0] = 0
    chained = _run(tmp_path / "chained", FakeCogClient(), "--levels", "L1", "L2", "--shots", "4", "--seeds", "1",
                   backend=OneAheadBackend)
    sizes = [chained["levels"][level][f"{split}_size"] for level in ("L1", "L2") for split in ("train", "test")]
    assert OneAheadBackend.calls == [1]  # batches of 16: each split's entry closed after one batch of the next
    assert list(closed.values()) == [sum(sizes[:1]) + 16, sum(sizes[:2]) + 16, sum(sizes[:3]) + 16, sum(sizes)]
    single = _run(tmp_path / "single", FakeCogClient(), "--levels", "L1", "L2", "--shots", "4", "--seeds", "1")
    assert results_of(chained) == results_of(single) and chained["result_sha256"] == single["result_sha256"]


def test_a_split_cached_meanwhile_leaves_the_chain_and_the_next_one_is_extracted(tmp_path, monkeypatch):
    """A split in the chain whose entry another run wrote before its turn is read from the
    cache; the chain is dropped and the split after it extracted whole by a new one."""
    first = _run(tmp_path, FakeCogClient(), "--levels", "L2", "--shots", "4", "--seeds", "1")  # L2's entries
    train, test = (Path(first["levels"]["L2"]["cache"][split]) for split in ("train", "test"))
    shutil.rmtree(test)  # extracted in this run
    hidden = [train.rename(train.with_name(train.name + ".away"))]  # written by another run meanwhile
    extract = cog_eval.FeatureCache.get_or_extract

    def get_or_extract(self, fields, split, *rest, **named):
        if (split.level, split.split) == ("L1", "test") and hidden:  # L2/train is in the chain by now
            path = hidden.pop()
            path.rename(path.with_name(path.name.removesuffix(".away")))
        return extract(self, fields, split, *rest, **named)

    monkeypatch.setattr(cog_eval.FeatureCache, "get_or_extract", get_or_extract)
    client = FakeCogClient()
    summary = _run(tmp_path, client, "--levels", "L1", "L2", "--shots", "4", "--seeds", "1")
    assert summary["levels"]["L1"]["extracted"] == {"train": 60, "test": 18}
    assert summary["levels"]["L2"]["extracted"] == {"train": 0, "test": first["levels"]["L2"]["test_size"]}
    clean = _run(tmp_path / "clean", FakeCogClient(), "--levels", "L1", "L2", "--shots", "4", "--seeds", "1")
    assert results_of(summary) == results_of(clean)
