"""``serve --metrics-port``: a real ``serve`` process over real stores, scraped over HTTP.

One server streams MD episodes (in messages and through shared memory), VTAB batches (a
packed source's task) and a CoG split's batch, takes reports (stored, a duplicate, one
refused), refuses a stream over ``--max-streams-per-client``, answers DATA_LOSS for a store
whose records were damaged and quarantines a truncated one at start-up; its ``/metrics``
then holds each of its metrics (``service.telemetry``) with the counts those calls make,
gRPC's per-method metrics by status, and no label with a run id or a seed. Replicas each
serve their own endpoint. A bad or busy ``--metrics-port`` is one line naming the flag."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import grpc
import lmdb
import pytest
from conftest import REPO_ROOT, generate_fixture, pack_fixture, start_serve
from doc_blocks import exec_python, python_block, where, with_constants
from prometheus_client.parser import text_string_to_metric_families

from sampler_server.cli.main import main
from sampler_server.fixtures.cog_counts import ELIGIBLE
from sampler_server.fixtures.imagenet21k import write_imagenet21k
from sampler_server.service import telemetry
from sampler_server.store.reader import StoreReader
from sampler_server.store.record import record_key
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.gen.sampler.v1 import sampler_pb2_grpc as pb_grpc
from sampler_common.wire.segments import read_probe

RUN = "metrics-run-0451"  # a run id no label may carry
SEED = 8_675_309  # nor a seed
METRICS_LINE = re.compile(r"metrics: http://127\.0\.0\.1:(\d+)/metrics")
COG = {"level_size": 1, "min_images": 3}  # five levels of one concept: the tiny IN-21K below
Samples = dict[tuple[str, frozenset], float]


def _flip_all(store_dir: Path) -> None:
    """Flip a byte inside every record's payload (its checksum then fails: DATA_LOSS)."""
    count = StoreReader(store_dir).num_records
    env = lmdb.open(str(store_dir), subdir=True, lock=False)
    with env.begin(write=True) as txn:
        for record_id in range(count):
            value = bytearray(txn.get(record_key(record_id)))
            value[len(value) - 40] ^= 0x5A
            txn.put(record_key(record_id), bytes(value))
    env.close()


def _data(root: Path) -> Path:
    """folder (MD), held (the same, for the streams held open while one is refused), flipped
    (every record damaged), broken (truncated: quarantined), and a tiny IN-21K (six concepts)
    for CoG."""
    fixture = generate_fixture("image_folder", root, num_classes=24, images_per_class=12)
    data = root / "data"
    pack_fixture(fixture, data, name="folder")
    pack_fixture(fixture, data, name="held")
    pack_fixture(fixture, data, name="flipped")
    _flip_all(data / "flipped")
    shutil.copytree(data / "folder", data / "broken")
    with open(data / "broken" / "data.mdb", "r+b") as handle:
        handle.truncate((data / "broken" / "data.mdb").stat().st_size // 2)
    layout = write_imagenet21k(root / "in21k", {wnid: 3 for wnid in ELIGIBLE[:6]}, sides=(16, 24)).input_dir
    assert main(["pack", "imagenet21k", "--input", str(layout), "--output", str(data), "--quiet",
                 "--workers", "1"]) == 0
    return data


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200 and response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, have), v in samples.items() if n == name and wanted <= have)


def poll(url: str, ready: Callable[[Samples], bool], seconds: float = 15.0) -> Samples:
    """Scrape until ``ready`` (gRPC's plugin hands its measurements over every 0.5 s)."""
    deadline = time.monotonic() + seconds
    while True:
        samples = scrape(url)
        if ready(samples) or time.monotonic() > deadline:
            return samples
        time.sleep(0.1)


