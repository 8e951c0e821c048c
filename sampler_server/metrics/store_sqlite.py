"""The metrics store's embedded database: one SQLite file (WAL), the default.

A write transaction is ``BEGIN IMMEDIATE``: it holds the file's write lock from its first
statement, so writers (threads or processes sharing the file) take turns and each reads
what the previous one committed.

Schema version ``PRAGMA user_version``, migrated in place on open: version 5 (and 4)
rebuild ``task_results`` with the regime key and the role, every existing result becoming
regime 0, seed 0 of a ``model`` run; version 4 also gains the empty ``cog_results``
table; version 3 also gains the empty ``task_results`` table; version 2 (runs without an
owner) also gains the ``owner`` column, NULL for every existing run; version 1 (key
without the seed, configuration overwritten on every write) is rebuilt.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sampler_server.errors import FailedPrecondition
from sampler_server.metrics.store_sql import REPORT_COLUMNS, SCHEMA_VERSION, SQLITE


class SqliteDatabase:
    dialect = SQLITE

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.name = str(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._migrate()

    def execute(self, sql: str, parameters: Sequence[Any] = ()) -> sqlite3.Cursor:
        return self._db.execute(sql, parameters)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    def close(self) -> None:
        self._db.close()

    def _migrate(self) -> None:
        # The version is read under the write lock: processes opening the file at once
        # (`serve --replicas`) migrate in turn, and each after the first finds it done.
        with self.transaction():
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise FailedPrecondition(
                    f"{self.path}: metrics schema version {version} is newer than this server's ({SCHEMA_VERSION})"
                )
            old_tables = {row[0] for row in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if version in (4, 5) and "task_results" in old_tables:
                # versions 4 and 5: keyed by (run, task, split), no regime nor role
                self._db.execute("ALTER TABLE task_results RENAME TO task_results_v5")
                self._create_missing()
                self._db.execute(
                    "INSERT INTO task_results(run_id, task, split, accuracy, examples) "
                    "SELECT run_id, task, split, accuracy, examples FROM task_results_v5"
                )
                self._db.execute("DROP TABLE task_results_v5")
            if version == 2 and "runs" in old_tables:
                self._db.execute("ALTER TABLE runs ADD COLUMN owner TEXT")
            elif version < 2 and "reports" in old_tables:
                # version 1: the key lacked the seed and '{}' meant "no configuration"
                self._db.execute("ALTER TABLE reports RENAME TO reports_v1")
                self._db.execute("ALTER TABLE runs RENAME TO runs_v1")
                self._create_missing()
                self._db.execute(
                    "INSERT INTO runs(run_id, config_json) SELECT run_id, NULLIF(config_json, '{}') FROM runs_v1"
                )
                self._db.execute(f"INSERT INTO reports({REPORT_COLUMNS}) SELECT {REPORT_COLUMNS} FROM reports_v1")
                self._db.execute("DROP TABLE reports_v1")
                self._db.execute("DROP TABLE runs_v1")
            self._create_missing()  # all, task_results, cog_results
            self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _create_missing(self) -> None:
        for statement in self.dialect.schema():
            self._db.execute(statement)
