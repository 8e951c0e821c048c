"""The shell commands of README.md and docs/ name what exists: each `sampler-server`,
`python -m clients.torch|tf` (also under torchrun) and bench script command names
subcommands its `--help` accepts and flags its `--help` lists; `make` targets are the
Makefile's, `pip install` extras are pyproject's, `pytest` paths exist. Help is asked the
way the user's command asks it (the console script's entry point, ``python -m``, the
script), in this process. Other programs (TFDS's `tfds`, `export`) are not ours."""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import re
import runpy
import shlex
import sys
import tomllib
from collections.abc import Iterator

import pytest
from doc_blocks import REPO_ROOT, Block, all_blocks

NOT_OURS = {"tfds", "export"}
PYTHONS = {"python", "python3", ".venv/bin/python"}
# What a reader can install: the clone (`.`) or the wheel `python -m build` puts in dist/,
# with extras; the package is on no index, so `sampler-server[torch]` cannot work.
PIP_TARGET = re.compile(r"^(?:\.|dist/sampler_server-(?P<version>[\w.]+)-py3-none-any\.whl)(?:\[(?P<extras>[\w,-]+)\])?$")
FROM_AN_INDEX = {"build"}  # what the docs install from PyPI: python -m build's package
TRAINERS = {"clients.torch", "clients.tf"}
BARE_WORD = re.compile(r"^[a-z][a-z0-9_]*(?:-[a-z0-9_]+)*$")
SHELL_STOPS = {">", ">>", "|", "&&", ";", "2>"}


def _logical_lines(code: str) -> Iterator[str]:
    """Physical lines joined across trailing backslashes and open quotes."""
    pending = ""
    for line in code.split("\n"):
        pending = f"{pending} {line}" if pending else line
        if pending.endswith("\\"):
            pending = pending[:-1]
            continue
        try:
            shlex.split(pending, comments=True)
        except ValueError:  # a quote still open
            continue
        if pending.strip():
            yield pending.strip()
        pending = ""
    assert not pending, f"an unfinished command: {pending!r}"


def _tokens(line: str) -> list[str]:
    tokens = shlex.split(line, comments=True)
    while tokens and re.match(r"^[A-Z_][A-Z0-9_]*=", tokens[0]):  # VAR=value before a command
        tokens = tokens[1:]
    stop = next((i for i, token in enumerate(tokens) if token in SHELL_STOPS), len(tokens))
    return [bare for token in tokens[:stop] if (bare := _unbracketed(token))]


def _unbracketed(token: str) -> str:
    """A token without the brackets of an optional part (``[--json]``); ``.[server]`` keeps its own."""
    if token.startswith("["):
        token = token[1:]
    if token.endswith("]") and "[" not in token:
        token = token[:-1]
    return token


def _commands() -> list[tuple[Block, str, list[str]]]:
    """(block, line, tokens) of every command of every shell block."""
    return [(block, line, tokens) for block in all_blocks() if block.language == "sh"
            for line in _logical_lines(block.code) if (tokens := _tokens(line))]


def _program(tokens: list[str]) -> tuple[str, list[str]]:
    """What a command runs and its arguments: ("sampler-server" | a trainer module | a script
    path | "make" | "pip" | "pytest" | "other", arguments)."""
    head = tokens[0]
    if head.endswith("sampler-server"):
        return "sampler-server", tokens[1:]
    if head in PYTHONS and tokens[1:2] == ["-m"]:
        return tokens[2], tokens[3:]
    if head in PYTHONS:
        return tokens[1], tokens[2:]
    if head == "torchrun":
        module = tokens.index("-m") + 1
        return tokens[module], tokens[module + 1:]
    if head in ("make", "pip"):
        return head, tokens[1:]
    assert head in NOT_OURS, f"`{head}`: a program these tests do not check (add it here)"
    return "other", tokens[1:]


def _console_script() -> object:
    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, name = scripts["sampler-server"].partition(":")
    return getattr(importlib.import_module(module), name)


@functools.cache
def _help(program: str, path: tuple[str, ...]) -> str | None:
    """What ``PROGRAM PATH... --help`` prints, or None when it exits non-zero."""
    out = io.StringIO()
    argv, sys_path = sys.argv, list(sys.path)
    status: object = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            if program == "sampler-server":
                status = _console_script()([*path, "--help"])
            elif program in TRAINERS:
                sys.argv = [f"python -m {program}", *path, "--help"]
                runpy.run_module(program, run_name="__main__", alter_sys=False)
            else:
                sys.argv = [program, *path, "--help"]
                runpy.run_path(str(REPO_ROOT / program), run_name="__main__")
    except SystemExit as done:
        status = done.code
    finally:
        sys.argv, sys.path[:] = argv, sys_path
    return out.getvalue() if status in (0, None) else None


