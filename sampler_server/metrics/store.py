"""SQLite (WAL) store of per-episode metric reports.

A report is keyed by (run id, protocol, source, split, index); writing the same key
again is acknowledged as a duplicate and changes nothing, so a trainer that retries
after a lost acknowledgement never double-counts. A duplicate whose fingerprint or
metrics differ from what is stored is refused: that is a different result claiming
the same episode. Each report keeps the episode fingerprint and the canonical
request it came from, so the composition (ways, shots) can be recomputed exactly.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sampler_server.errors import FailedPrecondition, InvalidArgument, NotFound

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    config_json TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS reports (
    run_id TEXT NOT NULL,
    protocol TEXT NOT NULL,
    source TEXT NOT NULL,
    split TEXT NOT NULL,
    idx INTEGER NOT NULL,
    seed INTEGER NOT NULL,
    fingerprint TEXT NOT NULL,
    metrics_json TEXT NOT NULL,
    request_json TEXT NOT NULL,
    predicted_json TEXT NOT NULL DEFAULT '[]',
    PRIMARY KEY (run_id, protocol, source, split, idx)
);
"""

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

    def key(self) -> tuple[str, str, str, str, int]:
        return (self.run_id, self.protocol, self.source, self.split, self.index)


def validate_run_id(run_id: str) -> str:
    if not run_id or len(run_id) > MAX_RUN_ID or not run_id.isprintable():
        raise InvalidArgument(f"run_id: got {run_id!r}, expected 1 to {MAX_RUN_ID} printable characters")
    return run_id


class MetricsStore:
    """Thread-safe: one connection, serialised by a lock (writes are small)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def add(self, reports: Iterable[StoredReport], run_config_json: str = "") -> tuple[int, int]:
        """Store reports atomically; returns (stored, duplicates)."""
        stored = duplicates = 0
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for report in reports:
                    validate_run_id(report.run_id)
                    self._db.execute("INSERT OR IGNORE INTO runs(run_id) VALUES (?)", (report.run_id,))
                    if run_config_json:
                        self._db.execute(
                            "UPDATE runs SET config_json = ? WHERE run_id = ?", (run_config_json, report.run_id)
                        )
                    row = self._db.execute(
                        "SELECT fingerprint, metrics_json FROM reports WHERE run_id=? AND protocol=? AND source=? "
                        "AND split=? AND idx=?",
                        report.key(),
                    ).fetchone()
                    metrics_json = json.dumps(dict(report.metrics), sort_keys=True)
                    if row is not None:
                        if row != (report.fingerprint, metrics_json):
                            raise FailedPrecondition(
                                f"run {report.run_id!r} already has a different result for {report.source} "
                                f"{report.split} episode {report.index}; a run reports each episode once"
                            )
                        duplicates += 1
                        continue
                    self._db.execute(
                        "INSERT INTO reports VALUES (?,?,?,?,?,?,?,?,?,?)",
                        (*report.key(), report.seed, report.fingerprint, metrics_json,
                         json.dumps(dict(report.request), sort_keys=True), json.dumps(list(report.predicted))),
                    )
                    stored += 1
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return stored, duplicates

    def run_ids(self) -> list[str]:
        with self._lock:
            return [r[0] for r in self._db.execute("SELECT run_id FROM runs ORDER BY run_id")]

    def run_config(self, run_id: str) -> dict[str, Any]:
        with self._lock:
            row = self._db.execute("SELECT config_json FROM runs WHERE run_id=?", (run_id,)).fetchone()
        if row is None:
            raise NotFound(f"run {run_id!r} has no reports; known runs: {', '.join(self.run_ids()) or 'none'}")
        return json.loads(row[0] or "{}")

    def reports(self, run_id: str) -> Iterator[StoredReport]:
        """Every report of a run, sorted by (protocol, source, split, index)."""
        self.run_config(run_id)  # NotFound for an unknown run
        with self._lock:
            rows = self._db.execute(
                "SELECT * FROM reports WHERE run_id=? ORDER BY protocol, source, split, idx", (run_id,)
            ).fetchall()
        for row in rows:
            yield StoredReport(
                run_id=row[0], protocol=row[1], source=row[2], split=row[3], index=row[4], seed=row[5],
                fingerprint=row[6], metrics=json.loads(row[7]), request=json.loads(row[8]),
                predicted=tuple(json.loads(row[9])),
            )
