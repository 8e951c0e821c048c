"""VTAB task results with role and regime (metrics schema 6): keyed by (run, task, split,
regime, regime seed), one role per run, max runs without a regime, and every older
database migrated with what it held (as regime 0 of a model run)."""

from __future__ import annotations

import sqlite3

import pytest

from postgres_cluster import metrics_target, postgres_url  # noqa: F401 (fixtures: both backends)

from sampler_server.errors import FailedPrecondition, InvalidArgument
from sampler_server.metrics.store import SCHEMA_VERSION, CogResult, MetricsStore, TaskResult


def _result(run="run-a", regime=0, seed=0, accuracy=0.5, role="model", split="test") -> TaskResult:
    return TaskResult(run_id=run, task="cifar100", split=split, accuracy=accuracy, examples=10_000, regime=regime,
                      regime_seed=seed, role=role)


def test_results_are_keyed_by_regime_and_seed_and_keep_the_role(metrics_target):
    store = MetricsStore(metrics_target)
    assert store.add_task_results([_result(), _result(regime=200, seed=1), _result(regime=200, seed=2, accuracy=0.4),
                                   _result(regime=800, seed=1, accuracy=0.6)]) == (4, 0)
    assert store.add_task_results([_result(regime=200, seed=1)]) == (0, 1)
    with pytest.raises(FailedPrecondition, match=r"^run 'run-a' already has a different result for VTAB task "
                                                 r"cifar100 split test regime 200 seed 2; "):
        store.add_task_results([_result(regime=200, seed=2, accuracy=0.41)])
    assert [(r.regime, r.regime_seed, r.accuracy) for r in store.task_results("run-a", regime=None)] == [
        (0, 0, 0.5), (200, 1, 0.5), (200, 2, 0.4), (800, 1, 0.6)]
    assert [r.regime for r in store.task_results("run-a")] == [0]  # what the VTAB tables read
    assert [r.regime_seed for r in store.task_results("run-a", regime=200)] == [1, 2]
    assert store.run_role("run-a") == "model"
    store.add_task_results([_result("scratch-a", regime=200, seed=1, role="scratch")])
    assert store.run_role("scratch-a") == "scratch"
    store.set_run_config("empty", '{"a": 1}')
    assert store.run_role("empty") is None


def test_a_run_has_one_role_and_nothing_of_a_refused_batch_is_stored(metrics_target):
    store = MetricsStore(metrics_target)
    store.add_task_results([_result("max-a", role="max")])
    with pytest.raises(FailedPrecondition, match=r"^role: run 'max-a' is a max run, got 'scratch' for VTAB task "
                                                 r"cifar100 split val200; a run has one role"):
        store.add_task_results([_result("other"), _result("max-a", role="scratch", split="val200")])
    with pytest.raises(FailedPrecondition, match="is a model run, got 'max'"):
        store.add_task_results([_result("both"), _result("both", split="val200", role="max")])
    with pytest.raises(Exception):
        store.task_results("other")  # the whole batch was rolled back: the run was never created


@pytest.mark.parametrize(("result", "words"), [
    (_result(role="teacher"), "role: got 'teacher' for task cifar100, expected one of model, scratch, max"),
    (_result(regime=0, seed=3), "regime_seed: got 3 for task cifar100 with regime 0, expected 0"),
    (_result(regime=100, role="max"), "regime: got 100 for task cifar100 of a max run, expected 0"),
    (_result(regime=-1), "regime: got -1 for task cifar100, expected an integer >= 0"),
])
def test_a_bad_role_or_regime_is_one_line(metrics_target, result, words):
    store = MetricsStore(metrics_target)
    with pytest.raises(InvalidArgument) as caught:
        store.add_task_results([result])
    assert str(caught.value).startswith(words) and "\n" not in str(caught.value)


def _old_database(path, version: int) -> None:
    owner = ", owner TEXT" if version >= 3 else ""
    key = "run_id, protocol, source, split, seed, idx" if version >= 2 else "run_id, protocol, source, split, idx"
    script = f"""
        CREATE TABLE runs (run_id TEXT PRIMARY KEY, config_json TEXT{owner});
        CREATE TABLE reports (run_id TEXT NOT NULL, protocol TEXT NOT NULL, source TEXT NOT NULL,
            split TEXT NOT NULL, idx INTEGER NOT NULL, seed INTEGER NOT NULL, fingerprint TEXT NOT NULL,
            metrics_json TEXT NOT NULL, request_json TEXT NOT NULL, predicted_json TEXT NOT NULL DEFAULT '[]',
            PRIMARY KEY ({key}));
        INSERT INTO runs(run_id, config_json) VALUES ('old', '{{"lr": 1}}');
        INSERT INTO reports VALUES ('old', 'md-episode', 'omniglot', 'test', 3, 7, 'fp3', '{{"accuracy": 0.5}}',
            '{{}}', '[]');
    """
    if version >= 4:
        script += """
        CREATE TABLE task_results (run_id TEXT NOT NULL, task TEXT NOT NULL, split TEXT NOT NULL,
            accuracy REAL NOT NULL, examples INTEGER NOT NULL, PRIMARY KEY (run_id, task, split));
        INSERT INTO task_results VALUES ('old', 'cifar100', 'test', 0.25, 10000);
        """
    if version >= 5:
        script += """
        CREATE TABLE cog_results (run_id TEXT NOT NULL, level TEXT NOT NULL, shots INTEGER NOT NULL,
            seed INTEGER NOT NULL, accuracy REAL NOT NULL, examples INTEGER NOT NULL,
            extras_json TEXT NOT NULL DEFAULT '{}', PRIMARY KEY (run_id, level, shots, seed));
        INSERT INTO cog_results VALUES ('old', 'L3', 0, 1, 0.5, 50000, '{}');
        """
    if version >= 2:
        script += f"PRAGMA user_version = {version};"
    db = sqlite3.connect(path)
    db.executescript(script)
    db.commit()
    db.close()


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5])
def test_every_older_database_gains_regimes_and_roles_and_keeps_what_it_held(tmp_path, version):
    path = tmp_path / f"v{version}.sqlite"
    _old_database(path, version)
    store = MetricsStore(path)
    assert store.run_config("old") == {"lr": 1}
    assert [r.fingerprint for r in store.reports("old")] == ["fp3"]
    held = store.task_results("old", regime=None)
    assert [(r.task, r.accuracy, r.regime, r.regime_seed, r.role) for r in held] == (
        [("cifar100", 0.25, 0, 0, "model")] if version >= 4 else [])
    assert [c.level for c in store.cog_results("old")] == (["L3"] if version >= 5 else [])
    assert store.add_task_results([_result("old", regime=100, seed=1)], admin=True) == (1, 0)
    if version >= 4:
        assert store.add_task_results([_result("old", accuracy=0.25)], admin=True) == (0, 1)  # the migrated row
        with pytest.raises(FailedPrecondition, match="is a model run"):
            store.add_task_results([_result("old", regime=100, seed=2, role="scratch")], admin=True)
    store.add_cog_results([CogResult("old", "L1", 0, 1, 0.5, 50_000)], admin=True)
    store.close()
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 6
    assert [r.regime for r in MetricsStore(path).task_results("old", regime=None)] == (
        [0, 100] if version >= 4 else [100])
