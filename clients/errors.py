"""The client's error: what the server refused, or a server that stayed unreachable.

Raised by every call and stream of ``SamplerClient`` (and by the reporting helpers when
the server kept fewer reports than were sent), with the server's message and, where the
server answered, its gRPC status code. Retrying cannot fix it: retryable faults are
retried (``clients.channel``) before one of these is raised. ``NothingListens``, its
kind for an address where no server was ever reached and every connection is refused,
is raised at once: a server that is not running does not start by being asked again.
"""

from __future__ import annotations

import grpc


class SamplerClientError(RuntimeError):
    """A request the server refused, or a server that stayed unreachable; names both."""

    def __init__(self, message: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        self.code = code


class NothingListens(SamplerClientError):
    """No server listens at the address (every connection refused at once): said in one
    line within a second or two, with what to check, instead of after every retry."""

    def __init__(self, address: str) -> None:
        super().__init__(f"nothing listens at {address}: is `sampler-server serve` running there? "
                         "It prints its address when ready", grpc.StatusCode.UNAVAILABLE)
        self.address = address

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return NothingListens, (self.address,)  # pickles (into a DataLoader's parent) as itself


class UsageError(Exception):
    """Bad local input found after parsing (a checkpoint, a device, a backbone): one line, exit 2."""
