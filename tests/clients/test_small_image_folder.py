"""A small image folder (12 classes) packed with the defaults: the 70/15/15 rule leaves 2 classes
each to valid and test, fewer than Meta-Dataset's variable-way episodes draw (5), so `pack`
warns and names the fix; the trainer's defaults are then refused in one line (exit 2, the
request's fault), and the fix the warning names (--eval-ways 2) evaluates."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

from sampler_server.cli.main import main as server_cli
from sampler_server.service.server import RunningServer, ServerConfig

CLASSES, IMAGES = 12, 8


def _image_folder(root: Path) -> Path:
    rng = np.random.default_rng(0)
    for c in range(CLASSES):
        folder = root / f"class_{c:02d}"
        folder.mkdir(parents=True)
        colour = rng.integers(0, 256, 3)
        for i in range(IMAGES):
            pixels = np.clip(colour + rng.integers(-20, 21, (20, 20, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(folder / f"{i}.png")
    return root


def test_a_twelve_class_folder_warns_at_pack_and_evaluates_with_the_fix_it_names(tmp_path, capfd, torch_one_thread):
    from clients.torch.md_train import main

    data = tmp_path / "data"
    assert server_cli(["pack", "image_folder", "--input", str(_image_folder(tmp_path / "pets")), "--output", str(data),
                       "--name", "pets", "--quiet", "--workers", "1"]) == 0
    err = capfd.readouterr().err
    warnings = [line for line in err.splitlines() if line.startswith("warning: image_folder: split")]
    assert [w.split(" has ")[0] for w in warnings] == ["warning: image_folder: split valid",
                                                      "warning: image_folder: split test"], err
    assert "draw 2-way episodes (the trainers' --eval-ways 2, evaluate --md-ways 2)" in warnings[1]
    assert "--class-splits FILE" in warnings[1]
    server = RunningServer(ServerConfig(data_dir=data, port=0, workers=1, threads=4, grace_seconds=0.5)).start()
    try:
        base = ["--server", server.address, "--sources", "pets", "--image-size", "16", "--backbone", "tiny",
                "--train-episodes", "2", "--eval-episodes", "2", "--threads", "1"]
        assert main([*base, "--run", "small-defaults"]) == 2  # refused: the request asks for too many ways
        refused = capfd.readouterr().err.strip().splitlines()
        assert len(refused) == 1 and "min_ways" in refused[0] and "expected at most 2" in refused[0], refused
        summary = tmp_path / "fixed.json"
        assert main([*base, "--run", "small-fixed", "--eval-ways", "2", "--json-summary", str(summary)]) == 0
        result = json.loads(summary.read_text())
        assert result["eval"]["pets"]["episodes"] == 2 and result["config"]["eval_ways"] == 2
    finally:
        server.stop(grace=0.5)
