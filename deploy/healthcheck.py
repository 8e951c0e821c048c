"""The image's health check: is the server on this host SERVING?

Asks the standard gRPC health service (``grpc.health.v1``) on 127.0.0.1:$SAMPLER_PORT for
``sampler.v1.Sampler``, which the server reports SERVING while any store is served and
NOT_SERVING while it drains (``sampler_server.service.server``). Exit 0 when SERVING, 1
otherwise (also for a bad SAMPLER_PORT: Docker reserves 2), with one line saying why. Kubernetes needs none of this (its probes speak gRPC
health themselves); compose and ``docker run`` have only command health checks.

With ``SAMPLER_TLS_CERT`` set the server speaks TLS, whose certificate names this check
cannot know (nor hold a client certificate for mutual TLS): it then checks only that the
port accepts a TCP connection, and says so.

Run: ``python deploy/healthcheck.py [--service NAME] [--timeout S]``.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Sequence

SERVICE = "sampler.v1.Sampler"


def check(port: int, service: str, timeout: float, tls: bool) -> tuple[bool, str]:
    """(healthy, one line) for the server on 127.0.0.1:``port``."""
    if tls:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=timeout).close()
        except OSError as error:
            return False, f"127.0.0.1:{port}: no TCP connection ({error.strerror or error})"
        return True, f"127.0.0.1:{port}: accepts TCP connections (TLS is on: gRPC health not asked)"
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError as error:
            return False, f"127.0.0.1:{port} {service!r}: {error.code().name} ({error.details()})"
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    return reply.status == health_pb2.HealthCheckResponse.SERVING, f"127.0.0.1:{port} {service!r}: {status}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--service", default=SERVICE, help=f"health service name (default {SERVICE}; '' = overall)")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the answer (default 5)")
    args = parser.parse_args(argv)
    text = os.environ.get("SAMPLER_PORT", "").strip() or "50051"
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        print(f"healthcheck: error: SAMPLER_PORT: got {text!r}, expected 1 to 65535", file=sys.stderr)
        return 1  # Docker reserves exit status 2
    healthy, line = check(int(text), args.service, args.timeout, tls=bool(os.environ.get("SAMPLER_TLS_CERT", "").strip()))
    print(line, file=sys.stdout if healthy else sys.stderr)
    return 0 if healthy else 1


if __name__ == "__main__":
    raise SystemExit(main())
