"""What gRPC Python itself moves over loopback, with no sampling and no decoding.

A server process streams one prebuilt serialised message of N MB over and over to
a client process that only receives the bytes. This is the ceiling for any episode
stream on this machine: ``serve_bench.py``'s raw-store MB/s should be read against it.
Run: ``.venv/bin/python bench/transport_ceiling.py [--mb 14] [--messages 80]``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from concurrent import futures

import grpc

OPTIONS = [("grpc.max_send_message_length", 1 << 30), ("grpc.max_receive_message_length", 1 << 30)]


def serve(size: int, messages: int) -> None:
    payload = b"\x6a" + b"x" * size

    def stream(request: bytes, context: grpc.ServicerContext):
        for _ in range(messages):
            yield payload

    server = grpc.server(futures.ThreadPoolExecutor(4), options=OPTIONS)
    handler = grpc.unary_stream_rpc_method_handler(stream, request_deserializer=bytes, response_serializer=bytes)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("bench.Transport", {"Stream": handler}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    server.wait_for_termination()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=14.0, help="message size (a 126 px MD episode is about 14 MB)")
    parser.add_argument("--messages", type=int, default=80)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    size = int(args.mb * 1e6)
    if args.serve:
        serve(size, args.messages)
        return 0
    server = subprocess.Popen([sys.executable, __file__, "--serve", "--mb", str(args.mb), "--messages", str(args.messages)],
                              stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())
        channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=OPTIONS)
        call = channel.unary_stream("/bench.Transport/Stream", request_serializer=bytes, response_deserializer=bytes)
        received = 0
        started = time.perf_counter()
        for message in call(b""):
            received += len(message)
        seconds = time.perf_counter() - started
        print(f"gRPC loopback, server process -> client process, {args.mb:g} MB messages: "
              f"{received / seconds / 1e6:.0f} MB/s")
    finally:
        server.kill()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
