"""Shape buckets in the PyTorch trainer are exact: a padded step's loss, gradients and
batch-norm statistics equal the unpadded step's (float32 tightly, bf16 autocast within
its precision) for conv4 and ResNet-18; evaluation predicts the same; a bucketed run
and an unbucketed run of the same seed follow the same training curve on the same
episodes; and the run configuration records the setting."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
from prerequisites import needs_cuda

import torch

from torch.nn import functional as F  # noqa: E402

from clients.buckets import Ladder, pack_episode  # noqa: E402
from clients.core import EpisodeSpec, SamplerClient  # noqa: E402
from clients.torch.backbones import named_preprocessing, to_model_input  # noqa: E402
from clients.torch.models import ProtoNet, build_backbone  # noqa: E402
from clients.torch.staging import Stager  # noqa: E402
from clients.torch.md_train import TorchFramework, main  # noqa: E402
from clients.trainer_args import parse_args  # noqa: E402

CPU = torch.device("cpu")


pytestmark = pytest.mark.usefixtures("torch_one_thread")  # conftest: one torch thread per test


def _episode(seed: int, support: int, query: int, ways: int, size: int = 32) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (support + query, size, size, 3), dtype=torch.uint8, generator=generator)
    labels = torch.cat([torch.arange(support) % ways, torch.randint(0, ways, (query,), generator=generator)])
    return images[:support], labels[:support], images[support:], labels[support:]


def _step(model: ProtoNet, episode: tuple[torch.Tensor, ...], ways: int, padded_rows: int | None, autocast: bool,
          count_valid_rows: bool = True, device: torch.device = CPU) -> torch.Tensor:
    """One training forward + backward: unpadded (``padded_rows`` None, the plain
    ``ProtoNet.forward``) or in the bucketed layout of ``padded_rows`` rows."""
    support, support_labels, query, query_labels = (t.to(device) for t in episode)
    scaling = named_preprocessing(support.shape[1])
    # bf16 in the trainer's bf16 layout, channels_last (on this test's CPU also the fast one:
    # NCHW bf16 convolutions fall back to a slow path, 16 s of a ResNet-18 backward)
    layout = torch.channels_last if autocast else torch.contiguous_format

    def to_input(images: torch.Tensor, device: torch.device) -> torch.Tensor:
        return to_model_input(images, scaling, device).contiguous(memory_format=layout)

    model.train()
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
        if padded_rows is None:
            logits = model(to_input(support, device), support_labels, to_input(query, device), ways)
            labels = query_labels
        else:
            ns, nq = len(support), len(query)
            images = torch.zeros((padded_rows, *support.shape[1:]), dtype=torch.uint8, device=device)
            images[:ns], images[ns:ns + nq] = support, query
            all_labels = torch.zeros(padded_rows, dtype=torch.int64, device=device)
            all_labels[:ns], all_labels[ns:ns + nq] = support_labels, query_labels
            if count_valid_rows:
                logits, labels = model.packed(to_input(images, device), all_labels, ns, nq, ways)
            else:  # the control: plain batch norm over the padded batch
                embedded = model.backbone(to_input(images, device)).float()
                logits = model._logits(embedded, support_labels, ns, nq, ways)
                labels = query_labels
    loss = F.cross_entropy(logits.float(), labels)
    loss.backward()
    return loss.detach()


def _relative_gradient_error(a: ProtoNet, b: ProtoNet) -> float:
    return max(float((p.grad - q.grad).norm() / p.grad.norm().clamp_min(1e-12))
               for p, q in zip(a.parameters(), b.parameters(), strict=True))


_DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param("cuda", id="cuda", marks=needs_cuda(torch.cuda.is_available())),
]


@pytest.fixture
def _exact_float32_on_cuda():
    """float32 convolutions and matmuls on CUDA in full float32 (not TF32), as on CPU."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


