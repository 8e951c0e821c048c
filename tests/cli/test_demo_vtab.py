"""The demo's VTAB leg at its smallest: the stores ``make demo`` builds (conftest's ``demo_data``,
built once per run by the demo's own code, whose VTAB part packs test-built TFDS data of its two
tasks with the ``pack vtab`` code path), the demo's VTAB-protocol runs (cut to one step) in torch
and tf through a server over them, their rows in the VTAB table; and the one-line skip when
tensorflow-datasets is missing."""

from __future__ import annotations

import argparse
import json
import sys

import pytest

from sampler_server.cli import demo_cmd


def test_vtab_leg_packs_its_tasks_and_torch_and_tf_probes_land_in_the_vtab_and_vtab_md_tables(demo_data, tmp_path):
    import torch
    from clients.tf.vtab_transfer import main as tf_transfer_main
    from clients.torch.vtab_transfer import main as transfer_main
    from sampler_server.metrics.vtab.report import (
        build_vtab_md_report,
        build_vtab_report,
        render_vtab_md_report,
        render_vtab_report,
    )

    assert {"tfds_svhn_cropped", "tfds_kitti"} <= {path.name for path in demo_data.data.iterdir()}
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:  # the demo's VTAB protocol flags, cut to one setting of one step (the last --lrs / --steps win)
        assert transfer_main(["--server", demo_data.address, "--run", "demo-vtab-torch", "--tasks",
                              *demo_cmd.VTAB_TASKS, *demo_cmd.VTAB_RUN, "--lrs", "0.1", "--steps", "1", "--device",
                              "cpu", "--json-summary", str(tmp_path / "torch.json")]) == 0
        assert tf_transfer_main(["--server", demo_data.address, "--run", "demo-vtab-tf", "--tasks",
                                 *demo_cmd.VTAB_TASKS, *demo_cmd.VTAB_RUN, "--lrs", "0.1", "--steps", "1"]) == 0
    finally:
        torch.set_num_threads(threads)
    summary = json.loads((tmp_path / "torch.json").read_text())
    assert summary["protocol"] == "vtab" and summary["mode"] == "finetune"
    assert summary["protocol_values"]["resize"] == "legacy_bilinear" and len(summary["run_seeds"]) == 3
    metrics = demo_data.server.metrics
    runs = ["demo-vtab-torch", "demo-vtab-tf"]
    table = render_vtab_report(build_vtab_report(metrics, runs), "table")
    rows = {line.split()[1]: line for line in table.splitlines() if len(line.split()) > 2}
    for task in ("svhn", "kitti_distance"):  # both runs scored every test example of both tasks
        assert rows[task].count("(100)") == 2, table
    combined = render_vtab_md_report(build_vtab_md_report(metrics, runs), "json")
    assert '"svhn"' in combined and '"kitti_distance"' in combined and "demo-vtab-tf" in combined, combined


def test_without_tensorflow_datasets_the_leg_is_skipped_with_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)  # import now fails as if not installed
    assert not demo_cmd.build_vtab_data(tmp_path, tmp_path / "store", workers=1, quiet=True)
    assert capsys.readouterr().out.strip() == demo_cmd.VTAB_INSTALL
    assert not (tmp_path / "store").exists()


def test_no_vtab_flag_parses():
    parser = argparse.ArgumentParser()
    demo_cmd.register(parser.add_subparsers())
    assert parser.parse_args(["demo", "--no-vtab"]).vtab is False
    assert parser.parse_args(["demo"]).vtab is True


def test_control_baseline_runs_parse_with_their_roles_and_regimes():
    """The demo's three control runs are valid transfer command lines: the model run probes
    at the demo's regimes, scratch and max fine-tune from random init, max on all the data."""
    from clients.trainer_args import parse_transfer_args

    for role, extra in demo_cmd.CONTROL_RUNS.items():
        init = ["--weights", __file__] if role == "model" else []
        args = parse_transfer_args("torch", ["--server", "127.0.0.1:1", "--run", f"demo-control-{role}", "--tasks",
                                             *demo_cmd.VTAB_TASKS, *demo_cmd.VTAB_PROBE, *extra, *init, "--role", role])
        assert args.role == role
        assert args.mode == ("linear" if role == "model" else "finetune")
        assert list(args.regimes or []) == ([] if role == "max" else [20, 80])
