"""The backbone contract in PyTorch (``clients.torch.backbones``): a backbone defined here,
passed as ``module:callable``, runs in the MD trainer, ``transfer`` and ``cog``; TorchScript
and ``.pt2`` files and ``--weights`` (a state dict, our MD checkpoint) load; declared
input size, range, mean and std are honoured (the server serves that size, the model sees
exactly ``Preprocessing.to_float``'s values); a wrong output or a checkpoint that does not
fit fails at once in one line saying what it got and what was expected."""

from __future__ import annotations

import argparse
import json
import re

import numpy as np
import pytest
from prerequisites import needs_cuda

import torch
from torch import nn  # noqa: E402

from clients.backbone_contract import BackboneSpec, Preprocessing  # noqa: E402
from clients.errors import UsageError  # noqa: E402

CPU = torch.device("cpu")
HERE = "test_backbones_torch"  # this module, importable by name (tests/clients is on the path)
SEEN: list[torch.Tensor] = []   # what DeclaredNet was given, for the tests to compare


class DeclaredNet(nn.Module):
    """A user's backbone declaring its own input: 24 px, [0, 1], a per-channel mean and std."""

    input_size = 24
    input_range = (0.0, 1.0)
    mean = (0.25, 0.5, 0.75)
    std = (0.5, 0.25, 2.0)

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.norm = nn.BatchNorm2d(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        SEEN.append(x.detach().clone())
        return torch.flatten(nn.functional.adaptive_avg_pool2d(torch.relu(self.norm(self.conv(x))), 1), 1)


class Plain(nn.Module):
    """No declarations: the one default applies (``clients.backbone_contract.DEFAULT_CONVENTION``)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x).mean((2, 3))


class Unpooled(Plain):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x).mean((2, 3)).unsqueeze(2)  # [N, D, 1]


class Integers(Plain):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x).mean((2, 3)).long()


class Pair(Plain):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.conv(x).mean((2, 3))
        return features, features


def declared() -> nn.Module:
    return DeclaredNet()


def _namespace(backbone: str, weights: str | None = None, **flags) -> argparse.Namespace:
    values = {"image_size": None, "input_range": None, "mean": None, "std": None, "seed": 0, "init_seed": None}
    values.update(flags)
    return argparse.Namespace(backbone=backbone, weights=weights, **values)


def _load(backbone: str, weights: str | None = None, default_size: int = 32, **flags):
    from clients.torch.backbones import load_backbone

    return load_backbone(_namespace(backbone, weights, **flags), CPU, default_size, "backbone")


# ---- loading and preprocessing --------------------------------------------------------------------


def test_declared_preprocessing_is_honoured_and_the_model_sees_to_floats_values():
    from clients.torch.backbones import TorchFeatures

    loaded = _load(f"{HERE}:declared")
    assert loaded.preprocessing == Preprocessing(24, 0.0, 1.0, (0.25, 0.5, 0.75), (0.5, 0.25, 2.0))
    assert loaded.out_dim == 8 and loaded.spec == BackboneSpec("callable", f"{HERE}:declared")
    images = np.random.RandomState(0).randint(0, 256, (5, 24, 24, 3), dtype=np.uint8)
    SEEN.clear()
    features = TorchFeatures(loaded, CPU, batch_size=2).features(images)
    assert features.shape == (5, 8) and features.dtype == np.float32 and len(SEEN) == 3  # batches of 2, 2, 1
    seen = torch.cat(SEEN).permute(0, 2, 3, 1).numpy()
    assert np.array_equal(seen, loaded.preprocessing.to_float(images))  # bit for bit
    assert not loaded.model.training  # eval mode: batch norm used its running statistics
    # a flag wins over the attribute; the named backbones' [-1, 1] is x / 127.5 - 1 exactly
    flagged = _load(f"{HERE}:declared", image_size=16, input_range=[-1.0, 1.0], mean=[0.0] * 3, std=[1.0] * 3)
    assert flagged.preprocessing == Preprocessing(16, -1.0, 1.0, (0.0,) * 3, (1.0,) * 3)
    assert np.array_equal(flagged.preprocessing.to_float(images), images.astype(np.float32) / 127.5 - 1)


def test_named_backbones_are_seeded_by_name_and_declare_md_scaling():
    first, again = _load("tiny"), _load("tiny")
    other_seed = _load("tiny", seed=1)
    assert first.fingerprint == again.fingerprint != other_seed.fingerprint
    assert first.preprocessing == Preprocessing(32, -1.0, 1.0, (0.0,) * 3, (1.0,) * 3) and first.out_dim == 64
    assert _load("conv4", default_size=16).out_dim == 64


@pytest.mark.slow  # torch.export: about 6 s
def test_torchscript_and_exported_files_give_the_modules_features(tmp_path):
    from clients.torch.backbones import TorchFeatures

    module = _load(f"{HERE}:declared")
    images = np.random.RandomState(1).randint(0, 256, (3, 24, 24, 3), dtype=np.uint8)
    expected = TorchFeatures(module, CPU, 8).features(images)
    script, program = tmp_path / "net.pt", tmp_path / "net.pt2"
    model = Plain().eval()
    torch.jit.script(model).save(str(script))
    batch = torch.export.Dim("batch")
    torch.export.save(torch.export.export(model, (torch.rand(2, 3, 24, 24),), dynamic_shapes=({0: batch},)),
                      str(program))
    reference = torch.jit.load(str(script))
    for path in (script, program):
        loaded = _load(str(path), image_size=24, input_range=[0.0, 1.0])
        assert loaded.spec.kind == "file" and loaded.out_dim == 4
        ours = TorchFeatures(loaded, CPU, 2).features(images)
        with torch.inference_mode():
            want = reference(torch.from_numpy(loaded.preprocessing.to_float(images)).permute(0, 3, 1, 2)).numpy()
        assert np.allclose(ours, want, atol=1e-6), path
    assert expected.shape == (3, 8)


def test_weights_load_from_a_state_dict_and_from_our_md_checkpoint(tmp_path):
    from clients.torch.md_train import CHECKPOINT_FORMAT

    source = _load(f"{HERE}:declared", seed=7)
    state = source.model.state_dict()
    torch.save(state, tmp_path / "state.pt")
    torch.save({"format": CHECKPOINT_FORMAT, "next_index": 3, "resume": {}, "backbone": state, "head": None,
                "optimizer": {}}, tmp_path / "checkpoint.pt")
    torch.save({"state_dict": {f"module.{k}": v for k, v in state.items()}}, tmp_path / "wrapped.pt")
    fresh = _load(f"{HERE}:declared")
    assert fresh.fingerprint != source.fingerprint
    for name in ("state.pt", "checkpoint.pt", "wrapped.pt"):
        assert _load(f"{HERE}:declared", str(tmp_path / name)).fingerprint == source.fingerprint, name


def _torchvision_resnet50_state() -> dict[str, torch.Tensor]:
    """torchvision's ``resnet50`` state dict layout (names and shapes, zeros): 320 tensors with ``fc``."""
    state: dict[str, torch.Tensor] = {}

    def norm(prefix: str, channels: int) -> None:
        for name in ("weight", "bias", "running_mean", "running_var"):
            state[f"{prefix}.{name}"] = torch.zeros(channels)
        state[f"{prefix}.num_batches_tracked"] = torch.zeros((), dtype=torch.int64)

    state["conv1.weight"] = torch.zeros(64, 3, 7, 7)
    norm("bn1", 64)
    channels = 64
    for layer, (blocks, width) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512)), start=1):
        for block in range(blocks):
            prefix = f"layer{layer}.{block}"
            state[f"{prefix}.conv1.weight"] = torch.zeros(width, channels, 1, 1)
            norm(f"{prefix}.bn1", width)
            state[f"{prefix}.conv2.weight"] = torch.zeros(width, width, 3, 3)
            norm(f"{prefix}.bn2", width)
            state[f"{prefix}.conv3.weight"] = torch.zeros(width * 4, width, 1, 1)
            norm(f"{prefix}.bn3", width * 4)
            if block == 0:
                state[f"{prefix}.downsample.0.weight"] = torch.zeros(width * 4, channels, 1, 1)
                norm(f"{prefix}.downsample.1", width * 4)
            channels = width * 4
    state["fc.weight"], state["fc.bias"] = torch.zeros(1000, 2048), torch.zeros(1000)
    return state


