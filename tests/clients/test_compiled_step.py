"""The compiled embedding step (``--compile``) is exact: a padded step through
``CompiledEmbedding`` has the loss, gradients and batch-norm statistics of the unpadded
eager step (the tolerances of ``test_shape_buckets_torch``), one compilation serves
every bucket and row count, and the trainer records what it compiled.

On CPU the exactness tests trace with dynamo and AOTAutograd and run the traced graph
eagerly (``aot_eager``: what inductor compiles, without a minute of C++ compilation per
test); one trainer run compiles with inductor itself. On CUDA the same tests use
inductor."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
from prerequisites import needs_cuda

import torch

from torch.nn import functional as F  # noqa: E402

from clients.compile_cache import describe_cache  # noqa: E402
from clients.errors import UsageError  # noqa: E402
from clients.torch.backbones import named_preprocessing, to_model_input  # noqa: E402
from clients.torch import compile_ahead  # noqa: E402
from clients.torch.compiled import CompiledEmbedding, resolve_compile  # noqa: E402
from clients.torch.md_train import main  # noqa: E402
from clients.torch.models import ProtoNet, build_backbone, counted_batch_norm, row_batch_norm  # noqa: E402

# float32 on CPU: conv4 (the float64 test below holds ResNet-18's compiled step to the eager one)
_FLOAT32_CASES = [pytest.param("conv4", "cpu", id="conv4-cpu"),
                  *(pytest.param(backbone, "cuda", id=f"{backbone}-cuda",
                                 marks=needs_cuda(torch.cuda.is_available())) for backbone in ("conv4", "resnet18"))]


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """A fresh dynamo cache, one thread, and float32 on CUDA in full float32 (not TF32), as on CPU.
    One thread: ``make test`` runs two test processes on two cores, and a second thread there
    spins waiting for a core (it took a conv4 step 3 to 7 times the CPU time of one thread)."""
    torch._dynamo.reset()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved
    torch.set_num_threads(threads)
    torch._dynamo.reset()


@pytest.mark.parametrize("momentum", [0.1, None])
def test_counted_batch_norm_equals_row_batch_norm(momentum):
    """The compiled path's formula against the eager path's native kernel, in float32."""
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(24, 8, 5, 5, generator=generator)
    weight, bias = torch.randn(8, generator=generator), torch.randn(8, generator=generator)
    results = []
    for counted in (False, True):
        xi, wi, bi = (t.clone().requires_grad_() for t in (x, weight, bias))
        mean, var = torch.zeros(8), torch.ones(8)
        factor = 0.1 if momentum is not None else torch.tensor(0.5)
        if counted:
            out = counted_batch_norm(xi, torch.tensor(17), mean, var, wi, bi, factor, 1e-5)
        else:
            out = row_batch_norm(xi, 17, mean, var, wi, bi, float(factor), 1e-5)
        (out * torch.arange(out.numel()).view_as(out).float().sin()).sum().backward()
        results.append((out.detach(), xi.grad, wi.grad, bi.grad, mean, var))
    for eager, counted in zip(*results, strict=True):
        assert torch.allclose(eager, counted, rtol=1e-5, atol=1e-5)
    assert float(results[1][0][17:].abs().max()) == 0.0 and float(results[1][1][17:].abs().max()) == 0.0


def _episode(seed: int, support: int, query: int, ways: int, size: int) -> tuple[torch.Tensor, ...]:
    """Smooth images (4 x 4 random colours upsampled), as photographs are: per-pixel noise
    makes a random ResNet-18 so sensitive that a 1e-6 relative change of one batch norm's
    output moves its gradients by 6e-3, in the eager step alone."""
    generator = torch.Generator().manual_seed(seed)
    coarse = torch.rand((support + query, 3, 4, 4), generator=generator) * 255
    images = F.interpolate(coarse, size=(size, size), mode="bilinear", align_corners=False)
    images = images.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).contiguous()
    labels = torch.cat([torch.arange(support) % ways, torch.randint(0, ways, (query,), generator=generator)])
    return images, labels


def _relative_gradient_error(a: torch.nn.Module, b: torch.nn.Module) -> float:
    return max(float((p.grad - q.grad).norm() / p.grad.norm().clamp_min(1e-12))
               for p, q in zip(a.parameters(), b.parameters(), strict=True))


class _Float64(torch.nn.Module):
    """The backbone in float64 behind the float32 input conversion: rounding out of the way."""

    def __init__(self, backbone: torch.nn.Module) -> None:
        super().__init__()
        self.backbone = backbone.double()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.backbone(x.double())


EPISODES = [(13, 15, 5, 40), (7, 9, 3, 24), (20, 30, 6, 56)]  # support, query, ways, bucket rows
EPISODES_BY_BACKBONE = {"conv4": EPISODES, "resnet18": EPISODES[:2]}  # two row counts suffice for the slow net


def _compare_steps(backbone: str, device: str, float64: bool, temperature: float, tolerance: float,
                   size: int = 32, gradient_tolerance: float | None = None) -> None:
    """Each episode: the unpadded eager step against the padded compiled step (fresh
    gradients, the same weights); then one compilation for all of them."""
    where = torch.device(device)
    torch.manual_seed(0)
    reference = ProtoNet(build_backbone(backbone, size)).to(where)
    if float64:
        reference.backbone = _Float64(reference.backbone)
    compiled_net = copy.deepcopy(reference)
    scaling = named_preprocessing(size)
    embedding = CompiledEmbedding(compiled_net.backbone, scaling, where,
                                  backend="inductor" if device == "cuda" else "aot_eager")
    reference.train()
    compiled_net.train()
    for seed, (support, query, ways, rows) in enumerate(EPISODES_BY_BACKBONE[backbone]):
        images, labels = (t.to(where) for t in _episode(seed, support, query, ways, size))
        logits = reference(to_model_input(images[:support], scaling, where), labels[:support],
                           to_model_input(images[support:], scaling, where), ways)
        loss = F.cross_entropy(logits / temperature, labels[support:])
        loss.backward()
        padded = torch.zeros((rows, size, size, 3), dtype=torch.uint8, device=where)
        padded[:support + query] = images
        padded_labels = torch.zeros(rows, dtype=torch.int64, device=where)
        padded_labels[:support + query] = labels
        embedded = embedding(padded, support, query)
        compiled_logits, query_labels = compiled_net.packed_logits(embedded, padded_labels, support, query, ways)
        compiled_loss = F.cross_entropy(compiled_logits / temperature, query_labels)
        compiled_loss.backward()
        assert float(compiled_loss) == pytest.approx(float(loss), rel=tolerance)
        assert _relative_gradient_error(reference, compiled_net) < (gradient_tolerance or tolerance)
        assert float(embedded[support + query:].abs().max()) == 0.0  # padding rows: zero embeddings
        for (name, buffer), (_, other) in zip(reference.named_buffers(), compiled_net.named_buffers(), strict=True):
            assert torch.allclose(buffer.double(), other.double(), rtol=1e-5, atol=1e-6), name  # running statistics
        reference.zero_grad()
        compiled_net.zero_grad()
    assert embedding.graphs == 1  # one graph for every row count (40, 24 and, for conv4, 56) and every count


@pytest.mark.parametrize(("backbone", "device"), _FLOAT32_CASES)
def test_compiled_padded_step_equals_unpadded_eager_step(backbone: str, device: str):
    """float32: the loss within 2e-5 (2e-4 on CUDA, where inductor generates its own
    reductions), the gradients within 5e-2 relative. Why so loose for gradients: under MD's
    batch norm the support's moments normalise the query, so every row's gradient reaches the
    whole channel through them, and a ReLU whose input lies within float32 rounding of 0 can
    switch between the two paths' summation orders (the eager one takes its moments with
    ``var_mean``, which on CPU accumulates in float64; the compiled one sums masked rows in
    float32): measured 1.1e-3 (conv4) and 2.3e-2 (ResNet-18) on these episodes, 2e-6 where
    nothing switches. That the padded compiled step IS the unpadded eager step is
    ``..._is_exact_in_float64``'s (1e-9; measured 4e-14). The logits are divided by 100 first:
    at random initialisation they lie hundreds apart and the saturated softmax would turn
    float32 rounding into gradient differences of its own."""
    _compare_steps(backbone, device, float64=False, temperature=100.0, tolerance=2e-5 if device == "cpu" else 2e-4,
                   gradient_tolerance=5e-2)


@pytest.mark.parametrize("backbone", ["conv4", "resnet18"])
def test_compiled_padded_step_is_exact_in_float64(backbone: str):
    """The trainer's own loss, rounding out of the way: the compiled padded step is the
    unpadded eager step to 1e-9."""
    _compare_steps(backbone, "cpu", float64=True, temperature=1.0, tolerance=1e-9, size=16)  # float64: slow on CPU


def test_preloading_the_cached_shapes_leaves_the_backbone_as_it_was():
    """``CompiledEmbedding.preload`` runs each shape once, forward and backward, before
    training: afterwards the backbone's running statistics, step counters and gradients are
    what they were, each shape is taken compiled (no new graph at its first real step), and
    the next step's loss and gradients equal those of an embedding that loaded nothing."""
    from clients.torch.layers import adopt_batch_norms

    size, where = 32, torch.device("cpu")
    torch.manual_seed(0)
    nets = [ProtoNet(build_backbone("conv4", size)) for _ in range(2)]
    nets[1].load_state_dict(nets[0].state_dict())
    scaling = named_preprocessing(size)
    embeddings = []
    for net in nets:
        adopt_batch_norms(net.backbone, "md")
        net.train()
        embeddings.append(CompiledEmbedding(net.backbone, scaling, where, backend="aot_eager", dynamic=False,
                                            batch_norm="md"))
    before = {name: value.clone() for name, value in nets[0].state_dict().items()}
    seconds = embeddings[0].preload([40, 24], size, lambda: torch.autocast("cpu", enabled=False))
    assert seconds > 0 and embeddings[0].graphs == 2 and embeddings[0].compiled_rows == {24, 40}
    after = nets[0].state_dict()
    assert all(torch.equal(before[name], after[name]) for name in before)  # num_batches_tracked included
    assert all(p.grad is None for p in nets[0].parameters())
    assert embeddings[0].preload([40, 24], size, lambda: torch.autocast("cpu", enabled=False)) == 0.0
    for seed, (support, query, ways, rows) in enumerate(EPISODES[:2]):
        losses = []
        for net, embedding in zip(nets, embeddings, strict=True):
            images, labels = _episode(seed, support, query, ways, size)
            padded = torch.zeros((rows, size, size, 3), dtype=torch.uint8)
            padded[:support + query] = images
            padded_labels = torch.zeros(rows, dtype=torch.int64)
            padded_labels[:support + query] = labels
            logits, query_labels = net.packed_logits(embedding(padded, support, query), padded_labels, support,
                                                     query, ways)
            loss = F.cross_entropy(logits, query_labels)
            loss.backward()
            losses.append(float(loss.detach()))
        assert losses[0] == losses[1]
        assert _relative_gradient_error(nets[0], nets[1]) == 0.0
        for (name, buffer), (_, other) in zip(nets[0].named_buffers(), nets[1].named_buffers(), strict=True):
            assert torch.equal(buffer, other), name
        for net in nets:
            net.zero_grad()
    assert embeddings[0].graphs == 2  # the real steps of the preloaded shapes traced nothing new


