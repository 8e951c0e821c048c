"""The code blocks and links of README.md and docs/, read the way a user reads them.

A fenced block names its language (```` ```python ````, ```` ```sh ````, ```` ```text ````).
A Python block a test runs names itself (```` ```python title="vtab-client" ````); the test
fetches it with ``python_block(page, title)`` (string literals, so that
``tests/docs/test_doc_pages.py`` can find every call and hold every unmarked block to
being run). A block that cannot run in the suite says why in an HTML comment on the line
before it: ``<!-- not run: needs a GPU -->``. Examples set what a reader changes as
top-level constants (``SERVER = "127.0.0.1:50051"``); ``with_constants`` points them at
the test's server and fixture stores.

Two ways to run a block. A fresh interpreter (``python -c``), as a reader runs it, pays the
interpreter's start and the import of torch (3 s) or TensorFlow (10 s of CPU) every time.
``exec_python`` runs the block in the test's process as ``python -c`` would (as
``__main__``, in a new namespace, from the repository root, with the variables
``EXAMPLE_ENVIRONMENT`` names, its output captured) and puts back what it changed; it fails
naming the block and with its traceback. A block that worked only thanks to what the test
process has already (a module imported, a path on ``sys.path``) would pass in process, so
each framework keeps a block run in a fresh interpreter: "Use your own model"'s torch and tf
blocks (tests/clients/test_readme_examples.py, ``transfer_runs_twice``: their training is
most of their time, so running them in process saved nothing measurable), besides the
quickstart's ``python -m clients.torch`` command; the other blocks run in process.
"""

from __future__ import annotations

import contextlib
import io
import linecache
import os
import re
import runpy
import shlex
import sys
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]

FENCE = re.compile(r'^```(?P<language>[\w-]*)(?:\s+title="(?P<title>[\w-]+)")?\s*$')
NOT_RUN = re.compile(r"^<!--\s*not run:\s*(?P<reason>.+?)\s*-->$")


@dataclass(frozen=True)
class Block:
    """One fenced code block: where it is, its language and title, and why it is not run."""

    page: str  # relative to the repository, e.g. "docs/clients.md"
    line: int  # of the opening fence, 1-based
    language: str
    title: str | None
    not_run: str | None
    code: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def doc_pages() -> list[str]:
    """README.md, every page under docs/ and bench/README.md, relative to the repository."""
    pages = ["README.md", *sorted(p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "docs").rglob("*.md"))]
    return [*pages, "bench/README.md"]


def blocks(page: str) -> list[Block]:
    """Every fenced block of a page, in order."""
    lines = (REPO_ROOT / page).read_text().split("\n")
    found: list[Block] = []
    number = 0
    while number < len(lines):
        opening = FENCE.match(lines[number])
        if opening is None:
            number += 1
            continue
        end = next((i for i in range(number + 1, len(lines)) if lines[i].rstrip() == "```"), None)
        assert end is not None, f"{page}:{number + 1}: a code block that is never closed"
        before = next((lines[i].strip() for i in range(number - 1, -1, -1) if lines[i].strip()), "")
        marker = NOT_RUN.match(before)
        found.append(Block(page, number + 1, opening["language"], opening["title"],
                           marker["reason"] if marker else None, "\n".join(lines[number + 1:end]) + "\n"))
        number = end + 1
    return found


def all_blocks() -> list[Block]:
    return [block for page in doc_pages() for block in blocks(page)]


def python_block(page: str, title: str) -> str:
    """The code of the one Python block of ``page`` titled ``title``."""
    matching = [b for b in blocks(page) if b.language == "python" and b.title == title]
    assert len(matching) == 1, f"{page} has {len(matching)} python blocks titled {title!r}, expected 1"
    return matching[0].code


def where(page: str, title: str) -> str:
    """``page:line (title)`` of the one Python block of ``page`` titled ``title``, for messages."""
    matching = [b for b in blocks(page) if b.language == "python" and b.title == title]
    assert len(matching) == 1, f"{page} has {len(matching)} python blocks titled {title!r}, expected 1"
    return f"{matching[0].where} ({title})"


def with_constants(code: str, **values: Any) -> str:
    """The code with each top-level ``NAME = ...`` line (set exactly once) set to ``repr(value)``."""
    for name, value in values.items():
        code, replaced = re.subn(rf"^{name} = .*$", f"{name} = {value!r}", code, flags=re.MULTILINE)
        assert replaced == 1, f"the example sets {name} once at the top level, found {replaced}"
    return code


EXAMPLE_ENVIRONMENT = {"PYTHONPATH": str(REPO_ROOT), "TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLE_ONEDNN_OPTS": "0"}
"""What a block run as a reader runs it (``python -c`` from the repository root) has in its
environment besides the test's: ``exec_python`` sets it while a block runs."""


