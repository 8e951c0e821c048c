"""``sampler-server`` entry point.

Each subcommand lives in its own module exposing ``register(subparsers)``, which
adds its parser and sets ``func(args) -> int``. Errors the user can cause surface
as one line on stderr and exit status 2; nothing else is caught here.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from sampler_common.checks import FieldError
from sampler_server import __version__
from sampler_server.errors import SamplerError

_SUBCOMMAND_MODULES = {
    "pack": "sampler_server.cli.pack_cmd",
    "inspect": "sampler_server.cli.inspect_cmd",
    "fixtures": "sampler_server.cli.fixtures_cmd",
    "episode": "sampler_server.cli.episode_cmd",
    "batches": "sampler_server.cli.batches_cmd",
    "demo": "sampler_server.cli.demo_cmd",
    "hierarchy": "sampler_server.cli.hierarchy_cmd",
    "serve": "sampler_server.cli.serve_cmd",
    "report": "sampler_server.cli.report_cmd",
    "verify": "sampler_server.cli.verify_cmd",
    "vtab": "sampler_server.cli.vtab_cmd",
    "cog": "sampler_server.cli.cog_cmd",
    "regime": "sampler_server.cli.regime_cmd",
    "calibrate": "sampler_server.cli.calibrate_cmd",
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full parser, or (``only``) one with just that subcommand: a command imports
    only its own module, so ``serve`` starts without loading what ``pack`` or
    ``hierarchy`` need."""
    import importlib

    parser = argparse.ArgumentParser(
        prog="sampler-server",
        description="Deterministic episodic sampling service for few-shot and transfer learning.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module_name in _SUBCOMMAND_MODULES.items():
        if only is None or name == only:
            importlib.import_module(module_name).register(subparsers)
    return parser


SERVER_EXTRA_MODULES = ("lmdb", "cv2", "PIL", "simplejpeg", "networkx", "scipy", "tqdm", "matplotlib",
                        "grpc_health", "grpc_reflection", "grpc_observability", "opentelemetry", "prometheus_client")
"""Top-level modules of the ``[server]`` extra: a client-only install lacks them."""


def _missing_server_extra(error: ModuleNotFoundError) -> str | None:
    name = (error.name or "").split(".")[0]
    if name not in SERVER_EXTRA_MODULES:
        return None
    return (f"sampler-server: the server's dependencies are not installed (no module {name!r}); install them with "
            "pip install 'sampler-server[server]' (clients need only the base install)")


def _exit_for_missing_extra(error: ModuleNotFoundError) -> int:
    """Exit status 2 and one line when the server's extra is not installed; any other
    missing module is a real fault and raised as it was."""
    message = _missing_server_extra(error)
    if message is None:
        raise error
    print(message, file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in arguments if not a.startswith("-")), None)
    try:
        parser = build_parser(command if command in _SUBCOMMAND_MODULES else None)
        args = parser.parse_args(arguments)
    except ModuleNotFoundError as error:
        return _exit_for_missing_extra(error)
    try:
        return int(args.func(args) or 0)
    except ModuleNotFoundError as error:
        return _exit_for_missing_extra(error)
    except (SamplerError, FieldError) as error:
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
