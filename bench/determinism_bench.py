"""Deterministic training on one GPU: are two runs the same, and what does it cost?

For each model (ProtoNet conv4 at 84 px, ResNet-18 at 126 px by default; MD
variable-way variable-shot training episodes through a real ``sampler-server serve``)
it runs ``python -m clients.torch`` with ``--deterministic on`` twice and with
``--deterministic off`` twice, each in a fresh process with a checkpoint, and prints
per model:
- whether the two deterministic runs end with identical weights (the run record's
  ``result_sha256``, the sha256 of the final backbone weights; and the saved
  checkpoint's tensors), and whether the two non-deterministic runs do;
- episodes/s of each mode (the mean of its two runs) and the ratio deterministic /
  non-deterministic: the cost of ``--deterministic on``.
The store is generated and packed here (as ``bench/gpu_train.py`` does: raw pixels at
each model's side, so the server only copies them).

Run on a GPU: ``.venv/bin/python bench/determinism_bench.py`` (200 episodes, the issue's
figure). A CPU smoke run:
``.venv/bin/python bench/determinism_bench.py --device cpu --episodes 4 --classes 20 --per-class 10 --models conv4:32``.
Dependencies: torch, numpy, grpcio, lmdb, Pillow and this repository.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.gpu_train import STORE, make_stores, start_server  # noqa: E402

MODES = ("on", "on", "off", "off")


def child_env() -> dict[str, str]:
    """This repository first on the trainer's path, before what PYTHONPATH already holds (carried wheels)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def checkpoint_sha256(path: Path) -> str:
    """sha256 of a torch trainer checkpoint's tensors (backbone, head), by name."""
    import torch

    state = torch.load(path, map_location="cpu")
    digest = hashlib.sha256()
    for part in ("backbone", "head"):
        for name, tensor in sorted((state.get(part) or {}).items()):
            digest.update(f"{part}.{name}".encode())
            digest.update(tensor.contiguous().numpy().tobytes())
    return digest.hexdigest()


def train_once(address: str, backbone: str, size: int, episodes: int, device: str, deterministic: str,
               attempt: int) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        summary_path = Path(scratch) / "summary.json"
        checkpoints = Path(scratch) / "checkpoints"
        argv = [sys.executable, "-m", "clients.torch", "--server", address,
                "--run", f"determinism-{backbone}-{size}-{deterministic}-{attempt}",
                "--sources", STORE.format(size=size), "--image-size", str(size), "--backbone", backbone,
                "--train-episodes", str(episodes), "--eval-episodes", "0", "--device", device,
                "--deterministic", deterministic, "--log-every", str(episodes),
                "--checkpoint-dir", str(checkpoints), "--checkpoint-every", str(episodes),
                "--json-summary", str(summary_path)]
        done = subprocess.run(argv, capture_output=True, text=True, env=child_env(), check=False)
        if done.returncode != 0:
            raise RuntimeError(f"trainer ({backbone} {size}px, --deterministic {deterministic}) exited "
                               f"{done.returncode}: {done.stderr[-2000:]}")
        summary = json.loads(summary_path.read_text())
        return {"episodes_per_s": summary["train"]["steps_per_s"], "result_sha256": summary["config"]["result_sha256"],
                "checkpoint_sha256": checkpoint_sha256(checkpoints / "checkpoint.pt"),
                "deterministic": summary["config"].get("deterministic"), "device": summary["config"].get("device"),
                "device_name": summary["config"].get("device_name")}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=200, help="training episodes per run")
    parser.add_argument("--models", nargs="+", default=["conv4:84", "resnet18:126"], metavar="BACKBONE:PX")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--per-class", type=int, default=30)
    parser.add_argument("--workers", type=int, default=min(12, os.cpu_count() or 1), help="serve --workers")
    parser.add_argument("--lookahead-mb", type=int, default=128, metavar="MB", help="serve --lookahead-mb")
    args = parser.parse_args(argv)
    for model in args.models:
        backbone, _, size = model.partition(":")
        if backbone not in ("conv4", "resnet18", "resnet50", "tiny") or not size.isdigit():
            parser.error(f"--models: got {model!r}, expected NAME:PX with a named backbone")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    models = [(m.partition(":")[0], int(m.partition(":")[2])) for m in args.models]
    with tempfile.TemporaryDirectory() as scratch:
        data = make_stores(Path(scratch), args.classes, args.per_class, {size for _, size in models})
        server, address = start_server(data, args.workers, args.lookahead_mb)
        try:
            rows = []
            for backbone, size in models:
                runs = [train_once(address, backbone, size, args.episodes, args.device, mode, i)
                        for i, mode in enumerate(MODES)]
                on, off = runs[:2], runs[2:]
                rate_on = sum(r["episodes_per_s"] for r in on) / 2
                rate_off = sum(r["episodes_per_s"] for r in off) / 2
                rows.append({
                    "model": f"{backbone} {size}px", "device": on[0]["device_name"] or on[0]["device"],
                    "on_identical": on[0]["result_sha256"] == on[1]["result_sha256"]
                    and on[0]["checkpoint_sha256"] == on[1]["checkpoint_sha256"],
                    "off_identical": off[0]["result_sha256"] == off[1]["result_sha256"],
                    "on_episodes_per_s": round(rate_on, 2), "off_episodes_per_s": round(rate_off, 2),
                    "cost_ratio": round(rate_on / rate_off, 3), "recorded": [r["deterministic"] for r in runs],
                    "result_sha256": [r["result_sha256"][:12] for r in runs]})
        finally:
            server.terminate()
            server.wait(timeout=60)
    print(f"{'model':<16} {'device':<28} {'on: same weights':>16} {'off: same':>10} {'on ep/s':>9} "
          f"{'off ep/s':>9} {'on/off':>7}")
    for row in rows:
        print(f"{row['model']:<16} {str(row['device'])[:28]:<28} {str(row['on_identical']):>16} "
              f"{str(row['off_identical']):>10} {row['on_episodes_per_s']:>9.2f} {row['off_episodes_per_s']:>9.2f} "
              f"{row['cost_ratio']:>7.3f}")
    print(json.dumps(rows))
    return 0 if all(row["on_identical"] for row in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
