"""Help that says what there is (issue 27, item 3): the trainers' top-level ``--help``
lists every command with a one-line summary, no flag's help shows two defaults in any
parser of the trainers or of ``sampler-server``, and a summary that promises "no images
read" belongs to a command that has no flag drawing images."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import runpy
import sys
from collections.abc import Iterator

import pytest

from clients.evaluate_args import build_evaluate_parser
from clients.trainer_args import build_cog_parser, build_parser, build_transfer_parser
from sampler_server.cli.main import build_parser as build_server_parser

TRAINER_COMMANDS = ("train", "transfer", "cog", "evaluate")
DEFAULT_WORD = re.compile(r"\bdefault\b", re.IGNORECASE)


def _subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:  # argparse keeps its subparsers only here
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def _all_parsers() -> Iterator[argparse.ArgumentParser]:
    """Every parser of both trainers' commands and every (nested) sampler-server subcommand."""
    for framework in ("torch", "tf"):
        for build in (build_parser, build_transfer_parser, build_cog_parser, build_evaluate_parser):
            yield build(framework)
    pending = [build_server_parser()]
    while pending:
        parser = pending.pop()
        yield parser
        pending.extend(child for _, child in _subcommands(parser))


def _rendered(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """What ``--help`` prints for ``action`` (its flags and help, as the parser formats them)."""
    formatter = parser.formatter_class(prog=parser.prog)
    formatter.add_argument(action)
    return " ".join(formatter.format_help().split())


def test_no_help_line_shows_more_than_one_default():
    doubled = []
    for parser in _all_parsers():
        for action in parser._actions:
            if action.help and action.help is not argparse.SUPPRESS:
                text = _rendered(parser, action)
                if len(DEFAULT_WORD.findall(text)) > 1:
                    doubled.append(f"{parser.prog}: {text}")
    assert not doubled, "\n".join(doubled)


@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_the_trainers_top_level_help_lists_every_command_with_a_summary(framework):
    text = build_parser(framework).format_help()
    for name in TRAINER_COMMANDS:
        assert re.search(rf"^ +{name} +\w.{{20,}}$", text, re.MULTILINE), f"{name} is not listed:\n{text}"
    assert f"python -m clients.{framework} COMMAND --help" in text


def _help_of(module: str, *argv: str) -> str:
    """What ``python -m MODULE ARGV... --help`` prints (run as the user runs it, in this process)."""
    out, saved = io.StringIO(), sys.argv
    sys.argv = [f"python -m {module}", *argv, "--help"]
    try:
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
            runpy.run_module(module, run_name="__main__", alter_sys=False)
    finally:
        sys.argv = saved
    assert done.value.code in (0, None), out.getvalue()
    return out.getvalue()


@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_each_listed_command_runs_under_its_name(framework):
    module = f"clients.{framework}"
    top = _help_of(module)
    assert all(re.search(rf"^ +{name} ", top, re.MULTILINE) for name in TRAINER_COMMANDS), top
    for name in TRAINER_COMMANDS:
        usage = _help_of(module, name).split("\n\n", 1)[0]
        assert re.search(rf"python -m {module} \[?{name}\b", usage), usage


def test_no_images_read_is_said_only_of_commands_that_draw_none():
    root = build_server_parser()
    summaries = {choice.dest: choice.help for action in root._actions
                 if isinstance(action, argparse._SubParsersAction) for choice in action._choices_actions}
    for name, parser in _subcommands(root):
        flags = {flag for action in parser._actions for flag in action.option_strings}
        if "no images read" in (summaries.get(name) or ""):
            assert "--png" not in flags, f"{name}: the summary says no images are read, but --png draws them"
    assert "--png" in dict(_subcommands(root))["episode"].format_help()
    assert "--png" in summaries["episode"]