def test_a_resnet50_state_dict_into_resnet18_is_one_line_saying_what_it_holds(tmp_path, capsys):
    """Issue 27: it blamed --image-size and cut the state-dict error off mid-string."""
    from clients.torch.vtab_transfer import main

    state = _torchvision_resnet50_state()
    assert len(state) == 320
    torch.save(state, tmp_path / "r50.pt")
    # --init: the transfer command's old spelling of --weights, still accepted
    assert main(["--server", "127.0.0.1:1", "--run", "r", "--tasks", "kitti_distance", "--backbone", "resnet18",
                 "--image-size", "32", "--init", str(tmp_path / "r50.pt"), "--device", "cpu"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    line = lines[0]
    assert "--image-size" not in line and "ResNet-50" in line and "r50.pt" in line, line
    assert "318 tensors" in line and "--backbone resnet18" in line, line  # what it holds (fc dropped), what fits
    assert "missing (first stem.0.weight)" in line and "(first conv1.weight)" in line, line  # the keys that differ
    assert line.endswith(")") and len(line) < 600, line  # whole, not cut off


def test_a_wrong_output_fails_at_once_naming_what_it_returned(capsys):
    from clients.torch.md_train import main

    assert main(["--server", "127.0.0.1:1", "--run", "r", "--sources", "folder", "--backbone", f"{HERE}:Unpooled",
                 "--image-size", "16", "--device", "cpu"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and f"{HERE}:Unpooled returned float32 [2, 4, 1] for 2 images, expected floating-point " \
                               "features [2, D]" in lines[0], lines
    for name, returned in (("Integers", "int64 [2, 4]"), ("Pair", "tuple []")):
        with pytest.raises(UsageError, match=rf"{HERE}:{name} returned {re.escape(returned)} for 2 images"):
            _load(f"{HERE}:{name}")


def test_shape_buckets_need_our_batch_norms(capsys):
    from clients.torch.md_train import TorchFramework
    from clients.trainer_args import parse_args

    base = ["--server", "h:1", "--run", "r", "--sources", "a", "--backbone", f"{HERE}:declared"]
    assert TorchFramework(parse_args("torch", [*base, "--device", "cpu"])).buckets is False
    with pytest.raises(UsageError, match=rf"--shape-buckets: got on, but --backbone {HERE}:declared is not one of"):
        TorchFramework(parse_args("torch", [*base, "--shape-buckets", "on"]))


@pytest.fixture(scope="module")
def kitti(kitti_served):
    """The transfer tests' KITTI store (train800/val200/test), served (one for the session)."""
    return kitti_served


# ---- the commands --------------------------------------------------------------------------------------


def test_md_trainer_trains_and_evaluates_a_module_callable_backbone_at_its_declared_size(served, tmp_path):
    from clients.torch.md_train import main

    summary_path = tmp_path / "summary.json"
    SEEN.clear()
    assert main(["--server", served.address, "--run", "torch-user-backbone", "--sources", "folder",
                 "--backbone", f"{HERE}:declared", "--ways", "3", "--shots", "2", "--query", "2",
                 "--train-episodes", "3", "--eval-episodes", "2", "--device", "cpu", "--checkpoint-dir",
                 str(tmp_path / "ckpt"), "--json-summary", str(summary_path)]) == 0
    summary = json.loads(summary_path.read_text())
    assert summary["next_index"] == 3 and summary["eval"]["folder"]["episodes"] == 2
    assert {tuple(x.shape[1:]) for x in SEEN} == {(3, 24, 24)}  # the server served the declared side
    config = served.server.metrics.run_config("torch-user-backbone")
    assert config["backbone"] == f"{HERE}:declared" and config["image_size"] == 24
    assert config["preprocessing"] == {"input_size": 24, "input_range": [0.0, 1.0], "mean": [0.25, 0.5, 0.75],
                                       "std": [0.5, 0.25, 2.0], "source": "model attributes"}
    assert len(config["backbone_sha256"]) == 64 and config["shape_buckets"] == "off" and "weights" not in config
    # the trained backbone, from the MD checkpoint, into the same callable
    trained = _load(f"{HERE}:declared", str(tmp_path / "ckpt" / "checkpoint.pt"))
    assert trained.fingerprint != _load(f"{HERE}:declared").fingerprint


def test_cog_evaluates_a_module_callable_backbone_and_keys_its_cache_by_preprocessing(tmp_path):
    from cog_eval_fake import SMALL, FakeCogClient

    from clients.cog_eval import CogRun
    from clients.torch.cog_eval import TorchCogBackend
    from clients.trainer_args import parse_cog_args

    at = SMALL.index("--image-size")
    small = SMALL[:at] + SMALL[at + 2:]  # the backbone declares its side

    def run(*extra: str) -> dict:
        args = parse_cog_args("torch", [*small, "--feature-cache", str(tmp_path), "--levels", "L1", "--shots", "4",
                                        "--seeds", "1", "--backbone", f"{HERE}:declared", *extra])
        return CogRun(TorchCogBackend(args), client, lambda _: None).execute()

    client = FakeCogClient()
    summary = run()
    assert summary["config"]["preprocessing"]["input_size"] == 24 and summary["levels"]["L1"]["feature_dim"] == 8
    streamed = client.streamed
    assert streamed > 0 and run()["extracted"] == 0 and client.streamed == streamed  # from the cache
    run("--std", "1", "1", "1")  # another preprocessing: extracted again
    assert client.streamed == 2 * streamed


@pytest.mark.slow  # packing the KITTI store: about 14 s
def test_transfer_runs_a_module_callable_backbone(tmp_path, kitti):
    from clients.torch.vtab_transfer import main

    summary_path = tmp_path / "transfer.json"
    SEEN.clear()
    assert main(["--server", kitti.address, "--run", "torch-user-transfer", "--protocol", "vtab-md", "--tasks",
                 "kitti_distance", "--backbone", f"{HERE}:declared", "--mode", "linear", "--batch-size", "32",
                 "--eval-batch-size", "128", "--lrs", "0.1", "--steps", "2", "--select-split", "none",
                 "--device", "cpu", "--json-summary", str(summary_path)]) == 0
    summary = json.loads(summary_path.read_text())
    assert summary["protocol_values"]["image_size"] == 24 and 0 <= summary["tasks"]["kitti_distance"][
        "test_accuracy"] <= 1
    assert summary["config"]["preprocessing"]["input_range"] == [0.0, 1.0]
    assert {tuple(x.shape[1:]) for x in SEEN} == {(3, 24, 24)}



# ---- the extraction stream (cog, evaluate) -----------------------------------------------------------


@pytest.mark.parametrize("device", [pytest.param("cpu", id="cpu"), pytest.param(
    "cuda", id="cuda", marks=needs_cuda(torch.cuda.is_available()))])
def test_the_extraction_stream_gives_each_batchs_features_in_order_and_its_errors_after_them(device):
    """``features_stream`` stages batches on a thread of its own, ahead of the model, and on
    CUDA keeps ``IN_FLIGHT`` batches queued on the device: the same features as ``features``
    batch by batch (more batches than are in flight, and fewer), an error of the batches after
    the batches before it, and a consumer that stops early leaves no thread behind."""
    import threading

    from clients.torch.backbones import IN_FLIGHT, TorchFeatures

    loaded = _load("tiny")
    loaded.model.to(device)
    extractor = TorchFeatures(loaded, torch.device(device), 8, "float32")
    batches = [np.random.RandomState(seed).randint(0, 256, (rows, 32, 32, 3), dtype=np.uint8)
               for seed, rows in enumerate((8, 8, 5, 8, 3, 7))]
    assert len(batches) > IN_FLIGHT
    for taken in (batches, batches[:IN_FLIGHT - 1]):
        streamed = list(extractor.features_stream(iter(taken)))
        assert [len(s) for s in streamed] == [len(b) for b in taken]
        assert all(np.allclose(s, extractor.features(b), rtol=1e-5, atol=1e-6) for s, b in zip(streamed, taken))

    def broken():
        yield from batches[:2]
        raise ConnectionError("the stream broke after batch 1")

    stream = extractor.features_stream(broken())
    assert [len(next(stream)) for _ in range(2)] == [8, 8]
    with pytest.raises(ConnectionError, match="after batch 1"):
        next(stream)

    before = {thread.ident for thread in threading.enumerate()}
    early = extractor.features_stream(iter(batches * 20))
    next(early)
    early.close()
    assert not [t for t in threading.enumerate() if t.ident not in before and t.name == "trainer-feed"]


def test_shape_graphs_capture_a_shape_at_its_second_sighting_up_to_the_limit_and_keep_a_failed_one_eager():
    """``ShapeGraphs``: a split's short last batch (seen once) runs eager, the stream's batch
    shape is captured once and reused; past the limit and after a failed capture: eager."""
    from clients.torch.graphed import ShapeGraphs

    made: list[str] = []

    def capture(key):
        def make():
            made.append(key)
            if key == "broken":
                raise RuntimeError("operation not permitted when stream is capturing")
            return f"graph of {key}"
        return make

    graphs: ShapeGraphs[str] = ShapeGraphs(limit=2)
    assert [graphs.runner(k, capture(k)) for k in ("a", "a", "a", "b", "c", "b")] == [
        None, "graph of a", "graph of a", None, None, "graph of b"]
    assert graphs.runner("c", capture("c")) is None and graphs.captured == 2  # the limit
    assert made == ["a", "b"]
    fresh: ShapeGraphs[str] = ShapeGraphs()
    assert [fresh.runner("broken", capture("broken")) for _ in range(3)] == [None, None, None]
    assert made.count("broken") == 1 and "stream is capturing" in fresh.refused["broken"]


@pytest.mark.parametrize("precision", ["float32", "bf16"])
@needs_cuda(torch.cuda.is_available())
def test_replayed_graphs_give_the_eager_features_bit_for_bit(precision):
    """On CUDA a named backbone's stream replays one captured graph for its batch shape
    (``clients.torch.graphed``); its features equal the eager pass's exactly, the short last
    batch included, and a second stream reuses the graph (and captures the short batch's shape,
    now met twice)."""
    from clients.torch.backbones import TorchFeatures

    loaded = _load("resnet18", default_size=64)
    loaded.model.to("cuda")
    batches = [np.random.RandomState(seed).randint(0, 256, (rows, 64, 64, 3), dtype=np.uint8)
               for seed, rows in enumerate((16, 16, 16, 16, 5))]
    eager = TorchFeatures(loaded, torch.device("cuda"), 16, precision)
    eager.graphs = False
    expected = list(eager.features_stream(iter(batches)))
    graphed = TorchFeatures(loaded, torch.device("cuda"), 16, precision)
    for captured in (1, 2):  # the short batch, met again by the second stream, is captured there
        got = list(graphed.features_stream(iter(batches)))
        assert all(np.array_equal(g, e) for g, e in zip(got, expected, strict=True))
        assert graphed._graphs.captured == captured
    assert eager._graphs.captured == 0


@needs_cuda(torch.cuda.is_available())
def test_two_streams_at_once_give_each_batchs_eager_features():
    """Two streams on two threads through one extractor: each batch's launch holds the
    extractor's lock, so the shared graph's input and output are
    never overwritten by the other thread before its copy; the features equal the eager pass's."""
    import threading

    from clients.torch.backbones import TorchFeatures

    loaded = _load("resnet18", default_size=64)
    loaded.model.to("cuda")
    splits = [[np.random.RandomState(100 * split + seed).randint(0, 256, (rows, 64, 64, 3), dtype=np.uint8)
               for seed, rows in enumerate((16,) * 12 + (9,))] for split in range(2)]
    eager = TorchFeatures(loaded, torch.device("cuda"), 16, "bf16")
    eager.graphs = False
    expected = [list(eager.features_stream(iter(batches))) for batches in splits]
    graphed = TorchFeatures(loaded, torch.device("cuda"), 16, "bf16")
    got: list = [None, None]

    def extract(split: int) -> None:
        got[split] = list(graphed.features_stream(iter(splits[split])))

    threads = [threading.Thread(target=extract, args=(split,)) for split in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for split in range(2):
        assert all(np.array_equal(g, e) for g, e in zip(got[split], expected[split], strict=True))
    assert graphed._graphs.captured >= 1


# ---- precision (--precision) -------------------------------------------------------------------------


def test_float32_precision_is_a_plain_forward_pass_and_bf16_autocast_stays_within_bf16s_error():
    from clients.torch.backbones import TorchFeatures, to_model_input

    loaded = _load("tiny")
    images = np.random.RandomState(1).randint(0, 256, (6, 32, 32, 3), dtype=np.uint8)
    with torch.inference_mode():  # the reference's extraction: float32, no autocast
        plain = loaded.model(to_model_input(torch.from_numpy(images), loaded.preprocessing, CPU)).numpy()
    float32 = TorchFeatures(loaded, CPU, 6, "float32").features(images)
    assert float32.dtype == np.float32 and np.array_equal(float32, plain)  # bit for bit
    assert np.array_equal(TorchFeatures(loaded, CPU, 6).features(images), plain)  # the trainers' default off CUDA
    bf16 = TorchFeatures(loaded, CPU, 6, "bf16").features(images)  # autocast on any device, the CPU included
    assert bf16.dtype == np.float32 and not np.array_equal(bf16, plain)
    error = np.linalg.norm(bf16 - plain, axis=1) / np.linalg.norm(plain, axis=1)
    assert error.max() < 0.05, error  # bf16 keeps 8 bits of mantissa: ~0.4% per rounding, a few layers deep
    with pytest.raises(ValueError, match="precision: got 'fp16', expected one of float32, bf16"):
        TorchFeatures(loaded, CPU, 6, "fp16")
