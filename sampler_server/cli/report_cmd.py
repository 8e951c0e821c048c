"""``sampler-server report --run RUN [--run RUN2 ...]``: the Meta-Dataset, VTAB-1k, VTAB+MD or ImageNet-CoG table.

Reads the metrics the server stored (SQLite). ``--table md`` (the default) recomputes
each reported episode's composition from the packed stores, so trainers need to report
only accuracies; ``--table vtab``, ``--table vtab-md`` and ``--table cog`` read stored
numbers only and need no packed stores, just the metrics file. ``--table cog
--baseline RUN`` adds each cell's difference from RUN's same cell.

``--calibrate --run A [--run B] --scratch RUN --max RUN`` is the control baselines'
calibrated report (``metrics.calibrated_report``): risk, cR and cR_scratch per VTAB task
and regime, and each run's CCI (``--cci-seeds points``, the default: the reference
notebook's; ``mean``: each run averaged over its seeds first). It needs ``--data`` too: the blind guess of each task is
computed from the labels of its packed store (the most frequent label of the task's
"train" split, scored on its "test" split), as the server computes it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from sampler_server.core.baselines.calibration import CCI_SEEDS, DEFAULT_CCI_SEEDS
from sampler_server.core.vtab.presets import VtabBenchmark
from sampler_server.core.vtab.splits import SPLITS
from sampler_server.errors import FailedPrecondition, InvalidArgument, NotFound
from sampler_server.metrics.report import FORMATS, build_report, render_report
from sampler_server.metrics.store import MetricsStore, metrics_target

TABLES = ("md", "vtab", "vtab-md", "cog")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report",
        help="per-source accuracy with 95%% CI, average ranks, robustness plots; VTAB-1k, VTAB+MD and "
        "ImageNet-CoG tables",
        description="The Meta-Dataset table for one or more runs: per source mean query accuracy, 95% confidence "
        "interval and episode count; with several runs each run's average rank (ties by a 95% test). "
        "--plots DIR writes accuracy-vs-ways and precision-vs-shots PNGs. "
        "--table vtab: per-task top-1, group and overall means (VTAB-1k); --table vtab-md: the VTAB+MD aggregate "
        "(MD-v2 test sources, VTAB-v2 tasks and groups) with per-source and per-task detail; with these --plots "
        "writes one per-task bar plot per run. --table cog: ImageNet-CoG top-1 per level (IN-1K, L1..L5) and N "
        "(training images per concept), mean ± std over seeds, with --baseline RUN also relative to RUN; --plots "
        "writes accuracy-vs-level and accuracy-vs-N plots.",
    )
    parser.add_argument("--run", action="append", required=True, help="run id (repeat for several runs)")
    parser.add_argument("--data", type=Path,
                        help="the server's data directory (packed stores); required for --table md")
    parser.add_argument("--metrics", metavar="FILE|URL",
                        help="metrics SQLite file (default DATA/metrics.sqlite), or the postgresql:// URL the servers "
                        "were given")
    parser.add_argument("--format", choices=FORMATS, default="table")
    parser.add_argument("--table", choices=TABLES, default="md",
                        help="md: Meta-Dataset episodes (default); vtab: VTAB-1k tasks; vtab-md: the VTAB+MD aggregate; "
                        "cog: ImageNet-CoG levels and N")
    parser.add_argument("--vtab-benchmark", choices=[b.value for b in VtabBenchmark],
                        help="task set of --table vtab (default vtab-v1; vtab-md always uses vtab-v2)")
    parser.add_argument("--vtab-split", choices=SPLITS,
                        help="VTAB split whose results --table vtab shows (default test)")
    parser.add_argument("--baseline", metavar="RUN",
                        help="--table cog: show each cell also relative to this run's same cell (points)")
    parser.add_argument("--plots", type=Path, help="write the plots (PNG) into this directory")
    parser.add_argument("--plots-per-n", action="store_true",
                        help="--table cog with --plots: also an accuracy-vs-level plot for each few-shot N")
    parser.add_argument("--calibrate", action="store_true",
                        help="the calibrated report of the control baselines: per VTAB task and regime the risk, "
                        "cR = (R - R_max) / (R_blind - R_max) and cR_scratch, and each run's CCI; needs --scratch, "
                        "--max and --data (the blind guess comes from the packed labels); --plots writes cR-vs-n and "
                        "cR-vs-cR_scratch plots per task")
    parser.add_argument("--scratch", metavar="RUN", help="--calibrate: the scratch run (role scratch)")
    parser.add_argument("--max", metavar="RUN", dest="max_run", help="--calibrate: the max run (role max)")
    parser.add_argument("--cci-seeds", choices=CCI_SEEDS,
                        help="--calibrate: points (default) is the reference notebook's CCI, every (n, seed) of a run "
                        "its own point against the scratch risk averaged over seeds; mean averages each run over its "
                        "seeds at each n first")
    parser.set_defaults(func=run)


def _open_metrics(args: argparse.Namespace) -> MetricsStore:
    if args.metrics is None and args.data is None:
        raise InvalidArgument("--metrics or --data: neither given; one is needed to find the metrics database")
    target = metrics_target(args.metrics) if args.metrics is not None else args.data / "metrics.sqlite"
    if isinstance(target, Path) and not target.is_file():
        where = f" on {args.data}" if args.data is not None else ""
        raise NotFound(f"{target}: no metrics database (has a server{where} received reports?)")
    return MetricsStore(target)


def run(args: argparse.Namespace) -> int:
    if args.calibrate:
        return _run_calibrated(args)
    if args.scratch or args.max_run or args.cci_seeds:
        given = "--scratch" if args.scratch else "--max" if args.max_run else "--cci-seeds"
        raise InvalidArgument(f"{given}: only with --calibrate")
    if args.table != "vtab" and (args.vtab_benchmark or args.vtab_split):
        given = "--vtab-benchmark" if args.vtab_benchmark else "--vtab-split"
        raise InvalidArgument(f"{given}: only with --table vtab (--table {args.table} uses its own fixed plan)")
    if args.table != "cog" and (args.baseline or args.plots_per_n):
        given = "--baseline" if args.baseline else "--plots-per-n"
        raise InvalidArgument(f"{given}: only with --table cog (got --table {args.table})")
    if args.table == "cog":
        return _run_cog(args)
    if args.table != "md":
        return _run_vtab(args)
    if args.data is None:
        raise InvalidArgument("--data: required for --table md (episodes are recomputed from the packed stores)")
    from sampler_server.service.registry import StoreRegistry
    from sampler_server.service.replay import EpisodeReplayer

    store = _open_metrics(args)
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


def _run_vtab(args: argparse.Namespace) -> int:
    """``--table vtab`` / ``--table vtab-md``: stored numbers only, no packed stores needed."""
    from sampler_server.metrics import vtab_report

    store = _open_metrics(args)
    if args.table == "vtab":
        report = vtab_report.build_vtab_report(store, args.run, args.vtab_benchmark or "vtab-v1",
                                               args.vtab_split or "test")
        print(vtab_report.render_vtab_report(report, args.format))
        scores = report.scores
    else:
        combined = vtab_report.build_vtab_md_report(store, args.run)
        print(vtab_report.render_vtab_md_report(combined, args.format))
        scores = combined.vtab
    if args.plots is not None:
        from sampler_server.metrics.vtab_plots import write_vtab_plots

        written = write_vtab_plots(scores, args.plots)
        if args.format != "json":
            print(f"\nplots: {len(written)} PNG files in {args.plots}")
    return 0


def _run_cog(args: argparse.Namespace) -> int:
    """``--table cog``: stored numbers only, no packed stores needed."""
    from sampler_server.metrics.cog_report import build_cog_report, render_cog_report

    if args.plots_per_n and args.plots is None:
        raise InvalidArgument("--plots-per-n: only with --plots DIR (it adds plots to that directory)")
    report = build_cog_report(_open_metrics(args), args.run, args.baseline)
    print(render_cog_report(report, args.format))
    if args.plots is not None:
        from sampler_server.metrics.cog_plots import write_cog_plots

        written = write_cog_plots(report, args.plots, per_shots=args.plots_per_n)
        if args.format != "json":
            print(f"\nplots: {len(written)} PNG files in {args.plots}")
    return 0


def blind_risks_from_data(data: Path) -> Callable[[str], float]:
    """``task -> R_blind`` over the packed stores in ``data``: the blind guess of the task's whole
    training pool scored on its test split (``core.baselines.blind_guess``), as the server computes it."""
    from sampler_server.cli.vtab_cmd import _pick_store
    from sampler_server.core.baselines import POOL_SPLIT, TEST_SPLIT, blind_guess
    from sampler_server.core.baselines.sources import is_source_task
    from sampler_server.core.vtab import get_task
    from sampler_server.store.vtab_records import list_split

    def risk(name: str) -> float:
        if is_source_task(name):
            from sampler_server.cli.regime_cmd import source_task_handle

            handle = source_task_handle(data, name)
            train, test = handle.listing(POOL_SPLIT), handle.listing(TEST_SPLIT)
            return blind_guess(train.labels, test.labels, task=name).risk
        task = get_task(name)
        records = _pick_store(data, task, None)
        train, test = list_split(records, task, POOL_SPLIT), list_split(records, task, TEST_SPLIT)
        return blind_guess(train.labels, test.labels, task=name).risk

    return risk


def _run_calibrated(args: argparse.Namespace) -> int:
    """``--calibrate``: the calibrated report over stored results and the packed labels."""
    from sampler_server.metrics.calibrated_report import build_calibrated_report, render_calibrated_report

    for given, name in ((args.table != "md", f"--table {args.table}"), (args.baseline, "--baseline"),
                        (args.plots_per_n, "--plots-per-n"), (args.vtab_benchmark, "--vtab-benchmark"),
                        (args.vtab_split, "--vtab-split")):
        if given:
            raise InvalidArgument(f"{name}: not with --calibrate (it reads VTAB test results at every regime)")
    for value, name in ((args.scratch, "--scratch"), (args.max_run, "--max")):
        if not value:
            raise InvalidArgument(f"{name}: required with --calibrate (the {name[2:]} run the others are "
                                  "calibrated against)")
    if args.data is None:
        raise InvalidArgument("--data: required with --calibrate (the blind guess is computed from the packed "
                              "tasks' labels)")
    report = build_calibrated_report(_open_metrics(args), args.run, args.scratch, args.max_run,
                                     blind_risks_from_data(args.data), args.cci_seeds or DEFAULT_CCI_SEEDS)
    print(render_calibrated_report(report, args.format))
    if args.plots is not None:
        from sampler_server.metrics.calibrated_plots import write_calibrated_plots

        written = write_calibrated_plots(report, args.plots)
        if args.format != "json":
            print(f"\nplots: {len(written)} PNG files in {args.plots}")
    return 0
