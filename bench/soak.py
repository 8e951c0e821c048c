"""Soak: many mixed clients against one server for minutes; errors, latency and RSS.

Builds an image_folder fixture (24 classes x 20 images) in a temp dir, packs it
twice (encoded, and raw at 84 px as ``folder_raw84``), starts ``sampler-server
serve`` with its default limits (``--stream-idle-seconds`` from an option) and runs
N client processes (spawn; each its own gRPC channel) for M minutes. Roles cycle
among the well-behaved kinds:
- ``stream``: StreamEpisodes of 50 episodes at 84 px over and over (alternating the
  encoded and the raw store), reading everything; latency = time to each message,
- ``unary``: GetEpisode at random indices; latency per call,
- ``report``: GetEpisode of the next index, then ReportMetrics of that episode under
  the client's own run id; latency = the ReportMetrics call,
- ``health``: grpc.health.v1 Check every 50 ms; latency per call;
and the last ``--stalled`` clients open 20 unbounded StreamEpisodes each and never
read them, re-opening each when it ends (cancelled by the server after its idle
period, or refused with RESOURCE_EXHAUSTED: counted apart, not as errors).
A well-behaved client's error is any RpcError or wrong data (an index that is not
the one asked, a report neither stored nor a duplicate, health not SERVING).

The parent samples the server's RSS (the server and all its descendants, VmRSS
from /proc; also their summed Pss, which counts the decode workers' shared-memory
buffers once where VmRSS counts them in each process) every 10 s, prints a line per sample, and at the end a table per role
(clients, calls, errors, p50/p99 ms), the stalled streams' fates, RSS start / max /
end, and PASS/FAIL for: 0 errors for the well-behaved clients, health p99 < 100 ms,
RSS growth (max - start) < 200 MB. It always exits 0.

Run: ``.venv/bin/python bench/soak.py [--clients 8] [--stalled 2] [--minutes 5]``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import queue as queue_module
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

WELL_BEHAVED = ("stream", "unary", "report", "health")
STORES = ("image_folder", "folder_raw84")
SOURCE = "image_folder"  # Episode.source names the source kind, which both stores hold
SIZE = 84
STREAM_COUNT = 50
STALLED_STREAMS = 20
HEALTH_PERIOD = 0.05
CALL_TIMEOUT = 30.0
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 256 << 20)]


# ----------------------------------------------------------------- data and server

def _cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "sampler_server", *args], check=True, cwd=REPO,
                   env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.DEVNULL)


def build_data(work: Path) -> Path:
    fixtures, data = work / "fixtures", work / "data"
    _cli("fixtures", "image_folder", "--output", str(fixtures), "--classes", "24", "--images-per-class", "20")
    _cli("pack", "image_folder", "--input", str(fixtures / "image_folder"), "--output", str(data), "--quiet")
    _cli("pack", "image_folder", "--input", str(fixtures / "image_folder"), "--output", str(data), "--quiet",
         "--raw-size", str(SIZE), "--name", "folder_raw84")
    return data


def start_server(data: Path, idle_seconds: float, log_path: Path,
                 extra: list[str] | None = None) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "sampler_server", "serve", "--data", str(data), "--port", "0",
         "--stream-idle-seconds", str(idle_seconds), *(extra or [])],
        stdout=subprocess.PIPE, stderr=open(log_path, "a"), text=True, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    line = process.stdout.readline()
    if "listening on" not in line:
        process.kill()
        raise RuntimeError(f"server did not start: {line!r}; see {log_path}")
    # Keep draining stdout so the server never blocks on a full pipe.
    threading.Thread(target=lambda: [None for _ in process.stdout], daemon=True).start()
    return process, line.split("listening on", 1)[1].split()[0]


def stop_server(process: subprocess.Popen) -> str:
    if process.poll() is not None:
        return f"already exited with {process.returncode}"
    process.send_signal(signal.SIGTERM)
    try:
        return f"exited with {process.wait(timeout=30)} after SIGTERM"
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return "killed: did not exit within 30 s of SIGTERM"


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                todo.extend(int(c) for c in Path(f"/proc/{current}/task/{task}/children").read_text().split())
            except OSError:
                pass
    return found


def rss_mb(pid: int) -> tuple[float, int, float, float]:
    """Memory (MB) of pid and all its descendants: summed VmRSS, how many processes,
    pid's own VmRSS, and summed Pss (smaps_rollup: pages shared between the
    processes, like the decode workers' shared-memory buffers, counted once)."""
    total, count, own, pss = 0, 0, 0, 0
    for p in _descendants(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
                    count += 1
                    own = own or int(line.split()[1])
                    break
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    pss += int(line.split()[1])
                    break
        except OSError:
            pass
    return total / 1024, count, own / 1024, pss / 1024


# ----------------------------------------------------------------- clients

def _request(pb, store: str, seed: int):
    return pb.EpisodeRequest(sources=[store], split=pb.SPLIT_TRAIN, seed=seed,
                             images=pb.ImageOptions(image_size=SIZE))


class _Tally:
    def __init__(self, role: str, k: int) -> None:
        self.role, self.k = role, k
        self.calls = 0
        self.errors = 0
        self.samples: list[str] = []
        self.latencies: list[float] = []
        self.stalled = {"opened": 0, "refused": 0, "cancelled": 0, "other": 0, "ended_ok": 0}

    def error(self, text: str) -> None:
        self.errors += 1
        if len(self.samples) < 5:
            self.samples.append(text[:300])

    def result(self) -> dict:
        return {"role": self.role, "k": self.k, "calls": self.calls, "errors": self.errors, "samples": self.samples,
                "latencies": self.latencies, "stalled": self.stalled}


def _rpc_text(error) -> str:
    import grpc
    if isinstance(error, grpc.RpcError) and hasattr(error, "code"):
        return f"{error.code().name}: {error.details()}"
    return repr(error)


def _run_stream(stub, pb, tally: _Tally, end: float, k: int) -> None:
    import grpc
    rounds = 0
    while time.time() < end:
        store, start = STORES[rounds % 2], random.randrange(0, 100_000)
        rounds += 1
        call = stub.StreamEpisodes(pb.StreamEpisodesRequest(request=_request(pb, store, k), start_index=start,
                                                           count=STREAM_COUNT))
        expected, last = start, time.perf_counter()
        try:
            for message in call:
                now = time.perf_counter()
                tally.calls += 1
                tally.latencies.append(now - last)
                last = now
                if message.index != expected or message.source != SOURCE or \
                        message.last != (expected == start + STREAM_COUNT - 1) or not message.support_images.data:
                    tally.error(f"wrong message: index {message.index} (asked {expected}), source {message.source}, "
                                f"last {message.last}")
                expected += 1
                if time.time() >= end:
                    call.cancel()
                    break
            else:
                if expected != start + STREAM_COUNT:
                    tally.error(f"stream ended after {expected - start} of {STREAM_COUNT} messages")
        except grpc.RpcError as error:
            if not (time.time() >= end and error.code() == grpc.StatusCode.CANCELLED):
                tally.error(_rpc_text(error))


def _run_unary(stub, pb, tally: _Tally, end: float, k: int) -> None:
    rng = random.Random(k)
    while time.time() < end:
        index = rng.randrange(0, 100_000)
        store = STORES[index % 2]
        started = time.perf_counter()
        try:
            message = stub.GetEpisode(pb.GetEpisodeRequest(request=_request(pb, store, k), index=index),
                                      timeout=CALL_TIMEOUT)
            tally.latencies.append(time.perf_counter() - started)
            if message.index != index or message.source != SOURCE or not message.support_images.data:
                tally.error(f"wrong episode: index {message.index} (asked {index}), source {message.source}")
        except Exception as error:  # noqa: BLE001 - every failure is an error here
            tally.error(_rpc_text(error))
        tally.calls += 1


def _run_report(stub, pb, tally: _Tally, end: float, k: int) -> None:
    run_id = f"soak-{os.getpid()}-{k}-{int(time.time())}"
    index = 0
    while time.time() < end:
        request = _request(pb, "image_folder", k)
        try:
            message = stub.GetEpisode(pb.GetEpisodeRequest(request=request, index=index), timeout=CALL_TIMEOUT)
            if message.index != index:
                tally.error(f"wrong episode: index {message.index} (asked {index})")
            report = pb.MetricReport(
                run_id=run_id, protocol="md-episode", source=message.source, split=message.split, seed=message.seed,
                index=message.index, fingerprint=message.fingerprint,
                metrics={"accuracy": random.random()}, request=request,
            )
            started = time.perf_counter()
            reply = stub.ReportMetrics(pb.ReportMetricsRequest(reports=[report], run_config_json='{"soak": 1}'),
                                       timeout=CALL_TIMEOUT)
            tally.latencies.append(time.perf_counter() - started)
            if (reply.stored, reply.duplicates) != (1, 0):
                tally.error(f"report of episode {index}: stored {reply.stored}, duplicates {reply.duplicates}")
        except Exception as error:  # noqa: BLE001
            tally.error(_rpc_text(error))
        tally.calls += 1
        index += 1


def _run_health(channel, tally: _Tally, end: float) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    stub = health_pb2_grpc.HealthStub(channel)
    next_at = time.perf_counter()
    while time.time() < end:
        started = time.perf_counter()
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=CALL_TIMEOUT)
            tally.latencies.append(time.perf_counter() - started)
            if reply.status != health_pb2.HealthCheckResponse.SERVING:
                tally.error(f"health status {reply.status}")
        except Exception as error:  # noqa: BLE001
            tally.error(_rpc_text(error))
        tally.calls += 1
        next_at += HEALTH_PERIOD
        time.sleep(max(0.0, next_at - time.perf_counter()))
        next_at = max(next_at, time.perf_counter() - HEALTH_PERIOD)  # no burst to catch up after a stall