def _names(word: str, text: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text) is not None


def _usage(text: str) -> str:
    return text.split("\n\n", 1)[0]


def _check_against_help(program: str, arguments: list[str], line: str) -> None:
    """Leading bare words are subcommands (or a choice the help lists); every --flag is in
    the help of the subcommand it follows."""
    path: tuple[str, ...] = ()
    parent = _help(program, path)
    assert parent is not None, f"`{program} --help` fails ({line})"
    for word in arguments:
        if not BARE_WORD.match(word):
            break
        child = _help(program, (*path, word))
        assert child is not None, f"`{word}` is no subcommand of `{program} {' '.join(path)}` ({line})"
        if child != parent and _names(word, _usage(child)):
            path, parent = (*path, word), child
            continue
        assert _names(word, parent), f"`{word}` is neither a subcommand nor a choice `{program} {' '.join(path)} " \
                                     f"--help` lists ({line})"
        break
    flags = {argument.split("=", 1)[0] for argument in arguments if argument.startswith("--")}
    missing = sorted(flag for flag in flags if not _names(flag, parent))
    assert not missing, f"`{program} {' '.join(path)} --help` has no {missing} ({line})"


def _checked(kind: str) -> list[tuple[str, str, list[str]]]:
    found = []
    for block, line, tokens in _commands():
        program, arguments = _program(tokens)
        if (kind == "script" and program.endswith(".py")) or program == kind or (kind == "trainers"
                                                                                  and program in TRAINERS):
            found.append((f"{block.where}: {line}", program, arguments))
    return found


def test_sampler_server_commands_name_existing_subcommands_and_flags():
    commands = _checked("sampler-server")
    assert len(commands) >= 30
    for where, program, arguments in commands:
        _check_against_help(program, arguments, where)


def test_trainer_commands_name_existing_subcommands_and_flags():
    commands = _checked("trainers")
    assert {program for _, program, _ in commands} == TRAINERS
    for where, program, arguments in commands:
        _check_against_help(program, arguments, where)


def test_bench_and_deploy_script_commands_name_existing_flags():
    commands = _checked("script")
    assert len(commands) >= 8
    for where, script, arguments in commands:
        assert (REPO_ROOT / script).is_file(), where
        _check_against_help(script, arguments, where)


def test_make_targets_pip_extras_and_pytest_paths_exist():
    targets = set(re.findall(r"^([\w-]+):", (REPO_ROOT / "Makefile").read_text(), re.MULTILINE))
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    extras, version = set(project["optional-dependencies"]), project["version"]
    seen = set()
    for block, line, tokens in _commands():
        program, arguments = _program(tokens)
        seen.add(program)
        if program == "make":
            assert set(arguments) <= targets, f"{block.where}: {line}"
        elif program == "pip":
            assert arguments[0] == "install", f"{block.where}: {line}"
            for argument in arguments[1:]:
                if argument.startswith("-") or argument in FROM_AN_INDEX:
                    continue
                target = PIP_TARGET.match(argument)
                assert target, f"{block.where}: {line}: install `.` or the built wheel in dist/, got {argument!r}"
                assert set((target["extras"] or "").split(",")) - {""} <= extras, f"{block.where}: {line}"
                assert target["version"] in (None, version), f"{block.where}: {line}: the wheel is {version}"
        elif program == "pytest":
            values = {i + 1 for i, argument in enumerate(arguments) if argument in ("-m", "-k", "-p")}
            for i, argument in enumerate(arguments):
                if not argument.startswith("-") and i not in values:
                    assert (REPO_ROOT / argument.split("::")[0]).exists(), f"{block.where}: {line}"
    assert {"make", "pip", "pytest"} <= seen


def test_the_readme_install_matrix_names_existing_extras():
    extras = set(tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    named = re.findall(r"`pip install ([^`]+)`", (REPO_ROOT / "README.md").read_text())
    assert len(named) >= 6, named
    for command in named:
        (argument,) = shlex.split(command)
        target = PIP_TARGET.match(argument)
        assert target, f"README.md: pip install {command}"
        assert set((target["extras"] or "").split(",")) - {""} <= extras, f"README.md: pip install {command}"
    assert extras - {"dev"} <= {extra for command in named for extra in re.findall(r"[\w-]+", command)}
