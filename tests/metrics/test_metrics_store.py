"""Idempotent report storage: retries never double-count; conflicting results are refused."""

from __future__ import annotations

import json

import sqlite3
import threading

import pytest

from postgres_cluster import metrics_target, postgres_url  # noqa: F401 (fixtures: both backends)

from sampler_server.errors import FailedPrecondition, InvalidArgument, NotFound, PermissionDenied
from sampler_server.metrics.store import SCHEMA_VERSION, MetricsStore, StoredReport


def _report(index, accuracy=0.5, fingerprint=None, run="run-a"):
    return StoredReport(
        run_id=run, protocol="md-episode", source="omniglot", split="test", index=index, seed=7,
        fingerprint=fingerprint or f"sha256:{index:04d}", metrics={"accuracy": accuracy, "loss": 1.0},
    )


def test_resent_reports_do_not_double_count(metrics_target):
    store = MetricsStore(metrics_target)
    assert store.add([_report(0), _report(1)], run_config_json='{"lr": 0.1}') == (2, 0)
    assert store.add([_report(1), _report(2)]) == (1, 1)
    assert [r.index for r in store.reports("run-a")] == [0, 1, 2]
    assert store.run_config("run-a") == {"lr": 0.1}
    reopened = MetricsStore(metrics_target)
    assert len(list(reopened.reports("run-a"))) == 3


def test_conflicting_result_for_the_same_episode_is_refused_atomically(metrics_target):
    store = MetricsStore(metrics_target)
    store.add([_report(0)])
    with pytest.raises(FailedPrecondition, match="already has a different result"):
        store.add([_report(5), _report(0, accuracy=0.9)])
    assert [r.index for r in store.reports("run-a")] == [0]  # report 5 rolled back too


def test_unknown_run_and_bad_run_id(metrics_target):
    store = MetricsStore(metrics_target)
    with pytest.raises(NotFound, match="run 'nope' has no reports"):
        list(store.reports("nope"))
    with pytest.raises(InvalidArgument, match="run_id"):
        store.add([_report(0, run="")])


