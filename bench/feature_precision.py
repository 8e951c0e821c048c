"""bf16 against float32 feature extraction, model-side, on one device: how far the features of
``--precision bf16`` (the backbone under bf16 autocast) lie from float32's, whether a
nearest-prototype classifier on them decides the same, and the speed of each.

No pretrained weights or ImageNet images reach the GPU machine, so the network is a named
backbone of ``clients.torch.models`` with random weights whose batch-norm statistics are
set by ``--calibrate`` forward passes in training mode (so activations sit in the range a
trained network's do, not at the default mean 0 / variance 1), and the images are
``--classes`` synthetic classes: each a seeded coarse colour pattern upsampled to
``--size`` px, each image its class pattern plus its own coarse noise (structure a
random network separates, as it separates natural images' colours and layouts). Inputs
are made as ``cog`` and ``evaluate`` make them (uint8 -> [0, 1] -> ImageNet mean/std,
channels_last), and the forward runs in ``torch.inference_mode`` in each precision
(``clients.torch.backbones.autocast``, the function ``TorchFeatures`` calls).

It prints, per backbone: the per-image relative L2 error of the bf16 features against
float32 (median, 99th percentile, max) and the smallest cosine similarity; the
nearest-prototype accuracy (prototypes from the first half of each class, the second
half classified) in each precision and the share of identical decisions; images/s of
each precision (``--batch-size`` images per forward, after a warm-up pass, best of
``--rounds``) and their ratio.

Run: ``.venv/bin/python bench/feature_precision.py`` (CUDA), or with ``--device cpu
--backbones resnet18 --images 64 --size 64 --rounds 1`` as a smoke run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from clients.backbone_contract import IMAGENET_MEAN as MEAN, IMAGENET_STD as STD  # noqa: E402
from clients.torch.backbones import autocast  # noqa: E402
from clients.torch.models import build_backbone  # noqa: E402


def synthetic_classes(classes: int, per_class: int, size: int, seed: int) -> tuple[torch.Tensor, np.ndarray]:
    """uint8 NHWC images of ``classes`` coarse colour patterns, each image with its own coarse noise."""
    generator = torch.Generator().manual_seed(seed)
    patterns = torch.rand((classes, 3, 6, 6), generator=generator)
    noise = torch.rand((classes * per_class, 3, 6, 6), generator=generator)
    labels = np.repeat(np.arange(classes), per_class)
    coarse = 0.7 * patterns[torch.from_numpy(labels)] + 0.3 * noise
    images = F.interpolate(coarse * 255, size=(size, size), mode="bilinear", align_corners=False)
    return images.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).contiguous(), labels


def model_input(images: torch.Tensor, device: torch.device) -> torch.Tensor:
    """uint8 NHWC -> float NCHW (channels_last) on ``device``, /255 and ImageNet mean/std, as ``cog`` feeds it."""
    x = images.to(device, non_blocking=True).permute(0, 3, 1, 2).float().div(255.0)
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1)
    return ((x - mean) / std).contiguous(memory_format=torch.channels_last)


def features(model: torch.nn.Module, images: torch.Tensor, device: torch.device, precision: str,
             batch_size: int) -> torch.Tensor:
    out = []
    with torch.inference_mode(), autocast(device, precision):
        for start in range(0, len(images), batch_size):
            out.append(model(model_input(images[start:start + batch_size], device)).float())
    return torch.cat(out)


def images_per_second(model: torch.nn.Module, images: torch.Tensor, device: torch.device, precision: str,
                      batch_size: int, rounds: int) -> float:
    resident = images.to(device)
    features(model, resident[:batch_size], device, precision, batch_size)  # warm-up: kernels chosen
    best = 0.0
    for _ in range(rounds):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        began = time.perf_counter()
        features(model, resident, device, precision, batch_size)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = max(best, len(images) / (time.perf_counter() - began))
    return best


def nearest_prototype(embedded: torch.Tensor, labels: np.ndarray, per_class: int) -> np.ndarray:
    """Predictions for each class's second half from prototypes of its first half."""
    first = (np.arange(len(labels)) % per_class) < per_class // 2
    classes = int(labels.max()) + 1
    prototypes = torch.stack([embedded[torch.from_numpy(first & (labels == c))].mean(0) for c in range(classes)])
    query = embedded[torch.from_numpy(~first)]
    return torch.cdist(query.double(), prototypes.double()).argmin(1).cpu().numpy()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backbones", nargs="+", default=["resnet50", "resnet18"])
    parser.add_argument("--images", type=int, default=4096, help="images in all (classes x per class)")
    parser.add_argument("--classes", type=int, default=64)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--calibrate", type=int, default=8, help="training-mode passes setting batch-norm statistics")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    torch.backends.cudnn.benchmark = True
    per_class = max(2, args.images // args.classes)
    images, labels = synthetic_classes(args.classes, per_class, args.size, args.seed)
    calibration, _ = synthetic_classes(args.classes, max(2, args.batch_size // args.classes), args.size, args.seed + 1)
    print(f"{device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}), torch "
          f"{torch.__version__}: {len(images)} images of {args.classes} synthetic classes at {args.size} px")
    for name in args.backbones:
        torch.manual_seed(args.seed)
        model = build_backbone(name, args.size).to(device).to(memory_format=torch.channels_last)
        model.train()
        with torch.no_grad():
            for _ in range(args.calibrate):
                model(model_input(calibration, device))
        model.eval()
        full = features(model, images, device, "float32", args.batch_size)
        half = features(model, images, device, "bf16", args.batch_size)
        error = ((half - full).norm(dim=1) / full.norm(dim=1).clamp_min(1e-12)).cpu().numpy()
        cosine = F.cosine_similarity(half, full, dim=1).min().item()
        truth = labels[(np.arange(len(labels)) % per_class) >= per_class // 2]
        decided = {p: nearest_prototype(f, labels, per_class) for p, f in (("float32", full), ("bf16", half))}
        accuracy = {p: float(np.mean(d == truth)) for p, d in decided.items()}
        same = float(np.mean(decided["float32"] == decided["bf16"]))
        speed = {p: images_per_second(model, images, device, p, args.batch_size, args.rounds)
                 for p in ("float32", "bf16")}
        print(f"{name}: features {full.shape[1]}-d; bf16 vs float32 relative L2 error median "
              f"{np.median(error):.2e}, p99 {np.percentile(error, 99):.2e}, max {error.max():.2e}; "
              f"min cosine {cosine:.6f}")
        print(f"{name}: nearest-prototype accuracy float32 {accuracy['float32']:.4f}, bf16 {accuracy['bf16']:.4f} "
              f"({len(truth)} queries), same decision {same:.4f}")
        print(f"{name}: images/s float32 {speed['float32']:.0f}, bf16 {speed['bf16']:.0f} "
              f"(bf16 / float32 {speed['bf16'] / speed['float32']:.2f})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
