"""``sampler-server report --run RUN [--run RUN2 ...]``: the Meta-Dataset, VTAB-1k, VTAB+MD or ImageNet-CoG table.

Reads the metrics the server stored (SQLite, or the PostgreSQL URL the servers were
given). The tables, their options and their refusals are the report registry's
(``metrics.registry``), the same the ``GetReport`` RPC reads: ``--table md`` (the
default) recomputes each reported episode's composition from the packed stores, so
trainers need to report only accuracies; ``--table vtab``, ``--table vtab-md`` and
``--table cog`` read stored numbers only and need no packed stores, just the metrics
file. ``--table cog --baseline RUN`` adds each cell's difference from RUN's same cell.

``--calibrate --run A [--run B] --scratch RUN --max RUN`` is the control baselines'
calibrated report (``metrics.baselines.report``): risk, cR and cR_scratch per VTAB task
and regime, and each run's CCI (``--cci-seeds points``, the default: the reference
notebook's; ``mean``: each run averaged over its seeds first). It needs ``--data`` too: the blind guess of each task is
computed from the labels of its packed store (the most frequent label of the task's
"train" split, scored on its "test" split), as the server computes it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sampler_server.errors import InvalidArgument, NotFound
from sampler_server.metrics import registry
from sampler_server.metrics.store import MetricsStore, metrics_target
from sampler_server.metrics.tables import FORMATS


def register(subparsers: argparse._SubParsersAction) -> None:
    tables = registry.tables()
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
                        help="the server's data directory (packed stores); required for "
                        + " and ".join(table.spelled(registry.Entry.COMMAND) for table in tables
                                       if table.needs_stores))
    parser.add_argument("--metrics", metavar="FILE|URL",
                        help="metrics SQLite file (default DATA/metrics.sqlite), or the postgresql:// URL the servers "
                        "were given")
    parser.add_argument("--format", choices=FORMATS, default="table")
    by_table = [table for table in tables if not table.flag]
    parser.add_argument("--table", choices=[table.name for table in by_table], default=registry.default_table().name,
                        help="; ".join(f"{table.name}: {table.help}" for table in by_table))
    parser.add_argument("--plots", type=Path, help="write the plots (PNG) into this directory")
    for table in tables:
        if table.flag:
            parser.add_argument(table.flag, action="store_true", dest=_flag_dest(table), help=table.help)
        for option in table.options:
            if option.switch:
                parser.add_argument(option.flag, action="store_true", dest=option.name, help=option.help)
            else:
                parser.add_argument(option.flag, dest=option.name, metavar=option.metavar, choices=option.choices,
                                    help=option.help)
    parser.set_defaults(func=run)


def _flag_dest(table: registry.ReportTable) -> str:
    return "table_" + table.flag.lstrip("-").replace("-", "_")


def _chosen_table(args: argparse.Namespace) -> registry.ReportTable:
    """The table a flag picks (``--calibrate``), else ``--table``'s; a flag with another ``--table`` is refused."""
    for table in registry.tables():
        if table.flag and getattr(args, _flag_dest(table)):
            if args.table != registry.default_table().name:
                refusal = table.refusal[1] if table.refusal is not None else "{flag}: not with " + table.flag
                raise InvalidArgument(refusal.format(flag=f"--table {args.table}"))
            return table
    return registry.table(args.table)


def _query(args: argparse.Namespace) -> registry.ReportQuery:
    values = {option.name: getattr(args, option.name) for option in registry.options()}
    return registry.ReportQuery(run_ids=tuple(args.run), format=args.format, plots=args.plots,
                                **{name: value for name, value in values.items() if value is not None})


def _open_metrics(args: argparse.Namespace) -> MetricsStore:
    if args.metrics is None and args.data is None:
        raise InvalidArgument("--metrics or --data: neither given; one is needed to find the metrics database")
    target = metrics_target(args.metrics) if args.metrics is not None else args.data / "metrics.sqlite"
    if isinstance(target, Path) and not target.is_file():
        where = f" on {args.data}" if args.data is not None else ""
        raise NotFound(f"{target}: no metrics database (has a server{where} received reports?)")
    return MetricsStore(target)


class StoresContext:
    """What a report needs from the packed stores of a data directory (``registry.ReportContext``):
    episodes recomputed as the server replays them, and the blind guess of a task over the
    labels the server would serve. The stores are opened when first needed; without
    ``--data`` (``data`` None) only the tables that read stored numbers alone can run."""

    def __init__(self, data: Path | None) -> None:
        self.data = data
        self._replayer: Any = None

    def _stores(self, why: str) -> Path:
        if self.data is None:
            raise InvalidArgument(f"--data: not given; {why} needs the packed stores")
        return self.data

    def episode(self, request: Any | Mapping[str, Any], seed: int, index: int) -> Any:
        data = self._stores("recomputing an episode")
        if self._replayer is None:
            from sampler_server.catalog.registry import StoreRegistry
            from sampler_server.catalog.replay import EpisodeReplayer

            self._replayer = EpisodeReplayer(StoreRegistry.from_data_dir(data))
        return self._replayer.episode(request, seed, index)

    def blind_risk(self, task: str) -> float:
        from sampler_server.catalog.tasks import pick_tfds_store, source_handle, tfds_stores_in
        from sampler_server.core.baselines.sources import is_source_task
        from sampler_server.core.vtab import get_task
        from sampler_server.metrics.baselines.report import blind_risk
        from sampler_server.store.vtab_records import list_split

        data = self._stores("the blind guess of a task")
        if is_source_task(task):
            from sampler_server.catalog.registry import StoreRegistry

            return blind_risk(task, source_handle(StoreRegistry.from_data_dir(data), task).listing)
        vtab_task = get_task(task)
        records = pick_tfds_store(tfds_stores_in(data), vtab_task, None, where=f"in {data}", field="--store")
        return blind_risk(task, lambda split: list_split(records, vtab_task, split))


def blind_risks_from_data(data: Path) -> Callable[[str], float]:
    """``task -> R_blind`` over the packed stores in ``data``, as the server computes it."""
    return StoresContext(data).blind_risk


def run(args: argparse.Namespace) -> int:
    table = _chosen_table(args)
    query = _query(args)
    registry.check_query(table, query, registry.Entry.COMMAND)
    if table.needs_stores and args.data is None:
        where = f"with {table.flag}" if table.flag else f"for --table {table.name}"
        raise InvalidArgument(f"--data: required {where} ({table.needs_stores})")
    report = table.build(_open_metrics(args), query, StoresContext(args.data))
    print(table.render(report, args.format))
    if args.plots is not None and table.plot is not None:
        written = table.plot(report, args.plots, query)
        if args.format != "json":
            print(f"\nplots: {len(written)} PNG files in {args.plots}")
    failure = table.failure(report) if table.failure is not None else None
    if failure is not None:
        raise failure
    return 0

