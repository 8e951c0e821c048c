"""``--preset`` alone: the trainers ask the server which sources a preset uses.

The issue this guards: ``python -m clients.tf --preset md-v2 --model baseline``
trained the baseline on the 712 MD-v1 ImageNet train classes instead of all of them.
Here every MD-v1 and MD-v2 training source is served (tiny fixtures in their original layouts);
the baseline of each variant must train on exactly that variant's train classes.
"""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest

from conftest import generate_fixture, pack_fixture
from trainer_threads import threads  # noqa: F401 (a fixture)
from sampler_server.core.md.presets import benchmark_sources
from sampler_server.service.server import RunningServer, ServerConfig
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.gen.sampler.v1 import sampler_pb2_grpc as pb_grpc

V2_TRAIN = benchmark_sources("md-v2", "train")
TRAIN_SOURCES = sorted(set(V2_TRAIN) | set(benchmark_sources("md-v1", "train")))  # MD-v1 adds vgg_flower


@pytest.fixture(scope="module")
def md_v2_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("md_v2")
    for source in TRAIN_SOURCES:
        pack_fixture(generate_fixture(source, root), root / "data")
    server = RunningServer(ServerConfig(data_dir=root / "data", port=0, workers=1, threads=8, grace_seconds=0.5))
    yield server.start()
    server.stop(grace=0.5)


def _train_classes(server, preset: str) -> dict[str, int]:
    channel = grpc.insecure_channel(server.address)
    try:
        summaries = pb_grpc.SamplerStub(channel).ListSources(pb.ListSourcesRequest(preset=preset)).sources
    finally:
        channel.close()
    return {s.source: s.train_classes for s in summaries}


def test_the_server_lists_a_presets_sources_per_split(md_v2_server):
    channel = grpc.insecure_channel(md_v2_server.address)
    stub = pb_grpc.SamplerStub(channel)
    reply = stub.ListSources(pb.ListSourcesRequest(preset="md-v2", split=pb.SPLIT_TRAIN))
    assert tuple(reply.preset_sources) == V2_TRAIN
    assert not stub.ListSources(pb.ListSourcesRequest(preset="md-v2")).preset_sources  # no split, no list
    with pytest.raises(grpc.RpcError) as caught:
        stub.ListSources(pb.ListSourcesRequest(preset="md-v1", split=pb.SPLIT_TEST))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert "source 'mscoco' is not served" in caught.value.details()
    channel.close()


# the three-convolution tiny backbone: the classes a baseline trains on do not depend on the network,
# and TensorFlow's trace of tiny's step is half conv4's
@pytest.mark.slow
@pytest.mark.parametrize("framework", ["tf", "torch"])
def test_preset_alone_trains_the_baseline_on_that_variants_train_classes(md_v2_server, tmp_path, framework,
                                                                        threads):
    if framework == "tf":
        from clients.tf.md_train import main
    else:
        from clients.torch.md_train import main
    expected = {"md-v1": _train_classes(md_v2_server, "md-v1"), "md-v2": _train_classes(md_v2_server, "md-v2")}
    assert expected["md-v2"]["ilsvrc_2012"] > expected["md-v1"]["ilsvrc_2012"]  # MD-v2 trains on every class
    for preset in ("md-v1", "md-v2"):
        summary = tmp_path / f"{preset}.json"
        code = main(["--server", md_v2_server.address, "--run", f"{framework}-{preset}-baseline", "--preset", preset,
                     "--model", "baseline", "--image-size", "16", "--backbone", "tiny", "--batch-size", "8",
                     "--train-steps", "2", "--eval-episodes", "0", "--json-summary", str(summary),
                     *threads[framework]])
        assert code == 0
        config = json.loads(summary.read_text())["config"]
        sources = benchmark_sources(preset, "train")
        assert config["train_sources"] == list(sources)
        assert config["baseline_classes"] == [expected[preset][s] for s in sources]
