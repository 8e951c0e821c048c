"""The demo's ImageNet-CoG leg at its smallest: its IN-21K layout packed as shards and
served as one source, the levels it prints, and its torch evaluation flags (cut to one
epoch, one seed, one grid point) landing in the CoG table through a real server."""

from __future__ import annotations

import argparse

import pytest

from sampler_server.cli import demo_cmd


def test_cog_leg_packs_shards_prints_levels_and_its_evaluation_reaches_the_cog_table(tmp_path, capsys):
    import torch
    from clients.torch.cog_eval import main as cog_main
    from sampler_server.core.cog.levels import compute_levels
    from sampler_server.fixtures.cog_counts import LEVEL_SIZE, MIN_IMAGES, cog_counts
    from sampler_server.metrics.cog.report import build_cog_report, render_cog_report
    from sampler_server.metrics.store import MetricsStore
    from sampler_server.service.server import RunningServer, ServerConfig

    store = tmp_path / "store"
    demo_cmd.build_cog_data(tmp_path, store, workers=1, quiet=True)
    shards = sorted(path.name for path in store.iterdir() if path.name.startswith("imagenet21k"))
    assert shards == [f"imagenet21k-{i:05d}-of-{demo_cmd.COG_SHARDS:05d}" for i in range(demo_cmd.COG_SHARDS)]
    levels = compute_levels(cog_counts(), level_size=LEVEL_SIZE, min_images=MIN_IMAGES)
    printed = capsys.readouterr().out
    assert f"fingerprint {levels.fingerprint}" in printed and "eligible: 30" in printed
    server = RunningServer(ServerConfig(data_dir=store, port=0, workers=1, threads=8, grace_seconds=0.5)).start()
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:  # the demo's flags, cut down (the last value of a repeated flag wins)
        assert cog_main(["--server", server.address, "--run", "demo-cog-torch", *demo_cmd.COG_EVAL,
                         "--levels", "L1", "L5", "--shots", "all", "--seeds", "1", "--epochs", "1", "--grid", "1x1",
                         "--feature-cache", str(tmp_path / "features"), "--device", "cpu"]) == 0
    finally:
        torch.set_num_threads(threads)
        server.stop(grace=0.5)
    report = build_cog_report(MetricsStore(store / "metrics.sqlite"), ["demo-cog-torch"])
    table = render_cog_report(report, "table")
    rows = [line.split() for line in table.splitlines() if line.startswith("demo-cog-torch")]
    assert [row[1] for row in rows] == ["L1", "L5"] and all(row[3] == "(1)" for row in rows), table


def test_no_cog_flag_parses():
    parser = argparse.ArgumentParser()
    demo_cmd.register(parser.add_subparsers())
    assert parser.parse_args(["demo", "--no-cog"]).cog is False
    assert parser.parse_args(["demo"]).cog is True