@dataclass(frozen=True)
class Printed:
    """What an example run in process printed (``stdout`` and ``stderr``, as a finished process has)."""

    stdout: str
    stderr: str


@contextlib.contextmanager
def as_python_c(argv: Sequence[str] = ("-c",), *, cwd: Path = REPO_ROOT) -> Iterator[None]:
    """This process as ``python -c`` from ``cwd`` with ``EXAMPLE_ENVIRONMENT``: ``sys.argv``,
    the working folder, ``sys.path`` (the repository first, as ``PYTHONPATH`` puts it) and the
    environment, each put back as it was afterwards."""
    saved_argv, saved_path, saved_cwd, saved_environ = sys.argv[:], sys.path[:], os.getcwd(), dict(os.environ)
    try:
        sys.argv[:] = list(argv)
        os.chdir(cwd)
        sys.path.insert(0, str(REPO_ROOT))
        os.environ.update(EXAMPLE_ENVIRONMENT)
        yield
    finally:
        sys.argv[:] = saved_argv
        sys.path[:] = saved_path
        os.chdir(saved_cwd)
        if dict(os.environ) != saved_environ:
            os.environ.clear()
            os.environ.update(saved_environ)


def exec_python(code: str, *, where: str) -> Printed:
    """Run an example in this process as ``python -c`` runs it in a fresh one (see the module's
    docstring for what that cannot catch): the code as ``__main__`` in a namespace of its own,
    its output captured; an exception it raises (or a non-zero ``sys.exit``) fails the caller
    with ``where`` (the block's ``page:line (title)``), the traceback and what it printed."""
    filename = f"<{where}>"
    linecache.cache[filename] = (len(code), None, code.splitlines(keepends=True), filename)  # source in tracebacks
    compiled = compile(code, filename, "exec")
    stdout, stderr = io.StringIO(), io.StringIO()
    failure = None
    with as_python_c(), contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            exec(compiled, {"__name__": "__main__", "__builtins__": __builtins__})
        except SystemExit as error:
            if error.code not in (None, 0):
                failure = f"it exited {error.code!r}\n"
        except Exception as error:  # noqa: BLE001: any failure of the example is the test's failure
            frames = traceback.extract_tb(error.__traceback__)
            own = next((i for i, frame in enumerate(frames) if frame.filename == filename), 0)
            failure = "".join(traceback.format_list(frames[own:]) + traceback.format_exception_only(error))
    if failure is not None:
        raise AssertionError(f"the example {where} failed (run in process):\n{failure}"
                             f"--- its stdout ---\n{stdout.getvalue()[-2000:]}--- its stderr ---\n"
                             f"{stderr.getvalue()[-3000:]}")
    return Printed(stdout.getvalue(), stderr.getvalue())


def exec_command(command: str, *, cwd: Path, where: str) -> tuple[int, Printed]:
    """(exit status, what it printed) of a documented ``sampler-server ...`` or ``python -m
    MODULE ...`` command line run in this process from ``cwd``, as its fresh process would
    run it: ``sampler_server.cli.main.main`` (the ``sampler-server`` script) with its
    arguments, or the module run as ``__main__`` (``runpy``) with ``sys.argv`` set. Not for
    ``serve``, which never returns. An exception other than ``SystemExit`` fails the caller
    with ``where`` and the traceback, as a crashed process would."""
    tokens = shlex.split(command, comments=True)
    assert tokens and (tokens[0] == "sampler-server" or tokens[:2] == ["python", "-m"]), f"{where}: {command}"
    assert tokens[0] != "sampler-server" or "serve" not in tokens[1:2], f"{where}: serve runs as a process"
    stdout, stderr = io.StringIO(), io.StringIO()
    argv = ["sampler-server", *tokens[1:]] if tokens[0] == "sampler-server" else [tokens[2], *tokens[3:]]
    with as_python_c(argv, cwd=cwd), contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            if tokens[0] == "sampler-server":
                from sampler_server.cli.main import main

                status = main(tokens[1:])
            else:
                runpy.run_module(tokens[2], run_name="__main__", alter_sys=True)
                status = 0
        except SystemExit as error:
            status = error.code if isinstance(error.code, int) else (0 if error.code is None else 1)
        except Exception:  # noqa: BLE001: a crash is the test's failure, with its traceback
            raise AssertionError(f"{where}: `{command}` raised (run in process):\n{traceback.format_exc()}"
                                 f"--- its stderr ---\n{stderr.getvalue()[-3000:]}") from None
    return status, Printed(stdout.getvalue(), stderr.getvalue())