@pytest.mark.parametrize("device", _DEVICES)
@pytest.mark.parametrize("backbone", ["conv4", "resnet18"])
@pytest.mark.parametrize(("autocast", "tolerance"), [(False, 2e-5), (True, 5e-2)])
def test_padded_step_equals_unpadded_step(backbone: str, autocast: bool, tolerance: float, device: str,
                                          _exact_float32_on_cuda):
    """The same tolerances on CUDA (an H100 gave relative errors of at most 1e-5 for
    either backbone, float32 or bf16 autocast, though cuDNN may pick other kernels for
    the padded shape). bf16 autocast: 5e-2, a dozen of bf16's rounding steps (2**-8): on a CPU
    with bf16 units (AMX) ResNet-18's gradients differed by 8e-3 to 1.6e-2 (conv4's by 5e-9);
    without counting only the valid rows, by more than 1."""
    torch.manual_seed(0)
    where = torch.device(device)
    # bf16 on a CPU without bf16 units is emulated and slow (a minute for ResNet-18 at 32 px):
    # there the images are 24 px, the rows and their padding the same. Not 16: ResNet-18's last
    # stage then takes 1x1 inputs into its stride-2 convolution, whose CPU bf16 weight gradient
    # (256 -> 512 channels, torch 2.13) came out as 1e16 to 1e36 in 21 of 30 trials of that
    # convolution alone, padded or not, and this test failed in one run of six
    size = 24 if autocast and device == "cpu" else 32
    layout = torch.channels_last if autocast else torch.contiguous_format  # the trainer's, as in _step
    reference = ProtoNet(build_backbone(backbone, size)).to(where, memory_format=layout)
    padded = copy.deepcopy(reference)
    control = copy.deepcopy(reference)
    ways, episode = 5, _episode(1, 13, 15, 5, size)
    rows = Ladder(cap=1000).size(28) + 8  # 40 rows: 12 of them padding

    loss = _step(reference, episode, ways, None, autocast, device=where)
    padded_loss = _step(padded, episode, ways, rows, autocast, device=where)
    control_loss = _step(control, episode, ways, rows, autocast, count_valid_rows=False, device=where)

    assert float(padded_loss) == pytest.approx(float(loss), rel=tolerance)
    assert _relative_gradient_error(reference, padded) < tolerance
    for (name, buffer), (_, other) in zip(reference.named_buffers(), padded.named_buffers(), strict=True):
        assert torch.allclose(buffer.float(), other.float(), rtol=1e-5, atol=1e-6), name  # running statistics
    # without counting only the valid rows, padding changes what is learned: the test can tell
    assert abs(float(control_loss) - float(loss)) > 100 * tolerance * abs(float(loss)) or \
        _relative_gradient_error(reference, control) > 10 * tolerance
    assert any(not torch.allclose(b.float(), c.float(), rtol=1e-3)
               for b, c in zip(reference.buffers(), control.buffers(), strict=True))


# The trainer-level checks run at 16 px: whether padding changes a prediction, a loss or a training
# curve does not depend on the image size (conv4 still runs its four blocks, every pool on an even
# side as at 32; ResNet-18 all its stages), and a step is a third of a 32-px one
SIZE = 16


def _framework(served, buckets: str, backbone: str = "conv4", seed: int = 0) -> TorchFramework:
    framework = TorchFramework(parse_args("torch", ["--server", served.address, "--run", "r", "--sources", "folder",
                                                    "--image-size", str(SIZE), "--backbone", backbone, "--seed", str(seed),
                                                    "--shape-buckets", buckets, "--threads", "1"]))
    framework.build(0)
    return framework


@pytest.mark.parametrize("backbone", ["conv4", "resnet18"])
def test_evaluation_predicts_the_same_with_buckets(served, backbone: str):
    on, off = _framework(served, "on", backbone), _framework(served, "off", backbone)
    with SamplerClient(served.address) as client:
        train = list(client.episodes(EpisodeSpec(sources=("folder",), split="train", image_size=SIZE), 0, 1))
        test = list(client.episodes(EpisodeSpec(sources=("folder",), split="test", image_size=SIZE), 0, 4))
    for episode in train:  # batch-norm statistics that are not the initial ones
        on.train_step(episode)
        off.train_step(episode)
    padded = 0
    for episode in test:
        predicted_on, loss_on = on.evaluate(episode)
        predicted_off, loss_off = off.evaluate(episode)
        assert np.array_equal(predicted_on, predicted_off)
        assert loss_on == pytest.approx(loss_off, rel=1e-4)
        padded += on._inline_stager.stage(episode).padded
    assert padded > 0 and on.shapes and all(shape[0] % 8 == 0 for shape in on.shapes)


