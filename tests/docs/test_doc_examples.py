"""The Python examples of README.md and docs/ run unchanged, in this process as ``python -c``
would run them (``exec_python``; the fresh-interpreter runs are the quickstart's), against
a real server on 127.0.0.1 over the stores ``make demo`` leaves (``demo_data``: the demo's
own data code at its own scale); only ``SERVER``, the address, is pointed at the test's
server. (The quickstart runs in test_quickstart.py; "Use your own model" in
tests/clients/test_readme_examples.py.)"""

from __future__ import annotations

import pytest
from doc_blocks import exec_python, python_block, where, with_constants


def test_the_same_host_example_names_its_transport(demo_data):
    done = exec_python(with_constants(python_block("docs/serving.md", "same-host"), SERVER=demo_data.address),
                       where=where("docs/serving.md", "same-host"))
    assert done.stdout.strip() in {"same-host", "grpc"}


def test_the_client_options_example_connects_the_client_and_an_adapter_alike(served, tmp_path):
    """docs/operations.md's connection settings, against a server with TLS and tokens."""
    import json

    from pki import make_pki

    from sampler_server.service.server import RunningServer, ServerConfig, TlsFiles

    pki = make_pki(tmp_path / "pki")
    (tmp_path / "tokens.jsonl").write_text(json.dumps({"name": "me", "token": "tok-me", "role": "read"}) + "\n")
    (tmp_path / "token.txt").write_text("tok-me\n")
    server = RunningServer(ServerConfig(
        data_dir=served.data, port=0, workers=1, threads=4, metrics_path=tmp_path / "metrics.sqlite",
        grace_seconds=0.2, tls=TlsFiles(pki / "server.pem", pki / "server.key"), tokens=tmp_path / "tokens.jsonl",
    )).start()
    try:
        code = with_constants(python_block("docs/operations.md", "client-options"), SERVER=server.address,
                              CA=str(pki / "ca.pem"), TOKEN_FILE=str(tmp_path / "token.txt"), SOURCE="folder")
        done = exec_python(code, where=where("docs/operations.md", "client-options"))
    finally:
        server.stop(grace=0.2)
    assert done.stdout.splitlines() == ["['folder', 'folder_raw32']", "0 (5, 32, 32, 3)", "1 (5, 32, 32, 3)"]


def test_the_replicas_example_builds_round_robin_clients():
    exec_python(python_block("docs/clients.md", "replicas"), where=where("docs/clients.md", "replicas"))


@pytest.mark.slow
def test_the_vtab_client_example_runs(demo_data):
    code = with_constants(python_block("docs/protocols/vtab.md", "vtab-client"), SERVER=demo_data.address)
    exec_python(code + "assert {'svhn', 'kitti_distance'} <= {t.task for t in tasks}, tasks\n"
                       "assert episode.query_images.shape == (100, 224, 224, 3), episode.query_images.shape\n"
                       "assert episode.support_images.shape[0] == 1000 and batch.images.shape == (64, 224, 224, 3)\n",
                where=where("docs/protocols/vtab.md", "vtab-client"))


@pytest.mark.slow
def test_the_vtab_adapters_example_runs(demo_data):
    code = with_constants(python_block("docs/clients.md", "vtab-adapters"), SERVER=demo_data.address)
    exec_python(code + "assert inputs.dtype == torch.float32 and inputs.shape == (64, 3, 224, 224), inputs.shape\n"
                       "assert 0 <= float(inputs.min()) and float(inputs.max()) <= 1 and labels.shape == (64,)\n",
                where=where("docs/clients.md", "vtab-adapters"))


@pytest.mark.slow
def test_the_cog_client_example_runs(demo_data):
    code = with_constants(python_block("docs/protocols/cog.md", "cog-client"), SERVER=demo_data.address)
    checks = ("assert [level.level for level in levels] == ['IN-1K', 'L1', 'L2', 'L3', 'L4', 'L5'], levels\n"
              "assert batch.images.shape[1:] == (224, 224, 3) and batch.last and len(split.record_ids) == 8 * 4\n")
    exec_python(code + checks, where=where("docs/protocols/cog.md", "cog-client"))


def test_the_backbone_factory_example_declares_what_the_trainers_apply(tmp_path, monkeypatch):
    import torch
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
                                                "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225],
                                                "source": "model attributes"}
    images = np.random.default_rng(0).integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)
    with torch.inference_mode():
        expected = loaded.model(torch.from_numpy(loaded.preprocessing.to_float(images)).permute(0, 3, 1, 2))
    np.testing.assert_allclose(TorchFeatures(loaded, torch.device("cpu"), 2).features(images), expected.numpy(),
                               rtol=1e-5, atol=1e-6)
