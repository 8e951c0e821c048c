"""Deterministic TensorFlow runs: the same command twice gives identical final weights and
identical reports, for the MD trainer (its checkpoint's variables, optimizer slots
included, and ``result_sha256``), ``transfer`` and ``cog`` (their summaries'
``result_sha256``), and each run's configuration records the determinism settings, the
library versions, the device and the thread counts in force. In a fresh process
``--threads`` and ``--deterministic`` take effect as asked; an op that op determinism
refuses ends the run with one line naming it. Commands run in-process (TensorFlow is
imported once), so the thread counts recorded are those the first command set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cog_eval_fake import SMALL as COG_SMALL
from cog_eval_fake import FakeCogClient
from conftest import REPO_ROOT

import tensorflow as tf

from clients.core import SamplerClient  # noqa: E402
from sampler_server.metrics.store import MetricsStore  # noqa: E402

# what differs between two runs of one command besides the run id: the clock
TIMINGS = {"seconds", "steps_per_s", "images_per_s", "data_wait_seconds", "first_wait_seconds", "data_wait_fraction",
           "episodes_per_s"}
# 16-pixel images: whether two runs agree does not depend on the image size (conv4 still runs
# its four blocks), and a step costs a third of a 32-pixel one
MD = ["--sources", "folder", "--image-size", "16", "--backbone", "conv4", "--log-every", "5", "--ways", "5",
      "--shots", "2", "--query", "3", "--train-episodes", "12", "--eval-episodes", "6", "--device", "cpu"]
TRANSFER = ["--protocol", "vtab-md", "--tasks", "kitti_distance", "--backbone", "conv4", "--image-size", "16",
            "--batch-size", "32", "--eval-batch-size", "128", "--lrs", "0.1", "0.01", "--steps", "2", "4",
            "--log-every", "1000", "--device", "cpu", "--seed", "5"]


def _same_but_run(value: Any, where: frozenset[str] = frozenset()) -> Any:
    """``value`` without what two repeats may differ in: run ids, timings and (``where``) paths."""
    if isinstance(value, dict):
        return {k: _same_but_run(v, where) for k, v in value.items() if k not in TIMINGS | {"run", "run_id"} | where}
    if isinstance(value, list):
        return [_same_but_run(v, where) for v in value]
    return value


def _assert_recorded(config: dict) -> None:
    """The run configuration says how the run was computed: determinism, versions, device, threads."""
    assert config["deterministic"] is True and config["requested_deterministic"] == "auto"  # auto: on, on CPU
    assert config["op_determinism"] is True
    threading = tf.config.threading
    assert (config["intra_op_threads"], config["inter_op_threads"]) == (
        threading.get_intra_op_parallelism_threads(), threading.get_inter_op_parallelism_threads())
    assert config["tensorflow_version"] == tf.__version__ and config["keras_version"] == tf.keras.__version__
    assert config["python_version"] and config["numpy_version"] == np.__version__
    assert config["device"] == "/CPU:0" and config["device_name"]


def _checkpoint(directory: Path) -> dict[str, np.ndarray]:
    reader = tf.train.load_checkpoint(str(directory))
    return {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map()
            if key.endswith("VARIABLE_VALUE")}


def test_md_trainer_twice_gives_identical_weights_and_reports(served, tmp_path, capsys):
    from clients.tf.md_train import main

    runs = {}
    for run in ("tf-repeat-a", "tf-repeat-b"):
        summary = tmp_path / f"{run}.json"
        code = main(["--server", served.address, "--run", run, *MD, "--checkpoint-dir", str(tmp_path / run),
                     "--json-summary", str(summary)])
        assert code == 0, capsys.readouterr().err
        runs[run] = json.loads(summary.read_text())
    first, second = (_checkpoint(tmp_path / run) for run in runs)
    assert first.keys() == second.keys() and any("optimizer" in key for key in first)
    for key in first:
        np.testing.assert_array_equal(first[key], second[key], err_msg=key)
    a, b = runs.values()
    assert a["config"]["result_sha256"] == b["config"]["result_sha256"]
    assert _same_but_run(a) == _same_but_run(b)

    metrics = MetricsStore(served.data / "metrics.sqlite")
    try:
        reports = [[(r.source, r.split, r.index, r.seed, r.fingerprint, dict(r.metrics), r.predicted)
                    for r in metrics.reports(run)] for run in runs]
        configs = [metrics.run_config(run) for run in runs]
    finally:
        metrics.close()
    assert len(reports[0]) == 6 and reports[0] == reports[1]
    assert _same_but_run(configs[0]) == _same_but_run(configs[1])
    _assert_recorded(configs[0])


@pytest.fixture(scope="module")
def kitti(kitti_served):
    return kitti_served


@pytest.mark.parametrize("mode", ["linear", "finetune"])
def test_transfer_twice_gives_identical_weights_and_reports(kitti, tmp_path, mode):
    from clients.tf.vtab_transfer import main

    one_setting = ["--lrs", "0.01", "--steps", "2"] if mode == "finetune" else []  # a finetuning fit trains the backbone
    summaries = []
    for run in (f"tf-transfer-repeat-{mode}-a", f"tf-transfer-repeat-{mode}-b"):
        path = tmp_path / f"{run}.json"
        assert main(["--server", kitti.address, "--run", run, "--json-summary", str(path), *TRANSFER,
                     "--mode", mode, *one_setting]) == 0
        summaries.append(json.loads(path.read_text()))
    a, b = summaries
    assert a["result_sha256"] == b["result_sha256"]
    assert _same_but_run(a) == _same_but_run(b)
    with SamplerClient(kitti.address) as client:
        report = json.loads(client.get_vtab_report([a["run"], b["run"]], fmt="json"))
    assert report["scores"][a["run"]] == report["scores"][b["run"]]
    assert _same_but_run(report["configs"][a["run"]]) == _same_but_run(report["configs"][b["run"]])
    _assert_recorded(a["config"])


def test_cog_twice_gives_identical_weights_and_reports(tmp_path):
    from clients.cog_eval import CogRun
    from clients.tf.cog_eval import TFCogBackend
    from clients.trainer_args import parse_cog_args

    runs = []
    for cache in ("cache-a", "cache-b"):  # each run extracts its own features
        client = FakeCogClient()
        args = parse_cog_args("tf", [*COG_SMALL, "--feature-cache", str(tmp_path / cache), "--levels", "L1", "L2",
                                     "--shots", "all", "2", "--seeds", "1", "2"])
        summary = CogRun(TFCogBackend(args), client, lambda _: None).execute()
        runs.append((summary, client))
    (a, first), (b, second) = runs
    assert a["extracted"] == b["extracted"] > 0
    assert a["result_sha256"] == b["result_sha256"]
    assert _same_but_run(a, frozenset({"cache"})) == _same_but_run(b, frozenset({"cache"}))  # the caches' paths
    assert len(first.reports) == 8 and first.reports == second.reports
    assert first.configs == second.configs
    _assert_recorded(json.loads(first.configs[0]))


def test_a_fresh_process_takes_threads_and_determinism_as_asked():
    """Before TensorFlow's runtime starts, ``--threads`` and ``--deterministic off`` hold; once
    it has started, the record says what is still in force (op determinism stays on). The
    imports run as a program's entry runs them (``program_imports``: the collector held off
    and the heap frozen, a third less of the import's CPU); they start no runtime."""
    script = """if True:
        import json
        from sampler_common.startup import program_imports
        with program_imports():
            import tensorflow as tf
            from clients.tf.determinism import apply_determinism, tf_record
            from clients.trainer_args import parse_args
        def record(*flags):
            args = parse_args("tf", ["--server", "h:1", "--run", "r", "--sources", "a", "--device", "cpu", *flags])
            determinism = apply_determinism(args, "/CPU:0")
            return {**determinism.as_config(), **tf_record("/CPU:0")}
        off = record("--deterministic", "off", "--threads", "1")
        tf.constant(1.0) + 1.0  # the runtime starts
        on = record("--deterministic", "on", "--threads", "3")
        later = record("--deterministic", "off", "--threads", "1")
        print(json.dumps([off, on, later]))
    """
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLE_ONEDNN_OPTS": "0", "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120,
                          cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr
    off, on, later = json.loads(done.stdout.strip().splitlines()[-1])
    assert (off["deterministic"], off["op_determinism"], off["intra_op_threads"], off["inter_op_threads"]) == (
        False, False, 1, 1)
    assert (on["deterministic"], on["op_determinism"], on["intra_op_threads"]) == (True, True, 1)  # 3 came too late
    assert (later["deterministic"], later["op_determinism"]) == (False, True)  # it cannot be switched off


def test_an_op_refused_by_op_determinism_ends_in_one_line_naming_it(tmp_path):
    from clients.tf.cog_eval import TFCogBackend
    from clients.tf.determinism import determinism_failure
    from clients.trainer_args import parse_cog_args

    backend = TFCogBackend(parse_cog_args("tf", [*COG_SMALL, "--feature-cache", str(tmp_path)]))  # op determinism on
    with pytest.raises(tf.errors.OpError) as refused:
        tf.function(lambda: tf.timestamp() + 1.0)()
    status, line = backend.classify(refused.value)
    assert status == 2 and line.startswith("op Timestamp cannot run deterministically") and "\n" not in line
    assert "--deterministic off" in line
    no_kernel = tf.errors.UnimplementedError(None, None, "Deterministic GPU implementation of unsorted segment "
                                             "reduction op not available. [Op:UnsortedSegmentSum]")
    assert determinism_failure(no_kernel)[1].startswith("op UnsortedSegmentSum cannot run deterministically")
    assert determinism_failure(tf.errors.UnimplementedError(None, None, "no kernel for this dtype")) is None
    assert determinism_failure(ValueError("determinism")) is None
