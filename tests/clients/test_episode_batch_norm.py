"""Meta-Dataset's episode batch norm in the PyTorch trainer (``--batch-norm md``, the
default; ``clients.batch_norm``): the support set's moments normalise the support and the
query, the gradient flows through them, and running statistics are never read, in training
and in evaluation alike; ``transductive`` normalises each set by its own moments.

Checked against ``md_batch_norm_reference`` (the reference's computation in NumPy float64,
unpadded, one set at a time) for conv4 and ResNet-18 in the bucketed layout (support, query,
padding), and end to end on a fixture store: a checkpoint whose running statistics are
poisoned evaluates exactly as the clean one."""

from __future__ import annotations

import json

import numpy as np
import pytest
from md_batch_norm_reference import episode_embeddings

import torch
from prerequisites import needs_cuda
from torch import nn

from clients.torch.backbones import named_preprocessing, to_model_input  # noqa: E402
from clients.torch.md_train import CHECKPOINT, main  # noqa: E402
from clients.torch.layers import EpisodeRows, episode_batch_norm  # noqa: E402
from clients.torch.models import ProtoNet, RowBatchNorm2d, adopt_batch_norms, build_backbone, episode_norm  # noqa: E402

DEVICES = [pytest.param("cpu", id="cpu"),
           pytest.param("cuda", id="cuda", marks=needs_cuda(torch.cuda.is_available()))]

SUPPORT, QUERY, ROWS = 7, 5, 16  # a bucket of 16 rows: 4 of padding


def _images(seed: int, rows: int, size: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (rows, size, size, 3), generator=generator, dtype=torch.uint8)


def _float64_net(backbone: str, size: int, mode: str) -> ProtoNet:
    torch.manual_seed(3)
    net = ProtoNet(build_backbone(backbone, size), mode).double()
    with torch.no_grad():  # batch-norm affine parameters away from 1 and 0, so they are exercised
        for module in net.modules():
            if isinstance(module, RowBatchNorm2d):
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.5, 0.5)
    return net


def _padded_input(images: torch.Tensor, size: int) -> torch.Tensor:
    padded = torch.zeros((ROWS, size, size, 3), dtype=torch.uint8)
    padded[:len(images)] = images
    return to_model_input(padded, named_preprocessing(size), torch.device("cpu")).double()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("mode", ["md", "transductive"])
@pytest.mark.parametrize(("backbone", "size"), [("conv4", 16), ("resnet18", 16)])
def test_padded_episode_embeddings_equal_the_references_unpadded_passes(backbone, size, mode, training, device):
    net = _float64_net(backbone, size, mode)
    net.train(training)
    weights = {name: value.numpy().copy() for name, value in net.backbone.state_dict().items()}
    images = _images(1, SUPPORT + QUERY, size)
    x = _padded_input(images, size)
    net.to(device)
    with torch.no_grad(), episode_norm(net.backbone, mode, SUPPORT, QUERY):
        embedded = net.backbone(x.to(device)).cpu().numpy()
    support, query, _ = episode_embeddings(backbone, weights, x[:SUPPORT].numpy(), x[SUPPORT:SUPPORT + QUERY].numpy(),
                                           mode)
    assert np.allclose(embedded[:SUPPORT], support, rtol=1e-10, atol=1e-10)
    assert np.allclose(embedded[SUPPORT:SUPPORT + QUERY], query, rtol=1e-10, atol=1e-10)
    assert not embedded[SUPPORT + QUERY:].any()  # padding rows: zeros


def _layer_pass(x: torch.Tensor, mode: str, support: int, query: int, momentum: float | None,
                device: str) -> dict[str, torch.Tensor]:
    """One episode batch norm's output, input and parameter gradients and updated running
    statistics for a fixed upstream gradient, computed on ``device`` and returned on the CPU."""
    generator = torch.Generator().manual_seed(11)
    channels = x.shape[1]
    weight = (torch.rand(channels, generator=generator, dtype=torch.float64) + 0.5).to(device).requires_grad_()
    bias = torch.randn(channels, generator=generator, dtype=torch.float64).to(device).requires_grad_()
    running_mean = torch.randn(channels, generator=generator, dtype=torch.float64).to(device)
    running_var = (torch.rand(channels, generator=generator, dtype=torch.float64) + 1).to(device)
    upstream = torch.randn(x.shape, generator=generator, dtype=torch.float64).to(device)
    x = x.detach().clone().to(device).requires_grad_()
    factor = 0.1 if momentum is not None else torch.tensor(0.25, dtype=torch.float64, device=device)
    out = episode_batch_norm(x, EpisodeRows(mode, support, query), weight, bias, 1e-5,
                             (running_mean, running_var, factor))
    out.backward(upstream)
    return {name: value.detach().cpu() for name, value in (("out", out), ("x", x.grad), ("weight", weight.grad),
                                                           ("bias", bias.grad), ("running mean", running_mean),
                                                           ("running var", running_var))}


