"""The server group of every trainer command (framework-free): where the sampler server is,
the run id, and how to connect (timeout, retries, TLS, token), declared once
(``SERVER_GROUP``) and added to the ``train``, ``transfer``, ``cog`` and ``evaluate``
parsers.

The run id is recorded in a run's configuration (the server's ``RUN_KEYS``); the rest is
operational, left out of it, so the same run can be reached at another address or with
other credentials. ``--tls-ca`` / ``--tls-cert`` / ``--tls-key`` and ``--token-file`` (or
the ``SAMPLER_TLS_CA`` / ``SAMPLER_TLS_CERT`` / ``SAMPLER_TLS_KEY`` / ``SAMPLER_TOKEN``
environment, read by the client) reach a server with TLS and tokens. ``evaluate`` hands
every one of them on to the commands it runs (the run id as each protocol's sub-run).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from clients.balancing import parse_target
from clients.channel import RetryPolicy, check_tls_pair
from clients.flag_types import int_at_least, positive_float
from clients.trainer_options import OptionGroup, Record, Resume, option

MAX_RUN_ID = 200  # the metrics store's limit


def _address(text: str) -> str:
    """One server (HOST:PORT) or many replicas (dns:///NAME:PORT, ipv4:A:P,B:P,...)."""
    try:
        parse_target(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def _run_id(text: str) -> str:
    if not text or len(text) > MAX_RUN_ID or not text.isprintable() or text != text.strip():
        raise argparse.ArgumentTypeError(
            f"got {text!r}, expected 1 to {MAX_RUN_ID} printable characters without surrounding spaces"
        )
    return text


def _readable_file(text: str) -> str:
    try:
        with open(text, "rb"):
            pass
    except OSError as error:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a readable file ({error.strerror or error})") from None
    return text


def _token_file(text: str) -> str:
    _readable_file(text)
    try:
        token = Path(text).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as error:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a readable text file ({error})") from None
    if not token or len(token.split()) != 1:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a file holding one token (it holds "
                                         f"{len(token.split())} words)")
    return text


_BOTH = ("transfer", "cog")  # evaluate hands each on to the commands it runs
_CONNECTION = {"record": Record.OPERATIONAL, "resume": Resume.FREE, "forward": _BOTH}

SERVER_GROUP = OptionGroup("server and run", (
    option("--server", required=True, type=_address, metavar="TARGET", **_CONNECTION,
           help="sampler server: HOST:PORT, or many replicas balanced round-robin: dns:///NAME:PORT "
                "(every address NAME resolves to) or ipv4:A.B.C.D:PORT,..."),
    # --run-id: the same, for torchrun command lines (torchrun's parser takes --run for its own --run-path)
    option("--run", "--run-id", dest="run", required=True, type=_run_id, metavar="RUN_ID",
           record=Record.RUN, resume=Resume.FREE, forward=_BOTH, help="run id the reports are stored under"),
    option("--connect-timeout", type=positive_float, default=10.0, metavar="SECONDS", **_CONNECTION,
           help="give up connecting to the server after this long (per attempt)"),
    option("--retries", type=int_at_least(1), default=5, metavar="N", **_CONNECTION,
           help="attempts per call or stream before a fault is reported (exit 3)"),
    option("--tls-ca", type=_readable_file, default=None, metavar="FILE", **_CONNECTION,
           help="PEM file of the CA that signed the server's certificate: connect over TLS "
                "(default: $SAMPLER_TLS_CA; neither: plaintext)"),
    option("--tls-cert", type=_readable_file, default=None, metavar="FILE", **_CONNECTION,
           help="this client's certificate (PEM), where the server requires client certificates "
                "(default: $SAMPLER_TLS_CERT)"),
    option("--tls-key", type=_readable_file, default=None, metavar="FILE", **_CONNECTION,
           help="the key of --tls-cert (PEM; default: $SAMPLER_TLS_KEY)"),
    option("--token-file", type=_token_file, default=None, metavar="FILE", **_CONNECTION,
           help="file holding the bearer token sent with every call (default: the token in "
                "$SAMPLER_TOKEN; neither: no token)"),
))
"""The server, run id and connection flags: the same in every trainer's command line."""


FLAG_SPELLING = {
    "tls_ca": "--tls-ca FILE (or SAMPLER_TLS_CA)",
    "no_tls": "without --tls-ca (and SAMPLER_TLS_CA unset)",
    "tls_cert": "--tls-cert FILE and --tls-key FILE (or SAMPLER_TLS_CERT and SAMPLER_TLS_KEY)",
    "token": "--token-file FILE (or SAMPLER_TOKEN)",
    "address": "--server",
}
"""The server group's flags as a ``ConnectionMismatch`` line names them (the library's
spelling: ``clients.errors.LIBRARY_SPELLING``)."""


def check_server_group(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The server group's cross-argument check, in every trainer's command line: a
    client certificate comes with its key (``clients.channel.check_tls_pair``)."""
    try:
        check_tls_pair(args.tls_cert, args.tls_key, "arguments --tls-cert/--tls-key")
    except ValueError as error:
        parser.error(str(error))


def client_options(args: argparse.Namespace) -> dict[str, Any]:
    """``SamplerClient`` keyword arguments of the server group: retries, connect timeout,
    TLS and the token (TLS and token None: the client's environment defaults apply)."""
    token = Path(args.token_file).read_text(encoding="utf-8").strip() if args.token_file else None
    return {"retry": RetryPolicy(max_attempts=args.retries), "connect_timeout": args.connect_timeout,
            "tls_ca": args.tls_ca, "tls_cert": args.tls_cert, "tls_key": args.tls_key, "token": token}
