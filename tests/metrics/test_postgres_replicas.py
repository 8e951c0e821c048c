"""Replicas of the service sharing one PostgreSQL metrics database: two real ``serve``
processes on 127.0.0.1 taking the same reports at once, every report stored once and
the runs configured alike; ``serve`` refusing a bad or unreachable database at start in
one line; a database lost while serving makes reports UNAVAILABLE, not the episodes."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading

import grpc
import pytest
from conftest import REPO_ROOT, start_serve
from grpc_health.v1 import health_pb2, health_pb2_grpc
from postgres_cluster import cluster, postgres_url  # noqa: F401 (fixture)

from sampler_server.cli.main import main
from sampler_server.metrics.store import MetricsStore
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.gen.sampler.v1 import sampler_pb2_grpc as pb_grpc

CONFIG = '{"backbone": "conv4", "lr": 0.01}'
REQUEST = pb.EpisodeRequest(sources=["folder"], split=pb.SPLIT_TRAIN, seed=5, images=pb.ImageOptions(image_size=8))


@pytest.fixture(scope="module")
def replicas(served, postgres_url, tmp_path_factory):
    logs = tmp_path_factory.mktemp("replicas")
    processes = []
    try:
        for replica in range(2):
            with open(logs / f"replica-{replica}.log", "w") as log:  # a file: a full pipe would stall the server
                processes.append(start_serve(served.data, "--workers", "1", "--metrics", postgres_url, stderr=log))
        yield [address for _, address in processes]
    finally:
        for process, _ in processes:
            process.terminate()
            process.wait(timeout=30)


def _episode_report(run: str, episode: pb.Episode) -> pb.MetricReport:
    return pb.MetricReport(run_id=run, protocol="md-episode", source=episode.source, split=episode.split,
                           seed=episode.seed, index=episode.index, fingerprint=episode.fingerprint,
                           metrics={"accuracy": (episode.index % 4) / 4}, request=REQUEST)


def _all_reports(episodes: list[pb.Episode]) -> list[pb.MetricReport]:
    reports = []
    for run in ("replica-x", "replica-y"):
        reports += [_episode_report(run, episode) for episode in episodes]
        reports += [pb.MetricReport(run_id=run, protocol="vtab-task", task=task, task_split="test", examples=1000,
                                    metrics={"accuracy": 0.5}) for task in ("cifar100", "svhn", "dtd")]
        reports += [pb.MetricReport(run_id=run, protocol="cog", cog_level=level, seed=seed, examples=5000,
                                    metrics={"accuracy": 0.25}) for level in ("L1", "L5") for seed in (1, 2)]
    return reports


def test_two_replicas_store_every_report_once_and_configure_runs_alike(replicas, postgres_url, served, capsys):
    channels = [grpc.insecure_channel(address) for address in replicas]
    stubs = [pb_grpc.SamplerStub(channel) for channel in channels]
    episodes = list(stubs[0].StreamEpisodes(pb.StreamEpisodesRequest(request=REQUEST, count=12)))
    reports = _all_reports(episodes)
    totals = {"stored": 0, "duplicates": 0, "sent": 0}
    errors: list[BaseException] = []
    lock = threading.Lock()

    def send(worker: int) -> None:  # each worker sends every report twice, in its own order, to one replica
        rng = random.Random(worker)
        stub = stubs[worker % 2]
        for _ in range(2):
            order = list(reports)
            rng.shuffle(order)
            batches = [order[start:start + 6] for start in range(0, len(order), 6)]
            for batch in batches + batches[:1]:  # and the first batch again: a retry after a lost reply
                try:
                    reply = stub.ReportMetrics(pb.ReportMetricsRequest(reports=batch, run_config_json=CONFIG),
                                               timeout=60)
                except grpc.RpcError as error:
                    errors.append(error)
                    return
                with lock:
                    totals["stored"] += reply.stored
                    totals["duplicates"] += reply.duplicates
                    totals["sent"] += len(batch)

    threads = [threading.Thread(target=send, args=(worker,)) for worker in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, [error.details() for error in errors]
    assert totals["stored"] == len(reports) == 2 * (12 + 3 + 4)
    assert totals["duplicates"] == totals["sent"] - len(reports) > 3 * len(reports)
    store = MetricsStore(postgres_url)
    assert store.run_ids() == ["replica-x", "replica-y"]
    for run in store.run_ids():
        assert [(r.index, r.fingerprint) for r in store.reports(run)] == [(e.index, e.fingerprint) for e in episodes]
        assert [t.task for t in store.task_results(run)] == ["cifar100", "dtd", "svhn"]
        assert [(c.level, c.seed) for c in store.cog_results(run)] == [("L1", 1), ("L1", 2), ("L5", 1), ("L5", 2)]
        assert store.run_config(run) == {"backbone": "conv4", "lr": 0.01}
    (rows,) = cluster().execute("SELECT (SELECT count(*) FROM reports), (SELECT count(*) FROM task_results), "
                                "(SELECT count(*) FROM cog_results)", postgres_url.rsplit("/", 1)[1])
    assert rows == (24, 6, 8)
    text = stubs[1].GetReport(pb.GetReportRequest(run_ids=["replica-x"], format="table")).text
    assert "folder/train" in text and "(12)" in text  # each replica reads what both stored
    with pytest.raises(grpc.RpcError) as caught:  # a run keeps its first configuration on every replica
        stubs[1].ReportMetrics(pb.ReportMetricsRequest(reports=reports[:1], run_config_json='{"lr": 0.1}'))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "already has a different configuration" in caught.value.details()
    for channel in channels:
        channel.close()
    assert main(["report", "--data", str(served.data), "--metrics", postgres_url, "--run", "replica-x"]) == 0
    assert text in capsys.readouterr().out  # report --metrics URL: the table the replicas serve


@pytest.mark.parametrize(("url", "words"), [
    ("postgresql://lab:secret@127.0.0.1:{closed}/metrics", "cannot use postgresql://lab@127.0.0.1:{closed}/metrics: "),
    ("postgresql://lab:secret@127.0.0.1:99999/metrics", "port: got '99999' in the PostgreSQL URL, expected 1 to 65535"),
    ("mysql://lab:secret@127.0.0.1/metrics", "got a mysql:// URL, expected a SQLite file or a postgresql:// URL"),
], ids=["unreachable", "bad-port", "other-scheme"])
def test_serve_refuses_a_bad_or_unreachable_database_in_one_line(served, url, words):
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    done = subprocess.run(
        [sys.executable, "-m", "sampler_server", "serve", "--data", str(served.data), "--port", "0", "--workers", "1",
         "--metrics", url.format(closed=closed)],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""  # never listened
    (line,) = done.stderr.splitlines()
    assert line.startswith("sampler-server serve: error: --metrics: " + words.format(closed=closed)), line
    assert "secret" not in line


def test_a_lost_database_makes_reports_unavailable_while_episodes_keep_coming(served, postgres_url):
    from sampler_server.service.server import RunningServer, ServerConfig

    server = RunningServer(ServerConfig(data_dir=served.data, port=0, workers=1, metrics_path=postgres_url,
                                        grace_seconds=0.5)).start()
    channel = grpc.insecure_channel(server.address)
    try:
        stub = pb_grpc.SamplerStub(channel)
        stream = stub.StreamEpisodes(pb.StreamEpisodesRequest(request=REQUEST, count=0))
        first = [next(stream) for _ in range(2)]
        reports = [_episode_report("lost-run", episode) for episode in first]
        assert stub.ReportMetrics(pb.ReportMetricsRequest(reports=reports[:1])).stored == 1
        cluster().stop()
        try:
            with pytest.raises(grpc.RpcError) as caught:
                stub.ReportMetrics(pb.ReportMetricsRequest(reports=reports[1:]))
            assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
            details = caught.value.details()
            assert details.startswith(f"metrics database {postgres_url} unreachable (") and "\n" not in details
            assert [next(stream).index for _ in range(3)] == [2, 3, 4]  # the open stream goes on
            again = stub.GetEpisode(pb.GetEpisodeRequest(request=REQUEST, index=1))
            assert again.fingerprint == first[1].fingerprint  # and new calls are served
            health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
            assert health.status == health_pb2.HealthCheckResponse.SERVING
        finally:
            cluster().start()
        reply = stub.ReportMetrics(pb.ReportMetricsRequest(reports=reports))  # the client's retry, once it is back
        assert (reply.stored, reply.duplicates) == (1, 1)
        stream.cancel()
    finally:
        channel.close()
        server.stop(grace=0.5)
