"""The report protocols and report tables, each registered once, in its protocol's package.

A protocol registers (in its package's ``protocol`` module, listed once in
``PROTOCOL_PACKAGES``) its report parser (``ReportProtocol``: a wire ``MetricReport`` ->
the result the metrics store keeps, refused with one line naming the field) under its
id from ``sampler_common.protocols``; a table registers its builder, renderer, plots and
the options it reads (``ReportTable``). ``ReportMetrics``, ``GetReport`` and
``sampler-server report`` all read this registry, so adding a protocol or a table is
adding its module and one registration, nothing else.

What a parser or table needs from whoever serves it (recompute an episode, the blind
guess of a task) comes in through a ``ReportContext``: the server passes its own, the
report command one over a data directory. Nothing here imports the service or gRPC.

Options are spelled twice, as ``GetReport`` fields (``Entry.WIRE``) and as the command's
flags (``Entry.COMMAND``); an option given with a table that does not read it is refused
with the refusal its declaring table wrote for that entry point, or the asked table's
own refusal where it has one.

With several runs a report ends with the runs compared (``render``, ``metrics.compare``):
each against the first, the same computation or what differs, read from the same store by
both entry points.
"""

from __future__ import annotations

import enum
import importlib
import json
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sampler_server.errors import InvalidArgument, SamplerError
from sampler_server.metrics import compare
from sampler_server.metrics.store import MetricsStore
from sampler_server.quoting import quoted
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb

PROTOCOL_PACKAGES = ("md", "vtab", "cog", "baselines", "held")
"""The packages under ``sampler_server.metrics`` whose ``protocol`` module declares a
protocol's registration: ``PROTOCOLS`` (its parsers) and ``TABLES``, registered in this
order when the registry is first read (importing a ``protocol`` module registers nothing)."""


class ReportContext(Protocol):
    """What the server (or the report command, from a data directory) lends the parsers and tables."""

    def episode(self, request: pb.EpisodeRequest | Mapping[str, Any], seed: int, index: int) -> Any:
        """The episode ``request`` names at (seed, index), recomputed from the stores."""

    def blind_risk(self, task: str) -> float:
        """The blind guess's test risk on ``task`` (control baselines)."""


class Entry(enum.Enum):
    """Where a report is asked for: the ``GetReport`` RPC or the ``report`` command."""

    WIRE = "wire"
    COMMAND = "command"


@dataclass(frozen=True)
class ReportQuery:
    """A report request as both entry points give it (empty: not given)."""

    run_ids: tuple[str, ...]
    format: str = "table"
    baseline_run: str = ""
    scratch_run: str = ""
    max_run: str = ""
    cci_seeds: str = ""
    vtab_benchmark: str = ""
    vtab_split: str = ""
    plots: Path | None = None
    plots_per_n: bool = False

    def given(self, name: str) -> bool:
        return bool(getattr(self, name))


@dataclass(frozen=True)
class ReportOption:
    """An option one table reads. The refusals are what a table that does not read it
    answers: ``wire_refusal`` formatted with ``name`` and ``table`` (the table asked for),
    ``command_refusal`` with ``flag`` and ``table``."""

    name: str  # the ReportQuery attribute (and GetReportRequest field when ``on_wire``)
    flag: str  # the report command's flag
    wire_refusal: str
    command_refusal: str
    help: str = ""  # the command's help for its flag
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    switch: bool = False  # the command's flag takes no value
    on_wire: bool = True
    with_plots: bool = False  # the command takes it only with --plots
    names_run: bool = False  # its value is a run id (read-permission checks cover it)

    def refusal(self, entry: Entry, table: str) -> str:
        if entry is Entry.WIRE:
            return self.wire_refusal.format(name=self.name, table=table)
        return self.command_refusal.format(flag=self.flag, table=table)


@dataclass(frozen=True)
class Requirement:
    """An option a table cannot do without, and each entry point's refusal when it is empty."""

    name: str
    wire_message: str
    command_message: str


@dataclass(frozen=True)
class ReportProtocol:
    """A report protocol: its wire id and its parser (``MetricReport`` -> stored result)."""

    id: str
    parse: Callable[[pb.MetricReport, ReportContext], Any]


