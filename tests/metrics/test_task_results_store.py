"""VTAB task results in the metrics store: exactly once, owned and configured like episode reports."""

from __future__ import annotations

import sqlite3

import pytest

from postgres_cluster import metrics_target, postgres_url  # noqa: F401 (fixtures: both backends)

from sampler_server.errors import FailedPrecondition, InvalidArgument, NotFound, PermissionDenied
from sampler_server.metrics.store import SCHEMA_VERSION, MetricsStore, StoredReport, TaskResult


def _result(task="cifar100", accuracy=0.5, run="run-a", split="test", examples=10000):
    return TaskResult(run_id=run, task=task, split=split, accuracy=accuracy, examples=examples)


def test_a_resent_result_is_a_duplicate_not_a_second_row(metrics_target):
    store = MetricsStore(metrics_target)
    assert store.add_task_results([_result(), _result("svhn", 0.8, examples=26032)],
                                  run_config_json='{"lr": 0.01}') == (2, 0)
    assert store.add_task_results([_result(), _result("dmlab", 0.4)]) == (1, 1)
    assert store.add_task_results([_result(split="val200", examples=200)]) == (1, 0)  # another split, another key
    reopened = MetricsStore(metrics_target)
    assert [(r.task, r.split) for r in reopened.task_results("run-a")] == [
        ("cifar100", "test"), ("cifar100", "val200"), ("dmlab", "test"), ("svhn", "test"),
    ]
    assert [r.task for r in reopened.task_results("run-a", split="test")] == ["cifar100", "dmlab", "svhn"]
    assert reopened.run_config("run-a") == {"lr": 0.01}


def test_a_different_result_for_a_stored_key_is_refused_atomically(metrics_target):
    store = MetricsStore(metrics_target)
    store.add_task_results([_result()])
    with pytest.raises(FailedPrecondition, match="^run 'run-a' already has a different result for VTAB task cifar100"):
        store.add_task_results([_result("svhn"), _result(accuracy=0.6)])
    with pytest.raises(FailedPrecondition):
        store.add_task_results([_result(examples=9999)])
    assert [r.task for r in store.task_results("run-a")] == ["cifar100"]  # svhn rolled back


def test_bad_fields_name_the_input_and_what_is_allowed(metrics_target):
    store = MetricsStore(metrics_target)
    with pytest.raises(InvalidArgument, match=r"^unknown VTAB task 'cifar10'; did you mean 'cifar100'\?; allowed: caltech101, cifar100"):
        store.add_task_results([_result("cifar10")])
    with pytest.raises(InvalidArgument, match="^split: got 'testing' for task cifar100, expected one of train800, val200, "):
        store.add_task_results([_result(split="testing")])
    with pytest.raises(InvalidArgument, match=r"^accuracy: got 1.5 for task cifar100, expected 0 to 1$"):
        store.add_task_results([_result(accuracy=1.5)])
    with pytest.raises(InvalidArgument, match=r"^examples: got 0 for task cifar100, expected an integer >= 1$"):
        store.add_task_results([_result(examples=0)])
    with pytest.raises(InvalidArgument, match="^run_id"):
        store.add_task_results([_result(run="")])
    assert store.run_ids() == []
    with pytest.raises(NotFound, match="^run 'run-a' has no reports$"):
        store.task_results("run-a")


def test_results_share_the_runs_owner_and_configuration_with_episode_reports(metrics_target):
    store = MetricsStore(metrics_target)
    episode = StoredReport(run_id="run-a", protocol="md-episode", source="omniglot", split="test", index=0, seed=1,
                           fingerprint="fp", metrics={"accuracy": 0.5})
    store.add([episode], run_config_json='{"lr": 0.1}', owner="team-a")
    assert store.add_task_results([_result()], owner="team-a") == (1, 0)
    with pytest.raises(PermissionDenied):
        store.add_task_results([_result("svhn")], owner="team-b")
    with pytest.raises(FailedPrecondition, match="already has a different configuration"):
        store.add_task_results([_result("svhn")], run_config_json='{"lr": 0.2}', owner="team-a")
    assert store.add_task_results([_result("svhn")], owner="root", admin=True) == (1, 0)
    assert store.run_owner("run-a") == "team-a" and store.run_config("run-a") == {"lr": 0.1}
    store.add_task_results([_result(run="vtab-only")], run_config_json='{"head": "linear"}', owner="team-b")
    assert store.run_owner("vtab-only") == "team-b" and list(store.reports("vtab-only")) == []


def test_a_version_3_database_gains_the_task_table_and_keeps_its_reports(tmp_path):
    path = tmp_path / "v3.sqlite"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE runs (run_id TEXT PRIMARY KEY, config_json TEXT, owner TEXT);
        CREATE TABLE reports (run_id TEXT NOT NULL, protocol TEXT NOT NULL, source TEXT NOT NULL,
            split TEXT NOT NULL, idx INTEGER NOT NULL, seed INTEGER NOT NULL, fingerprint TEXT NOT NULL,
            metrics_json TEXT NOT NULL, request_json TEXT NOT NULL, predicted_json TEXT NOT NULL DEFAULT '[]',
            PRIMARY KEY (run_id, protocol, source, split, seed, idx));
        INSERT INTO runs VALUES ('old', '{"lr": 1}', 'team-a');
        INSERT INTO reports VALUES ('old', 'md-episode', 'omniglot', 'test', 3, 7, 'fp3', '{"accuracy": 0.5}', '{}',
            '[]');
        PRAGMA user_version = 3;
    """)
    db.commit()
    db.close()
    store = MetricsStore(path)
    assert len(list(store.reports("old"))) == 1 and store.task_results("old") == []
    assert store.add_task_results([_result(run="old")], owner="team-a") == (1, 0)
    store.close()
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_a_newer_database_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "future.sqlite"
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.commit()
    db.close()
    with pytest.raises(FailedPrecondition, match=rf"future.sqlite: metrics schema version {SCHEMA_VERSION + 1} is "
                                                 rf"newer than this server's \({SCHEMA_VERSION}\)"):
        MetricsStore(path)
