"""ImageNet-CoG results in the metrics store: once per (run, level, N, seed), owned and
configured like the other reports, and every older schema migrated to hold them."""

from __future__ import annotations

import sqlite3

import pytest

from postgres_cluster import metrics_target, postgres_url  # noqa: F401 (fixtures: both backends)

from sampler_server.errors import FailedPrecondition, InvalidArgument, NotFound, PermissionDenied
from sampler_server.metrics.store import SCHEMA_VERSION, CogResult, MetricsStore, StoredReport, TaskResult


def _result(level="L3", shots=0, seed=1, accuracy=0.5, run="run-a", examples=50_000, **extras):
    return CogResult(run_id=run, level=level, shots=shots, seed=seed, accuracy=accuracy, examples=examples,
                     extras=extras)


def test_a_resent_result_is_a_duplicate_not_a_second_row(metrics_target):
    store = MetricsStore(metrics_target)
    first = [_result(), _result(seed=2, accuracy=0.52, learning_rate=0.1, weight_decay=1e-4, val_accuracy=0.55)]
    assert store.add_cog_results(first, run_config_json='{"backbone": "r50"}') == (2, 0)
    assert store.add_cog_results(first + [_result(shots=8)]) == (1, 2)
    assert store.add_cog_results([_result(level="IN-1K")]) == (1, 0)  # another level, another key
    reopened = MetricsStore(metrics_target)
    results = reopened.cog_results("run-a")
    assert [(r.level, r.shots, r.seed) for r in results] == [("IN-1K", 0, 1), ("L3", 0, 1), ("L3", 0, 2), ("L3", 8, 1)]
    assert results[2].extras == {"learning_rate": 0.1, "val_accuracy": 0.55, "weight_decay": 1e-4}
    assert results[2].accuracy == 0.52 and results[2].examples == 50_000
    assert reopened.run_config("run-a") == {"backbone": "r50"}
    assert sum(len(reopened.cog_results(run)) for run in reopened.run_ids()) == 4  # no second row anywhere


@pytest.mark.parametrize("changed", [
    {"accuracy": 0.6}, {"examples": 49_999}, {"learning_rate": 0.2}, {"val_accuracy": 0.5},
])
def test_a_different_result_for_a_stored_key_is_refused_naming_the_key(metrics_target, changed):
    store = MetricsStore(metrics_target)
    store.add_cog_results([_result(seed=2, learning_rate=0.1)])
    fields = {"seed": 2, "learning_rate": 0.1, **changed}
    with pytest.raises(FailedPrecondition, match=r"^run 'run-a' already has a different result for CoG level L3 "
                                                 r"N=all seed 2 \(stored: accuracy 0.5 over 50000 examples\); a run "
                                                 r"reports each level, N and seed once$"):
        store.add_cog_results([_result(level="L1"), _result(**fields)])
    assert [(r.level, r.seed) for r in store.cog_results("run-a")] == [("L3", 2)]  # L1 rolled back


def test_results_share_the_runs_owner_and_configuration_with_other_reports(metrics_target):
    store = MetricsStore(metrics_target)
    episode = StoredReport(run_id="run-a", protocol="md-episode", source="omniglot", split="test", index=0, seed=1,
                           fingerprint="fp", metrics={"accuracy": 0.5})
    store.add([episode], run_config_json='{"lr": 0.1}', owner="team-a")
    store.add_task_results([TaskResult("run-a", "cifar100", "test", 0.5, 10_000)], owner="team-a")
    assert store.add_cog_results([_result()], owner="team-a") == (1, 0)
    with pytest.raises(PermissionDenied, match="^run 'run-a' belongs to another token") as caught:
        store.add_cog_results([_result(seed=2)], owner="team-b")
    assert "team-a" not in str(caught.value)
    with pytest.raises(FailedPrecondition, match="already has a different configuration"):
        store.add_cog_results([_result(seed=2)], run_config_json='{"lr": 0.2}', owner="team-a")
    assert store.add_cog_results([_result(seed=2)], owner="root", admin=True) == (1, 0)  # admin writes anywhere
    assert store.run_owner("run-a") == "team-a" and store.run_config("run-a") == {"lr": 0.1}
    store.add_cog_results([_result(run="cog-only")], run_config_json='{"head": "logreg"}', owner="team-b")
    assert store.run_owner("cog-only") == "team-b" and list(store.reports("cog-only")) == []
    assert store.task_results("cog-only") == [] and store.run_config("cog-only") == {"head": "logreg"}
    store.add_cog_results([_result(run="open")])  # no tokens: no owner ...
    with pytest.raises(PermissionDenied):
        store.add_cog_results([_result(run="open", seed=2)], owner="team-a")  # ... then admin-only
    assert [r.seed for r in store.cog_results("run-a")] == [1, 2]


