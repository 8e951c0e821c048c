"""What a padded batch costs in the row-counting batch norm: one training step of a backbone.

For each backbone (conv4 at 84 px, ResNet-18 at 126 px by default) it times one
forward + backward + SGD step (bf16 autocast and channels_last on CUDA, as the trainer
runs them) in three modes, interleaved over ``--rounds`` rounds (median reported):
- ``plain``: the unpadded batch of ``--rows`` rows, ``nn.BatchNorm2d`` as is;
- ``cat``: the batch padded to ``--bucket`` rows, the batch norms counting the first
  ``--rows`` (the former ``RowBatchNorm2d``: batch norm of ``x[:rows]``, then
  ``torch.cat`` with zeros; kept here as the reference);
- ``row``: the same padded batch through today's ``RowBatchNorm2d`` (the valid rows'
  batch norm written straight into the padded output);
- ``md``: the same padded batch as one episode under ``--batch-norm md`` (the first half
  of the valid rows the support set, whose moments normalise the support and the query),
  the eager trainer's step (int row counts: slices and native kernels);
- ``md-masked``: the same under row counts held as tensors (masked reductions: the
  compiled step's form).
It first checks on the device that ``row`` and ``cat`` agree, and ``md`` and ``md-masked``
(loss, gradients, running statistics; cuDNN deterministic for that check) and says which
batch-norm backend PyTorch picks for the plain step. Last line per backbone:
``<backbone> <px>px: cat/plain X, row/plain Y (padding adds Z% rows)`` (target for
``row``: within about 1.10).

On a GPU: ``.venv/bin/python bench/bn_bench.py`` (``--profile`` adds each mode's top
CUDA kernels). CPU smoke run: ``.venv/bin/python bench/bn_bench.py --device cpu
--models conv4:32 --rows 20 --bucket 24 --warmup 1 --steps 2 --rounds 1``.
Dependencies: torch and this repository.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from clients.torch.models import RowBatchNorm2d, build_backbone, episode_norm, valid_rows  # noqa: E402

MODES = ("plain", "cat", "row", "md", "md-masked")


def cat_forward(self: RowBatchNorm2d, x: torch.Tensor) -> torch.Tensor:
    """The reference: batch norm of the valid rows, then a full copy to re-attach zeros."""
    rows = self.valid_rows
    if rows is None or not self.training or rows >= x.shape[0]:
        return nn.BatchNorm2d.forward(self, x)
    valid = nn.BatchNorm2d.forward(self, x[:rows])
    return torch.cat([valid, torch.zeros_like(x[rows:], dtype=valid.dtype)], 0)


def use_cat(net: nn.Module) -> nn.Module:
    for module in net.modules():
        if isinstance(module, RowBatchNorm2d):
            module.forward = cat_forward.__get__(module)
    return net


class Setup:
    """One backbone, its input and the step of each mode."""

    def __init__(self, args: argparse.Namespace, name: str, px: int) -> None:
        self.args, self.name, self.px = args, name, px
        self.device = torch.device(args.device)
        self.memory_format = torch.channels_last if args.memory_format == "channels_last" else torch.contiguous_format
        self.autocast = args.dtype == "bf16"
        generator = torch.Generator().manual_seed(0)
        images = torch.rand(args.bucket, 3, px, px, generator=generator) * 2 - 1
        images[args.rows:] = -1.0  # padding rows: black images, as the stager pads them
        self.padded = images.to(self.device).contiguous(memory_format=self.memory_format)
        self.unpadded = self.padded[:args.rows].contiguous(memory_format=self.memory_format)
        torch.manual_seed(0)
        self.base = build_backbone(name, px).to(self.device).to(memory_format=self.memory_format)

    def net(self, mode: str) -> nn.Module:
        net = copy.deepcopy(self.base)
        return use_cat(net) if mode == "cat" else net

    def step(self, mode: str, net: nn.Module, optimizer: torch.optim.Optimizer | None) -> torch.Tensor:
        rows = self.args.rows
        x = self.unpadded if mode == "plain" else self.padded
        support = rows // 2
        counts = ((support, rows - support) if mode == "md" else
                  tuple(torch.tensor(n, device=self.device) for n in (support, rows - support)))
        rows_set = (episode_norm(net, "md", *counts) if mode.startswith("md")
                    else valid_rows(net, None if mode == "plain" else rows))
        with rows_set, torch.autocast(self.device.type, torch.bfloat16, enabled=self.autocast):
            out = net(x)[:rows].float()
        loss = out.pow(2).mean()
        if optimizer is not None:
            optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if optimizer is not None:
            optimizer.step()
        return loss.detach()

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def check(self, first: str = "cat", second: str = "row", gradient_tolerance: float = 1e-3,
              buffer_tolerance: float = 1e-5) -> str:
        """``second`` against ``first`` on this device: one step from the same weights."""
        deterministic = torch.backends.cudnn.deterministic
        torch.backends.cudnn.deterministic = True
        try:
            nets = {mode: self.net(mode) for mode in (first, second)}
            losses = {mode: float(self.step(mode, net, None)) for mode, net in nets.items()}
        finally:
            torch.backends.cudnn.deterministic = deterministic
        cat, row = nets[first], nets[second]
        gradient = max(float((p.grad - q.grad).norm() / p.grad.norm().clamp_min(1e-12))
                       for p, q in zip(cat.parameters(), row.parameters(), strict=True))
        buffers = max(float((a.double() - b.double()).abs().max())
                      for a, b in zip(cat.buffers(), row.buffers(), strict=True))
        loss = abs(losses[first] - losses[second]) / max(abs(losses[first]), 1e-12)
        ok = loss < 1e-3 and gradient < gradient_tolerance and buffers < buffer_tolerance
        return (f"check {second} vs {first}: loss rel {loss:.2e}, gradients rel {gradient:.2e}, "
                f"buffers abs {buffers:.2e}: {'ok' if ok else 'MISMATCH'}")

    def backend(self) -> str:
        """The backend ``F.batch_norm`` picks for the first batch norm of the plain step."""
        norm = next(m for m in self.base.modules() if isinstance(m, RowBatchNorm2d))
        dtype = torch.bfloat16 if self.autocast else torch.float32
        probe = torch.empty(self.args.rows, norm.num_features, 4, 4, device=self.device, dtype=dtype)
        probe = probe.contiguous(memory_format=self.memory_format)
        select = getattr(torch._C, "_select_batch_norm_backend", None)
        if select is None:
            return "unknown (torch._C._select_batch_norm_backend missing)"
        return str(select(probe, norm.weight, norm.bias, norm.running_mean, norm.running_var, True, norm.eps))

    def time(self, mode: str, net: nn.Module, optimizer: torch.optim.Optimizer) -> float:
        for _ in range(self.args.warmup):
            self.step(mode, net, optimizer)
        self.sync()
        start = time.perf_counter()
        for _ in range(self.args.steps):
            self.step(mode, net, optimizer)
        self.sync()
        return (time.perf_counter() - start) / self.args.steps

    def profile(self, mode: str, net: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        from torch.profiler import ProfilerActivity, profile
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device.type == "cuda" else [])
        with profile(activities=activities) as prof:
            self.step(mode, net, optimizer)
            self.sync()
        key = "self_device_time_total" if self.device.type == "cuda" else "self_cpu_time_total"
        print(f"  {mode} top kernels:\n" + prof.key_averages().table(sort_by=key, row_limit=self.args.profile),
              flush=True)


def run(args: argparse.Namespace, name: str, px: int, report: Callable[[str], None]) -> None:
    setup = Setup(args, name, px)
    report(f"{name} {px}px: rows {args.rows}, bucket {args.bucket}, {args.dtype}, {args.memory_format}, "
           f"device {torch.cuda.get_device_name() if setup.device.type == 'cuda' else 'cpu'}; "
           f"plain batch norm backend: {setup.backend()}")
    report("  " + setup.check())
    # the two md forms round in other places under bf16: on an H200 each is as far from the float32
    # step as the other (bench/md_bn_precision.py), and 0.25 apart from each other for ResNet-18
    # and their running statistics, moved by bf16 activations, 2.2e-4 apart at ResNet-18's deepest layers
    report("  " + setup.check("md-masked", "md", gradient_tolerance=1.0 if setup.autocast else 1e-3,
                              buffer_tolerance=1e-3 if setup.autocast else 1e-5))
    nets = {mode: setup.net(mode) for mode in MODES}
    optimizers = {mode: torch.optim.SGD(net.parameters(), lr=0.01) for mode, net in nets.items()}
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    for _ in range(args.rounds):
        for mode in MODES:
            times[mode].append(setup.time(mode, nets[mode], optimizers[mode]))
    median = {mode: statistics.median(values) for mode, values in times.items()}
    for mode in MODES:
        batch = args.rows if mode == "plain" else args.bucket
        report(f"  {mode:5s} batch {batch}: {median[mode] * 1000:.2f} ms/step, {1 / median[mode]:.1f} steps/s "
               f"(rounds: {', '.join(f'{t * 1000:.2f}' for t in times[mode])})")
    if args.profile:
        for mode in MODES:
            setup.profile(mode, nets[mode], optimizers[mode])
    extra = 100.0 * (args.bucket - args.rows) / args.rows
    report(f"{name} {px}px: cat/plain {median['cat'] / median['plain']:.3f}, "
           f"row/plain {median['row'] / median['plain']:.3f}, md/row {median['md'] / median['row']:.3f}, "
           f"md-masked/row {median['md-masked'] / median['row']:.3f} (padding adds {extra:.1f}% rows)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--models", default="conv4:84,resnet18:126", help="backbone:px pairs, comma-separated")
    parser.add_argument("--rows", type=int, default=574, help="valid rows (default 574, the MD mean)")
    parser.add_argument("--bucket", type=int, default=608, help="padded batch (default 608)")
    parser.add_argument("--dtype", choices=("bf16", "fp32"), default=None,
                        help="bf16 autocast (default on cuda) or fp32 (default on cpu)")
    parser.add_argument("--memory-format", choices=("channels_last", "contiguous"), default=None,
                        help="default: channels_last on cuda, contiguous on cpu (as clients.torch.backbones.to_model_input)")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=40, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the median is reported")
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="print each mode's top N kernels")
    args = parser.parse_args()
    if args.device not in ("cuda", "cpu"):
        parser.error(f"--device: got {args.device!r}, expected cuda or cpu")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device: got cuda, but torch sees no CUDA device (use --device cpu)")
    if not 2 <= args.rows <= args.bucket:
        parser.error(f"--rows/--bucket: got {args.rows}/{args.bucket}, expected 2 <= rows <= bucket")
    for flag, value in (("--steps", args.steps), ("--rounds", args.rounds)):
        if value < 1:
            parser.error(f"{flag}: got {value}, expected at least 1")
    if args.warmup < 0 or args.profile < 0:
        parser.error(f"--warmup/--profile: got {args.warmup}/{args.profile}, expected at least 0")
    args.dtype = args.dtype or ("bf16" if args.device == "cuda" else "fp32")
    args.memory_format = args.memory_format or ("channels_last" if args.device == "cuda" else "contiguous")
    pairs = []
    for item in args.models.split(","):
        name, _, px = item.partition(":")
        if name not in ("conv4", "resnet18") or not px.isdigit():
            parser.error(f"--models: got {item!r}, expected backbone:px with backbone conv4 or resnet18")
        pairs.append((name, int(px)))
    for name, px in pairs:
        run(args, name, px, lambda line: print(line, flush=True))


if __name__ == "__main__":
    main()
