"""Several server processes (``serve --replicas``) opening one SQLite metrics file of an
older schema at once migrate it once: the version is read inside the write transaction,
so each opener after the first finds the migration done instead of repeating it
("duplicate column name: owner"). The file is in WAL mode, as every version wrote it."""

from __future__ import annotations

import multiprocessing
import sqlite3

from sampler_server.metrics.store import MetricsStore
from sampler_server.metrics.store_sql import SCHEMA_VERSION

V2 = """
    PRAGMA journal_mode = WAL;
    CREATE TABLE runs (run_id TEXT PRIMARY KEY, config_json TEXT);
    CREATE TABLE reports (run_id TEXT NOT NULL, protocol TEXT NOT NULL, source TEXT NOT NULL,
        split TEXT NOT NULL, idx INTEGER NOT NULL, seed INTEGER NOT NULL, fingerprint TEXT NOT NULL,
        metrics_json TEXT NOT NULL, request_json TEXT NOT NULL, predicted_json TEXT NOT NULL DEFAULT '[]',
        PRIMARY KEY (run_id, protocol, source, split, seed, idx));
    INSERT INTO runs VALUES ('old', '{"lr": 1}');
    PRAGMA user_version = 2;
"""


def _open(path, barrier, errors) -> None:
    barrier.wait()
    try:
        MetricsStore(path).close()
    except Exception as error:  # reported to the test
        errors.put(f"{type(error).__name__}: {error}")


def test_replicas_opening_an_old_metrics_file_at_once_migrate_it_once(tmp_path):
    context = multiprocessing.get_context("fork")
    errors = context.Queue()
    for trial in range(6):
        path = tmp_path / f"v2-{trial}.sqlite"
        db = sqlite3.connect(path)
        db.executescript(V2)
        db.commit()
        db.close()
        barrier = context.Barrier(4)
        openers = [context.Process(target=_open, args=(path, barrier, errors)) for _ in range(4)]
        for opener in openers:
            opener.start()
        for opener in openers:
            opener.join(timeout=60)
        found = []
        while not errors.empty():
            found.append(errors.get())
        assert not found, found
        store = MetricsStore(path)
        assert store.run_config("old") == {"lr": 1} and store.run_owner("old") is None
        store.close()
        assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
