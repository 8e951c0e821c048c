"""What the metrics store's two databases differ in, and the schema they share.

``metrics.store`` holds the rules (keys, duplicates, run ownership and configuration)
once, as SQL that SQLite and PostgreSQL both run; this module is the rest: the column
types each spells its own way, how a write transaction holds the runs it writes, and
the interface a backend (``store_sqlite``, ``store_postgres``) offers the rules. Pure: no
connection is opened here.

Both databases must agree on what the rules read back: text keys compare and sort by
their bytes (SQLite's BINARY collation; in PostgreSQL the "C" collation, whatever the
database's locale), integers are 64-bit, accuracies double precision.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

SCHEMA_VERSION = 6
MAX_INTEGER = 2**63 - 1  # the largest value an INTEGER (SQLite) or BIGINT (PostgreSQL) column holds

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id {text} PRIMARY KEY,
    config_json TEXT,
    owner TEXT
);
CREATE TABLE IF NOT EXISTS reports (
    run_id {text} NOT NULL,
    protocol {text} NOT NULL,
    source {text} NOT NULL,
    split {text} NOT NULL,
    idx {integer} NOT NULL,
    seed {integer} NOT NULL,
    fingerprint TEXT NOT NULL,
    metrics_json TEXT NOT NULL,
    request_json TEXT NOT NULL,
    predicted_json TEXT NOT NULL DEFAULT '[]',
    PRIMARY KEY (run_id, protocol, source, split, seed, idx)
);
CREATE TABLE IF NOT EXISTS task_results (
    run_id {text} NOT NULL,
    task {text} NOT NULL,
    split {text} NOT NULL,
    regime {integer} NOT NULL DEFAULT 0,
    regime_seed {integer} NOT NULL DEFAULT 0,
    role TEXT NOT NULL DEFAULT 'model',
    accuracy {real} NOT NULL,
    examples {integer} NOT NULL,
    PRIMARY KEY (run_id, task, split, regime, regime_seed)
);
CREATE TABLE IF NOT EXISTS cog_results (
    run_id {text} NOT NULL,
    level {text} NOT NULL,
    shots {integer} NOT NULL,
    seed {integer} NOT NULL,
    accuracy {real} NOT NULL,
    examples {integer} NOT NULL,
    extras_json TEXT NOT NULL DEFAULT '{{}}',
    PRIMARY KEY (run_id, level, shots, seed)
);
"""
TASK_COLUMNS = "run_id, task, split, regime, regime_seed, role, accuracy, examples"
REPORT_COLUMNS = "run_id, protocol, source, split, idx, seed, fingerprint, metrics_json, request_json, predicted_json"


@dataclass(frozen=True)
class Dialect:
    """How one database spells what the shared SQL leaves open."""

    text: str  # a key column: compared and sorted byte-wise
    integer: str  # 64-bit
    real: str  # double precision
    lock_rows: str  # ends a SELECT whose rows the transaction holds until it ends

    def schema(self) -> list[str]:
        """The CREATE TABLE IF NOT EXISTS statements of the current schema."""
        text = _SCHEMA.format(text=self.text, integer=self.integer, real=self.real)
        return [statement.strip() for statement in text.split(";") if statement.strip()]


# SQLite: a write transaction (BEGIN IMMEDIATE) holds the whole file, so no row lock is needed
SQLITE = Dialect(text="TEXT", integer="INTEGER", real="REAL", lock_rows="")
# PostgreSQL: writers of other runs go on in parallel; writers of one run take turns on its row
POSTGRES = Dialect(text='TEXT COLLATE "C"', integer="BIGINT", real="DOUBLE PRECISION", lock_rows=" FOR UPDATE")


class Cursor(Protocol):
    rowcount: int

    def fetchone(self) -> tuple[Any, ...] | None: ...

    def fetchall(self) -> list[tuple[Any, ...]]: ...


class Database(Protocol):
    """One connection to a metrics database, used under the store's lock. Statements use
    ``?`` placeholders; outside ``transaction`` each statement commits on its own."""

    dialect: Dialect
    name: str  # the file or the URL without its password, for messages

    def execute(self, sql: str, parameters: Sequence[Any] = ()) -> Cursor: ...

    def transaction(self) -> AbstractContextManager[None]:
        """Everything inside commits together or not at all (rolled back on any error)."""
        ...

    def close(self) -> None: ...
