"""``sampler-server report --run RUN [--run RUN2 ...]``: the Meta-Dataset, VTAB-1k, VTAB+MD or ImageNet-CoG table.

Reads the metrics the server stored (SQLite, or the PostgreSQL URL the servers were
given). The tables, their options and their refusals are the report registry's
(``metrics.registry``), the same the ``GetReport`` RPC reads: ``--table md`` (the
default) recomputes each reported episode's composition from the packed stores, so
trainers need to report only accuracies; ``--table vtab``, ``--table vtab-md`` and
``--table cog`` read stored numbers only and need no packed stores, just the metrics
file. ``--table cog --baseline RUN`` adds each cell's difference from RUN's same cell.
With several runs every table ends with each run compared with the first
(``registry.render``, ``metrics.compare``): the same computation (configuration and
stored results identical), or the configuration keys and results that differ. A ``--run``
with no reports of its own stands for the runs under it (``evaluate``'s
``RUN/<preset>/<learner>``, ``RUN/vtab``, ``RUN/cog``) that have the table's results, so
``--run RUN/md-v1`` puts one checkpoint's learners side by side (each column headed by
its learner, ranked by MD's rule) and ``--table vtab-md --run RUN`` each MD-v2 learner
beside ``RUN/vtab``.

``--calibrate --run A [--run B] --scratch RUN --max RUN`` is the control baselines'
calibrated report (``metrics.baselines.report``): risk, cR and cR_scratch per VTAB task
and regime, and each run's CCI (``--cci-seeds points``, the default: the reference
notebook's; ``mean``: each run averaged over its seeds first). It needs ``--data`` too: the blind guess of each task is
computed from the labels of its packed store (the most frequent label of the task's
"train" split, scored on its "test" split), as the server computes it.

``--card`` is the report card (``metrics.card``): the MD (one per preset), VTAB-1k,
VTAB+MD, CoG and calibrated tables of the runs side by side on one page, each built by its registered table from the
same options (``--vtab-benchmark``, ``--baseline``, ``--cci-seeds`` ...), markdown on the
terminal; ``--html FILE`` writes it as one self-contained HTML page with the plots
embedded, ``--plots DIR`` keeps the PNGs. Without ``--data`` the MD episodes are not
recomputed (no fingerprint check, no robustness plots) and the calibrated table is left
out; without ``--scratch``/``--max`` the card takes the metrics database's one scratch
and one max run, if it has exactly one of each.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from sampler_server.errors import FailedPrecondition, InvalidArgument, NotFound, SamplerError
from sampler_server.metrics import card, registry
from sampler_server.metrics.store import MetricsStore, metrics_target
from sampler_server.metrics.tables import FORMATS, check_runs
from sampler_server.quoting import quoted

RUNS_NAMED = 20
"""The most run ids an unknown ``--run`` lists from the metrics database."""


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
        "writes accuracy-vs-level and accuracy-vs-N plots. --card: the report card, every table of the runs side by "
        "side (markdown), --html FILE writes it as one HTML page with the plots embedded. With several runs every "
        "table ends with each run compared with the first: 'same computation' (configuration and stored results "
        "identical) or what differs (arguments, versions, device, threads, determinism, result_sha256, results). "
        "A --run with no reports of its own stands for the runs under it that have the table's results (evaluate's "
        "RUN/<preset>/<learner>, RUN/vtab, RUN/cog); each column is headed by its run's learner.",
    )
    parser.add_argument("--run", action="append", required=True, help="run id (repeat for several runs)")
    parser.add_argument("--data", type=Path,
                        help="the server's data directory (packed stores); required for "
                        + " and ".join(table.spelled(registry.Entry.COMMAND) for table in tables
                                       if table.needs_stores))
    parser.add_argument("--metrics", metavar="FILE|URL",
                        help="metrics SQLite file (default DATA/metrics.sqlite), or the postgresql:// URL the servers "
                        "were given")
    parser.add_argument("--format", choices=FORMATS, help="table (default), markdown or json")
    by_table = [table for table in tables if not table.flag]
    parser.add_argument("--table", choices=[table.name for table in by_table],
                        help="; ".join(f"{table.name}: {table.help}" for table in by_table)
                        + f" (default {registry.default_table().name})")
    parser.add_argument("--plots", type=Path, help="write the plots (PNG) into this directory")
    parser.add_argument("--card", action="store_true",
                        help="the report card: the " + ", ".join(t.title for t in card.CARD_TABLES)
                        + " and calibrated tables of the runs side by side, as markdown; a table no run has results "
                        "for is left out with one line")
    parser.add_argument("--html", type=Path, metavar="FILE",
                        help="--card: also write it as one self-contained HTML file (plots embedded as PNG data URIs)")
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
            if args.table not in (None, registry.default_table().name):
                refusal = table.refusal[1] if table.refusal is not None else "{flag}: not with " + table.flag
                raise InvalidArgument(refusal.format(flag=f"--table {args.table}"))
            return table
    return registry.table(args.table or "")


def _query(args: argparse.Namespace) -> registry.ReportQuery:
    values = {option.name: getattr(args, option.name) for option in registry.options()}
    return registry.ReportQuery(run_ids=tuple(args.run), format=args.format or "table", plots=args.plots,
                                **{name: value for name, value in values.items() if value is not None})


def _open_metrics(args: argparse.Namespace) -> MetricsStore:
    if args.metrics is None and args.data is None:
        raise InvalidArgument("--metrics or --data: neither given; one is needed to find the metrics database")
    target = metrics_target(args.metrics) if args.metrics is not None else args.data / "metrics.sqlite"
    if isinstance(target, Path) and not target.is_file():
        where = f" on {args.data}" if args.data is not None else ""
        raise NotFound(f"{target}: no metrics database (has a server{where} received reports?)")
    return MetricsStore(target)


def _check_runs_known(store: MetricsStore, run_ids: Iterable[str]) -> None:
    """``NotFound`` for the first run the metrics database lacks, naming the runs it has
    (the command reads the whole file, so it may list them; the server names none)."""
    known: list[str] | None = None
    for run in run_ids:
        known = store.run_ids() if known is None else known
        if run not in known:
            listed = ", ".join(known[:RUNS_NAMED]) + (f" and {len(known) - RUNS_NAMED} more"
                                                      if len(known) > RUNS_NAMED else "")
            raise NotFound(f"run {quoted(run)} has no reports; {store.name} has "
                           + (f"runs {listed}" if known else "no runs"))


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


def _expand_runs(store: MetricsStore, query: registry.ReportQuery,
                 table: registry.ReportTable) -> registry.ReportQuery:
    """``query`` with each run id that has no reports of its own but runs under it
    (``evaluate``'s ``RUN/<preset>/<learner>``, ``RUN/vtab``, ``RUN/cog``; ``card.expand_runs``)
    replaced by those of them with results in ``table`` (the card's tables: md, vtab,
    vtab-md, cog), so ``--run RUN`` puts an evaluated checkpoint's learners side by side.
    ``NotFound`` where none of them has any; other tables take the run ids as given."""
    shown = next((entry for entry in card.CARD_TABLES if entry.name == table.name), None)
    if shown is None:
        return query
    known = store.run_ids()
    asked = [run for run in query.run_ids if run not in known]
    under = {run: card.expand_runs([run], known) for run in asked}
    under = {run: runs for run, runs in under.items() if runs != (run,)}
    if not under:
        return query
    expanded = card.expand_runs(query.run_ids, known)
    having = set(shown.runs_with_results(table.build(store, dataclasses.replace(query, run_ids=expanded), None)))
    for run, runs in under.items():
        if not having & set(runs):
            raise NotFound(f"run {quoted(run)}: no reports of its own, and none of the runs under it "
                           f"({', '.join(runs)}) has {shown.results}")
    kept = [run for run in expanded if run in having or run in query.run_ids]
    return dataclasses.replace(query, run_ids=tuple(kept))


def run(args: argparse.Namespace) -> int:
    if args.card:
        return run_card(args)
    if args.html is not None:
        raise InvalidArgument("--html: only with --card (the report card as one HTML file)")
    table = _chosen_table(args)
    query = _query(args)
    registry.check_query(table, query, registry.Entry.COMMAND)
    if table.needs_stores and args.data is None:
        where = f"with {table.flag}" if table.flag else f"for --table {table.name}"
        raise InvalidArgument(f"--data: required {where} ({table.needs_stores})")
    store = _open_metrics(args)
    query = _expand_runs(store, query, table)
    _check_runs_known(store, registry.run_ids_named(query))
    report = table.build(store, query, StoresContext(args.data))
    print(registry.render(table, report, query, store))
    if args.plots is not None and table.plot is not None:
        written = table.plot(report, args.plots, query)
        if query.format != "json":
            print(f"\nplots: {len(written)} PNG files in {args.plots}")
    failure = table.failure(report) if table.failure is not None else None
    if failure is not None:
        raise failure
    return 0



# ---- the report card ------------------------------------------------------------------------


def _check_card_flags(args: argparse.Namespace, query: registry.ReportQuery) -> None:
    """Refuse what the card does not take: a table choice, a format, one control run alone,
    plot-only options without anywhere to draw."""
    if args.table is not None:
        raise InvalidArgument(f"--table: not with --card (got --table {args.table}; the card shows every table)")
    for table in registry.tables():
        if table.flag and getattr(args, _flag_dest(table)):
            raise InvalidArgument(f"{table.flag}: not with --card (the card has the {table.name} table where the "
                                  "scratch and max runs exist; name them with --scratch and --max)")
    if args.format is not None:
        raise InvalidArgument(f"--format: not with --card (got --format {args.format}; the card is markdown, "
                              "--html FILE writes it as HTML)")
    if bool(query.scratch_run) != bool(query.max_run):
        given, missing = ("--scratch", "--max") if query.scratch_run else ("--max", "--scratch")
        raise InvalidArgument(f"{missing}: required with {given} (the card calibrates against both control runs; "
                              "give neither to take the metrics database's own)")
    if query.plots is None and args.html is None:
        for option in registry.options():
            if option.with_plots and query.given(option.name):
                raise InvalidArgument(f"{option.flag}: only with --plots DIR or --html FILE (it adds plots)")


def _plots(table: registry.ReportTable, report: Any, directory: Path | None,
           query: registry.ReportQuery, folder: str = "") -> tuple[card.Plot, ...]:
    if directory is None or table.plot is None:
        return ()
    written = table.plot(report, directory / folder if folder else directory, query)
    return tuple(card.Plot(f"{folder}/{path.name}" if folder else path.name, path.read_bytes()) for path in written)


def _card_sections(
    store: MetricsStore, query: registry.ReportQuery, context: StoresContext | None, shown: card.CardTable,
    plots: Path | None,
) -> list[tuple[card.Section, SamplerError | None]]:
    """The card's table ``shown``: one section, or one per group of runs where its
    ``groups`` part them in several (the MD table: one per preset), the runs in no group
    named above the first."""
    groups = shown.groups(store, query.run_ids) if shown.groups is not None else {}
    if len(groups) < 2:
        return [_card_section(store, query, context, shown, plots)]
    grouped = {run for runs in groups.values() for run in runs}
    ungrouped = [run for run in query.run_ids if run not in grouped]
    lacking = (card.lacking_line(shown.results, ungrouped),) if ungrouped else ()
    sections = []
    for name, runs in groups.items():
        titled = dataclasses.replace(shown, title=f"{shown.title} ({name})", plots_folder=name)
        section, failure = _card_section(store, dataclasses.replace(query, run_ids=tuple(runs)), context, titled,
                                         plots)
        sections.append((dataclasses.replace(section, lines=lacking + section.lines) if not sections else section,
                         failure))
    return sections


def _card_section(
    store: MetricsStore, query: registry.ReportQuery, context: StoresContext | None, shown: card.CardTable,
    plots: Path | None,
) -> tuple[card.Section, SamplerError | None]:
    """One table of the card over the runs that have its results (all of ``query``'s first);
    the error its table would exit with (MD: fingerprint mismatches). ``context`` None (no
    ``--data``): the MD table reads the stored accuracies without recomputing episodes."""
    table = registry.table(shown.name)
    report = table.build(store, query, context)
    having = shown.runs_with_results(report)
    if not having:
        return card.left_out(shown.title, f"no {shown.results} for {', '.join(query.run_ids)}"), None
    lacking = [run for run in query.run_ids if run not in having]
    lines = [card.lacking_line(shown.results, lacking)] if lacking else []
    if lacking:
        query = dataclasses.replace(query, run_ids=tuple(having))
        report = table.build(store, query, context)
    if shown.name == "md" and context is None:
        lines.append("fingerprints not checked: without --data the reported episodes are not recomputed")
    failure = table.failure(report) if table.failure is not None else None
    section = card.Section(shown.title, table.render(report, "markdown"), tuple(lines),
                           _plots(table, report, plots, query, shown.plots_folder))
    return section, failure


def _calibrated_section(
    store: MetricsStore, query: registry.ReportQuery, context: StoresContext | None, plots: Path | None,
) -> card.Section:
    """The calibrated table of the model runs shown, against the scratch and max runs the
    query names or, named by neither, the metrics database's only ones (then whatever keeps
    it from being computed leaves it out with a line instead of failing the card)."""
    shown = card.CALIBRATED
    table = registry.table(shown.name)
    chosen = bool(query.scratch_run)
    if chosen:
        controls = card.ControlRuns(query.scratch_run, query.max_run)
    else:
        controls = card.control_runs({run: store.run_role(run) for run in store.run_ids()})
        if controls.missing:
            return card.left_out(shown.title, controls.missing)
    if context is None:
        if chosen:
            raise InvalidArgument(f"--data: required for the calibrated table ({table.needs_stores})")
        return card.left_out(shown.title, f"it needs --data ({table.needs_stores})")
    models = tuple(run for run in query.run_ids
                   if run not in (controls.scratch, controls.max) and store.run_role(run) == "model")
    if not models:
        return card.left_out(shown.title, f"no {shown.results} for {', '.join(query.run_ids)}")
    asked = dataclasses.replace(query, run_ids=models, scratch_run=controls.scratch or "", max_run=controls.max or "")
    try:
        report = table.build(store, asked, context)
    except (FailedPrecondition, NotFound) as error:
        if chosen:
            raise
        return card.left_out(shown.title, f"against {controls.scratch} (scratch) and {controls.max} (max): {error}")
    having = shown.runs_with_results(report)
    if not having:
        return card.left_out(shown.title, f"no {shown.results} for {', '.join(query.run_ids)}")
    lacking = [run for run in query.run_ids if run not in having]
    lines = [card.lacking_line(shown.results, lacking)] if lacking else []
    if not chosen:
        lines.append(f"control runs: {controls.scratch} (scratch), {controls.max} (max), the metrics database's only "
                     "ones (--scratch and --max pick others)")
    return card.Section(shown.title, table.render(report, "markdown"), tuple(lines), _plots(table, report, plots, asked))


def run_card(args: argparse.Namespace) -> int:
    """``report --card``: every table of the runs on one page (markdown on stdout, ``--html``
    as a file, ``--plots`` kept); exits with the MD table's failure after writing, as ``report`` does."""
    query = dataclasses.replace(_query(args), format="markdown")
    _check_card_flags(args, query)
    check_runs(query.run_ids)
    store = _open_metrics(args)
    query = dataclasses.replace(query, run_ids=card.expand_runs(query.run_ids, store.run_ids()))
    _check_runs_known(store, registry.run_ids_named(query))
    context = StoresContext(args.data) if args.data is not None else None
    provenance = [f"metrics: {store.name}"
                  + (f"; packed stores: {args.data}" if args.data is not None else "; no --data (packed stores)"),
                  *card.input_lines({run: store.run_config(run) for run in query.run_ids})]
    failures: list[SamplerError] = []
    with tempfile.TemporaryDirectory(prefix="sampler-card-") as scratch:
        directory = args.plots if args.plots is not None else (Path(scratch) if args.html is not None else None)
        sections = []
        for shown in card.CARD_TABLES:
            for section, failure in _card_sections(store, query, context, shown, directory):
                sections.append(section)
                failures += [failure] if failure is not None else []
        sections.append(_calibrated_section(store, query, context, directory))
    page = card.Card(runs=query.run_ids, sections=tuple(sections), provenance=tuple(provenance),
                     plots_dir=str(args.plots) if args.plots is not None else "")
    print(card.render_markdown(page), end="")
    if args.html is not None:
        args.html.parent.mkdir(parents=True, exist_ok=True)
        args.html.write_text(card.render_html(page), encoding="utf-8")
        print(f"\nhtml: {args.html}")
    if failures:
        raise failures[0]
    return 0
