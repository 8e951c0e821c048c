"""The container's entry point: ``sampler-server serve`` with its options from the environment.

Every long option of ``serve`` has a variable: ``--data`` is ``SAMPLER_DATA``,
``--max-streams`` is ``SAMPLER_MAX_STREAMS``, ``--tls-cert`` is ``SAMPLER_TLS_CERT``,
``--log-json`` is ``SAMPLER_LOG_JSON`` (1/true/yes/on or 0/false/no/off). The names are
read from serve's own parser, so an option added to ``serve`` gets its variable with no
change here. An empty variable counts as unset (compose's ``${X:-}``). Arguments given
to the entry point come after those from the environment and win over them (argparse
keeps the last value), so ``docker run IMAGE --workers 2`` overrides ``SAMPLER_WORKERS``.

Values are checked here with serve's own types, so a bad one is one line naming the
variable. Other ``SAMPLER_*`` names are left alone (clients and tests use some, e.g.
``SAMPLER_TOKEN``); one that is close to an option's variable gets a warning, since a
typo there would otherwise fall back to the default without a word.

Run: ``python deploy/entrypoint.py [serve options]`` (the image's ENTRYPOINT).
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit, urlunsplit

from sampler_server.quoting import quoted

PREFIX = "SAMPLER_"
PROG = "sampler-server entrypoint"
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


class EnvironmentValueError(ValueError):
    """A ``SAMPLER_*`` variable holds a value its serve option does not take."""


def serve_options() -> dict[str, argparse.Action]:
    """Serve's long options by variable name (``--max-streams`` -> ``SAMPLER_MAX_STREAMS``)."""
    from sampler_server.cli import serve_cmd

    subparsers = argparse.ArgumentParser(prog="sampler-server").add_subparsers()
    serve_cmd.register(subparsers)
    options: dict[str, argparse.Action] = {}
    for action in subparsers.choices["serve"]._actions:
        flag = next((s for s in action.option_strings if s.startswith("--")), None)
        if flag is None or isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue  # hidden options are serve's own (a replica's command line), not a deployment's
        options[PREFIX + flag[2:].upper().replace("-", "_")] = action
    return options


def arguments_from_environment(environ: Mapping[str, str],
                               options: Mapping[str, argparse.Action] | None = None) -> list[str]:
    """Serve's command-line arguments for the ``SAMPLER_*`` variables set in ``environ``.

    Raises:
        EnvironmentValueError: a variable's value is not one its option takes.
    """
    options = serve_options() if options is None else options
    arguments: list[str] = []
    for variable, action in options.items():
        value = environ.get(variable, "").strip()
        if not value:
            continue
        flag = next(s for s in action.option_strings if s.startswith("--"))
        if action.nargs == 0:  # a switch such as --log-json
            if value.lower() not in _TRUE | _FALSE:
                raise EnvironmentValueError(f"{variable}: got {quoted(value)}, expected 1, true, yes or on (serve "
                                            f"{flag}) or 0, false, no or off (no {flag})")
            if value.lower() in _TRUE:
                arguments.append(flag)
            continue
        _check(variable, flag, value, action)
        arguments += [flag, value]
    return arguments


def near_misses(environ: Mapping[str, str], options: Mapping[str, argparse.Action]) -> list[str]:
    """One warning per ``SAMPLER_*`` name that is not an option's but is close to one."""
    warnings = []
    for name in sorted(environ):
        if name.startswith(PREFIX) and name not in options:
            close = difflib.get_close_matches(name, list(options), n=1, cutoff=0.85)
            if close:
                warnings.append(f"{PROG}: warning: {name} is not read (a serve option's variable is {close[0]})")
    return warnings


def shown(arguments: Sequence[str]) -> str:
    """The arguments as one line for the log, with any password in a URL masked."""
    return " ".join(_masked(argument) for argument in arguments)


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    environ = os.environ if environ is None else environ
    extra = list(sys.argv[1:] if argv is None else argv)
    options = serve_options()
    try:
        arguments = arguments_from_environment(environ, options)
    except EnvironmentValueError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    for warning in near_misses(environ, options):
        print(warning, file=sys.stderr)
    print(f"{PROG}: serve {shown(arguments + extra)}", file=sys.stderr, flush=True)
    from sampler_server.cli.main import main as cli_main

    return cli_main(["serve", *arguments, *extra])


def _check(variable: str, flag: str, value: str, action: argparse.Action) -> None:
    if action.type is not None:
        try:
            action.type(value)
        except (TypeError, ValueError, argparse.ArgumentTypeError):
            kind = getattr(action.type, "__name__", "a value")
            expected = {"int": "an integer", "float": "a number"}.get(kind, f"a {kind}")
            raise EnvironmentValueError(f"{variable}: got {quoted(value)}, expected {expected} (serve {flag})") from None
    if action.choices is not None and value not in action.choices:
        allowed = ", ".join(str(choice) for choice in action.choices)
        raise EnvironmentValueError(f"{variable}: got {quoted(value)}, expected one of {allowed} (serve {flag})")


def _masked(argument: str) -> str:
    if "://" not in argument:
        return argument
    parts = urlsplit(argument)
    if parts.password is None:
        return argument
    address = parts.netloc.rpartition("@")[2]  # host[:port] as written
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{address}"))


if __name__ == "__main__":
    raise SystemExit(main())
