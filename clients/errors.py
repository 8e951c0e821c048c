"""The client's error: what the server refused, or a server that stayed unreachable.

Raised by every call and stream of ``SamplerClient`` (and by the reporting helpers when
the server kept fewer reports than were sent), with the server's message and, where the
server answered, its gRPC status code. Retrying cannot fix it: retryable faults are
retried (``clients.channel``) before one of these is raised. ``NothingListens``, its
kind for an address where no server was ever reached and every connection is refused,
is raised at once: a server that is not running does not start by being asked again.
``ConnectionMismatch``, its kind for a server and a client that disagree on how to connect
(TLS or plaintext, the CA, the host its certificate is for, a client certificate, the
token), is raised at once too, naming the cause and the option that fixes it: asking
again does not change either side's configuration.
"""

from __future__ import annotations

from collections.abc import Mapping

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


LIBRARY_SPELLING: Mapping[str, str] = {
    "tls_ca": "tls_ca=FILE (or SAMPLER_TLS_CA)",
    "no_tls": "without tls_ca (and SAMPLER_TLS_CA unset)",
    "tls_cert": "tls_cert=FILE and tls_key=FILE (or SAMPLER_TLS_CERT and SAMPLER_TLS_KEY)",
    "token": "token=TOKEN (or SAMPLER_TOKEN)",
    "address": "the address",
}
"""How a ``SamplerClient`` (and an adapter's ``client_options``) is given each connection
setting a ``ConnectionMismatch`` may name; the trainers spell them as their flags
(``clients.server_options.FLAG_SPELLING``)."""


class ConnectionMismatch(SamplerClientError):
    """The server and this client disagree on how to connect: one side uses TLS and the
    other not, the CA does not sign the server's certificate, the certificate is for
    another host, the server requires a client certificate or refuses this one, or it
    requires a token this client did not send or does not know the one sent. One line:
    the server's address, the cause, and what fixes it (``fix``: a template whose fields,
    e.g. ``{tls_ca}``, are spelled by where the settings were given, ``line``)."""

    def __init__(self, address: str, cause: str, fix: str,
                 code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE) -> None:
        self.address, self.cause, self.fix = address, cause, fix
        super().__init__(self.line(LIBRARY_SPELLING), code)

    def line(self, spelling: Mapping[str, str]) -> str:
        """The one line, each setting spelled as ``spelling`` says (keys as ``LIBRARY_SPELLING``)."""
        return f"server {self.address} {self.cause}: {self.fix.format_map(spelling)}"

    def __reduce__(self) -> tuple[type, tuple[str, str, str, grpc.StatusCode]]:
        return ConnectionMismatch, (self.address, self.cause, self.fix, self.code)


class UsageError(Exception):
    """Bad local input found after parsing (a checkpoint, a device, a backbone): one line, exit 2."""