def test_concurrent_writers_store_each_key_once(metrics_target):
    store = MetricsStore(metrics_target)
    results = []

    def send():
        results.append(store.add([_report(i) for i in range(50)]))

    threads = [threading.Thread(target=send) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(stored for stored, _ in results) == 50
    assert sum(dup for _, dup in results) == 150
    assert len(list(store.reports("run-a"))) == 50


def test_the_same_index_under_another_seed_is_another_episode(metrics_target):
    store = MetricsStore(metrics_target)
    assert store.add([_report(0)]) == (1, 0)
    other_seed = StoredReport(
        run_id="run-a", protocol="md-episode", source="omniglot", split="test", index=0, seed=8,
        fingerprint="sha256:other-seed", metrics={"accuracy": 0.75, "loss": 1.0},
    )
    assert store.add([other_seed]) == (1, 0)
    assert store.add([other_seed]) == (0, 1)
    assert sorted((r.seed, r.index) for r in store.reports("run-a")) == [(7, 0), (8, 0)]


def test_what_a_run_was_computed_with_may_differ_but_not_what_defines_it(metrics_target):
    """Evaluating a checkpoint again with other threads, on another device or library version
    is the same run (its results are checked one by one); another lr is not. The first
    configuration is the one kept."""
    store = MetricsStore(metrics_target)
    first = {"lr": 0.1, "result_sha256": "ab", "intra_op_threads": 2, "inter_op_threads": 2, "torch_version": "2.13.0",
             "device": "cpu", "device_name": "a cpu", "deterministic": True}
    store.add([_report(0)], run_config_json=json.dumps(first))
    again = {**first, "intra_op_threads": 8, "inter_op_threads": 1, "torch_version": "2.14.0", "device": "cuda:0",
             "device_name": "a gpu", "deterministic": False}
    store.add([_report(1)], run_config_json=json.dumps(again))
    assert store.run_config("run-a") == first
    for changed in ({"lr": 0.2}, {"result_sha256": "cd"}, {"backbone": "conv4"}):
        with pytest.raises(FailedPrecondition, match="already has a different configuration"):
            store.add([_report(2)], run_config_json=json.dumps({**first, **changed}))
    assert [r.index for r in store.reports("run-a")] == [0, 1]


def test_a_run_configuration_is_stored_once_and_never_replaced(metrics_target):
    store = MetricsStore(metrics_target)
    store.add([_report(0)])  # no configuration yet
    store.add([_report(1)], run_config_json='{"lr": 0.1, "backbone": "conv4"}')
    store.add([_report(2)], run_config_json='{"backbone": "conv4", "lr": 0.1}')  # same, other key order
    store.add([_report(3)])  # later writes need not resend it
    assert store.run_config("run-a") == {"lr": 0.1, "backbone": "conv4"}
    with pytest.raises(FailedPrecondition, match="run 'run-a' already has a different configuration"):
        store.add([_report(4)], run_config_json='{"lr": 0.2, "backbone": "conv4"}')
    assert [r.index for r in store.reports("run-a")] == [0, 1, 2, 3]  # the refused write stored nothing
    with pytest.raises(FailedPrecondition):
        store.set_run_config("run-a", '{"lr": 0.3}')
    store.set_run_config("run-b", '{"lr": 0.3}')
    assert store.run_config("run-b") == {"lr": 0.3}
    with pytest.raises(InvalidArgument, match="run_config_json: not valid JSON"):
        store.add([_report(9)], run_config_json="{nope")


def test_a_version_1_database_is_migrated_with_its_reports(tmp_path):
    import sqlite3

    path = tmp_path / "v1.sqlite"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE runs (run_id TEXT PRIMARY KEY, config_json TEXT NOT NULL DEFAULT '{}');
        CREATE TABLE reports (run_id TEXT NOT NULL, protocol TEXT NOT NULL, source TEXT NOT NULL,
            split TEXT NOT NULL, idx INTEGER NOT NULL, seed INTEGER NOT NULL, fingerprint TEXT NOT NULL,
            metrics_json TEXT NOT NULL, request_json TEXT NOT NULL, predicted_json TEXT NOT NULL DEFAULT '[]',
            PRIMARY KEY (run_id, protocol, source, split, idx));
        INSERT INTO runs VALUES ('old', '{}'), ('configured', '{"lr": 1}');
        INSERT INTO reports VALUES ('old', 'md-episode', 'omniglot', 'test', 3, 7, 'fp3',
            '{"accuracy": 0.5}', '{}', '[1, 2]');
    """)
    db.commit()
    db.close()
    store = MetricsStore(path)
    (report,) = store.reports("old")
    assert (report.index, report.seed, report.fingerprint, report.predicted) == (3, 7, "fp3", (1, 2))
    assert store.run_config("configured") == {"lr": 1}
    store.add([StoredReport(run_id="old", protocol="md-episode", source="omniglot", split="test", index=3, seed=8,
                            fingerprint="fp3-seed8", metrics={"accuracy": 0.25})], run_config_json='{"lr": 2}')
    assert store.run_config("old") == {"lr": 2}  # '{}' was version 1's "no configuration"
    assert len(list(MetricsStore(path).reports("old"))) == 2


def test_a_run_belongs_to_the_owner_that_created_it(metrics_target):
    store = MetricsStore(metrics_target)
    store.add([_report(0)], owner="team-a")
    assert store.add([_report(1)], owner="team-a") == (1, 0)
    with pytest.raises(PermissionDenied, match="^run 'run-a' belongs to another token") as caught:
        store.add([_report(2), _report(3, run="run-b")], owner="team-b")
    assert "team-a" not in str(caught.value)
    with pytest.raises(NotFound):
        store.run_owner("run-b")  # rolled back with the refused report
    with pytest.raises(PermissionDenied):
        store.set_run_config("run-a", '{"lr": 0.1}', owner="team-b")
    assert store.add([_report(2)], owner="root", admin=True) == (1, 0)  # admin writes to any run
    assert store.add([_report(3)]) == (1, 0)  # no tokens configured: no owner, anyone writes
    assert store.run_owner("run-a") == "team-a"
    store.add([_report(0, run="open")])
    assert store.run_owner("open") is None
    with pytest.raises(PermissionDenied):
        store.add([_report(1, run="open")], owner="team-a")  # an ownerless run: admin-only once tokens are on
    with pytest.raises(NotFound, match="^run 'nope' has no reports$"):
        store.run_owner("nope")


def test_unknown_run_names_no_other_run(metrics_target):
    store = MetricsStore(metrics_target)
    store.add([_report(0, run="secret-run")])
    with pytest.raises(NotFound) as caught:
        store.run_config("nope")
    assert "secret-run" not in str(caught.value)


def test_version_2_database_is_migrated_to_owned_runs(tmp_path):
    path = tmp_path / "v2.sqlite"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE runs (run_id TEXT PRIMARY KEY, config_json TEXT);
        CREATE TABLE reports (run_id TEXT NOT NULL, protocol TEXT NOT NULL, source TEXT NOT NULL,
            split TEXT NOT NULL, idx INTEGER NOT NULL, seed INTEGER NOT NULL, fingerprint TEXT NOT NULL,
            metrics_json TEXT NOT NULL, request_json TEXT NOT NULL, predicted_json TEXT NOT NULL DEFAULT '[]',
            PRIMARY KEY (run_id, protocol, source, split, seed, idx));
        INSERT INTO runs VALUES ('old', '{"lr": 1}');
        INSERT INTO reports VALUES ('old', 'md-episode', 'omniglot', 'test', 3, 7, 'fp3', '{"accuracy": 0.5}', '{}',
            '[]');
        PRAGMA user_version = 2;
    """)
    db.commit()
    db.close()
    store = MetricsStore(path)
    assert store.run_owner("old") is None and store.run_config("old") == {"lr": 1}
    assert len(list(store.reports("old"))) == 1
    with pytest.raises(PermissionDenied):
        store.add([_report(0, run="old")], owner="team-a")
    store.close()
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_a_batch_mixing_protocols_is_stored_all_or_none(metrics_target):
    from sampler_server.metrics.store import CogResult, TaskResult

    store = MetricsStore(metrics_target)
    store.add_cog_results([CogResult("mixed", "L1", 0, 1, 0.25, 5000)])
    batch = [_report(0, run="mixed"), TaskResult("mixed", "svhn", "test", 0.5, 1000),
             CogResult("mixed", "L1", 0, 1, 0.3, 5000)]
    with pytest.raises(FailedPrecondition, match="^run 'mixed' already has a different result for CoG"):
        store.add_batch(batch, '{"lr": 0.1}')  # what one ReportMetrics request carries
    assert list(store.reports("mixed")) == [] and store.task_results("mixed") == []
    assert store.run_config("mixed") == {}  # the configuration was rolled back with the rest
    batch[-1] = CogResult("mixed", "L1", 0, 1, 0.25, 5000)
    assert store.add_batch(batch, '{"lr": 0.1}') == (2, 1)
    assert store.add_batch(batch) == (0, 3)
    assert store.run_config("mixed") == {"lr": 0.1}
