"""The Python examples of README.md and docs/ run as written, in a fresh interpreter,
against a real server on 127.0.0.1 over stores packed from fixtures; only the constants
a reader would change (the server, sources, task, scale) are pointed at the fixtures.
(The "Use your own model" examples run in tests/clients/test_readme_examples.py.)"""

from __future__ import annotations

import pytest
from conftest import generate_fixture, pack_fixture
from doc_blocks import python_block, run_python, with_constants

from sampler_server.cli.main import main


def _serve(data):
    from sampler_server.service.server import RunningServer, ServerConfig

    return RunningServer(ServerConfig(data_dir=data, port=0, workers=1, threads=8, grace_seconds=0.5)).start()


@pytest.mark.slow
def test_the_readme_client_streams_the_episode_the_cli_prints(served, capsys):
    pytest.importorskip("torch")
    code = with_constants(python_block("README.md", "readme-client"), SERVER=served.address, SOURCES=("folder",))
    index, ways, fingerprint = run_python(code).stdout.split()
    assert main(["episode", "--data", str(served.data), "--source", "folder", "--split", "train", "--seed", "0",
                 "--index", "0", "--image-size", "84", "--json"]) == 0
    printed = capsys.readouterr().out
    assert index == "0" and int(ways) >= 2 and fingerprint in printed


def test_the_same_host_example_names_its_transport(served):
    done = run_python(with_constants(python_block("docs/serving.md", "same-host"), SERVER=served.address))
    assert done.stdout.strip() in {"same-host", "grpc"}


def test_the_replicas_example_builds_round_robin_clients():
    run_python(python_block("docs/clients.md", "replicas"))


@pytest.fixture(scope="module")
def vtab_address(tmp_path_factory):
    from sampler_server.fixtures.tfds import TestClevr, prepare

    root = tmp_path_factory.mktemp("docs-vtab")
    prepare(TestClevr, root / "tfds")
    assert main(["pack", "vtab", "--tfds-name", "clevr", "--tfds-data-dir", str(root / "tfds"), "--output",
                 str(root / "data"), "--quiet", "--workers", "1"]) == 0
    server = _serve(root / "data")
    yield server.address
    server.stop(grace=0.5)


@pytest.mark.slow
def test_the_vtab_client_example_runs(vtab_address):
    # The fixture's CLEVR has 70 train examples: too few for VTAB-1k's 1000, so it trains on `train`.
    code = with_constants(python_block("docs/protocols/vtab.md", "vtab-client"), SERVER=vtab_address,
                          TASK="clevr_count", TRAIN="train", STEPS=2)
    run_python(code + "assert len(tasks) == 2 and episode.query_images.shape[1:] == (224, 224, 3), episode\n")


@pytest.fixture(scope="module")
def cog_address(tmp_path_factory):
    from sampler_server.fixtures.cog_counts import cog_counts
    from sampler_server.fixtures.imagenet21k import write_imagenet21k

    root = tmp_path_factory.mktemp("docs-cog")
    write_imagenet21k(root / "in21k", cog_counts(), sides=(16, 40), workers=2)
    assert main(["pack", "imagenet21k", "--input", str(root / "in21k"), "--output", str(root / "data"), "--quiet",
                 "--workers", "2"]) == 0
    pack_fixture(generate_fixture("ilsvrc_2012", root, num_classes=2, images_per_class=3), root / "data",
                 name="ilsvrc_2012")
    server = _serve(root / "data")
    yield server.address
    server.stop(grace=0.5)


@pytest.mark.slow
def test_the_cog_client_example_runs(cog_address):
    from sampler_server.fixtures.cog_counts import LEVEL_SIZE, MIN_IMAGES

    code = with_constants(python_block("docs/protocols/cog.md", "cog-client"), SERVER=cog_address,
                          SCALE={"level_size": LEVEL_SIZE, "min_images": MIN_IMAGES})
    checks = ("assert [level.level for level in levels] == ['IN-1K', 'L1', 'L2', 'L3', 'L4', 'L5'], levels\n"
              "assert batch.images.shape[1:] == (224, 224, 3) and batch.last and len(split.record_ids) == 8 * 4\n")
    run_python(code + checks)


def test_the_backbone_factory_example_declares_what_the_trainers_apply(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    import numpy as np

    from clients.evaluate_args import parse_evaluate_args
    from clients.torch.backbones import TorchFeatures, load_backbone

    (tmp_path / "my_models.py").write_text(python_block("docs/clients.md", "backbone-factory"))
    monkeypatch.syspath_prepend(str(tmp_path))
    args = parse_evaluate_args("torch", ["--server", "127.0.0.1:1", "--run", "doc", "--backbone", "my_models:small_net",
                                         "--feature-cache", str(tmp_path / "features")])
    loaded = load_backbone(args, torch.device("cpu"), 224, "backbone")
    assert args.image_size == 32 and loaded.out_dim == 32
    assert loaded.preprocessing.as_config() == {"input_size": 32, "input_range": [0.0, 1.0],
                                                "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
    images = np.random.default_rng(0).integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)
    with torch.inference_mode():
        expected = loaded.model(torch.from_numpy(loaded.preprocessing.to_float(images)).permute(0, 3, 1, 2))
    np.testing.assert_allclose(TorchFeatures(loaded, torch.device("cpu"), 2).features(images), expected.numpy(),
                               rtol=1e-5, atol=1e-6)