def test_compile_setting_resolution():
    conv4 = build_backbone("conv4", 32)
    assert resolve_compile("on", "conv4", conv4) is True
    assert resolve_compile("off", "conv4", conv4) is False
    assert resolve_compile("on", "my.module:factory", conv4) is True
    assert resolve_compile("off", "model.pt", lambda x: x) is False
    with pytest.raises(UsageError, match="not an nn.Module"):
        resolve_compile("on", "model.pt", lambda x: x)
    with pytest.raises(UsageError, match="expected one of auto, on, off"):
        resolve_compile("yes", "conv4", conv4)
    # auto: where the compiled step measured faster, ours on CUDA without an inner loop
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert resolve_compile("auto", "conv4", conv4, cuda) is True
    assert resolve_compile("auto", "resnet18", conv4, cuda) is True
    assert resolve_compile("auto", "conv4", conv4, cpu) is False
    assert resolve_compile("auto", "conv4", conv4, cuda, inner_loop=True) is False
    assert resolve_compile("auto", "my.module:factory", conv4, cuda) is False
    assert resolve_compile("auto", "model.pt", lambda x: x, cuda) is False


def _run(served, tmp_path: Path, run_id: str, *extra: str) -> dict:
    summary = tmp_path / f"{run_id}.json"
    assert main(["--server", served.address, "--run", run_id, "--sources", "folder", "--image-size", "32",
                 "--train-episodes", "3", "--eval-episodes", "2", "--log-every", "1", "--seed", "5",
                 "--shape-buckets", "on", "--threads", "1", "--json-summary", str(summary), *extra]) == 0
    return json.loads(summary.read_text())


