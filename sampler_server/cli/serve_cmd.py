"""``sampler-server serve --data DIR``: run the sampling service."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from sampler_server.errors import InvalidArgument


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve the packed stores of a data directory over gRPC",
        description="Loads manifests (not images), starts decode workers, serves on HOST:PORT until SIGTERM, "
        "then drains open streams and exits.",
    )
    parser.add_argument("--data", required=True, type=Path, help="data directory of packed stores")
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1; "
                        "0.0.0.0 exposes the server to the network)")
    parser.add_argument("--port", type=int, default=50051, help="TCP port (0 = pick a free one)")
    parser.add_argument("--workers", type=int, default=0, help="decode worker processes (default: one per core)")
    parser.add_argument("--threads", type=int, default=32, help="gRPC handler threads")
    parser.add_argument("--max-streams", type=int, default=64, help="concurrent streams served at most")
    parser.add_argument("--max-message-mb", type=int, default=512, help="largest episode/batch message, MiB")
    parser.add_argument("--metrics", type=Path, help="SQLite file for metric reports (default DATA/metrics.sqlite)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from sampler_server.service.server import RunningServer, ServerConfig
    from sampler_server.service.servicer import ServiceLimits

    if not 0 <= args.port <= 65535:
        raise InvalidArgument(f"--port: got {args.port}, expected 0 to 65535")
    if args.workers < 0 or args.max_streams < 1 or args.max_message_mb < 1 or args.threads < 1:
        raise InvalidArgument("--workers must be >= 0; --threads, --max-streams and --max-message-mb >= 1")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    started = time.perf_counter()
    _start_decode_forkserver(args.workers)
    config = ServerConfig(
        data_dir=args.data,
        host=args.host,
        port=args.port,
        workers=args.workers or None,
        threads=args.threads,
        metrics_path=args.metrics,
        limits=ServiceLimits(max_message_bytes=args.max_message_mb << 20, max_streams=args.max_streams),
    )
    server = RunningServer(config).start()
    server.install_signal_handlers()
    stores = ", ".join(sorted(server.registry.stores))
    print(f"listening on {server.address} ({len(server.registry.stores)} stores: {stores}; "
          f"ready in {time.perf_counter() - started:.2f} s)", flush=True)
    server.wait()
    logging.getLogger("sampler_server.service").info("stopped")
    return 0


def _start_decode_forkserver(workers: int) -> None:
    """Start the decode pool's forkserver before any thread or socket exists, so that it
    (and through it every decode worker) dies with this process, even when SIGKILLed."""
    import os

    from sampler_server import procutil
    from sampler_server.assembly import assembler

    if (workers or os.cpu_count() or 1) > 1:
        procutil.start_forkserver(preload=[assembler.__name__])