@dataclass(frozen=True)
class ReportTable:
    """A report table.

    ``build(store, query, context)`` reads the stored results into a report,
    ``render(report, fmt)`` writes it, ``plot(report, directory, query)`` draws it (the
    command's ``--plots``), ``failure(report)`` is the error the command exits with after
    printing (MD: fingerprint mismatches). ``refusal`` (wire, command templates with
    ``name`` / ``flag``) replaces the options' own refusals with this table's;
    ``wire_ignores`` are options ``GetReport`` has always accepted and ignored with it.
    ``needs_stores`` says why the command needs ``--data`` (its context) for it;
    ``flag`` picks it in the command instead of ``--table``. ``compares_runs`` False: a
    table for machines (``held``) that ``render`` leaves as the table writes it.
    """

    name: str
    help: str
    build: Callable[[MetricsStore, ReportQuery, ReportContext], Any]
    render: Callable[[Any, str], str]
    options: tuple[ReportOption, ...] = ()
    required: tuple[Requirement, ...] = ()
    refusal: tuple[str, str] | None = None
    wire_ignores: tuple[str, ...] = ()
    plot: Callable[[Any, Path, ReportQuery], list[Path]] | None = None
    failure: Callable[[Any], SamplerError | None] | None = None
    needs_stores: str = ""
    flag: str = ""
    default: bool = False  # the table of an empty ``GetReport.table`` and of the command without --table
    compares_runs: bool = True  # with several runs, ``render`` ends with their comparison (``metrics.compare``)

    def reads(self, name: str) -> bool:
        return any(option.name == name for option in self.options)

    def spelled(self, entry: Entry) -> str:
        """How an entry point names this table in its messages."""
        if entry is Entry.WIRE:
            return self.name
        return self.flag or f"--table {self.name}"


@dataclass
class _Registry:
    protocols: dict[str, ReportProtocol] = field(default_factory=dict)
    tables: dict[str, ReportTable] = field(default_factory=dict)
    loaded: bool = False


_REGISTRY = _Registry()
_LOCK = threading.RLock()


def _loaded() -> _Registry:
    """The registry, with every package of ``PROTOCOL_PACKAGES`` registered (once)."""
    with _LOCK:
        if not _REGISTRY.loaded:
            _REGISTRY.loaded = True
            for package in PROTOCOL_PACKAGES:
                module = importlib.import_module(f"sampler_server.metrics.{package}.protocol")
                for protocol in module.PROTOCOLS:
                    register_protocol(protocol)
                for table in module.TABLES:
                    register_table(table)
        return _REGISTRY


def register_protocol(protocol: ReportProtocol) -> ReportProtocol:
    """Add a report protocol (``ValueError`` for an id already registered)."""
    with _LOCK:
        registry = _loaded()
        if protocol.id in registry.protocols:
            raise ValueError(f"report protocol {protocol.id!r} is registered already")
        registry.protocols[protocol.id] = protocol
    return protocol


def unregister_protocol(protocol_id: str) -> None:
    with _LOCK:
        del _loaded().protocols[protocol_id]


def register_table(table: ReportTable) -> ReportTable:
    """Add a report table (``ValueError`` for a name, or an option another table declares, already registered)."""
    with _LOCK:
        registry = _loaded()
        if table.name in registry.tables:
            raise ValueError(f"report table {table.name!r} is registered already")
        declared = {option.name for other in registry.tables.values() for option in other.options}
        for option in table.options:
            if option.name in declared:
                raise ValueError(f"report table {table.name!r}: option {option.name!r} is another table's")
        if table.default and any(other.default for other in registry.tables.values()):
            raise ValueError(f"report table {table.name!r}: another table is the default")
        registry.tables[table.name] = table
    return table


def unregister_table(name: str) -> None:
    with _LOCK:
        del _loaded().tables[name]


def protocols() -> tuple[ReportProtocol, ...]:
    with _LOCK:
        return tuple(_loaded().protocols.values())


def tables() -> tuple[ReportTable, ...]:
    with _LOCK:
        return tuple(_loaded().tables.values())


def options() -> tuple[ReportOption, ...]:
    """Every table's options, in table order."""
    return tuple(option for table in tables() for option in table.options)


