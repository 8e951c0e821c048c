"""A documented example run twice in one fresh interpreter, as a reader runs it, then again.

``python -c`` starts the interpreter (from the repository root, with the variables
``doc_blocks.EXAMPLE_ENVIRONMENT`` names); it executes the example as ``__main__`` and hands back what
it printed, then waits until the caller asks for the rerun, which executes the same code
in a new namespace. The example seeds its own weights, so the rerun must print and report
what the first run did. One interpreter for both runs: the rerun adds the example's work,
not a second start-up and import of torch or TensorFlow (6-11 s for TensorFlow).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile

from doc_blocks import EXAMPLE_ENVIRONMENT, REPO_ROOT

DRIVER = """if True:
    import contextlib, io, json, sys
    code = compile(sys.argv[1], "<example>", "exec")
    for run in range(2):
        if run and not sys.stdin.readline():
            sys.exit(0)  # the caller wanted one run
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(code, {"__name__": "__main__"})
        sys.stdout.write(json.dumps(printed.getvalue()) + "\\n")
        sys.stdout.flush()
"""


class ExampleRuns:
    """``with ExampleRuns(code) as example:``, ``example.run()`` twice: what the example printed
    on its first run, then on its rerun in the same interpreter (which must then exit 0). A
    run that fails, or prints nothing within ``timeout`` seconds, fails the caller with the
    end of its stderr."""

    def __init__(self, code: str, *, timeout: float = 300) -> None:
        self.code, self.timeout, self.runs = code, timeout, 0

    def __enter__(self) -> ExampleRuns:
        # OMP_NUM_THREADS: torch's threads; on the examples' small convolutions a second one only
        # spins waiting for work (make test's other worker has the machine's other core)
        env = {**os.environ, **EXAMPLE_ENVIRONMENT, "OMP_NUM_THREADS": "1"}
        self.errors = tempfile.TemporaryFile("w+")  # a file, not a pipe: a chatty stderr never blocks the example
        self.process = subprocess.Popen([sys.executable, "-c", DRIVER, self.code], cwd=REPO_ROOT, env=env, text=True,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errors)
        return self

    def __exit__(self, *exc: object) -> None:
        self.process.kill()
        self.process.wait()
        self.errors.close()

    def run(self) -> str:
        assert self.runs < 2, "the driver runs the example twice"
        if self.runs:
            self.process.stdin.write("\n")
            self.process.stdin.flush()
        self.runs += 1
        ready, _, _ = select.select([self.process.stdout], [], [], self.timeout)
        line = self.process.stdout.readline() if ready else ""
        if self.runs == 2 and line:
            self.process.stdin.close()
            code = self.process.wait(timeout=60)
            line = line if code == 0 else ""
        if not line:
            self.process.kill()
            self.process.wait()
            self.errors.seek(0)
            raise AssertionError(f"run {self.runs} of the example failed or printed nothing within {self.timeout} s "
                                 f"(exit {self.process.returncode}):\n{self.errors.read()[-3000:]}")
        return json.loads(line)