@needs_cuda(torch.cuda.is_available())
@pytest.mark.parametrize("momentum", [0.1, None], ids=["momentum", "cumulative"])
@pytest.mark.parametrize(("mode", "support", "query"), [("md", 7, 5), ("md", 12, 0), ("transductive", 7, 5),
                                                        ("transductive", 9, 0)])
@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last], ids=["nchw", "nhwc"])
def test_the_cuda_episode_batch_norm_equals_the_cpu_ones_output_gradients_and_running_statistics(
        mode, support, query, momentum, layout):
    """On CUDA the eager episode batch norm runs SyncBatchNorm's kernels (``_GroupedMomentsNorm``);
    in float64 it gives the CPU form's output, every gradient (through the support's moments
    under md) and running statistics, padding rows zero in both."""
    generator = torch.Generator().manual_seed(5)
    x = (torch.randn(ROWS, 6, 5, 5, generator=generator, dtype=torch.float64) * 3 + 1).contiguous(
        memory_format=layout)
    cpu = _layer_pass(x, mode, support, query, momentum, "cpu")
    cuda = _layer_pass(x, mode, support, query, momentum, "cuda")
    for name, expected in cpu.items():
        assert torch.allclose(cuda[name], expected, rtol=1e-9, atol=1e-10), name
    assert not cuda["out"][support + query:].any() and not cuda["x"][support + query:].any()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last], ids=["nchw", "nhwc"])
