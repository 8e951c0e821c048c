"""The demo's VTAB leg at its smallest: test-built TFDS data of its two tasks packed into one
data directory with the ``pack vtab`` code path, a one-step torch linear probe through the
server, its row in the VTAB table; and the one-line skip when tensorflow-datasets is missing."""

from __future__ import annotations

import argparse
import sys

import pytest

from sampler_server.cli import demo_cmd

pytest.importorskip("tensorflow_datasets")


def test_vtab_leg_packs_its_tasks_and_a_probe_lands_in_the_vtab_table(tmp_path):
    torch = pytest.importorskip("torch")
    from clients.torch.transfer import main as transfer_main
    from sampler_server.metrics.store import MetricsStore
    from sampler_server.metrics.vtab_report import build_vtab_report, render_vtab_report
    from sampler_server.service.server import RunningServer, ServerConfig

    store = tmp_path / "store"
    assert demo_cmd.build_vtab_data(tmp_path, store, workers=1, quiet=True)
    assert {"tfds_svhn_cropped", "tfds_kitti"} <= {path.name for path in store.iterdir()}
    server = RunningServer(ServerConfig(data_dir=store, port=0, workers=1, threads=8, grace_seconds=0.5)).start()
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:  # the demo's probe flags, cut to one setting of one step (the last --lrs / --steps win)
        assert transfer_main(["--server", server.address, "--run", "demo-vtab-torch", "--tasks", *demo_cmd.VTAB_TASKS,
                              *demo_cmd.VTAB_PROBE, "--lrs", "1.0", "--steps", "1", "--device", "cpu"]) == 0
    finally:
        torch.set_num_threads(threads)
        server.stop(grace=0.5)
    report = build_vtab_report(MetricsStore(store / "metrics.sqlite"), ["demo-vtab-torch"])
    rows = {line.split()[1]: line for line in render_vtab_report(report, "table").splitlines() if len(line.split()) > 2}
    assert "(100)" in rows["svhn"] and "(100)" in rows["kitti_distance"]  # every test example scored


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
