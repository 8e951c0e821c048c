"""The metrics store on PostgreSQL: what a database shared by many writers must get right
beyond the rules both backends share (those run on both in the other store tests)."""

from __future__ import annotations

import random
import socket
import threading

import pytest
from postgres_cluster import cluster, metrics_target, postgres_url  # noqa: F401 (fixtures)

from sampler_server.errors import FailedPrecondition, InvalidArgument, Unavailable
from sampler_server.metrics.store import CogResult, MetricsStore, StoredReport, TaskResult, metrics_target as target_of

RUNS = ("run-c", "run-a", "run-b")


def _episode(run: str, index: int) -> StoredReport:
    return StoredReport(run_id=run, protocol="md-episode", source="omniglot", split="test", index=index, seed=3,
                        fingerprint=f"sha256:{run}:{index}", metrics={"accuracy": index / 100})


def _results(run: str) -> tuple[list[StoredReport], list[TaskResult], list[CogResult]]:
    return ([_episode(run, i) for i in range(30)],
            [TaskResult(run, task, "test", 0.5, 1000) for task in ("cifar100", "svhn", "dtd")],
            [CogResult(run, level, 0, seed, 0.25, 5000) for level in ("L1", "L5") for seed in (1, 2)])


def test_two_connections_writing_at_once_store_each_result_once(postgres_url):
    stores = [MetricsStore(postgres_url), MetricsStore(postgres_url)]  # as two replicas: a connection each
    config = '{"lr": 0.1}'
    totals = [0, 0]
    errors: list[BaseException] = []
    count = threading.Lock()

    def write(worker: int) -> None:
        rng = random.Random(worker)
        store = stores[worker % 2]
        runs = list(RUNS)
        for _ in range(3):  # every result three times per worker, in batches of runs in an order of its own
            rng.shuffle(runs)
            for run in runs:
                episodes, tasks, cogs = _results(run)
                rng.shuffle(episodes)
                other = runs[(runs.index(run) + 1) % len(runs)]
                for start in range(0, len(episodes), 7):  # a batch spans two runs: locks taken in both orders
                    batch = episodes[start:start + 7] + [_episode(other, start)]
                    try:
                        done = store.add(batch, config)
                        more = store.add_task_results(tasks, config)
                        again = store.add_cog_results(cogs, config)
                    except BaseException as error:  # noqa: BLE001 (reported below)
                        errors.append(error)
                        return
                    with count:
                        totals[0] += done[0] + more[0] + again[0]
                        totals[1] += done[1] + more[1] + again[1]

    threads = [threading.Thread(target=write, args=(worker,)) for worker in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    unique = len(RUNS) * (30 + 3 + 4)
    assert totals[0] == unique
    sent = 4 * 3 * len(RUNS) * (30 + 5 + 5 * 3 + 5 * 4)  # workers, rounds, runs; per batch: one more, tasks, cogs
    assert totals[1] == sent - unique
    reader = MetricsStore(postgres_url)
    assert reader.run_ids() == sorted(RUNS)
    for run in RUNS:
        assert sorted(r.index for r in reader.reports(run)) == list(range(30))
        assert len(reader.task_results(run)) == 3 and len(reader.cog_results(run)) == 4
        assert reader.run_config(run) == {"lr": 0.1}
    (rows,) = cluster().execute("SELECT count(*) FROM reports", postgres_url.rsplit("/", 1)[1])
    assert rows == (len(RUNS) * 30,)


def test_racing_first_configurations_one_wins_and_the_others_are_refused(postgres_url):
    stores = [MetricsStore(postgres_url) for _ in range(3)]
    stores[0].add([_episode(f"race-{race}", 9) for race in range(0, 8, 2)])  # half exist already, unconfigured
    outcomes: dict[tuple[str, int], str] = {}
    barrier = threading.Barrier(3)

    def claim(worker: int) -> None:
        for race in range(8):
            run = f"race-{race}"
            barrier.wait(timeout=30)
            try:
                stores[worker].add([_episode(run, worker)], f'{{"worker": {worker}}}')
                outcomes[run, worker] = "stored"
            except FailedPrecondition as error:
                outcomes[run, worker] = str(error)

    threads = [threading.Thread(target=claim, args=(worker,)) for worker in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    reader = MetricsStore(postgres_url)
    for race in range(8):
        run = f"race-{race}"
        winners = [worker for worker in range(3) if outcomes[run, worker] == "stored"]
        assert len(winners) == 1, outcomes  # the others found the run configured otherwise
        assert all("already has a different configuration" in outcomes[run, worker]
                   for worker in range(3) if worker not in winners)
        assert reader.run_config(run) == {"worker": winners[0]}
        assert [r.index for r in reader.reports(run)] == winners + ([9] if race % 2 == 0 else [])


def test_keys_sort_by_their_bytes_whatever_the_database_locale(metrics_target):
    store = MetricsStore(metrics_target)  # the test cluster's default collation is ICU en-US: "a" < "B" there
    names = ["b", "B", "_x", "a-1", "a_1", "Zeta", "\u00e4"]
    store.add([_episode(name, 0) for name in names])
    assert store.run_ids() == sorted(names) == ["B", "Zeta", "_x", "a-1", "a_1", "b", "\u00e4"]
    store.add([StoredReport("sources", "md-episode", source, split, 0, 3, "fp", {"accuracy": 0.5})
               for source in ("omniglot", "Birds", "aircraft") for split in ("test", "TRAIN")])
    assert [(r.source, r.split) for r in store.reports("sources")] == sorted(
        [(source, split) for source in ("omniglot", "Birds", "aircraft") for split in ("test", "TRAIN")])


def test_a_url_is_checked_before_any_connection_and_hides_its_password():
    with pytest.raises(InvalidArgument, match=r"^--metrics: got a mysql:// URL, expected a SQLite file or a "
                                              r"postgresql:// URL$"):
        target_of("mysql://u:secret@db/metrics")
    with pytest.raises(InvalidArgument, match=r"^--metrics: port: got 'five' in the PostgreSQL URL, expected 1 "
                                              r"to 65535$"):
        target_of("postgresql://u:secret@db:five/metrics")
    with pytest.raises(InvalidArgument, match=r"^--metrics: not a valid PostgreSQL URL \(") as caught:
        target_of("postgresql://u:secret@[::1/metrics")
    assert "secret" not in str(caught.value) and "\n" not in str(caught.value)
    assert target_of("postgres://u:secret@db:5433/metrics?sslmode=require") == (
        "postgres://u:secret@db:5433/metrics?sslmode=require")
    assert str(target_of("runs/metrics.sqlite")) == "runs/metrics.sqlite"


def test_an_unreachable_database_at_open_is_one_line_naming_the_option():
    with socket.socket() as probe:  # a port nothing listens on: the connection is refused at once
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(Unavailable) as caught:
        MetricsStore(f"postgresql://lab:secret@127.0.0.1:{port}/metrics")
    message = str(caught.value)
    assert message.startswith(f"--metrics: cannot use postgresql://lab@127.0.0.1:{port}/metrics: ")
    assert "refused" in message and "secret" not in message and "\n" not in message


def test_a_lost_database_is_unavailable_until_it_is_back(postgres_url):
    store = MetricsStore(postgres_url)
    assert store.add([_episode("lost", 0)], '{"a": 1}') == (1, 0)
    cluster().stop()
    try:
        for call in (lambda: store.add([_episode("lost", 1)]), lambda: store.run_config("lost")):
            with pytest.raises(Unavailable) as caught:
                call()
            message = str(caught.value)
            assert message.startswith(f"metrics database {postgres_url} unreachable (") and "\n" not in message
    finally:
        cluster().start()
    assert store.add([_episode("lost", 1), _episode("lost", 0)]) == (1, 1)  # connected again; nothing half-stored
    assert [r.index for r in store.reports("lost")] == [0, 1]


def test_a_newer_schema_is_refused_and_a_role_without_create_rights_may_read(postgres_url):
    MetricsStore(postgres_url).add([_episode("kept", 0)])
    database = postgres_url.rsplit("/", 1)[1]
    cluster().execute("UPDATE metrics_schema SET version = version + 1", database)
    try:
        with pytest.raises(FailedPrecondition, match=rf"^--metrics: {postgres_url}: metrics schema version 7 is newer "
                                                     r"than this server's \(6\)$"):
            MetricsStore(postgres_url)
    finally:
        cluster().execute("UPDATE metrics_schema SET version = version - 1", database)
    cluster().execute("DROP ROLE IF EXISTS reader; CREATE ROLE reader LOGIN; "
                      "GRANT SELECT ON ALL TABLES IN SCHEMA public TO reader", database)
    reader = MetricsStore(postgres_url.replace("postgres@", "reader@"))  # PostgreSQL 15: no CREATE in public
    assert [r.index for r in reader.reports("kept")] == [0]
    with pytest.raises(FailedPrecondition, match="refuses this role: permission denied for table runs"):
        reader.add([_episode("kept", 1)])