def test_an_empty_query_under_transductive_gives_finite_gradients(layout, device):
    """A support-only episode under transductive: the query has no moments, and none may reach
    the parameters' gradients (they were NaN on the CPU for channels_last input)."""
    x = torch.randn(ROWS, 6, 5, 5, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    result = _layer_pass(x.contiguous(memory_format=layout), "transductive", 9, 0, 0.1, device)
    assert all(torch.isfinite(value).all() for value in result.values())


@needs_cuda(torch.cuda.is_available())
def test_the_cuda_episode_batch_norm_in_bf16_stays_within_bf16_of_float64():
    """Under autocast the trainer feeds bf16 channels_last activations with float32 parameters:
    output and input gradient within bf16's rounding of the float64 form, the parameter
    gradients in float32, the layout kept."""
    generator = torch.Generator().manual_seed(6)
    x = torch.randn(ROWS, 8, 6, 6, generator=generator, dtype=torch.float64) * 2 + 0.5
    results = {}
    for dtype, device in ((torch.float64, "cpu"), (torch.bfloat16, "cuda")):
        inputs = x.to(device, dtype).contiguous(memory_format=torch.channels_last).requires_grad_()
        weight = torch.linspace(0.5, 1.5, 8, dtype=dtype if device == "cpu" else torch.float32, device=device)
        bias = torch.linspace(-0.5, 0.5, 8, dtype=weight.dtype, device=device)
        weight.requires_grad_()
        out = episode_batch_norm(inputs, EpisodeRows("md", SUPPORT, QUERY), weight, bias, 1e-5)
        out.float().square().sum().backward()
        results[device] = out, inputs.grad, weight.grad
    (out, grad, weight_grad), (exact, exact_grad, exact_weight_grad) = results["cuda"], results["cpu"]
    assert out.dtype == grad.dtype == torch.bfloat16 and weight_grad.dtype == torch.float32
    assert out.is_contiguous(memory_format=torch.channels_last)
    assert (out.double().cpu() - exact).abs().max() < 0.02 * exact.abs().max()
    assert (grad.double().cpu() - exact_grad).abs().max() < 0.02 * exact_grad.abs().max()
    assert (weight_grad.double().cpu() - exact_weight_grad).abs().max() < 0.02 * exact_weight_grad.abs().max()
    assert not out[SUPPORT + QUERY:].any() and not grad[SUPPORT + QUERY:].any()


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_a_query_only_change_moves_no_support_embedding_and_no_support_moment(training):
    """Under md the support's embeddings (so every moment they are made from) do not depend on
    the query; the query's embeddings do not depend on the padding."""
    net = _float64_net("conv4", 16, "md")
    net.train(training)
    images = _images(2, SUPPORT + QUERY, 16)
    changed = images.clone()
    changed[SUPPORT:] = _images(9, QUERY, 16)
    moments = []
    hooks = [norm.register_forward_hook(lambda norm, args, out: moments.append(out[:SUPPORT].clone()))
             for norm in net.modules() if isinstance(norm, RowBatchNorm2d)]
    with torch.no_grad(), episode_norm(net.backbone, "md", SUPPORT, QUERY):
        first = net.backbone(_padded_input(images, 16))
        padded = _padded_input(images, 16)
        padded[SUPPORT + QUERY:] = 1.0  # other padding
        again = net.backbone(padded)
        second = net.backbone(_padded_input(changed, 16))
    for hook in hooks:
        hook.remove()
    assert torch.equal(first[:SUPPORT], second[:SUPPORT])
    layers = len(moments) // 3
    assert all(torch.equal(a, b) for a, b in zip(moments[:layers], moments[2 * layers:], strict=True))
    assert not torch.equal(first[SUPPORT:SUPPORT + QUERY], second[SUPPORT:SUPPORT + QUERY])
    assert torch.equal(first[:SUPPORT + QUERY], again[:SUPPORT + QUERY])


@pytest.mark.parametrize("mode", ["md", "transductive"])
def test_running_statistics_are_never_read(mode):
    """NaN running statistics change nothing in training or evaluation mode."""
    clean = _float64_net("resnet18", 16, mode)
    poisoned = _float64_net("resnet18", 16, mode)
    for module in poisoned.modules():
        if isinstance(module, RowBatchNorm2d):
            module.running_mean.fill_(float("nan"))
            module.running_var.fill_(float("nan"))
    x = _padded_input(_images(4, SUPPORT + QUERY, 16), 16)
    labels = torch.arange(SUPPORT + QUERY) % 3
    for training in (True, False):
        clean.train(training)
        poisoned.train(training)
        with torch.no_grad():
            a = clean.packed(x, labels, SUPPORT, QUERY, 3)[0]
            b = poisoned.packed(x, labels, SUPPORT, QUERY, 3)[0]
        assert torch.isfinite(a).all() and torch.equal(a, b)


def test_the_gradient_flows_through_the_support_moments_under_md_only():
    """A loss of the query's embeddings alone reaches the support images through the moments
    (MD's backprop_through_moments); under transductive it does not."""
    grads = {}
    for mode in ("md", "transductive"):
        net = _float64_net("conv4", 16, mode)
        x = _padded_input(_images(5, SUPPORT + QUERY, 16), 16).requires_grad_()
        with episode_norm(net.backbone, mode, SUPPORT, QUERY):
            embedded = net.backbone(x)
        embedded[SUPPORT:SUPPORT + QUERY].square().sum().backward()
        grads[mode] = x.grad
    assert grads["md"][:SUPPORT].abs().max() > 1e-3
    assert grads["transductive"][:SUPPORT].abs().max() == 0.0
    assert grads["md"][SUPPORT + QUERY:].abs().max() == 0.0  # padding: no gradient


def test_running_mode_keeps_the_classifiers_batch_norm():
    """running: support and query normalised together in training, by the running statistics
    in evaluation (so there a query-only change leaves the support alone, and in training not)."""
    net = _float64_net("conv4", 16, "running")
    images = _images(6, SUPPORT + QUERY, 16)
    changed = images.clone()
    changed[SUPPORT:] = _images(8, QUERY, 16)
    for training, moves in ((True, True), (False, False)):
        net.train(training)
        with torch.no_grad(), episode_norm(net.backbone, "running", SUPPORT, QUERY):
            first = net.backbone(_padded_input(images, 16))
            second = net.backbone(_padded_input(changed, 16))
        assert torch.equal(first[:SUPPORT], second[:SUPPORT]) is not moves


def test_a_plain_batch_norm_is_adopted_and_another_kind_refused():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
    assert adopt_batch_norms(model, "md") == 1 and type(model[1]) is RowBatchNorm2d
    assert adopt_batch_norms(nn.Sequential(nn.BatchNorm2d(2)), "running") == 0
    with pytest.raises(ValueError, match=r"batch_norm: got md, but layer 1 is a BatchNorm1d, which cannot take an "
                                         r"episode's moments; use running"):
        adopt_batch_norms(nn.Sequential(nn.Flatten(), nn.BatchNorm1d(4)), "md")


def _run(served, directory, run_id: str, *extra: str) -> dict:
    summary = directory / f"{run_id}.json"
    assert main(["--server", served.address, "--run", run_id, "--sources", "folder", "--image-size", "16",
                 "--eval-episodes", "3", "--seed", "4", "--threads", "1", "--checkpoint-dir", str(directory / "ckpt"),
                 "--json-summary", str(summary), *extra]) == 0
    return json.loads(summary.read_text())


@pytest.mark.slow
def test_the_trainers_evaluation_reads_no_running_statistic(served, tmp_path):
    """Trained two episodes under md (the default), the checkpoint evaluates to the same
    accuracies and losses once its running statistics are NaN; the summary records the mode."""
    trained = _run(served, tmp_path, "bn-md", "--train-episodes", "2")
    assert trained["config"]["batch_norm"] == "md" and trained["config"]["batch_norm_layers"] == 4
    path = tmp_path / "ckpt" / CHECKPOINT
    state = torch.load(path, map_location="cpu")
    for name in state["backbone"]:
        if name.endswith(("running_mean", "running_var")):
            state["backbone"][name].fill_(float("nan"))
    torch.save(state, path)
    again = _run(served, tmp_path, "bn-md-poisoned", "--train-episodes", "2", "--eval-only")
    for key in ("mean_accuracy", "ci95"):
        assert again["eval"]["folder"][key] == trained["eval"]["folder"][key]
    assert np.isfinite(again["eval"]["folder"]["mean_accuracy"])