def test_stager_layout_on_cpu(served):
    with SamplerClient(served.address) as client:
        episode = client.episode(EpisodeSpec(sources=("folder",), split="train", image_size=32), 3)
    staged = Stager(CPU, buckets=True).stage(episode).ready()
    expected = pack_episode(episode, Ladder(cap=1000))
    assert staged.images.dtype == torch.uint8 and staged.labels.dtype == torch.int64
    assert np.array_equal(staged.images.numpy(), expected.images)
    assert np.array_equal(staged.labels.numpy(), expected.labels)
    assert (staged.support, staged.query, staged.ways, staged.index) == (len(episode.support_images),
                                                                       len(episode.query_images), episode.ways, 3)
    plain = Stager(CPU, buckets=False).stage(episode)
    assert not plain.padded and plain.images.shape[0] == staged.rows


def test_bucket_ratio_sets_the_trainers_episode_and_support_grids(capfd):
    """``--bucket-ratio``: the feed's and the inline stager's episode sizes and the inner loop's
    support sizes come from the finer grid; the first line names it; 1 (no grid) is refused."""
    from types import SimpleNamespace

    fine, default = Ladder(ratio=1.0625), Ladder()
    rows = next(n for n in range(65, 1000) if fine.size(n) < default.size(n))
    rng = np.random.RandomState(0)
    images = rng.randint(0, 256, (rows, 8, 8, 3)).astype(np.uint8)
    labels = np.arange(rows) % 5
    episode = SimpleNamespace(support_images=images[:rows - 10], query_images=images[rows - 10:],
                              support_labels=labels[:rows - 10], query_labels=labels[rows - 10:], ways=5, index=0,
                              request=None)
    argv = ["--server", "127.0.0.1:1", "--run", "r", "--sources", "folder", "--model", "maml", "--device", "cpu",
            "--shape-buckets", "on"]
    framework = TorchFramework(parse_args("torch", [*argv, "--bucket-ratio", "1.0625"]))
    for stager in (framework._feed_stager, framework._inline_stager):
        staged = stager.stage(episode)
        assert staged.images.shape[0] == fine.size(rows) < default.size(rows)
        assert np.array_equal(staged.images.numpy(), pack_episode(episode, fine).images)
    assert framework._support_rows(staged) == fine.size(rows - 10)
    assert "shape buckets on (grid ratio 1.0625)" in framework.step_settings()
    plain = TorchFramework(parse_args("torch", argv))
    assert plain._feed_stager.stage(episode).images.shape[0] == default.size(rows)
    assert "shape buckets on," in plain.step_settings() + ","
    assert main([*argv, "--bucket-ratio", "1"]) == 2
    assert "argument --bucket-ratio: got '1', expected a number in (1, 2]" in capfd.readouterr().err


@pytest.mark.parametrize("device", _DEVICES)
def test_stager_stages_a_batch_learners_batch_as_its_rows(device: str):
    """A batch (baseline, knn, finetune) goes through the stager as all-support rows, unpadded;
    on CUDA through the pinned ring, so more batches than its slots each arrive whole."""
    stager, rng = Stager(torch.device(device), buckets=True), np.random.RandomState(1)
    batches = [(rng.randint(0, 256, (rows, 8, 8, 3)).astype(np.uint8), rng.randint(0, 50, rows))
               for rows in (64, 64, 17, 64, 64)]
    staged = [stager.stage_batch(images, labels) for images, labels in batches]
    for (images, labels), item in zip(batches, staged, strict=True):
        item.ready()
        assert (item.support, item.query, item.padded) == (len(images), 0, False)
        assert np.array_equal(item.images.cpu().numpy(), images)
        assert item.labels.dtype == torch.int64 and np.array_equal(item.labels.cpu().numpy(), labels)


