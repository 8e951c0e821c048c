"""Idempotent report storage: retries never double-count; conflicting results are refused."""

from __future__ import annotations

import threading

import pytest

from sampler_server.errors import FailedPrecondition, InvalidArgument, NotFound
from sampler_server.metrics.store import MetricsStore, StoredReport


def _report(index, accuracy=0.5, fingerprint=None, run="run-a"):
    return StoredReport(
        run_id=run, protocol="md-episode", source="omniglot", split="test", index=index, seed=7,
        fingerprint=fingerprint or f"sha256:{index:04d}", metrics={"accuracy": accuracy, "loss": 1.0},
    )


def test_resent_reports_do_not_double_count(tmp_path):
    store = MetricsStore(tmp_path / "metrics.sqlite")
    assert store.add([_report(0), _report(1)], run_config_json='{"lr": 0.1}') == (2, 0)
    assert store.add([_report(1), _report(2)]) == (1, 1)
    assert [r.index for r in store.reports("run-a")] == [0, 1, 2]
    assert store.run_config("run-a") == {"lr": 0.1}
    reopened = MetricsStore(tmp_path / "metrics.sqlite")
    assert len(list(reopened.reports("run-a"))) == 3


def test_conflicting_result_for_the_same_episode_is_refused_atomically(tmp_path):
    store = MetricsStore(tmp_path / "m.sqlite")
    store.add([_report(0)])
    with pytest.raises(FailedPrecondition, match="already has a different result"):
        store.add([_report(5), _report(0, accuracy=0.9)])
    assert [r.index for r in store.reports("run-a")] == [0]  # report 5 rolled back too


def test_unknown_run_and_bad_run_id(tmp_path):
    store = MetricsStore(tmp_path / "m.sqlite")
    with pytest.raises(NotFound, match="run 'nope' has no reports"):
        list(store.reports("nope"))
    with pytest.raises(InvalidArgument, match="run_id"):
        store.add([_report(0, run="")])


def test_concurrent_writers_store_each_key_once(tmp_path):
    store = MetricsStore(tmp_path / "m.sqlite")
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
