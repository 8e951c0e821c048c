"""SQLite (WAL) store of per-episode metric reports.

A report is keyed by (run id, protocol, source, split, seed, index): what makes an
evaluated episode unique (the same index under another seed is another episode).
Writing the same key again is acknowledged as a duplicate and changes nothing, so a
trainer that retries after a lost acknowledgement never double-counts. A duplicate
whose fingerprint or metrics differ from what is stored is refused: that is a
different result claiming the same episode. Each report keeps the episode
fingerprint and the canonical request it came from, so the composition (ways,
shots) can be recomputed exactly.

A run's configuration is stored once, with its first report that carries one: the
first write wins, the same configuration again is accepted, and a different one for
that run is refused (FAILED_PRECONDITION), so a run id cannot silently mix two setups.

A run belongs to the token that created it (its ``owner``, the token's name): once
the server checks tokens, only that owner or an admin may write to it, and anything
else is refused with PERMISSION_DENIED (which names no owner). A run written while no
tokens were configured has no owner (NULL): anyone writes to it without tokens, only
an admin with them. Reads are filtered by the service, not here.

VTAB-1k task results (``TaskResult``) live beside the episode reports, one row per
(run id, task, split): a task is evaluated once per split, so that key makes a
retried write a duplicate, and a different accuracy or example count for the same
key is refused. They share the ``runs`` table, hence the run's owner and its
configuration (stored once, as for episode reports).

ImageNet-CoG results (``CogResult``) are a third kind, one row per (run id, level,
shots, seed): a linear classifier is trained once per level, number of training
images per concept and seed, so that key makes a retry a duplicate; a different
accuracy, example count or hyper-parameter for the same key is refused. They too
share the ``runs`` table (owner and configuration).

Control baselines key a VTAB task result also by its data regime: (run id, task,
split, regime, regime seed), regime 0 being the task's usual training split (and its
seed 0), so one run reports one result per regime and seed. Each result carries the
run's role (``model``, ``scratch`` or ``max``): a run has one role, a result with
another role for the same run is refused, and a ``max`` run trains on all training
data (regime 0 only).

Where reports live is the backend's business (``store_sql`` says what the two differ
in): a SQLite file, the embedded default (``store_sqlite``, which also migrates every
older schema version), or a PostgreSQL database that many replicas share
(``store_postgres``). The rules here are written once and run on both: every write of a
batch happens in one transaction that first creates and locks the runs it writes, so
concurrent writers (threads, or replicas on one database) take turns per run and a
retried batch finds what an earlier one committed. Schema version 6 (``store_sql``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sampler_server.errors import FailedPrecondition, InvalidArgument, NotFound, PermissionDenied
from sampler_server.metrics.cog.results import CogResult
from sampler_server.metrics.run_config import defining
from sampler_server.metrics.store_postgres import PostgresDatabase, is_postgres_url, parse_url
from sampler_server.metrics.store_sql import MAX_INTEGER, REPORT_COLUMNS, SCHEMA_VERSION, TASK_COLUMNS, Database
from sampler_server.metrics.store_sqlite import SqliteDatabase
from sampler_server.metrics.vtab.results import TaskResult
from sampler_server.quoting import quoted

__all__ = ["SCHEMA_VERSION", "CogResult", "MetricsStore", "StoredReport", "TaskResult", "metrics_target",
           "validate_run_id"]

MAX_RUN_ID = 200


@dataclass(frozen=True)
class StoredReport:
    run_id: str
    protocol: str
    source: str
    split: str
    index: int
    seed: int
    fingerprint: str
    metrics: Mapping[str, float]
    request: Mapping[str, Any] = field(default_factory=dict)
    predicted: tuple[int, ...] = ()

    def key(self) -> tuple[str, str, str, str, int, int]:
        return (self.run_id, self.protocol, self.source, self.split, self.seed, self.index)


def validate_run_id(run_id: str) -> str:
    if not run_id or len(run_id) > MAX_RUN_ID or not run_id.isprintable():
        raise InvalidArgument(f"run_id: got {quoted(run_id)}, expected 1 to {MAX_RUN_ID} printable characters")
    return run_id


def metrics_target(text: str) -> Path | str:
    """What ``--metrics`` names: a ``postgresql://`` URL (checked, not yet connected) or a
    SQLite file; ``InvalidArgument`` for a URL of another scheme or a bad PostgreSQL URL."""
    if is_postgres_url(text):
        parse_url(text)
        return text
    if "://" in text:
        raise InvalidArgument(f"--metrics: got a {text.split('://', 1)[0]}:// URL, expected a SQLite file or a "
                              "postgresql:// URL")
    return Path(text)


class MetricsStore:
    """Thread-safe: one connection, serialised by a lock (writes are small).

    ``target``: a SQLite file (created when missing) or a ``postgresql://`` URL
    (``store_postgres``).
    """

    def __init__(self, target: str | Path) -> None:
        self._lock = threading.Lock()
        self._db: Database
        if is_postgres_url(target):
            self._db = PostgresDatabase(str(target))
            self.path: Path | None = None
        else:
            self._db = SqliteDatabase(target)
            self.path = self._db.path

    @property
    def name(self) -> str:
        """The file or the URL (without its password) the reports live in."""
        return self._db.name

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def add(
        self, reports: Iterable[StoredReport], run_config_json: str = "", *, owner: str | None = None,
        admin: bool = False,
    ) -> tuple[int, int]:
        """Store reports atomically; returns (stored, duplicates).

        Args:
            reports: the reports; all or none are stored.
            run_config_json: recorded for each run these reports belong to that has no
                configuration yet.
            owner: the writing token's name, recorded on runs it creates; None when the
                server checks no tokens (then any run may be written).
            admin: the writer may write to any run (it still owns the runs it creates).

        Raises:
            PermissionDenied: a run belongs to another owner (or to none, and ``owner`` is
                given without ``admin``).
            Unavailable: the database cannot be reached (nothing is stored).
        """
        return self.add_batch(list(reports), run_config_json, owner=owner, admin=admin)

    def _write_report(self, report: StoredReport) -> bool:
        for name, value in (("seed", report.seed), ("index", report.index)):
            if not 0 <= value <= MAX_INTEGER:
                raise InvalidArgument(f"reports.{name}: got {value} for {report.source} {report.split}; the "
                                      f"metrics store keeps {name}s 0 to {MAX_INTEGER}")
        row = self._db.execute(
            "SELECT fingerprint, metrics_json FROM reports WHERE run_id=? AND protocol=? AND source=? "
            "AND split=? AND seed=? AND idx=?",
            report.key(),
        ).fetchone()
        metrics_json = json.dumps(dict(report.metrics), sort_keys=True)
        if row is not None:
            if tuple(row) != (report.fingerprint, metrics_json):
                raise FailedPrecondition(
                    f"run {report.run_id!r} already has a different result for {report.source} "
                    f"{report.split} seed {report.seed} episode {report.index}; a run reports each "
                    "episode once"
                )
            return False
        run_id, protocol, source, split, seed, index = report.key()
        self._db.execute(
            f"INSERT INTO reports({REPORT_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (run_id, protocol, source, split, index, seed, report.fingerprint, metrics_json,
             json.dumps(dict(report.request), sort_keys=True), json.dumps(list(report.predicted))),
        )
        return True

    def _hold_runs(self, run_ids: list[str], owner: str | None, admin: bool) -> None:
        """Create the runs that do not exist (owned by ``owner``), hold each until the
        transaction ends, and check that ``owner`` may write to every one."""
        owners: dict[str, str | None] = {}
        for run_id in sorted(run_ids):  # one order for every writer: no two wait on each other in a cycle
            self._db.execute("INSERT INTO runs(run_id, owner) VALUES (?, ?) ON CONFLICT DO NOTHING", (run_id, owner))
            (owners[run_id],) = self._db.execute(
                "SELECT owner FROM runs WHERE run_id=?" + self._db.dialect.lock_rows, (run_id,)).fetchone()
        if owner is None or admin:
            return
        for run_id in run_ids:
            if owners[run_id] != owner:
                raise PermissionDenied(
                    f"run {run_id!r} belongs to another token (it was created by another team, or before tokens "
                    "were checked); report under a run id of your own"
                )

    def _set_config_once(self, run_id: str, config: str) -> None:
        (current,) = self._db.execute("SELECT config_json FROM runs WHERE run_id=?", (run_id,)).fetchone()
        if current is None:
            self._db.execute("UPDATE runs SET config_json = ? WHERE run_id = ?", (config, run_id))
        elif _defining_json(current) != _defining_json(config):
            # what it was computed with (versions, device, threads) may differ: the results are checked one by one
            raise FailedPrecondition(
                f"run_config_json: run {run_id!r} already has a different configuration (stored with its first "
                "report); use a new run id for a new configuration"
            )

    def add_task_results(
        self, results: Iterable[TaskResult], run_config_json: str = "", *, owner: str | None = None,
        admin: bool = False,
    ) -> tuple[int, int]:
        """Store VTAB task results atomically; returns (stored, duplicates).

        What ``ReportMetrics`` stores for VTAB tasks (through ``add_batch``), with the
        same ``run_config_json``, ``owner`` and ``admin`` as ``add``: the run is created
        and owned, and its configuration kept once, exactly as for episode reports. A result whose key
        (run, task, split, regime, regime seed) is stored already counts as a duplicate
        when its accuracy, example count and role are equal, and is refused otherwise.

        Raises:
            InvalidArgument: an unknown task or split, an accuracy outside [0, 1], fewer
                than one example, an unknown role, a regime seed without a regime, a
                ``max`` result with a regime, or a bad run id (nothing is stored).
            FailedPrecondition: a different result for a stored key, a role other than
                the run's, or a different configuration for a configured run (nothing
                is stored).
            PermissionDenied: a run belongs to another owner (as in ``add``).
        """
        return self.add_batch(list(results), run_config_json, owner=owner, admin=admin)

    def _write_task_result(self, result: TaskResult) -> bool:
        role = self._db.execute("SELECT role FROM task_results WHERE run_id=? LIMIT 1", (result.run_id,)).fetchone()
        if role is not None and role[0] != result.role:
            raise FailedPrecondition(
                f"role: run {result.run_id!r} is a {role[0]} run, got {result.role!r} for {result.where()}; "
                "a run has one role (report the other role under another run id)"
            )
        row = self._db.execute(
            "SELECT accuracy, examples FROM task_results WHERE run_id=? AND task=? AND split=? AND regime=? "
            "AND regime_seed=?", result.key(),
        ).fetchone()
        if row is not None:
            if row != (float(result.accuracy), result.examples):
                raise FailedPrecondition(
                    f"run {result.run_id!r} already has a different result for {result.where()}; a run reports "
                    "each task, split and regime once"
                )
            return False
        self._db.execute(
            f"INSERT INTO task_results({TASK_COLUMNS}) VALUES (?,?,?,?,?,?,?,?)",
            (*result.key(), result.role, float(result.accuracy), result.examples),
        )
        return True

    def add_batch(
        self, results: Iterable[StoredReport | TaskResult | CogResult], run_config_json: str = "", *,
        owner: str | None = None, admin: bool = False,
    ) -> tuple[int, int]:
        """Store episode reports, VTAB task results and CoG results together, all or none:
        what one ``ReportMetrics`` request carries; returns (stored, duplicates).

        Each kind is checked, deduplicated and refused as ``add``, ``add_task_results`` and
        ``add_cog_results`` say, with the same ``run_config_json``, ``owner`` and ``admin``.
        In one transaction: each result's run is created (or found), held until the
        transaction ends, and checked for ownership; then configured once; then each result
        is written (stored, or a duplicate).
        """
        written = self.write_batch(results, run_config_json, owner=owner, admin=admin)
        return sum(written), len(written) - sum(written)

    def write_batch(
        self, results: Iterable[StoredReport | TaskResult | CogResult], run_config_json: str = "", *,
        owner: str | None = None, admin: bool = False,
    ) -> list[bool]:
        """``add_batch``, saying for each result, in order, whether it was stored (True) or a
        duplicate (False)."""
        checked = [result if isinstance(result, StoredReport) else result.validate() for result in results]
        config = _canonical_config(run_config_json) if run_config_json else None
        run_ids = [validate_run_id(run_id) for run_id in dict.fromkeys(result.run_id for result in checked)]
        writers: dict[type, Callable[[Any], bool]] = {
            StoredReport: self._write_report, TaskResult: self._write_task_result, CogResult: self._write_cog_result,
        }
        with self._lock, self._db.transaction():
            self._hold_runs(run_ids, owner, admin)
            if config is not None:
                for run_id in run_ids:
                    self._set_config_once(run_id, config)
            return [bool(writers[type(result)](result)) for result in checked]

    def add_cog_results(
        self, results: Iterable[CogResult], run_config_json: str = "", *, owner: str | None = None,
        admin: bool = False,
    ) -> tuple[int, int]:
        """Store ImageNet-CoG results atomically; returns (stored, duplicates).

        What ``ReportMetrics`` stores for protocol "cog" (through ``add_batch``), with the
        same ``run_config_json``, ``owner`` and ``admin`` as ``add``. A result whose key
        (run, level, shots, seed) is stored already counts as a duplicate when its
        accuracy, example count and extras are all equal, and is refused otherwise.

        Raises:
            InvalidArgument: a field outside what ``CogResult.validate`` allows (nothing
                is stored).
            FailedPrecondition: a different result for a stored key, or a different
                configuration for a configured run (nothing is stored).
            PermissionDenied: a run belongs to another owner (as in ``add``).
        """
        return self.add_batch(list(results), run_config_json, owner=owner, admin=admin)

    def _write_cog_result(self, result: CogResult) -> bool:
        row = self._db.execute(
            "SELECT accuracy, examples, extras_json FROM cog_results WHERE run_id=? AND level=? AND shots=? AND seed=?",
            result.key(),
        ).fetchone()
        values = (float(result.accuracy), result.examples, result.extras_json())
        if row is not None:
            if row != values:
                raise FailedPrecondition(
                    f"run {result.run_id!r} already has a different result for CoG {result.where()} (stored: "
                    f"accuracy {row[0]!r} over {row[1]} examples); a run reports each level, N and seed once"
                )
            return False
        self._db.execute(
            "INSERT INTO cog_results(run_id, level, shots, seed, accuracy, examples, extras_json) "
            "VALUES (?,?,?,?,?,?,?)",
            (*result.key(), *values),
        )
        return True

    def cog_results(self, run_id: str) -> list[CogResult]:
        """A run's ImageNet-CoG results, sorted by (level, shots, seed).

        Raises:
            NotFound: no run ``run_id`` (as ``reports``).
        """
        self.run_config(run_id)  # NotFound for an unknown run
        with self._lock:
            rows = self._db.execute(
                "SELECT run_id, level, shots, seed, accuracy, examples, extras_json FROM cog_results WHERE run_id=? "
                "ORDER BY level, shots, seed",
                (run_id,),
            ).fetchall()
        return [CogResult(*row[:6], extras=json.loads(row[6])) for row in rows]

    def task_results(self, run_id: str, split: str | None = None, regime: int | None = 0) -> list[TaskResult]:
        """A run's VTAB task results, sorted by (task, split, regime, regime seed): those of
        ``split`` only, if given, and of ``regime`` only (default 0, the usual training
        split, as the VTAB tables read them; None: every regime).

        Raises:
            NotFound: no run ``run_id`` (as ``reports``).
        """
        self.run_config(run_id)  # NotFound for an unknown run
        query = f"SELECT {TASK_COLUMNS} FROM task_results WHERE run_id=?"
        arguments: tuple[Any, ...] = (run_id,)
        if split is not None:
            query += " AND split=?"
            arguments += (split,)
        if regime is not None:
            query += " AND regime=?"
            arguments += (regime,)
        with self._lock:
            rows = self._db.execute(query + " ORDER BY task, split, regime, regime_seed", arguments).fetchall()
        return [TaskResult(run_id=row[0], task=row[1], split=row[2], regime=row[3], regime_seed=row[4], role=row[5],
                           accuracy=row[6], examples=row[7]) for row in rows]

    def run_role(self, run_id: str) -> str | None:
        """The role of a run's VTAB task results (None: it has none).

        Raises:
            NotFound: no run ``run_id`` (as ``reports``).
        """
        self.run_config(run_id)
        with self._lock:
            row = self._db.execute("SELECT role FROM task_results WHERE run_id=? LIMIT 1", (run_id,)).fetchone()
        return None if row is None else row[0]

    def run_ids(self) -> list[str]:
        with self._lock:
            return [r[0] for r in self._db.execute("SELECT run_id FROM runs ORDER BY run_id")]

    def _run_row(self, run_id: str) -> tuple[Any, ...]:
        with self._lock:
            row = self._db.execute("SELECT config_json, owner FROM runs WHERE run_id=?", (run_id,)).fetchone()
        if row is None:
            # names only the run asked for: a caller who may not read every run learns of no other
            raise NotFound(f"run {quoted(run_id)} has no reports")
        return row

    def run_config(self, run_id: str) -> dict[str, Any]:
        return json.loads(self._run_row(run_id)[0] or "{}")

    def run_owner(self, run_id: str) -> str | None:
        """The name of the token that created ``run_id`` (None: created without tokens)."""
        return self._run_row(run_id)[1]

    def set_run_config(
        self, run_id: str, run_config_json: str, *, owner: str | None = None, admin: bool = False
    ) -> None:
        """Record a run's configuration before any report (first write wins and ownership
        is checked, as in ``add``)."""
        validate_run_id(run_id)
        config = _canonical_config(run_config_json)
        with self._lock, self._db.transaction():
            self._hold_runs([run_id], owner, admin)
            self._set_config_once(run_id, config)

    def reports(self, run_id: str) -> Iterator[StoredReport]:
        """Every report of a run, sorted by (protocol, source, split, seed, index)."""
        self.run_config(run_id)  # NotFound for an unknown run
        with self._lock:
            rows = self._db.execute(
                f"SELECT {REPORT_COLUMNS} FROM reports WHERE run_id=? ORDER BY protocol, source, split, seed, idx",
                (run_id,),
            ).fetchall()
        for row in rows:
            yield StoredReport(
                run_id=row[0], protocol=row[1], source=row[2], split=row[3], index=row[4], seed=row[5],
                fingerprint=row[6], metrics=json.loads(row[7]), request=json.loads(row[8]),
                predicted=tuple(json.loads(row[9])),
            )


def _defining_json(text: str) -> str:
    """Canonical JSON of what a stored configuration says defines the results (``run_config.defining``)."""
    value = json.loads(text)
    return json.dumps(defining(value) if isinstance(value, dict) else value, sort_keys=True, separators=(",", ":"))


def _canonical_config(text: str) -> str:
    """Sorted-key JSON of a configuration, so equal settings compare equal whatever the key order."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidArgument(f"run_config_json: not valid JSON ({error})") from None
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
