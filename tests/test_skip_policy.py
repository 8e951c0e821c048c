"""No skip hides a failure: the suite's skip policy (tests/prerequisites.py), read from the test
files themselves, and .ci/run's gate over the skips a run reports (tests/skip_gate.py)."""

from __future__ import annotations

import ast
import functools
import os
import subprocess
import sys
from pathlib import Path

import prerequisites
import skip_gate
from python_source import parse_file

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
POLICY_HOME = TESTS / "prerequisites.py"


@functools.cache
def _test_sources() -> dict[str, ast.AST]:
    return {str(path.relative_to(REPO)): parse_file(path)
            for path in sorted(TESTS.rglob("*.py"))
            if path not in (POLICY_HOME, Path(__file__).resolve()) and "__pycache__" not in path.parts}


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return node.id if isinstance(node, ast.Name) else ""


SKIPPING_NAMES = {"skip", "skipif", "importorskip"}


def _uses(predicate) -> list[str]:
    """``path:line: dotted.name`` of each name ending in a skipping word that ``predicate`` picks."""
    return [f"{path}:{node.lineno}: {_dotted(node)}" for path, tree in _test_sources().items()
            for node in ast.walk(tree)
            if (node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)) in SKIPPING_NAMES
            and predicate(_dotted(node))]


def test_no_test_imports_with_importorskip():
    """A module the suite needs is imported plainly: a broken import in clients.* (or a missing
    extra that `make test` installs) fails, instead of turning its tests into skips."""
    assert _uses(lambda name: name.endswith("importorskip")) == []


def test_tests_skip_only_through_the_prerequisites_module():
    """pytest.skip, skipif and mark.skip appear nowhere else: every skip names an opt-out
    variable (prerequisites.missing) or a missing device (prerequisites.needs_cuda)."""
    skips = _uses(lambda name: name == "pytest.skip" or name.endswith(("mark.skip", "mark.skipif")))
    assert skips == []


def test_a_missing_prerequisite_fails_unless_its_variable_opts_out(monkeypatch):
    import pytest

    monkeypatch.delenv("SAMPLER_TESTS_WITHOUT_OPENSSL", raising=False)
    with pytest.raises(pytest.fail.Exception, match=r"openssl is gone; set SAMPLER_TESTS_WITHOUT_OPENSSL=1"):
        prerequisites.missing("SAMPLER_TESTS_WITHOUT_OPENSSL", "openssl is gone")
    monkeypatch.setenv("SAMPLER_TESTS_WITHOUT_OPENSSL", "1")
    with pytest.raises(pytest.skip.Exception, match=r"openssl is gone \(SAMPLER_TESTS_WITHOUT_OPENSSL=1\)"):
        prerequisites.missing("SAMPLER_TESTS_WITHOUT_OPENSSL", "openssl is gone")
    with pytest.raises(ValueError, match="'SAMPLER_TESTS_WITHOUT_GPU' is not an opt-out variable"):
        prerequisites.missing("SAMPLER_TESTS_WITHOUT_GPU", "no GPU")


def test_the_allowed_list_takes_the_opt_outs_and_cuda_and_nothing_else():
    patterns = skip_gate.allowed_patterns(skip_gate.ALLOWED.read_text())
    allowed = [("t", f"{what} is missing ({variable}=1)") for variable, what in prerequisites.OPT_OUTS.items()]
    allowed.append(("t", prerequisites.CUDA_REASON))
    assert skip_gate.disallowed(allowed, patterns) == []
    hidden = [("t", "could not import 'torch': No module named 'torch'"), ("t", "needs the openssl command"),
              ("t", "got empty parameter set ['x'], function test_f at t.py:3"),
              ("t", "no shared memory: /dev/shm does not exist on this host"), ("t", "unconditional skip")]
    assert skip_gate.disallowed(hidden, patterns) == hidden


def test_ci_runs_the_gate_over_the_skips_of_make_test():
    ci = (REPO / ".ci" / "run").read_text()
    assert "SAMPLER_TESTS_SKIP_LOG" in ci and "make test" in ci and "tests/skip_gate.py" in ci
    assert ci.index("SAMPLER_TESTS_SKIP_LOG") < ci.index("make test") < ci.index("tests/skip_gate.py")


def test_a_run_logs_its_skips_and_the_gate_fails_on_a_hidden_one(tmp_path):
    """The suite's conftest, as a plugin of a small run: one skip through the prerequisites
    module, one plain pytest.skip; the gate prints both and fails on the second alone."""
    (tmp_path / "test_sample.py").write_text(
        "import pytest\nimport prerequisites\n\n"
        "def test_opted_out():\n    prerequisites.missing('SAMPLER_TESTS_WITHOUT_SS', 'ss is missing')\n\n"
        "def test_hidden():\n    pytest.skip('tensorflow could not be imported')\n\n"
        "def test_runs():\n    assert True\n")
    log = tmp_path / "skips.log"
    env = {name: value for name, value in os.environ.items()  # not this run's record or worker
           if not name.startswith(("SAMPLER_TESTS_", "PYTEST_XDIST"))}
    env.update(SAMPLER_TESTS_SKIP_LOG=str(log), SAMPLER_TESTS_WITHOUT_SS="1",
               PYTHONPATH=os.pathsep.join([str(TESTS), str(REPO)]))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path / "test_sample.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert skip_gate.read_skips(log.read_text()) == [
        ("test_sample.py::test_opted_out", "ss is missing (SAMPLER_TESTS_WITHOUT_SS=1)"),
        ("test_sample.py::test_hidden", "tensorflow could not be imported")]
    gate = subprocess.run([sys.executable, str(TESTS / "skip_gate.py"), str(log)], capture_output=True, text=True)
    assert gate.returncode == 1
    assert "skipped tests: 2" in gate.stdout
    assert gate.stderr.splitlines()[1:] == ["  test_sample.py::test_hidden: tensorflow could not be imported"]
    log.write_text(log.read_text().splitlines(keepends=True)[0])
    assert subprocess.run([sys.executable, str(TESTS / "skip_gate.py"), str(log)], capture_output=True).returncode == 0