def test_bad_results_store_nothing(metrics_target):
    store = MetricsStore(metrics_target)
    with pytest.raises(InvalidArgument, match=r"^cog_level: got 'L6', expected one of IN-1K, L1, L2, L3, L4, L5$"):
        store.add_cog_results([_result(), _result(level="L6")])
    with pytest.raises(InvalidArgument, match="^run_id"):
        store.add_cog_results([_result(run="")])
    assert store.run_ids() == []
    with pytest.raises(NotFound, match="^run 'run-a' has no reports$"):
        store.cog_results("run-a")


def _old_database(path, version: int) -> None:
    """A database as a server of schema ``version`` left it: a run, an episode report,
    and (version 4) a VTAB task result."""
    owner_column = ", owner TEXT" if version >= 3 else ""
    owner_value = ", 'team-a'" if version >= 3 else ""
    key = "run_id, protocol, source, split, seed, idx" if version >= 2 else "run_id, protocol, source, split, idx"
    config_column = "config_json TEXT" if version >= 2 else "config_json TEXT NOT NULL DEFAULT '{}'"
    script = f"""
        CREATE TABLE runs (run_id TEXT PRIMARY KEY, {config_column}{owner_column});
        CREATE TABLE reports (run_id TEXT NOT NULL, protocol TEXT NOT NULL, source TEXT NOT NULL,
            split TEXT NOT NULL, idx INTEGER NOT NULL, seed INTEGER NOT NULL, fingerprint TEXT NOT NULL,
            metrics_json TEXT NOT NULL, request_json TEXT NOT NULL, predicted_json TEXT NOT NULL DEFAULT '[]',
            PRIMARY KEY ({key}));
        INSERT INTO runs VALUES ('old', '{{"lr": 1}}'{owner_value});
        INSERT INTO reports VALUES ('old', 'md-episode', 'omniglot', 'test', 3, 7, 'fp3', '{{"accuracy": 0.5}}',
            '{{}}', '[]');
    """
    if version == 4:
        script += """
        CREATE TABLE task_results (run_id TEXT NOT NULL, task TEXT NOT NULL, split TEXT NOT NULL,
            accuracy REAL NOT NULL, examples INTEGER NOT NULL, PRIMARY KEY (run_id, task, split));
        INSERT INTO task_results VALUES ('old', 'cifar100', 'test', 0.25, 10000);
        """
    if version >= 2:
        script += f"PRAGMA user_version = {version};"
    db = sqlite3.connect(path)
    db.executescript(script)
    db.commit()
    db.close()


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_every_older_database_gains_the_cog_table_and_keeps_what_it_held(tmp_path, version):
    path = tmp_path / f"v{version}.sqlite"
    _old_database(path, version)
    store = MetricsStore(path)
    assert store.run_config("old") == {"lr": 1}
    (report,) = store.reports("old")
    assert (report.index, report.seed, report.fingerprint) == (3, 7, "fp3")
    assert [(t.task, t.accuracy) for t in store.task_results("old")] == ([("cifar100", 0.25)] if version == 4 else [])
    assert store.cog_results("old") == []
    owner = "team-a" if version >= 3 else None  # runs from before owners have none: admin writes
    assert store.add_cog_results([_result(run="old")], owner=owner) == (1, 0)
    store.close()
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert [r.level for r in MetricsStore(path).cog_results("old")] == ["L3"]
