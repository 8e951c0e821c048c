"""The client's error: what the server refused, or a server that stayed unreachable.

Raised by every call and stream of ``SamplerClient`` (and by the reporting helpers when
the server kept fewer reports than were sent), with the server's message and, where the
server answered, its gRPC status code. Retrying cannot fix it: retryable faults are
retried (``clients.channel``) before one of these is raised.
"""

from __future__ import annotations

import grpc


class SamplerClientError(RuntimeError):
    """A request the server refused, or a server that stayed unreachable; names both."""

    def __init__(self, message: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        self.code = code


class UsageError(Exception):
    """Bad local input found after parsing (a checkpoint, a device, a backbone): one line, exit 2."""