def default_table() -> ReportTable:
    return next(table for table in tables() if table.default)


def table(name: str) -> ReportTable:
    """The table called ``name`` (empty: the default one); ``InvalidArgument`` naming them otherwise."""
    known = {t.name: t for t in tables()}
    if not name:
        return default_table()
    if name not in known:
        raise InvalidArgument(f"table: got {quoted(name)}, expected one of {', '.join(known)}")
    return known[name]


def parse_reports(reports: Sequence[pb.MetricReport], context: ReportContext) -> list[Any]:
    """The stored results of a ``ReportMetrics`` request: every report's protocol checked
    first, then each parsed by its protocol's parser, protocol by protocol in registration
    order (the order they are written in)."""
    known = {p.id: p for p in protocols()}
    for report in reports:
        if report.protocol not in known:
            raise InvalidArgument(f"reports.protocol: got {quoted(report.protocol)}, expected one of "
                                  f"{', '.join(map(repr, known))}")
    return [known[p].parse(report, context) for p in known for report in reports if report.protocol == p]


def query_from_wire(request: pb.GetReportRequest) -> ReportQuery:
    return ReportQuery(
        run_ids=tuple(request.run_ids), format=request.format or "table", baseline_run=request.baseline_run,
        scratch_run=request.scratch_run, max_run=request.max_run, cci_seeds=request.cci_seeds,
        vtab_benchmark=request.vtab_benchmark, vtab_split=request.vtab_split,
    )


def check_query(chosen: ReportTable, query: ReportQuery, entry: Entry) -> None:
    """Refuse what ``chosen`` cannot take: an option it does not read (in table order of
    the options), then an option it requires left empty, then (the command) an option that
    only adds plots given without ``--plots``. One ``InvalidArgument`` line each."""
    for option in options():
        if chosen.reads(option.name) or not query.given(option.name):
            continue
        if entry is Entry.WIRE and (not option.on_wire or option.name in chosen.wire_ignores):
            continue
        if chosen.refusal is not None:
            wire, command = chosen.refusal
            raise InvalidArgument(wire.format(name=option.name) if entry is Entry.WIRE
                                  else command.format(flag=option.flag))
        raise InvalidArgument(option.refusal(entry, chosen.name))
    for requirement in chosen.required:
        if not query.given(requirement.name):
            raise InvalidArgument(requirement.wire_message if entry is Entry.WIRE else requirement.command_message)
    if entry is Entry.COMMAND and query.plots is None:
        for option in chosen.options:
            if option.with_plots and query.given(option.name):
                raise InvalidArgument(f"{option.flag}: only with --plots DIR (it adds plots to that directory)")


def run_ids_named(query: ReportQuery) -> Iterable[str]:
    """Every run a query names: its runs, then the runs its options name (given or not
    read by the table asked for: a caller learns nothing of a run it may not read)."""
    yield from query.run_ids
    for option in options():
        if option.names_run and query.given(option.name):
            yield getattr(query, option.name)


def run_record(store: MetricsStore, run_id: str) -> compare.RunRecord:
    """A run's configuration and every stored result of it (MD episodes, VTAB task results
    of every regime, CoG results), as ``compare`` reads them."""
    return compare.run_record(run_id, store.run_config(run_id), store.reports(run_id),
                              store.task_results(run_id, regime=None), store.cog_results(run_id))


def render(chosen: ReportTable, report: Any, query: ReportQuery, store: MetricsStore) -> str:
    """``chosen``'s report as ``query.format`` writes it, what ``GetReport`` answers and the
    command prints. With several runs (and a table that ``compares_runs``) it ends with each
    run compared with the first (same computation, or what differs): a section after the
    table, or a "comparison" key where the JSON is an object."""
    text = chosen.render(report, query.format)
    if len(query.run_ids) < 2 or not chosen.compares_runs:
        return text
    comparisons = compare.compare_with_first([run_record(store, run) for run in query.run_ids])
    if query.format == "json":
        data = json.loads(text)
        if not isinstance(data, dict):
            return text
        return json.dumps({**data, "comparison": compare.comparisons_json(comparisons)}, indent=1)
    return text + "\n\n" + compare.render_comparisons(comparisons, query.format)