def _run_stalled(stub, pb, tally: _Tally, end: float, k: int, idle_seconds: float, streams: int) -> None:
    """Open streams, never read them; see each one's fate and re-open it.

    gRPC Python does not surface the status of a call whose received messages are
    unread, so a stream the server cancelled looks open here. A stream still open
    ``idle_seconds + 10`` s after it opened is therefore drained (at most 10
    messages, after the stall): CANCELLED then counts as cancelled by the server; a
    stream that keeps sending counts as ``not_cancelled`` and is cancelled here.
    """
    import grpc
    counts = tally.stalled
    counts["not_cancelled"] = 0

    def open_one(i: int):
        counts["opened"] += 1
        opened_at[i] = time.time()
        return stub.StreamEpisodes(pb.StreamEpisodesRequest(request=_request(pb, STORES[i % 2], k),
                                                           start_index=i * 1_000_000, count=0))

    def ended(code, details: str) -> None:
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            counts["refused"] += 1
        elif code == grpc.StatusCode.CANCELLED:
            counts["cancelled"] += 1
        elif code == grpc.StatusCode.OK:
            counts["ended_ok"] += 1
        else:
            counts["other"] += 1
            if len(tally.samples) < 5:
                tally.samples.append(f"{code.name}: {details}"[:300])

    opened_at = [0.0] * streams
    reopen_at = [0.0] * streams
    calls: list = [open_one(i) for i in range(streams)]
    while time.time() < end:
        for i, call in enumerate(calls):
            if call is None:
                if time.time() >= reopen_at[i]:
                    calls[i] = open_one(i)
                continue
            if call.done():
                ended(call.code(), call.details())
                # refused: wait the server's retry hint; otherwise re-open at once
                reopen_at[i] = time.time() + (5 if call.code() == grpc.StatusCode.RESOURCE_EXHAUSTED else 0)
                calls[i] = None
            elif time.time() - opened_at[i] > idle_seconds + 10:
                try:
                    for n, _ in enumerate(call):
                        if n >= 9:
                            counts["not_cancelled"] += 1
                            call.cancel()
                            break
                    else:
                        counts["ended_ok"] += 1
                except grpc.RpcError as error:
                    ended(error.code(), error.details())
                calls[i] = None
        time.sleep(0.2)
    for call in calls:
        if call is not None:
            call.cancel()


