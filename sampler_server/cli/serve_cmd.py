"""``sampler-server serve --data DIR [DIR ...]``: run the sampling service.

The ready line, on stdout once the server serves, is what scripts and the replicas'
parent read (``sampler_server.cli.ready``): ``listening on ADDRESS (N stores: a, b;
tls on|off, tokens on|off, metrics :PORT|off; ready in S s)``.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import sys
import time
from pathlib import Path

from sampler_server.cli.ready import ready_line, ready_settings
from sampler_server.errors import InvalidArgument


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve the packed stores of one or more data directories over gRPC",
        description="Loads manifests (not images), starts decode workers, serves on HOST:PORT until SIGTERM, "
        "then drains open streams and exits.",
    )
    parser.add_argument("--data", required=True, type=Path, nargs="+", action="extend", metavar="DIR",
                        help="data directories of packed stores (or stores themselves), all served together; two "
                        "stores of one name are refused. The first holds metrics.sqlite (unless --metrics) and "
                        "resolves a request's relative CoG file paths")
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1; "
                        "0.0.0.0 exposes the server to the network)")
    parser.add_argument("--port", type=int, default=50051, help="TCP port (0 = pick a free one); with --replicas N, "
                        "the first of N consecutive ports (0: each replica picks a free one)")
    parser.add_argument("--replicas", type=int, default=1, metavar="N",
                        help="server processes on this host (default 1), each a whole server on its own port with "
                        "its share of --workers; every limit (--lookahead-mb, --send-mb, --shm-mb, --max-streams, ...) "
                        "applies to each. The ready line names them all as ipv4:HOST:P0,HOST:P1,..., the server address "
                        "a client takes. One per GPU rank of a torchrun, and each rank reads from its own replica: one "
                        "process serves about 35-48 raw 126-px MD episodes/s however many cores it has "
                        "(docs/serving.md)")
    parser.add_argument("--workers", type=int, default=0, help="decode worker processes, all replicas together "
                        "(default: one per core; with --replicas N split evenly, at least 1 each)")
    parser.add_argument("--threads", type=int, default=16,
                        help="handler threads for unary calls and health checks, beyond one per stream (default 16)")
    parser.add_argument("--max-streams", type=int, default=64, help="concurrent streams served at most (default 64)")
    parser.add_argument("--max-streams-per-client", type=int, default=64, metavar="N",
                        help="concurrent streams of one client (peer host) at most (default 64)")
    parser.add_argument("--stream-idle-seconds", type=float, default=120.0, metavar="S",
                        help="cancel a stream whose client reads nothing for S seconds (default 120)")
    parser.add_argument("--stream-shed-seconds", type=float, default=5.0, metavar="S",
                        help="after S seconds without reading, a stream drops the episodes it prepared ahead "
                        "(prepared again when its client reads; default 5)")
    parser.add_argument("--lookahead-mb", type=int, default=16, metavar="MB",
                        help="episodes prepared ahead of their turn, all streams together, MiB at most; beyond it "
                        "a stream prepares each episode when its turn comes (default 16, which keeps a shared server's "
                        "memory bounded under stalled clients; at 126 px an MD episode is 14-27 MB, so a server "
                        "feeding GPU trainers should give 128); per replica with --replicas")
    parser.add_argument("--send-mb", type=int, default=16, metavar="MB",
                        help="replies handed to gRPC and not yet taken by their clients, all streams together, MiB "
                        "(gRPC keeps a copy of each: about twice this in memory). A stream waits for room; streams "
                        "stuck sending to clients that do not read are cancelled to make it (default 16); per replica with --replicas")
    parser.add_argument("--shm-mb", type=int, default=128, metavar="MB",
                        help="same-host transport: shared memory (/dev/shm) holding replies' pixels, all streams "
                        "together, MiB at most: replies not yet taken, held by their clients, or released for "
                        "reuse; a reply beyond it goes in the message. Clients on this host use it unless they opt "
                        "out; 0 turns it off (default 128); per replica with --replicas")
    parser.add_argument("--shm-release-seconds", type=float, default=60.0, metavar="S",
                        help="a shared-memory reply not taken, or held, for S seconds is unlinked (a reply not yet "
                        "taken is then sent again); a cancelled stream's are unlinked at once (default 60)")
    parser.add_argument("--max-queued-calls", type=int, default=256, metavar="N",
                        help="calls waiting for a handler thread at most; more get RESOURCE_EXHAUSTED (default 256)")
    parser.add_argument("--max-message-mb", type=int, default=512, help="largest episode/batch message, MiB")
    parser.add_argument("--metrics", metavar="FILE|URL",
                        help="where metric reports are kept: a SQLite file (default DATA/metrics.sqlite), or a "
                        "postgresql://USER@HOST:PORT/DB URL that every replica shares (the postgres extra)")
    parser.add_argument("--metrics-port", type=int, metavar="PORT",
                        help="serve Prometheus metrics over HTTP at http://HOST:PORT/metrics, HOST being --host "
                        "(0 = pick a free one; default: off): gRPC's per-method call metrics and the sampler's own "
                        "(docs/operations.md, Monitoring). Not --metrics, which keeps the trainers' metric reports. "
                        "With --replicas N each replica serves its own, on the first of N consecutive ports (0: each "
                        "picks a free one and logs it)")
    security = parser.add_argument_group("a shared deployment (see README: Running it for a lab)")
    security.add_argument("--tls-cert", type=Path, metavar="FILE", help="server certificate chain (PEM): serve TLS")
    security.add_argument("--tls-key", type=Path, metavar="FILE", help="the key of --tls-cert (PEM)")
    security.add_argument("--tls-client-ca", type=Path, metavar="FILE",
                          help="CA (PEM) whose client certificates are required (mutual TLS)")
    security.add_argument("--tokens", type=Path, metavar="FILE",
                          help='bearer tokens, JSON lines {"name": ..., "token": ..., "role": "read"|"report"|'
                          '"admin"}; without it no call is authenticated')
    security.add_argument("--log-json", action="store_true",
                          help="log lines (one per call: method, peer, token, status, ms) as JSON objects")
    # set by `serve --replicas N` on each replica's command line (serve_replicas.replica_argv)
    parser.add_argument("--replica-of", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--replica-name", help=argparse.SUPPRESS)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    if args.replica_of is not None:
        from sampler_server import procutil

        procutil.die_with_parent(args.replica_of)  # first: a replica never outlives its `serve --replicas`
    if not 0 <= args.port <= 65535:
        raise InvalidArgument(f"--port: got {args.port}, expected 0 to 65535")
    if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535:
        raise InvalidArgument(f"--metrics-port: got {args.metrics_port}, expected 0 to 65535 (0: a free port)")
    if args.metrics_port and args.metrics_port == args.port:
        raise InvalidArgument(f"--metrics-port: got {args.metrics_port}, the port --port serves gRPC on; expected "
                              "another")
    if args.replicas < 1:
        raise InvalidArgument(f"--replicas: got {args.replicas}, expected 1 or more server processes")
    if args.workers < 0 or args.max_streams < 1 or args.max_message_mb < 1 or args.threads < 1:
        raise InvalidArgument("--workers must be >= 0; --threads, --max-streams and --max-message-mb >= 1")
    if (args.max_streams_per_client < 1 or args.max_queued_calls < 0 or not args.stream_idle_seconds > 0
            or not args.stream_shed_seconds > 0 or args.lookahead_mb < 0 or args.send_mb < 0):
        raise InvalidArgument("--max-streams-per-client must be >= 1, --max-queued-calls >= 0, and "
                              "--stream-idle-seconds and --stream-shed-seconds > 0, --lookahead-mb and "
                              "--send-mb >= 0")
    if args.shm_mb < 0:
        raise InvalidArgument(f"--shm-mb: got {args.shm_mb}, expected 0 (off) or more MiB")
    if not args.shm_release_seconds > 0:
        raise InvalidArgument(f"--shm-release-seconds: got {args.shm_release_seconds:g}, expected more than 0")
    if (args.tls_cert is None) != (args.tls_key is None):
        raise InvalidArgument("--tls-cert and --tls-key: expected both or neither")
    if args.tls_client_ca is not None and args.tls_cert is None:
        raise InvalidArgument("--tls-client-ca: needs --tls-cert and --tls-key (client certificates need TLS)")
    if args.replicas > 1:
        from sampler_server.cli.serve_replicas import check_replicas, run_replicas

        check_replicas(args)
    from sampler_server.store.reader import find_stores_in

    find_stores_in(args.data)  # two stores of one name: one line now, before anything starts
    _configure_logging(args.log_json, args.replica_name)
    if not _is_loopback(args.host) and args.tokens is None and args.replica_of is None:  # said once, by the parent
        logging.getLogger("sampler_server.service").warning(
            "listening on %s without --tokens: anyone who reaches this port may read every run and report under "
            "any run id%s", args.host, "" if args.tls_cert else ", in plaintext (no --tls-cert)")
    if args.replicas > 1:
        return run_replicas(args, started)
    # No linear algebra here or in the decode workers: an OpenBLAS pool would only spin at
    # numpy's import, taking a core from start-up (a user's own setting wins)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from sampler_server import procutil

    procutil.return_large_blocks_to_os()
    _start_decode_forkserver(args.workers)  # first: it preloads the workers' modules while we import ours
    from sampler_server.metrics.store import metrics_target

    metrics = metrics_target(args.metrics) if args.metrics is not None else None  # a bad URL fails before stores load
    from sampler_server.service.server import RunningServer, ServerConfig, TlsFiles
    from sampler_server.service.limits import ServiceLimits

    config = ServerConfig(
        data_dir=tuple(args.data),
        host=args.host,
        port=args.port,
        workers=args.workers or None,
        threads=args.threads,
        metrics_path=metrics,
        tls=TlsFiles(args.tls_cert, args.tls_key, args.tls_client_ca) if args.tls_cert is not None else None,
        tokens=args.tokens,
        metrics_port=args.metrics_port,
        replica=_replica_number(args.replica_name),
        max_queued_calls=args.max_queued_calls,
        limits=ServiceLimits(max_message_bytes=args.max_message_mb << 20, max_streams=args.max_streams,
                             max_streams_per_client=args.max_streams_per_client,
                             stream_idle_seconds=args.stream_idle_seconds,
                             stream_shed_seconds=args.stream_shed_seconds,
                             lookahead_bytes=args.lookahead_mb << 20, send_bytes=args.send_mb << 20,
                             shm_bytes=args.shm_mb << 20, shm_release_seconds=args.shm_release_seconds),
    )
    server = RunningServer(config).start()
    server.install_signal_handlers()
    print(ready_line(server.address, sorted(server.registry.stores),
                     ready_settings(args.tls_cert is not None, args.tokens is not None,
                                    [getattr(server, "metrics_port", None)]),
                     time.perf_counter() - started), flush=True)
    server.wait()
    logging.getLogger("sampler_server.service").info("stopped")
    return 0


def _configure_logging(as_json: bool, replica: str | None = None) -> None:
    """Log lines on stderr; a replica's name (``replica 2/4``) leads each of its own lines."""
    handler = logging.StreamHandler(sys.stderr)
    if as_json:
        from sampler_server.service.auth import JsonLogFormatter

        handler.setFormatter(JsonLogFormatter())
    else:
        named = f"{replica}: " if replica else ""
        handler.setFormatter(logging.Formatter(f"%(asctime)s %(levelname)s {named}%(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])


def _replica_number(name: str | None) -> tuple[int, int]:
    """(this replica's number, the replica count) from ``--replica-name`` (``replica 2/4``);
    (1, 1) for a server of its own."""
    if name is None:
        return 1, 1
    from sampler_server.cli.serve_replicas import replica_number

    return replica_number(name)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def _start_decode_forkserver(workers: int) -> None:
    """Start the decode pool's forkserver before any thread or socket exists, so that it
    (and through it every decode worker) dies with this process, even when SIGKILLed."""
    from sampler_server import procutil

    if (workers or os.cpu_count() or 1) > 1:
        procutil.start_forkserver(preload=["sampler_server.assembly.assembler"])  # by name: not imported here