@pytest.mark.slow
def test_compiled_runs_follow_the_eager_curve_and_the_second_compiles_nothing(served, tmp_path, capfd, monkeypatch):
    """The trainer with ``--compile on`` (inductor's C++ on CPU; ``tiny``, whose graph
    compiles in seconds) and a fresh ``--compile-cache``: the first run trains each new shape
    eager while the background process compiles it, and compiles nothing itself; a second run
    of the same command says on its first line how many shapes the cache holds, loads each
    of them (cache hits), runs no step eager and compiles nothing, with the first run's
    per-episode losses (its steps eager) within float tolerance."""
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "1")  # no compile workers competing with the other tests
    # scalar C++ kernels, in the child (its environment) and here (the config, read by the cache
    # keys): the vectorised headers took half of the child's compiling, which checks nothing here
    monkeypatch.setenv("TORCHINDUCTOR_VEC_ISA_OK", "0")
    monkeypatch.setattr(torch._inductor.config.cpp, "vec_isa_ok", False)
    # the first run's end waits for the child however busy the host (the suite's two workers once
    # kept it past the default minute, and the second run found one shape of two)
    monkeypatch.setattr(compile_ahead, "CLOSE_SECONDS", 600.0)
    cache = tmp_path / "compile-cache"
    first = _run(served, tmp_path, "torch-compile-1", "--compile", "on", "--backbone", "tiny",
                 "--compile-cache", str(cache))
    assert "compile on (0 bucket shapes compiled before, in " in capfd.readouterr().err
    second = _run(served, tmp_path, "torch-compile-2", "--compile", "on", "--backbone", "tiny",
                  "--compile-cache", str(cache))
    shapes = second["train"]["distinct_shapes"]
    first_line = capfd.readouterr().err.splitlines()[0]
    assert shapes >= 2 and f"compile on ({describe_cache(shapes, cache)})" in first_line, first_line
    eager, loaded = first["train"]["compile_cache"], second["train"]["compile_cache"]
    assert eager["shapes_cached_at_start"] == 0 and eager["eager_steps"] >= 1 and eager["misses"] == 0
    assert loaded["shapes_cached_at_start"] == loaded["shapes_compiled_here"] == shapes
    assert loaded["eager_steps"] == 0 and loaded["misses"] == 0 and loaded["hits"] >= shapes
    assert eager["preload_seconds"] == 0 and loaded["preload_seconds"] > 0  # loaded at the first step
    assert second["train"]["compiled_graphs"] == shapes
    curve_eager, curve_compiled = np.array(first["train"]["curve"]), np.array(second["train"]["curve"])
    assert curve_eager.shape == curve_compiled.shape == (3, 3)
    assert np.allclose(curve_compiled[:, 1], curve_eager[:, 1], rtol=1e-3, atol=1e-4), (curve_eager, curve_compiled)
    assert first["config"]["compile"] == second["config"]["compile"] == "on"
    assert second["eval"]["folder"]["mean_accuracy"] == pytest.approx(first["eval"]["folder"]["mean_accuracy"])
