"""``sampler-server`` entry point.

Each subcommand lives in its own module exposing ``register(subparsers)``, which
adds its parser and sets ``func(args) -> int``. Errors the user can cause surface
as one line on stderr and exit status 2; nothing else is caught here.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from sampler_server import __version__
from sampler_server.errors import SamplerError

_SUBCOMMAND_MODULES = (
    "sampler_server.cli.pack_cmd",
    "sampler_server.cli.inspect_cmd",
    "sampler_server.cli.fixtures_cmd",
    "sampler_server.cli.episode_cmd",
    "sampler_server.cli.demo_cmd",
    "sampler_server.cli.hierarchy_cmd",
    "sampler_server.cli.serve_cmd",
    "sampler_server.cli.report_cmd",
)


def build_parser() -> argparse.ArgumentParser:
    import importlib

    parser = argparse.ArgumentParser(
        prog="sampler-server",
        description="Deterministic episodic sampling service for few-shot and transfer learning.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module_name in _SUBCOMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except SamplerError as error:
        print(f"sampler-server {args.command}: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # output piped into e.g. `head`, which stopped reading: not an error
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print(f"sampler-server {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
