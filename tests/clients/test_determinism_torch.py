"""``--deterministic`` in the PyTorch trainers: the MD trainer, ``transfer`` and ``cog`` run
twice with the same arguments give the same final weights (the saved checkpoint's tensors,
the ``result_sha256`` fingerprint) and the same reports, field for field (the run id aside,
when it differs); the run configuration records the settings, the library versions, the
device and the thread counts; ``auto`` is on for a CPU run; and an op without a
deterministic kernel ends a run in one line, exit 2, naming the op."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import torch

from cog_eval_fake import SMALL as COG_SMALL  # noqa: E402
from cog_eval_fake import FakeCogClient  # noqa: E402

from clients import trainer_shell  # noqa: E402
from clients.determinism import cores, weights_sha256  # noqa: E402
from clients.torch.cog_eval import main as cog_main  # noqa: E402
from clients.torch.md_train import CHECKPOINT  # noqa: E402
from clients.torch.md_train import main as md_main  # noqa: E402
from clients.torch.vtab_transfer import main as transfer_main  # noqa: E402

# 16 px: two runs agree or not whatever the size (conv4 still runs its four blocks, every pool on an
# even side as at 32), and a step is a third of a 32-px one
MD_SMALL = ["--sources", "folder", "--ways", "3", "--shots", "2", "--query", "2", "--image-size", "16",
            "--train-episodes", "6", "--eval-episodes", "4", "--log-every", "3", "--seed", "5"]
TASK = "kitti_distance"
TRANSFER_SMALL = ["--protocol", "vtab-md", "--tasks", TASK, "--backbone", "conv4", "--image-size", "16",
                  "--batch-size", "32", "--eval-batch-size", "256", "--lrs", "0.1", "--steps", "2", "--mode",
                  "finetune", "--log-every", "1000", "--device", "cpu", "--seed", "3"]
COG_ARGS = [*COG_SMALL, "--levels", "L1", "--shots", "all", "2", "--seeds", "1"]
RECORDED = ("torch_version", "cuda_version", "cudnn_version", "python_version", "numpy_version", "device_name")
NO_KERNEL = "max_unpooling2d_forward_out has no deterministic kernel on cpu"


@pytest.fixture(autouse=True)
def _restore_torch_settings():
    """Each run sets the process's threads and deterministic kernels; other tests get theirs back."""
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    yield
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(deterministic)


def _without(value: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in value.items() if k not in keys}


def _tensors_sha256(state: dict[str, Any]) -> str:
    """sha256 of a checkpoint's tensors (name, dtype, shape, bytes), in the order saved."""
    digest = hashlib.sha256()
    for part in ("backbone", "head"):
        for name, tensor in (state[part] or {}).items():
            digest.update(f"{part}.{name}{tensor.dtype}{tuple(tensor.shape)}".encode())
            digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def _rows(rows: Any) -> list[dict[str, Any]]:
    """Stored reports or results as dicts, without their run id."""
    return [_without(dataclasses.asdict(row), "run_id") for row in rows]


def _one_error_line(err: str) -> str:
    errors = [line for line in err.splitlines() if ": error: " in line]
    assert len(errors) == 1, err
    return errors[0]


# ---- the MD trainer ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def md_runs(served, tmp_path_factory) -> list[dict[str, Any]]:
    """The MD trainer run twice with the same arguments (--deterministic left at auto): each
    run's summary, saved checkpoint, stored reports and stored configuration."""
    runs = []
    for name in ("a", "b"):
        root = tmp_path_factory.mktemp(f"md-{name}")
        run_id = f"det-md-{name}"
        assert md_main(["--server", served.address, "--run", run_id, "--checkpoint-dir", str(root / "ckpt"),
                        "--json-summary", str(root / "summary.json"), *MD_SMALL]) == 0
        runs.append({"summary": json.loads((root / "summary.json").read_text()),
                     "checkpoint": torch.load(root / "ckpt" / CHECKPOINT, map_location="cpu"),
                     "reports": list(served.server.metrics.reports(run_id)),
                     "stored_config": served.server.metrics.run_config(run_id)})
    return runs


