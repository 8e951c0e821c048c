"""How far each eager form of Meta-Dataset's episode batch norm is from float32, under bf16.

For conv4 at 84 px and ResNet-18 at 126 px, one padded bucket (608 rows, 287 support and
287 query, as ``bench/bn_bench.py``), the loss and every parameter's gradient of one step
under ``--batch-norm md`` with bf16 autocast, in the two forms the trainer has: ``md`` (int
row counts: ``_SupportMomentsNorm``, native kernels on slices) and ``md-masked`` (row counts
as tensors: masked float32 reductions, the compiled step's form), each against the same
step in float32 without autocast. Also float32 masked against float32 sliced (their sums run
in another order only). Prints the loss's relative error and the largest and median
relative gradient error over the parameters.

On a GPU: ``.venv/bin/python bench/md_bn_precision.py``; CPU smoke run (float32 only, both
forms against each other): ``.venv/bin/python bench/md_bn_precision.py --device cpu --models conv4:32``.
Dependencies: torch and this repository.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from clients.torch.models import build_backbone, episode_norm  # noqa: E402

ROWS, BUCKET = 574, 608


def step(base: torch.nn.Module, x: torch.Tensor, form: str, bf16: bool) -> tuple[float, list[torch.Tensor]]:
    net = copy.deepcopy(base)
    support, query = ROWS // 2, ROWS - ROWS // 2
    counts = (support, query) if form == "md" else tuple(torch.tensor(n, device=x.device) for n in (support, query))
    with episode_norm(net, "md", *counts), torch.autocast(x.device.type, torch.bfloat16, enabled=bf16):
        out = net(x)[:ROWS].float()
    loss = out.pow(2).mean()
    loss.backward()
    return float(loss.detach()), [p.grad.float().clone() for p in net.parameters()]


def errors(got: list[torch.Tensor], want: list[torch.Tensor]) -> tuple[float, float]:
    values = sorted(float((a - b).norm() / b.norm().clamp_min(1e-12)) for a, b in zip(got, want, strict=True))
    return values[-1], values[len(values) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--models", nargs="+", default=["conv4:84", "resnet18:126"], metavar="BACKBONE:PX")
    args = parser.parse_args()
    device = torch.device(args.device)
    for model in args.models:
        name, _, px = model.partition(":")
        torch.manual_seed(0)
        base = build_backbone(name, int(px)).to(device)
        generator = torch.Generator().manual_seed(0)
        x = torch.rand(BUCKET, 3, int(px), int(px), generator=generator) * 2 - 1
        x[ROWS:] = -1.0
        memory = torch.channels_last if device.type == "cuda" else torch.contiguous_format
        base, x = base.to(memory_format=memory), x.to(device).contiguous(memory_format=memory)
        reference_loss, reference = step(base, x, "md", False)
        masked_loss, masked = step(base, x, "md-masked", False)
        worst, median = errors(masked, reference)
        print(f"{model} float32 md-masked vs float32 md: loss rel {abs(masked_loss - reference_loss) / reference_loss:.2e}, "
              f"gradients rel max {worst:.2e}, median {median:.2e}", flush=True)
        if device.type != "cuda":
            continue
        for form in ("md", "md-masked"):
            loss, gradients = step(base, x, form, True)
            worst, median = errors(gradients, reference)
            print(f"{model} bf16 {form} vs float32: loss rel {abs(loss - reference_loss) / reference_loss:.2e}, "
                  f"gradients rel max {worst:.2e}, median {median:.2e}", flush=True)


if __name__ == "__main__":
    main()
