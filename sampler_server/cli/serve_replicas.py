"""``serve --replicas N``: N server processes on one host behind one ready line.

Why: one ``serve`` is one Python interpreter that assembles every reply and writes
every same-host segment; on a 64-core host it stops near 40-48 ResNet-18 126-px MD
episodes/s however many decode workers it has (issue 26), while four GPU ranks want
more. N replicas are N such interpreters. Each is the same ``serve`` command with
``--replicas 1``: its own share of the decode workers (``--workers`` is the total,
split evenly, at least one each), its own lookahead, send and shared-memory budgets
(``--lookahead-mb``, ``--send-mb`` and ``--shm-mb`` are per replica) and its own
same-host segments, on ports ``--port``, ``--port`` + 1, ... (``--port 0``: each picks
a free one). Episodes are a pure function of request and index, so any replica serves
any index and a client sees the same episodes from any of them.

The parent only starts, watches and stops them:
- ready line, once every replica is ready: ``listening on TARGET (N replicas; decode
  workers W0+W1+...; S stores: ...; tls on|off, tokens on|off, metrics :P0+:P1+...|off;
  ready in S s)``, TARGET being ``ipv4:HOST:P0,HOST:P1,...`` (``ipv6:[HOST]:P0,...``), a
  target every client takes as ``--server`` (``clients.balancing``: round-robin, or
  under torchrun each local rank on its own replica), the metrics ports those of the
  replicas in order, read from their own ready lines (``sampler_server.cli.ready``);
- SIGTERM or SIGINT: sent on once to every replica (each drains as one server does);
  the parent exits when they all have, 0 when every one exited 0;
- a replica that exits by itself (killed, crashed, failed to start) is logged, the
  others are stopped, and the parent exits non-zero: never a silent half-service;
- the parent killed outright: the replicas die with it (``procutil.die_with_parent``).
The metrics store is shared: the parent creates a new SQLite file first, then SQLite in
WAL mode with a busy timeout takes writes from several processes (a ``postgresql://`` URL
is shared by design).
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from sampler_server.cli.ready import READY, SETTINGS, ready_settings
from sampler_server.errors import InvalidArgument

log = logging.getLogger("sampler_server.replicas")


# ---- the plan: pure ---------------------------------------------------------------------


def split_workers(total: int, replicas: int) -> list[int]:
    """Decode workers of each replica: ``total`` split evenly (the first ones get the
    remainder), at least one each."""
    share, extra = divmod(total, replicas)
    return [max(1, share + (index < extra)) for index in range(replicas)]


def replica_ports(port: int, replicas: int, flag: str = "--port") -> list[int]:
    """Consecutive ports from ``port`` (0: each replica picks a free one); ``flag`` names
    the option that gave ``port``.

    Raises:
        InvalidArgument: the last port would pass 65535.
    """
    if port == 0:
        return [0] * replicas
    if port + replicas - 1 > 65535:
        raise InvalidArgument(f"{flag}: got {port} with --replicas {replicas}, expected at most "
                              f"{65536 - replicas} (the replicas listen on consecutive ports)")
    return [port + index for index in range(replicas)]


def metrics_ports(args: argparse.Namespace) -> list[int | None]:
    """Each replica's ``--metrics-port`` (None: off), consecutive from the parent's.

    Raises:
        InvalidArgument: past 65535, or overlapping the replicas' gRPC ports.
    """
    if args.metrics_port is None:
        return [None] * args.replicas
    ports = replica_ports(args.metrics_port, args.replicas, "--metrics-port")
    shared = sorted(set(ports) & set(replica_ports(args.port, args.replicas)) - {0})
    if shared:
        raise InvalidArgument(f"--metrics-port: got {args.metrics_port} with --replicas {args.replicas}, whose "
                              f"metrics ports {ports[0]}-{ports[-1]} overlap the gRPC ports of --port {args.port} "
                              f"(port {shared[0]}); expected a range of its own")
    return list(ports)


def replica_number(name: str) -> tuple[int, int]:
    """(number, count) from a replica's name (``replica 2/4`` -> (2, 4))."""
    found = re.fullmatch(r"replica (\d+)/(\d+)", name)
    if found is None:
        raise InvalidArgument(f"--replica-name: got {name!r}, expected replica N/COUNT")
    return int(found[1]), int(found[2])