def test_md_trainer_twice_gives_the_same_weights_and_reports(md_runs):
    first, second = md_runs
    assert _tensors_sha256(first["checkpoint"]) == _tensors_sha256(second["checkpoint"])
    assert first["summary"]["config"]["result_sha256"] == second["summary"]["config"]["result_sha256"]
    assert len(first["reports"]) == 4 and _rows(first["reports"]) == _rows(second["reports"])
    assert _without(first["stored_config"], "run") == _without(second["stored_config"], "run")
    assert first["summary"]["eval"]["folder"]["mean_accuracy"] == second["summary"]["eval"]["folder"]["mean_accuracy"]
    assert first["summary"]["train"]["curve"] == second["summary"]["train"]["curve"]


def test_md_run_configuration_records_determinism_versions_device_and_threads(md_runs):
    run = md_runs[0]
    config = run["stored_config"]
    assert config == run["summary"]["config"]
    # auto is on for a CPU run
    assert config["deterministic"] is True and config["requested_deterministic"] == "auto"
    assert config["intra_op_threads"] == cores() and config["inter_op_threads"] >= 1
    assert config["device"] == "cpu" and config["device_name"]
    assert all(key in config for key in RECORDED) and config["torch_version"] == str(torch.__version__)
    # the fingerprint is the saved backbone's
    backbone = run["checkpoint"]["backbone"]
    assert config["result_sha256"] == weights_sha256((k, v.numpy()) for k, v in backbone.items())


def test_md_op_without_a_deterministic_kernel_ends_the_run_in_one_line(served, tmp_path, capfd):
    base = ["--server", served.address, "--sources", "folder", "--ways", "3", "--shots", "1", "--query", "1",
            "--image-size", "16", "--train-episodes", "2", "--eval-episodes", "0"]
    # met at start: the backbone's probe runs it
    assert md_main([*base, "--run", "det-md-always", "--backbone", "torch_unpooling_backbones:always"]) == 2
    line = _one_error_line(capfd.readouterr().err)
    assert "argument --deterministic: auto (on for cpu)" in line and NO_KERNEL in line
    # met at the first training step (the backbone unpools in training mode only)
    training = [*base, "--backbone", "torch_unpooling_backbones:training"]
    assert md_main([*training, "--run", "det-md-training", "--deterministic", "on"]) == 2
    line = _one_error_line(capfd.readouterr().err)
    assert "argument --deterministic: on," in line and NO_KERNEL in line
    assert md_main([*training, "--run", "det-md-training-off", "--deterministic", "off"]) == 0


# ---- transfer ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def transfer_runs(kitti_served, tmp_path_factory) -> list[tuple[dict[str, Any], Any, dict[str, Any]]]:
    """``transfer`` run twice with the same arguments (``--deterministic on --threads 1``): each
    run's summary, stored task results and stored configuration. Shared by the twice test and
    the configuration test (whose own run of these arguments, one step fewer, recorded the same)."""
    runs = []
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    for name in ("a", "b"):
        run_id = f"det-transfer-{name}"
        summary_path = tmp_path_factory.mktemp(f"transfer-{name}") / "summary.json"
        assert transfer_main(["--server", kitti_served.address, "--run", run_id, "--json-summary", str(summary_path),
                              *TRANSFER_SMALL, "--deterministic", "on", "--threads", "1"]) == 0
        runs.append((json.loads(summary_path.read_text()), kitti_served.metrics.task_results(run_id, regime=None),
                     kitti_served.metrics.run_config(run_id)))
    torch.set_num_threads(threads)  # as _restore_torch_settings does for a test's own run
    torch.use_deterministic_algorithms(deterministic)
    return runs


def test_transfer_twice_gives_the_same_weights_and_reports(transfer_runs):
    (first, first_rows, first_config), (second, second_rows, second_config) = transfer_runs
    assert first["result_sha256"] == second["result_sha256"]
    assert len(first_rows) == 2 and _rows(first_rows) == _rows(second_rows)  # val200 and test
    assert _without(first_config, "run") == _without(second_config, "run")
    assert _without(first, "run", "config") == _without(second, "run", "config")


def test_transfer_run_configuration_records_deterministic_on_and_the_threads(transfer_runs):
    summary, _, config = transfer_runs[0]
    assert config == summary["config"]
    assert config["deterministic"] is True and config["requested_deterministic"] == "on"
    assert config["threads"] == 1 and config["intra_op_threads"] == 1
    assert config["inter_op_threads"] == torch.get_num_interop_threads()  # set once per process: as in force
    assert config["device"] == "cpu" and config["device_name"] and all(key in config for key in RECORDED)


