"""``sampler-server report --run RUN [--run RUN2 ...]``: the Meta-Dataset table.

Reads the metrics the server stored (SQLite) and recomputes each reported episode's
composition from the packed stores, so trainers need to report only accuracies.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sampler_server.errors import FailedPrecondition, NotFound
from sampler_server.metrics.report import FORMATS, build_report, render_report
from sampler_server.metrics.store import MetricsStore


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report",
        help="per-source accuracy with 95%% CI, average ranks, robustness plots",
        description="The Meta-Dataset table for one or more runs: per source mean query accuracy, 95%% confidence "
        "interval and episode count; with several runs each run's average rank (ties by a 95%% test). "
        "--plots DIR writes accuracy-vs-ways and precision-vs-shots PNGs.",
    )
    parser.add_argument("--run", action="append", required=True, help="run id (repeat for several runs)")
    parser.add_argument("--data", type=Path, required=True, help="the server's data directory (packed stores)")
    parser.add_argument("--metrics", type=Path, help="metrics SQLite file (default DATA/metrics.sqlite)")
    parser.add_argument("--format", choices=FORMATS, default="table")
    parser.add_argument("--plots", type=Path, help="write the robustness plots (PNG) into this directory")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from sampler_server.service.registry import StoreRegistry
    from sampler_server.service.replay import EpisodeReplayer

    metrics_path = args.metrics or args.data / "metrics.sqlite"
    if not metrics_path.is_file():
        raise NotFound(f"{metrics_path}: no metrics database (has a server on {args.data} received reports?)")
    store = MetricsStore(metrics_path)
    replayer = EpisodeReplayer(StoreRegistry.from_data_dir(args.data))
    report = build_report(store, args.run, replayer)
    print(render_report(report, args.format))
    if args.plots is not None:
        from sampler_server.metrics.plots import write_plots

        written = write_plots(report, args.plots)
        if args.format != "json":
            print(f"\nplots: {len(written)} PNG files in {args.plots}")
    if report.mismatches:
        raise FailedPrecondition(
            f"{len(report.mismatches)} reported episodes do not match the stores' episodes (first: {report.mismatches[0]})"
        )
    return 0