def listed_host(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The address the ready line lists for ``--host`` (``localhost``: 127.0.0.1).

    Raises:
        InvalidArgument: a host name, which a fixed list of replicas cannot hold.
    """
    if host == "localhost":
        return ipaddress.IPv4Address("127.0.0.1")
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        raise InvalidArgument(f"--host: got {host!r}, expected an IP address with --replicas above 1 (the ready "
                              "line lists the replicas as ipv4:ADDR:PORT,... or ipv6:[ADDR]:PORT,...)") from None


def replica_target(host: str, ports: list[int]) -> str:
    """The target naming every replica, as ``clients.balancing.parse_target`` takes it."""
    address = listed_host(host)
    if address.version == 4:
        return "ipv4:" + ",".join(f"{address}:{port}" for port in ports)
    return "ipv6:" + ",".join(f"[{address}]:{port}" for port in ports)


NOT_OPTIONS = ("command", "func")
"""Namespace entries that are no option of ``serve``."""


def replica_argv(args: argparse.Namespace, *, port: int, workers: int, name: str, parent: int,
                 metrics_port: int | None = None) -> list[str]:
    """One replica's ``serve`` options: the parent's own written back (every option of
    ``serve`` is ``--NAME`` for the entry ``NAME`` with ``-`` for ``_``; a flag is a
    bool), with its port, its workers, its metrics port (None: off), ``--replicas 1`` and
    two hidden options: ``--replica-of`` (the parent's pid: the replica dies with it) and
    ``--replica-name`` (``replica 2/4``, leading its log lines and naming it in its metrics)."""
    own = {"port": port, "workers": workers, "replicas": 1, "replica_of": parent, "replica_name": name,
           "metrics_port": metrics_port}
    argv: list[str] = []
    for dest, value in {**vars(args), **own}.items():
        flag = "--" + dest.replace("_", "-")
        if dest in NOT_OPTIONS or value is None or value is False:
            continue
        if isinstance(value, list):  # --data DIR [DIR ...] (action "extend"): once per value
            argv.extend(f"{flag}={item}" for item in value)
            continue
        argv.append(flag if value is True else f"{flag}={value}")  # "=": a value may start with "-"
    return argv


# ---- the processes ----------------------------------------------------------------------


@dataclass
class Replica:
    name: str
    process: subprocess.Popen
    address: str = ""
    signalled: bool = False

    def terminate_once(self) -> None:
        """SIGTERM once (a second would start a second drain)."""
        if not self.signalled and self.process.poll() is None:
            self.signalled = True
            self.process.send_signal(signal.SIGTERM)


def check_replicas(args: argparse.Namespace) -> None:
    """Refuse what a list of replicas cannot be, and a missing data directory (once,
    rather than once by each replica), before anything starts."""
    replica_target(args.host, replica_ports(args.port, args.replicas))
    metrics_ports(args)
    for data in args.data:
        if not Path(data).is_dir():
            raise InvalidArgument(f"--data: got {data}, expected a data directory of packed stores (no such "
                                  "directory)")


def prepare_metrics(args: argparse.Namespace) -> None:
    """Create a new SQLite metrics file once, before the replicas open it together: a new
    file turns to WAL under an exclusive lock that a second opener does not wait for. A
    PostgreSQL URL is checked here (the replicas' schema set-up takes a lock of its own); a
    data directory that does not exist is left for the replicas to refuse."""
    if args.metrics is not None and "://" in args.metrics:
        from sampler_server.metrics.store import metrics_target

        metrics_target(args.metrics)  # a bad URL: one line, before anything starts
        return
    if args.metrics is None and not Path(args.data[0]).is_dir():
        return
    path = Path(args.metrics) if args.metrics is not None else Path(args.data[0]) / "metrics.sqlite"
    if path.exists():
        return
    from sampler_server.metrics.store_sqlite import SqliteDatabase

    SqliteDatabase(path).close()


def run_replicas(args: argparse.Namespace, started: float) -> int:
    """Start ``args.replicas`` servers, print the ready line, wait for a signal or a death."""
    count = args.replicas
    ports = replica_ports(args.port, count)
    metrics = metrics_ports(args)
    prepare_metrics(args)
    workers = split_workers(args.workers or os.cpu_count() or 1, count)
    package_root = str(Path(__file__).resolve().parents[2])  # the replicas import this very code
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
    replicas: list[Replica] = []
    stopping = False

    def forward(signum: int, _frame: object) -> None:
        nonlocal stopping
        if not stopping:
            log.info("signal %d: draining %d replicas", signum, len(replicas))
        stopping = True
        for replica in replicas:
            replica.terminate_once()

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    for index in range(count):
        name = f"replica {index + 1}/{count}"
        command = [sys.executable, "-m", "sampler_server", "serve",
                   *replica_argv(args, port=ports[index], workers=workers[index], name=name, parent=os.getpid(),
                                 metrics_port=metrics[index])]
        # a session of its own: a terminal's Ctrl-C reaches the parent only, which sends it on once
        process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env, start_new_session=True)
        replicas.append(Replica(name, process))
        if stopping:
            replicas[-1].terminate_once()
    stores = ""
    bound_metrics: list[int | None] = []  # each replica's, as its ready line says
    for replica in replicas:
        line = replica.process.stdout.readline().strip()
        ready = READY.match(line)
        if ready is None:
            if stopping:  # a signal came during start-up
                return _stop_all(replicas, None)
            failed = _stop_all(replicas, f"{replica.name} did not start ({line[:200]!r} on its stdout)" if line
                               else f"{replica.name} did not start")
            status = replica.process.returncode
            return status if status > 0 else failed  # 2: it refused its input (its one-line reason is above)
        replica.address = ready.group(1)
        settings = SETTINGS.search(ready.group(2))
        stores = stores or ready.group(2)[:settings.start() if settings else None].rstrip("; ")
        bound_metrics.append(int(settings.group(3)[1:]) if settings and settings.group(3) != "off" else None)
        log.info("%s: listening on %s (pid %d)", replica.name, replica.address, replica.process.pid)
    if stopping:
        return _stop_all(replicas, None)
    target = replica_target(args.host, [int(r.address.rsplit(":", 1)[1]) for r in replicas])
    settings = ready_settings(args.tls_cert is not None, args.tokens is not None, bound_metrics)
    print(f"listening on {target} ({count} replicas; decode workers {'+'.join(map(str, workers))}; {stores}; "
          f"{settings}; ready in {time.perf_counter() - started:.2f} s)", flush=True)
    while not stopping:
        dead = next((r for r in replicas if r.process.poll() is not None), None)
        if dead is not None:
            return _stop_all(replicas, f"{dead.name} ({dead.address}, pid {dead.process.pid}) exited with status "
                                       f"{dead.process.returncode}")
        time.sleep(0.2)
    return _stop_all(replicas, None)


def _stop_all(replicas: list[Replica], failure: str | None) -> int:
    """Stop every replica and wait for them: 0 after a clean drain of all, else 1."""
    if failure is not None:
        log.error("%s; stopping the other replicas", failure)
    for replica in replicas:
        replica.terminate_once()
    statuses = []
    for replica in replicas:
        statuses.append(replica.process.wait())
        if replica.process.stdout is not None:
            replica.process.stdout.close()
    log.info("stopped (exit status of each replica: %s)", ", ".join(map(str, statuses)))
    return 1 if failure is not None or any(statuses) else 0
