"""The shell every trainer command runs in: usage errors, exit codes, one line per failure.

``python -m clients.torch|tf`` (the Meta-Dataset trainer, ``clients.md_train``), their
``transfer`` (VTAB-1k, ``clients.vtab_transfer``) and ``cog`` (ImageNet-CoG,
``clients.cog_eval``) subcommands end the same way: exit 0 when done, 2 for bad input
(an argument, a checkpoint, a device: ``UsageError`` or an argparse error; or a request the
server refused as the request's fault: INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION,
e.g. an unknown source), 3 for a server fault (unreachable after retries, data loss, an
internal error, the server out of room; a server this command cannot connect to as
configured, ``ConnectionMismatch``, whose line names the flag that fixes it), 130 when interrupted; a framework may map its own errors (out
of memory, a lost rank) to a status and a line (``classify``). Every failure is one
line on stderr, ``<prog>: error: <what>``; anything else is a bug and raises.
``exit_for`` is that mapping, the one place it is written.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from clients.client import SamplerClient
from clients.errors import ConnectionMismatch, NothingListens, SamplerClientError, UsageError
from clients.server_options import FLAG_SPELLING, client_options

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_SERVER = 3
EXIT_INTERRUPTED = 130
REQUEST_REFUSALS = frozenset({grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
                              grpc.StatusCode.FAILED_PRECONDITION})
"""What the server answers when the request itself is wrong (exit 2, as a bad argument), not the server."""

Classify = Callable[[BaseException], "tuple[int, str] | None"]


def parse_status(stop: SystemExit) -> int:
    """The exit status of argparse's exit: --help (0) or a one-line argument error (2), already printed."""
    return int(stop.code) if isinstance(stop.code, int) else (EXIT_BAD_INPUT if stop.code else EXIT_OK)


def exit_for(error: BaseException, server: str, classify: Classify | None = None,
             interrupted: str = "interrupted") -> tuple[int, str] | None:
    """(exit status, one line) a trainer ends with for ``error``; None for an error that is
    a bug (re-raised). ``classify``: the framework's own mapping, asked for any other
    ``Exception``; ``interrupted``: what an interrupt says (e.g. where progress was saved)."""
    if isinstance(error, UsageError):
        return EXIT_BAD_INPUT, str(error)
    if isinstance(error, NothingListens):
        return EXIT_SERVER, str(error)  # names the address already, and what to check
    if isinstance(error, ConnectionMismatch):
        return EXIT_SERVER, error.line(FLAG_SPELLING)  # names the address, the cause and the flag
    if isinstance(error, SamplerClientError):
        status = EXIT_BAD_INPUT if error.code in REQUEST_REFUSALS else EXIT_SERVER
        return status, f"server {server}: {error}"
    if isinstance(error, KeyboardInterrupt):
        return EXIT_INTERRUPTED, interrupted
    if isinstance(error, Exception) and classify is not None:
        return classify(error)
    return None


class Console:
    """Progress and failure lines on stderr, each prefixed by the command's label."""

    def __init__(self, label: Callable[[], str]) -> None:
        self.label = label

    def log(self, message: str) -> None:
        self._line(f"{self.label()}: {message}")

    def fail(self, message: str) -> None:
        self._line(f"{self.label()}: error: {' '.join(message.split())}")

    @staticmethod
    def _line(text: str) -> None:
        # one write of the whole line: the ranks of a run share one stderr, and a line
        # written in two parts (text, then its newline) can be split by another rank's
        sys.stderr.write(text + "\n")
        sys.stderr.flush()


def write_summary(path: str | None, text: str) -> None:
    """Write the JSON summary where ``--json-summary`` asked (nothing when not asked)."""
    if path:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


def run_command(prog: str, parse: Callable[[], argparse.Namespace], make: Callable[[argparse.Namespace], Any],
                execute: Callable[[Any, SamplerClient, Callable[[str], None]], dict[str, Any]],
                summarise: Callable[[dict[str, Any]], str]) -> int:
    """The shell of a trainer subcommand (``transfer``, ``cog``): parse, build the framework
    part, run against the server, print (and with ``--json-summary`` write) the summary.
    Exit status as ``exit_for`` says; ``make``'s object may map a framework's own errors
    with ``classify``."""
    try:
        args = parse()
    except SystemExit as stop:
        return parse_status(stop)
    console = Console(lambda: prog)
    part: Any = None
    try:
        part = make(args)
        with SamplerClient(args.server, **client_options(args)) as client:
            summary = execute(part, client, console.log)
    except BaseException as error:
        mapped = exit_for(error, args.server, part.classify if part is not None else None)
        if mapped is None:
            raise
        console.fail(mapped[1])
        return mapped[0]
    print(summarise(summary), flush=True)
    write_summary(args.json_summary, json.dumps(summary, indent=2, sort_keys=True))
    return EXIT_OK