def test_transfer_op_without_a_deterministic_kernel_fails_at_start_in_one_line(kitti_served, capfd):
    argv = ["--server", kitti_served.address, "--run", "det-transfer-unpool", "--tasks", TASK, "--backbone",
            "torch_unpooling_backbones:always", "--mode", "linear", "--device", "cpu"]
    assert transfer_main(argv) == 2
    line = _one_error_line(capfd.readouterr().err)
    assert "argument --deterministic: auto (on for cpu)" in line and NO_KERNEL in line


# ---- cog --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cog_runs(tmp_path_factory) -> list[tuple[dict[str, Any], FakeCogClient]]:
    """``python -m clients.torch cog`` run twice with the same arguments (the same run id)
    against the stand-in client (tests/clients/cog_eval_fake.py): each run's summary and
    what the client received."""
    runs = []
    for name in ("a", "b"):
        root = tmp_path_factory.mktemp(f"cog-{name}")
        client = FakeCogClient()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(trainer_shell, "SamplerClient", lambda *args, **kwargs: contextlib.nullcontext(client))
            assert cog_main([*COG_ARGS, "--feature-cache", str(root / "cache"), "--json-summary",
                             str(root / "summary.json")]) == 0
        runs.append((json.loads((root / "summary.json").read_text()), client))
    return runs


def test_cog_twice_gives_the_same_weights_and_reports(cog_runs):
    (first, first_client), (second, second_client) = cog_runs
    assert first["result_sha256"] == second["result_sha256"]
    # the same run id: the reports and the configuration sent with them, byte for byte
    assert len(first_client.reports) == 2
    assert [r.SerializeToString(deterministic=True) for r in first_client.reports] == [
        r.SerializeToString(deterministic=True) for r in second_client.reports]
    assert first_client.configs == second_client.configs

    def results(summary: dict[str, Any]) -> dict[str, Any]:
        return {level: _without(entry, "cache") for level, entry in summary["levels"].items()}

    assert results(first) == results(second) and first["config"] == second["config"]


def test_cog_run_configuration_records_determinism_versions_device_and_threads(cog_runs):
    summary, client = cog_runs[0]
    config = json.loads(client.configs[0])
    assert config == summary["config"]
    assert config["deterministic"] is True and config["requested_deterministic"] == "auto"  # auto: on on CPU
    assert config["intra_op_threads"] == cores() and config["inter_op_threads"] >= 1
    assert config["device"] == "cpu" and config["device_name"] and all(key in config for key in RECORDED)


def test_cog_op_without_a_deterministic_kernel_fails_at_start_in_one_line(tmp_path, capfd):
    argv = [*COG_SMALL, "--feature-cache", str(tmp_path / "cache"), "--backbone", "torch_unpooling_backbones:always",
            "--deterministic", "on"]
    assert cog_main(argv) == 2
    line = _one_error_line(capfd.readouterr().err)
    assert "argument --deterministic: on," in line and NO_KERNEL in line


START_UP_SCRIPT = """
import argparse, sys, torch
from torch import nn
from clients.torch.backbones import named_preprocessing
from clients.torch.compiled import CompiledEmbedding
from clients.torch.determinism import apply_determinism
apply_determinism(argparse.Namespace(deterministic="on", threads=1), torch.device("cpu"))
print(torch.are_deterministic_algorithms_enabled(), "torch._inductor" in sys.modules)
CompiledEmbedding(nn.Conv2d(3, 4, 3), named_preprocessing(16), torch.device("cpu"), backend="aot_eager")
import torch._inductor.config as inductor_config
print(inductor_config.deterministic)
"""


def test_deterministic_kernels_start_without_inductor_and_a_compiled_step_gets_its_switch():
    """``torch.use_deterministic_algorithms`` imports inductor: 2.3 s of each torch trainer's
    start-up on an idle 2-core machine, before it could say that nothing listens at
    --server. Kernels are deterministic without it; a compiled step sets inductor's switch
    from the run's before compiling. A fresh process, so that no other test loaded inductor."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", START_UP_SCRIPT], capture_output=True, text=True, timeout=120,
                          cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False", "True"], done.stdout