def client_main(role: str, k: int, address: str, seconds: float, idle_seconds: float, stalled_streams: int,
                ready, go, queue) -> None:
    import grpc

    from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
    from sampler_common.wire.gen.sampler.v1 import sampler_pb2_grpc as pb_grpc

    tally = _Tally(role, k)
    channel = grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
    try:
        grpc.channel_ready_future(channel).result(timeout=60)
        stub = pb_grpc.SamplerStub(channel)
        ready.release()
        go.wait()
        end = time.time() + seconds
        if role == "stream":
            _run_stream(stub, pb, tally, end, k)
        elif role == "unary":
            _run_unary(stub, pb, tally, end, k)
        elif role == "report":
            _run_report(stub, pb, tally, end, k)
        elif role == "health":
            _run_health(channel, tally, end)
        else:
            _run_stalled(stub, pb, tally, end, k, idle_seconds, stalled_streams)
    except Exception as error:  # noqa: BLE001 - reported as this client's error
        tally.error(f"client crashed: {_rpc_text(error)}")
        ready.release()
    finally:
        queue.put(tally.result())
        channel.close()


# ----------------------------------------------------------------- main

def _ms(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values) * 1000, q)) if values else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8, help="client processes in all, stalled ones included")
    parser.add_argument("--stalled", type=int, default=2, help="of them, clients that open streams and never read")
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--stalled-streams", type=int, default=STALLED_STREAMS,
                        help=f"unbounded streams each stalled client opens and never reads (default {STALLED_STREAMS})")
    parser.add_argument("--stream-idle-seconds", type=float, default=30.0, help="passed to serve")
    parser.add_argument("--sample-seconds", type=float, default=10.0, help="RSS sampling period")
    parser.add_argument("--serve-arg", action="append", default=[], metavar="ARG",
                        help="one more argument for serve, e.g. --serve-arg=--send-mb --serve-arg=8 (repeatable)")
    args = parser.parse_args()
    roles = [WELL_BEHAVED[i % len(WELL_BEHAVED)] for i in range(args.clients - args.stalled)] + ["stalled"] * args.stalled
    seconds = args.minutes * 60
    work = Path(tempfile.mkdtemp(prefix="soak-"))
    log_path = work / "server.log"
    server = None
    try:
        started = time.perf_counter()
        data = build_data(work)
        print(f"data built in {time.perf_counter() - started:.1f} s: {', '.join(sorted(p.name for p in data.iterdir() if p.is_dir()))}",
              flush=True)
        server, address = start_server(data, args.stream_idle_seconds, log_path, args.serve_arg)
        print(f"server pid {server.pid} on {address}; {os.cpu_count()} cores; load average {os.getloadavg()}", flush=True)
        print(f"clients: {', '.join(f'{r} x{roles.count(r)}' for r in dict.fromkeys(roles))}; {args.minutes:g} min; "
              f"stream idle {args.stream_idle_seconds:g} s", flush=True)

        ctx = multiprocessing.get_context("spawn")
        queue, ready, go = ctx.Queue(), ctx.Semaphore(0), ctx.Event()
        processes = [ctx.Process(target=client_main, args=(role, k, address, seconds, args.stream_idle_seconds, args.stalled_streams, ready, go, queue), daemon=True)
                     for k, role in enumerate(roles)]
        for p in processes:
            p.start()
        for _ in processes:
            ready.acquire()
        rss_start, nproc, own, pss_start = rss_mb(server.pid)
        samples = [(0.0, rss_start, pss_start)]
        print("server memory: RSS = summed VmRSS of the server and its descendants; main = the server process alone; "
              "PSS = summed Pss (shared pages counted once)", flush=True)
        print(f"{'elapsed s':>9} {'RSS MB':>8} {'growth MB':>9} {'procs':>5} {'main MB':>8} {'PSS MB':>8} {'PSS growth':>10}",
              flush=True)
        print(f"{0.0:9.0f} {rss_start:8.1f} {0.0:9.1f} {nproc:5d} {own:8.1f} {pss_start:8.1f} {0.0:10.1f}", flush=True)
        go.set()
        t0 = time.time()
        results: list[dict] = []
        next_sample = t0 + args.sample_seconds
        hard_end = t0 + seconds + 180
        while len(results) < len(processes) and time.time() < hard_end:
            try:
                results.append(queue.get(timeout=max(0.05, min(1.0, next_sample - time.time()))))
            except queue_module.Empty:
                pass
            if time.time() >= next_sample:
                rss, nproc, own, pss = rss_mb(server.pid)
                samples.append((time.time() - t0, rss, pss))
                print(f"{time.time() - t0:9.0f} {rss:8.1f} {rss - rss_start:9.1f} {nproc:5d} {own:8.1f} {pss:8.1f} "
                      f"{pss - pss_start:10.1f}", flush=True)
                next_sample += args.sample_seconds
        rss_end, _, _, pss_end = rss_mb(server.pid)
        samples.append((time.time() - t0, rss_end, pss_end))
        for p in processes:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
        missing = len(processes) - len(results)
        print(f"server: {stop_server(server)}; load average {os.getloadavg()}", flush=True)
        server = None
    finally:
        if server is not None:
            print(f"server: {stop_server(server)}", flush=True)
    log = log_path.read_text() if log_path.exists() else ""
    if "Traceback" in log:
        print("server log, first traceback:\n" + log[log.index("Traceback"):][:3000], file=sys.stderr)
    shutil.rmtree(work, ignore_errors=True)

    print()
    print(f"{'role':8} {'clients':>7} {'calls':>8} {'errors':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    well_errors = missing
    health_p99 = float("nan")
    for role in dict.fromkeys(r for r in roles if r != "stalled"):
        mine = [r for r in results if r["role"] == role]
        latencies = [x for r in mine for x in r["latencies"]]
        errors = sum(r["errors"] for r in mine)
        well_errors += errors
        if role == "health":
            health_p99 = _ms(latencies, 99)
        print(f"{role:8} {len(mine):7d} {sum(r['calls'] for r in mine):8d} {errors:6d} {_ms(latencies, 50):8.1f} "
              f"{_ms(latencies, 99):8.1f} {max(latencies, default=float('nan')) * 1000:8.1f}")
    for r in results:
        for sample in r["samples"]:
            print(f"  {r['role']} client {r['k']}: {sample}")
    if missing:
        print(f"  {missing} client(s) sent no result (counted as errors)")
    stalled = [r["stalled"] for r in results if r["role"] == "stalled"]
    if stalled:
        total = {key: sum(s[key] for s in stalled) for key in stalled[0]}
        print(f"stalled  {len(stalled)} clients x {args.stalled_streams} streams: opened {total['opened']}, refused "
              f"(RESOURCE_EXHAUSTED) {total['refused']}, cancelled by the server {total['cancelled']} "
              f"(server log: {log.count('(its client does not read): cancelled')} idle cancels), "
              f"still sending after the idle period {total['not_cancelled']}, other endings {total['other'] + total['ended_ok']}")
    rss_max = max(rss for _, rss, _ in samples)
    pss_max = max(pss for _, _, pss in samples)
    growth = rss_max - rss_start
    print(f"server RSS MB: start {rss_start:.1f}, max {rss_max:.1f}, end {rss_end:.1f}; growth max-start {growth:.1f}, "
          f"end-start {rss_end - rss_start:.1f}")
    print(f"server PSS MB: start {pss_start:.1f}, max {pss_max:.1f}, end {pss_end:.1f}; growth max-start "
          f"{pss_max - pss_start:.1f}, end-start {pss_end - pss_start:.1f}")
    print()
    print(f"{'PASS' if well_errors == 0 else 'FAIL'}: {well_errors} errors for the well-behaved clients (want 0)")
    print(f"{'PASS' if health_p99 < 100 else 'FAIL'}: health p99 {health_p99:.1f} ms (want < 100)")
    print(f"{'PASS' if growth < 200 else 'FAIL'}: server RSS growth {growth:.1f} MB (max - start of summed VmRSS; "
          f"PSS growth {pss_max - pss_start:.1f} MB) (want < 200)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
