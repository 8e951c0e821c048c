"""One training step of the torch trainer at bucket sizes, eager against compiled.

For each backbone:side, the bucketed step (uint8 images -> embedding -> prototype head ->
cross-entropy -> backward -> fused Adam; bf16 autocast, channels_last on CUDA) at a few
bucket sizes with 94% valid rows, timed after warm-up: eager (``valid_rows``), compiled
with a dynamic row dimension (one graph), and compiled per static shape; plus the
unpadded eager step at the valid rows. The batch norms are the trainer's default, md (the
support's moments; half the valid rows are the support). Prints ms per step and each
compilation's cost (the first step). With ``TORCHINDUCTOR_CACHE_DIR`` set, a second run finds
inductor's and AOTAutograd's caches warm: its first steps show what a cached shape costs.
Run: ``.venv/bin/python bench/compile_probe.py [--models conv4:84 resnet18:126]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from clients.torch.backbones import named_preprocessing, to_model_input  # noqa: E402
from clients.torch.compiled import CompiledEmbedding  # noqa: E402
from clients.torch.models import ProtoNet, build_backbone, episode_norm  # noqa: E402


def measure(mode: str, backbone: str, size: int, buckets: list[int], steps: int, device: torch.device) -> list:
    torch.manual_seed(0)
    net = ProtoNet(build_backbone(backbone, size)).to(device).to(memory_format=torch.channels_last)
    net.train()
    scaling = named_preprocessing(size)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3, fused=device.type == "cuda")
    embed = None
    if mode.startswith("compiled"):
        embed = CompiledEmbedding(net.backbone, scaling, device, dynamic=mode == "compiled-dynamic")
    rows_out = []
    for bucket in buckets:
        valid = bucket * 94 // 100
        rows = valid if mode == "eager-unpadded" else bucket
        ways = 20
        support = valid // 2
        query = valid - support
        images = torch.randint(0, 256, (rows, size, size, 3), dtype=torch.uint8, device=device)
        labels = (torch.arange(rows, device=device) % ways)

        def step() -> None:
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                if embed is not None:
                    embedded = embed(images, support, query)
                else:
                    with episode_norm(net.backbone, "md", support, query):
                        embedded = net.backbone(to_model_input(images, scaling, device))
                logits, query_labels = net.packed_logits(embedded, labels, support, query, ways)
            loss = F.cross_entropy(logits, query_labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

        started = time.perf_counter()
        step()
        torch.cuda.synchronize()
        first = time.perf_counter() - started
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        rows_out.append((bucket, rows, first, (time.perf_counter() - started) / steps * 1e3))
    return rows_out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["conv4:84", "resnet18:126"])
    parser.add_argument("--buckets", nargs="+", type=int, default=[608, 456, 304])
    parser.add_argument("--modes", nargs="+", default=["eager", "eager-unpadded", "compiled-dynamic",
                                                        "compiled-static"])
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    device = torch.device("cuda")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    for model in args.models:
        backbone, _, size = model.partition(":")
        for mode in args.modes:
            for bucket, rows, first, ms in measure(mode, backbone, int(size), args.buckets, args.steps, device):
                print(f"{backbone} {size}px {mode:16} bucket {bucket:4} ({rows} rows fed): first step {first:6.2f} s, "
                      f"then {ms:7.2f} ms/step", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