def metrics_url(log: Path, count: int = 1, seconds: float = 30.0) -> list[str]:
    """The ``metrics: http://...`` URLs a server's log names, once it named ``count``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ports = METRICS_LINE.findall(log.read_text())
        if len(ports) >= count:
            return [f"http://127.0.0.1:{port}/metrics" for port in ports]
        time.sleep(0.05)
    raise AssertionError(f"no metrics line in the log: {log.read_text()[-2000:]}")


def _stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
        process.stdout.close()


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return _data(tmp_path_factory.mktemp("metrics-endpoint"))


@pytest.fixture(scope="module")
def server(data):
    log = data.parent / "serve.log"
    with open(log, "w") as stderr:
        process, address = start_serve(data, "--metrics-port", "0", "--workers", "2", "--max-streams-per-client", "2",
                                       stderr=stderr)
    try:
        (url,) = metrics_url(log)
        with grpc.insecure_channel(address) as channel:
            yield pb_grpc.SamplerStub(channel), url
    finally:
        _stop(process)


def _episodes(source: str = "folder", mode: int = pb.IMAGE_MODE_DECODED) -> pb.EpisodeRequest:
    return pb.EpisodeRequest(sources=[source], split=pb.SPLIT_TRAIN, seed=SEED,
                             images=pb.ImageOptions(image_size=16, mode=mode))


def _report(episode: pb.Episode, fingerprint: str = "") -> pb.MetricReport:
    return pb.MetricReport(run_id=RUN, protocol="md-episode", source=episode.source, split=episode.split,
                           seed=episode.seed, index=episode.index, fingerprint=fingerprint or episode.fingerprint,
                           metrics={"accuracy": 0.5}, request=_episodes())


def _images(episode: pb.Episode) -> int:
    return len(episode.support_record_ids) + len(episode.query_record_ids)


def test_every_metric_counts_what_the_server_did(server):
    stub, url = server
    first = scrape(url)
    assert value(first, "sampler_replica_info", replica="1", replicas="1", version="0.1.0") == 1
    assert value(first, "sampler_stores", state="quarantined") == 1
    assert value(first, "sampler_stores", state="served") == 4  # folder, held, flipped, the IN-21K store
    assert value(first, "sampler_store_quarantines_total", source="broken", stage="start") == 1
    assert value(first, "sampler_lookahead_limit_bytes") == value(first, "sampler_send_limit_bytes") == 16 << 20
    assert value(first, "sampler_admission_refusals_total") == 0  # the fixed labels start at 0

    # one admission refusal: a third stream of a client allowed two (of another store: what the
    # held streams still send while they are cancelled is not counted under "folder")
    request = pb.StreamBatchesRequest(source="held", split=pb.SPLIT_TRAIN, batch_size=4,
                                      images=pb.ImageOptions(image_size=16))
    held = [stub.StreamBatches(request) for _ in range(2)]
    for stream in held:
        next(stream)
    with pytest.raises(grpc.RpcError) as refused:
        next(stub.StreamBatches(request))
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    for stream in held:
        stream.cancel()
    # (gRPC's plugin records the end of a call its client cancelled late, if at all: not waited for)
    before = poll(url, lambda s: value(s, "sampler_streams_open") == 0 and value(
        s, "grpc_server_call_duration_seconds_count", grpc_status="RESOURCE_EXHAUSTED") == 1)
    assert value(before, "sampler_admission_refusals_total", reason="max_streams_per_client") == 1
    assert value(before, "grpc_server_call_duration_seconds_count", grpc_method="sampler.v1.Sampler/StreamBatches",
                 grpc_status="RESOURCE_EXHAUSTED") == 1
    assert value(before, "grpc_server_call_started_total", grpc_method="sampler.v1.Sampler/StreamBatches") == 3

    # episodes in messages (3 decoded, 1 encoded) and through shared memory (1)
    streamed = list(stub.StreamEpisodes(pb.StreamEpisodesRequest(request=_episodes(), count=3)))
    encoded = stub.GetEpisode(pb.GetEpisodeRequest(request=_episodes(mode=pb.IMAGE_MODE_ENCODED), index=5))
    same_host = pb.StreamEpisodesRequest(request=_episodes(), start_index=9, count=1)
    same_host.request.images.same_host_token = read_probe(stub.OfferSameHost(pb.SameHostRequest()).probe_segment)
    (mapped,) = stub.StreamEpisodes(same_host)
    assert mapped.support_images.segment.name and not mapped.support_images.data
    # VTAB batches (the packed source as a task), a CoG split and one batch of it
    batches = list(stub.StreamTaskBatches(pb.StreamTaskBatchesRequest(
        task="source:folder", split="train", batch_size=8, count=2, images=pb.ImageOptions(image_size=16))))
    split = stub.GetCogSplit(pb.CogSplitRequest(level="L1", split="test", **COG))  # (3 images: all are test)
    (cog_batch,) = stub.StreamCogBatches(pb.StreamCogBatchesRequest(
        split=pb.CogSplitRequest(level="L1", split="test", **COG), batch_size=2, count=1,
        images=pb.ImageOptions(image_size=16)))
    assert len(split.record_ids) == 3 and len(cog_batch.record_ids) == 2
    # reports: two stored, one retried (a duplicate), one refused (a wrong fingerprint)
    stored = stub.ReportMetrics(pb.ReportMetricsRequest(reports=[_report(e) for e in streamed[:2]]))
    again = stub.ReportMetrics(pb.ReportMetricsRequest(reports=[_report(streamed[0])]))
    assert (stored.stored, again.duplicates) == (2, 1)
    with pytest.raises(grpc.RpcError) as wrong:
        stub.ReportMetrics(pb.ReportMetricsRequest(reports=[_report(streamed[2], fingerprint="0" * 16)]))
    assert wrong.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # DATA_LOSS: every record of "flipped" is damaged
    with pytest.raises(grpc.RpcError) as lost:
        stub.GetEpisode(pb.GetEpisodeRequest(request=_episodes("flipped"), index=0))
    assert lost.value.code() == grpc.StatusCode.DATA_LOSS

    ended = {("GetEpisode", "OK"): 1, ("GetEpisode", "DATA_LOSS"): 1, ("GetCogSplit", "OK"): 1,
             ("StreamEpisodes", "OK"): 2, ("StreamTaskBatches", "OK"): 1, ("StreamCogBatches", "OK"): 1,
             ("ReportMetrics", "OK"): 2, ("ReportMetrics", "INVALID_ARGUMENT"): 1}

    def calls_ended(samples: Samples) -> dict[tuple[str, str], float]:
        return {(method, status): value(samples, "grpc_server_call_duration_seconds_count",
                                        grpc_method=f"sampler.v1.Sampler/{method}", grpc_status=status)
                - value(before, "grpc_server_call_duration_seconds_count",
                        grpc_method=f"sampler.v1.Sampler/{method}", grpc_status=status) for method, status in ended}

    # gRPC's plugin hands its measurements over in batches, some calls' ends later than others
    after = poll(url, lambda s: calls_ended(s) == ended)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    md, in_message = {"protocol": "md", "source": "folder"}, {"transport": "message"}
    assert delta("sampler_served_episodes_total", **md, **in_message) == 4
    assert delta("sampler_served_episodes_total", **md, transport="same_host") == 1
    assert delta("sampler_served_images_total", **md, **in_message) == sum(map(_images, [*streamed, encoded]))
    assert delta("sampler_served_images_total", **md, transport="same_host") == _images(mapped)
    assert delta("sampler_served_bytes_total", **md, transport="same_host") >= _images(mapped) * 16 * 16 * 3
    assert delta("sampler_served_bytes_total", **md, **in_message) >= sum(map(_images, streamed)) * 16 * 16 * 3
    assert delta("sampler_served_batches_total", protocol="vtab", source="folder") == len(batches) == 2
    assert delta("sampler_served_images_total", protocol="vtab", source="folder") == 16
    cog_store = split.store
    assert delta("sampler_served_batches_total", protocol="cog", source=cog_store) == 1
    assert delta("sampler_served_images_total", protocol="cog", source=cog_store) == len(cog_batch.record_ids)
    # decoded replies had their images decoded; every reply was assembled
    assert delta("sampler_decode_duration_seconds_count", **md) == 4  # not the encoded one
    assert delta("sampler_decode_duration_seconds_count", protocol="vtab") == 2
    assert delta("sampler_decode_duration_seconds_count", protocol="cog") == 1
    assert delta("sampler_decode_duration_seconds_sum", **md) > 0
    assert delta("sampler_assembly_duration_seconds_count", **md, **in_message) == 4
    assert delta("sampler_assembly_duration_seconds_count", **md, transport="same_host") == 1
    assert value(after, "sampler_streams_open") == 0 and value(after, "sampler_lookahead_used_bytes") == 0
    assert value(after, "sampler_send_used_bytes") == 0 and value(after, "sampler_same_host_used_bytes") >= 0
    reports = {outcome: delta("sampler_reports_total", protocol="md-episode", outcome=outcome)
               for outcome in telemetry.REPORT_OUTCOMES}
    assert reports == {"stored": 2, "duplicate": 1, "refused": 1}
    assert delta("sampler_data_loss_total", source="flipped") == 1 and delta("sampler_data_loss_total") == 1
    # gRPC's own, per method and status
    assert delta("grpc_server_call_started_total", grpc_method="sampler.v1.Sampler/StreamEpisodes") == 2
    assert delta("grpc_server_call_started_total", grpc_method="sampler.v1.Sampler/GetEpisode") == 2
    assert calls_ended(after) == ended
    assert delta("grpc_server_call_duration_seconds_bucket", grpc_method="sampler.v1.Sampler/GetCogSplit",
                 le="+Inf") == 1

    # every metric the server declares is there; no label carries a run id, a seed or a peer
    names = {name for name, _ in after}
    assert telemetry.exported_series() <= names, sorted(telemetry.exported_series() - names)
    allowed = {"protocol", "source", "transport", "reason", "state", "stage", "outcome", "replica", "replicas",
               "version", "grpc_method", "grpc_status", "le"}
    extra = {key for name, have in after for key, _ in have if not name.startswith("target_info")} - allowed
    assert not extra, extra
    values = {value for _, have in after for _, value in have}
    assert not [v for v in values if RUN in v or str(SEED) in v or "ipv4:" in v], values


def test_the_docs_scrape_example_prints_the_servers_lines(server):
    _, url = server
    done = exec_python(with_constants(python_block("docs/operations.md", "scrape"), METRICS=url),
                       where=where("docs/operations.md", "scrape"))
    lines = done.stdout.splitlines()
    assert any(line.startswith('sampler_replica_info{replica="1",replicas="1"') for line in lines), lines
    assert any(line.startswith("sampler_served_episodes_total{") for line in lines), lines


def test_replicas_each_serve_their_own_metrics(data, tmp_path):
    log = tmp_path / "serve.log"
    with open(log, "w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "sampler_server", "serve", "--data", str(data), "--port", "0", "--replicas", "2",
             "--workers", "2", "--metrics-port", "0", "--metrics", str(tmp_path / "reports.sqlite")],
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, stdout=subprocess.PIPE, stderr=stderr, text=True)
    try:
        ready = process.stdout.readline()
        assert ready.startswith("listening on ipv4:127.0.0.1:"), ready + log.read_text()[-2000:]
        addresses = re.findall(r"127\.0\.0\.1:\d+", ready.split()[2])
        urls = metrics_url(log, 2)
        by_replica = {}
        for line in log.read_text().splitlines():
            found = re.search(r"replica (\d)/2: metrics: (http://\S+)", line)
            if found:
                by_replica[int(found[1])] = found[2]
        assert sorted(by_replica) == [1, 2] and set(by_replica.values()) == set(urls), log.read_text()[-2000:]
        # replica 2 serves an episode: its endpoint counts it, replica 1's does not
        with grpc.insecure_channel(addresses[1]) as channel:
            episode = pb_grpc.SamplerStub(channel).GetEpisode(pb.GetEpisodeRequest(request=pb.EpisodeRequest(
                sources=["folder"], split=pb.SPLIT_TRAIN, seed=1, images=pb.ImageOptions(image_size=16))))
        for number in (1, 2):
            samples = poll(by_replica[number], lambda s: value(s, "grpc_server_call_started_total") >= (number == 2))
            assert value(samples, "sampler_replica_info", replica=str(number), replicas="2") == 1
            served = value(samples, "sampler_served_episodes_total", protocol="md", source="folder")
            assert served == (1 if number == 2 else 0), (number, served)
            assert value(samples, "grpc_server_call_started_total",
                         grpc_method="sampler.v1.Sampler/GetEpisode") == (number == 2)
        assert episode.index == 0
    finally:
        _stop(process)


def _refused(*flags: str) -> str:
    done = subprocess.run([sys.executable, "-m", "sampler_server", "serve", *flags], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    return lines[-1]


def test_a_bad_or_busy_metrics_port_is_one_line_naming_the_flag(data, server, tmp_path, capsys):
    for flags, said in ((["--metrics-port", "70000"], "--metrics-port: got 70000, expected 0 to 65535"),
                        (["--port", "6000", "--metrics-port", "6000"], "--metrics-port: got 6000, the port --port"),
                        (["--port", "6000", "--replicas", "3", "--metrics-port", "6002"],
                         "--metrics-port: got 6002 with --replicas 3, whose metrics ports 6002-6004 overlap"),
                        (["--replicas", "2", "--metrics-port", "65535"], "--metrics-port: got 65535 with --replicas 2")):
        assert main(["serve", "--data", str(tmp_path), *flags]) == 2, flags
        error = capsys.readouterr().err.strip()
        assert error.startswith(f"sampler-server serve: error: {said}") and "\n" not in error, error
    busy = int(server[1].rsplit(":", 1)[1].split("/")[0])  # the running server's metrics port
    line = _refused("--data", str(data), "--port", "0", "--workers", "1", "--metrics-port", str(busy),
                    "--metrics", str(tmp_path / "reports.sqlite"))
    assert line == f"sampler-server serve: error: --metrics-port: cannot listen on 127.0.0.1:{busy} " \
                   "(Address already in use)", line