def _run(served, tmp_path: Path, run_id: str, *extra: str) -> dict:
    summary = tmp_path / f"{run_id}.json"
    assert main(["--server", served.address, "--run", run_id, "--sources", "folder", "--image-size", str(SIZE),
                 "--train-episodes", "6", "--eval-episodes", "2", "--log-every", "1", "--seed", "5",
                 "--threads", "1", "--json-summary", str(summary), *extra]) == 0
    return json.loads(summary.read_text())


@pytest.mark.slow
def test_bucketed_run_follows_the_unbucketed_curve(served, tmp_path):
    """Same seed, same episodes (MD variable shapes): the per-episode losses agree within
    float tolerance, the evaluation is the same, and fewer shapes were met."""
    on = _run(served, tmp_path, "torch-buckets-on", "--shape-buckets", "on")
    off = _run(served, tmp_path, "torch-buckets-off")  # auto on CPU: off
    curve_on, curve_off = np.array(on["train"]["curve"]), np.array(off["train"]["curve"])
    assert curve_on.shape == curve_off.shape == (6, 3)
    assert np.array_equal(curve_on[:, 0], np.arange(1, 7))
    assert np.allclose(curve_on[:, 1], curve_off[:, 1], rtol=1e-3, atol=1e-4), (curve_on, curve_off)
    assert np.abs(curve_on[:, 2] - curve_off[:, 2]).max() <= 1 / 30 + 1e-6  # at most one query of an episode
    assert on["eval"]["folder"]["mean_accuracy"] == pytest.approx(off["eval"]["folder"]["mean_accuracy"])
    assert on["train"]["distinct_shapes"] < off["train"]["distinct_shapes"]
    # --log-every 1: the final window is the last episode (its accuracy, no interval)
    assert on["train"]["final_accuracy"] == pytest.approx(curve_on[-1, 2])
    assert off["train"]["final_accuracy_ci95"] is None
    assert abs(on["train"]["final_accuracy"] - off["train"]["final_accuracy"]) <= 1 / 30 + 1e-6
    assert (on["config"]["shape_buckets"], on["config"]["requested_shape_buckets"]) == ("on", "on")
    assert (off["config"]["shape_buckets"], off["config"]["requested_shape_buckets"]) == ("off", "auto")


def test_adapter_yields_the_bucketed_layout(served):
    from clients.reporting import episode_report
    from clients.torch import EpisodeDataset

    spec = EpisodeSpec(sources=("folder",), split="train", image_size=32)
    plain = list(EpisodeDataset(served.address, spec, count=3))
    packed = list(EpisodeDataset(served.address, spec, count=3, shape_buckets=True))
    ladder = Ladder(cap=1000)
    for item, bucketed in zip(plain, packed, strict=True):
        rows = len(item["support_images"]) + len(item["query_images"])
        assert (bucketed["support"], bucketed["query"]) == (len(item["support_images"]), len(item["query_images"]))
        assert bucketed["images"].shape == (ladder.size(rows), 32, 32, 3)
        assert bucketed["labels"].shape == (ladder.size(rows),)
        for key in ("support_images", "support_labels", "query_images", "query_labels"):
            assert torch.equal(item[key], bucketed[key]), key
        assert not bucketed["images"][rows:].any() and not bucketed["labels"][rows:].any()
        assert bucketed["query_images"].data_ptr() == bucketed["images"][bucketed["support"]:].data_ptr()  # a view
        report = episode_report("r", bucketed, bucketed["query_labels"].numpy())
        assert report.metrics["accuracy"] == 1.0 and report.fingerprint == item["fingerprint"]
    assert EpisodeDataset(served.address, spec, shape_buckets=True, bucket_ratio=1.0625).ladder == Ladder(1.0625, 8, 1000)
