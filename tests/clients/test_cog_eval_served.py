"""The ImageNet-CoG evaluation end to end against a real server on 127.0.0.1: a test-built
IN-21K layout (the cog_counts concepts, scaled-down levels: 4 concepts each, 60 images
at least) and a 4-class ILSVRC store; one small run in torch and one in tf extract
features through StreamCogBatches, train the classifiers and report; the reports are
in the server's CoG table, and a second run reads every feature from the cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import generate_fixture, pack_fixture
from trainer_threads import threads  # noqa: F401 (a fixture)
from transfer_runs_stores import copy_in21k_stores

from clients.core import SamplerClient
from sampler_server.fixtures.cog_counts import LEVEL_SIZE, MIN_IMAGES
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb

IN1K_IMAGES, IN1K_VALIDATION = 6, 50  # per IN-1K class: 6 train images, 50 validation images (its test set)
LEVELS = ("IN-1K", "L3")
SHOTS = ("all", "2")
SMALL = ["--levels", *LEVELS, "--shots", *SHOTS, "--seeds", "1", "--level-size", str(LEVEL_SIZE),
         "--min-images", str(MIN_IMAGES), "--image-size", "32", "--extract-batch-size", "64", "--epochs", "2",
         "--batch-size", "64", "--grid", "2x1", "--backbone", "tiny", "--device", "cpu"]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from sampler_server.service.server import RunningServer, ServerConfig

    root = tmp_path_factory.mktemp("cog-eval")
    data = root / "data"
    copy_in21k_stores(tmp_path_factory, data)  # the levels' store (written and packed once per process)
    pack_fixture(generate_fixture("ilsvrc_2012", root, num_classes=4, images_per_class=IN1K_IMAGES,
                                  validation_images=IN1K_VALIDATION), data, name="ilsvrc_2012")
    server = RunningServer(ServerConfig(data_dir=data, port=0, workers=1, threads=8, grace_seconds=0.5)).start()
    yield server
    server.stop(grace=0.5)


def _run(main, served, run_id: str, cache: Path | None, summary: Path, *extra: str) -> dict:
    """A run; ``cache`` None: no --feature-cache (its default)."""
    caching = ["--feature-cache", str(cache)] if cache is not None else []
    assert main(["--server", served.address, "--run", run_id, *caching, "--json-summary", str(summary), *SMALL,
                 *extra]) == 0
    return json.loads(summary.read_text())


def _cog_table(served, run_id: str) -> dict:
    with SamplerClient(served.address) as client:
        reply = client.call("GetReport", pb.GetReportRequest(run_ids=[run_id], format="json", table="cog"))
    return json.loads(reply.text)


@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_a_small_evaluation_reports_to_the_cog_table_and_reuses_its_features(served, tmp_path, framework, threads,
                                                                             monkeypatch, capfd):
    """The first run takes --feature-cache's default (the user's cache directory, named in its
    first line); the second names that directory and reads every feature from it."""
    if framework == "torch":
        from clients.torch.cog_eval import main
    else:
        from clients.tf.cog_eval import main
    run_id = f"cog-eval-{framework}"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    cache = tmp_path / "xdg" / "sampler-server" / "features"
    summary = _run(main, served, run_id, None, tmp_path / "first.json", *threads[framework])
    assert f"features cached in {cache}" in capfd.readouterr().err
    assert list(summary["levels"]) == list(LEVELS)
    in1k = summary["levels"]["IN-1K"]
    assert in1k["num_classes"] == 4
    assert in1k["test_size"] == 4 * IN1K_VALIDATION and in1k["train_size"] == 4 * IN1K_IMAGES
    assert summary["levels"]["L3"]["num_classes"] == LEVEL_SIZE
    assert summary["extracted"] == sum(e["train_size"] + e["test_size"] for e in summary["levels"].values())
    results = {(level, r["shots"]): r for level, e in summary["levels"].items() for r in e["results"]}
    assert set(results) == {(level, shots) for level in LEVELS for shots in (0, 2)}
    for result in results.values():
        assert 0.0 <= result["accuracy"] <= 1.0 and result["val_examples"] >= 1

    again = _run(main, served, run_id, cache, tmp_path / "second.json", *threads[framework])
    assert again["extracted"] == 0
    assert [r["accuracy"] for e in again["levels"].values() for r in e["results"]] == [
        r["accuracy"] for e in summary["levels"].values() for r in e["results"]]

    table = _cog_table(served, run_id)
    cells = table["scores"][run_id]["cells"]
    for (level, shots), result in results.items():
        cell = cells[level]["all" if shots == 0 else str(shots)]
        assert cell["seeds"] == [1] and cell["mean"] == pytest.approx(result["accuracy"])
    config = table["configs"][run_id]
    assert config["framework"] == framework and config["backbone_sha256"] == summary["config"]["backbone_sha256"]


def test_in1k_without_validation_images_is_named_not_evaluated_on_train_images(tmp_path, capsys):
    """An ILSVRC store packed without --validation (e.g. the one MD uses) does not stop the
    levels listing: IN-1K is left out with the server's reason, and asking for it is one line
    naming the pack command, before any image is read."""
    from clients.torch.cog_eval import main
    from sampler_server.service.server import RunningServer, ServerConfig

    data = tmp_path / "data"
    pack_fixture(generate_fixture("ilsvrc_2012", tmp_path, num_classes=2, images_per_class=3), data,
                 name="ilsvrc_2012", converter_overrides={"validation": None})
    server = RunningServer(ServerConfig(data_dir=data, port=0, workers=1, threads=4, grace_seconds=0.5)).start()
    try:
        common = ["--server", server.address, "--run", "no-validation", "--feature-cache", str(tmp_path / "cache"),
                  "--backbone", "tiny", "--device", "cpu"]
        assert main([*common, "--levels", "IN-1K"]) == 2
        err = capsys.readouterr().err
        assert "argument --levels: level IN-1K: store ilsvrc_2012 has no validation partition" in err
        assert "sampler-server pack ilsvrc_2012 --input TRAIN_DIR --validation VAL_DIR" in err
        assert main(common) == 2
        err = capsys.readouterr().err
        assert "cog: level IN-1K left out: level IN-1K: store ilsvrc_2012 has no validation partition" in err
        assert "the server serves no ImageNet-CoG level" in err
    finally:
        server.stop(grace=0.5)
