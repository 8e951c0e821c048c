"""The client's modules by concern: no circle, no private cross-module import, no mixin that
reaches into another object's attributes, ``clients.core`` only gathers public names, protocol
ids come from ``sampler_common.protocols``, one TLS-pair rule and one error-to-exit mapping."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from conftest import REPO_ROOT
from python_source import parse_file

from sampler_common import protocols

CLIENTS = REPO_ROOT / "clients"


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(CLIENTS.rglob("*.py")):
        parts = path.relative_to(REPO_ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _imports(name: str) -> Iterator[tuple[int, str, list[str]]]:
    """(line, module imported from, names) of every import in module ``name``, nested ones included."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(parse_file(path)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, []
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            yield node.lineno, base, [alias.name for alias in node.names]


def _edges(name: str) -> set[str]:
    """The clients modules that module ``name`` imports (a name of a package that is a submodule counts)."""
    targets = set()
    for _, module, names in _imports(name):
        for candidate in [module, *(f"{module}.{n}" for n in names)]:
            if candidate in MODULES and candidate != name:
                targets.add(candidate)
    return targets


def test_no_module_imports_a_private_name_of_another():
    private = [f"{MODULES[name].relative_to(REPO_ROOT)}:{line} imports {n} from {module}"
               for name in MODULES for line, module, names in _imports(name)
               for n in names if n.startswith("_") and n != "annotations"]
    assert private == []


def test_the_client_modules_import_no_circle():
    graph = {name: _edges(name) for name in MODULES}
    circles = []

    def visit(node: str, path: list[str]) -> None:
        for target in sorted(graph[node]):
            if target in path:
                circles.append(" -> ".join([*path[path.index(target):], target]))
            elif target not in done:
                visit(target, [*path, target])
        done.add(node)

    done: set[str] = set()
    for name in sorted(graph):
        if name not in done:
            visit(name, [name])
    assert circles == []


def test_no_client_module_silences_an_attribute_it_does_not_have():
    silenced = [f"{path.relative_to(REPO_ROOT)}:{number}" for path in MODULES.values()
                for number, line in enumerate(path.read_text().splitlines(), 1) if "ignore[attr-defined]" in line]
    assert silenced == []


def test_clients_core_only_gathers_public_names():
    tree = parse_file(CLIENTS / "core.py")
    body = [node for node in tree.body if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))]
    assert all(isinstance(node, ast.ImportFrom) or (isinstance(node, ast.Assign) and
                                                    [t.id for t in node.targets] == ["__all__"]) for node in body)
    import clients.core as core

    for name in ("SamplerClient", "SamplerClientError", "EpisodeSpec", "EpisodeArrays", "BatchArrays",
                 "TaskBatchArrays", "TaskEpisodeArrays", "CogBatchArrays", "RetryPolicy", "Reporter",
                 "VTAB_RESIZE", "shard_window", "to_array", "batch_request", "task_batch_request"):
        assert name in core.__all__ and getattr(core, name) is not None


def test_every_report_names_its_protocol_by_the_shared_id():
    """A ``MetricReport`` built in ``clients`` takes ``protocol=`` from ``sampler_common.protocols``."""
    seen = []
    for name, path in MODULES.items():
        shared = {alias for _, module, names in _imports(name) if module == "sampler_common.protocols"
                  for alias in names}
        for node in ast.walk(parse_file(path)):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "MetricReport":
                for keyword in node.keywords:
                    if keyword.arg == "protocol":
                        value = keyword.value
                        seen.append((name, isinstance(value, ast.Name) and value.id in shared))
    assert seen and all(ok for _, ok in seen), seen
    assert {"clients.reporting", "clients.protocols.vtab", "clients.cog_eval"} <= {name for name, _ in seen}
    assert set(protocols.REPORT_PROTOCOLS) == {protocols.MD, protocols.VTAB, protocols.COG}


class _RecordingRpc:
    """An ``Rpc`` without a server: records what a protocol's calls send."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, object]] = []

    def call(self, method, request):
        self.sent.append((method, request))
        return type("Reply", (), {"text": "table", "tasks": []})()

    def call_with_pixels(self, method, request_for, parse):
        raise AssertionError("not used here")

    def stream(self, method, request_for, parse, *, start=0, count=0, step=1, until_last=False):
        self.sent.append((method, request_for(start, count, "token-1")))
        return iter(())

    def report(self, reports, run_config_json=""):
        self.sent.append(("ReportMetrics", list(reports)))


def test_a_protocols_calls_need_only_the_public_rpc_surface():
    from clients.protocols.cog import CogCalls
    from clients.protocols.vtab import VtabCalls

    class Fake(_RecordingRpc, VtabCalls, CogCalls):
        pass

    fake = Fake()
    fake.report_task("run", "cifar100", "test", 0.5, 10)
    assert fake.sent[-1][1][0].protocol == protocols.VTAB
    list(fake.stream_cog_batches("L1", "train", start_index=3, count=2))
    method, request = fake.sent[-1]
    assert method == "StreamCogBatches" and (request.start_index, request.count) == (3, 2)
    assert request.images.same_host_token == "token-1"  # the engine's token, set where the request holds it
    list(fake.task_batches("cifar100", "train", 8, count=4))
    method, request = fake.sent[-1]
    assert method == "StreamTaskBatches" and request.shuffle and request.images.same_host_token == "token-1"


def test_one_tls_pair_rule_for_the_client_and_every_trainer_command_line(tmp_path, capsys):
    from clients.core import SamplerClient
    from clients.trainer_args import parse_args, parse_cog_args, parse_transfer_args

    pem = tmp_path / "x.pem"
    pem.write_text("-----BEGIN CERTIFICATE-----\n")
    with pytest.raises(ValueError, match="^tls_cert and tls_key: expected both or neither$"):
        SamplerClient("localhost:1", tls_ca=pem, tls_cert=pem)
    common = ["--server", "localhost:1", "--run", "r", "--tls-ca", str(pem), "--tls-cert", str(pem)]
    for parse, rest in ((parse_args, ["--sources", "omniglot"]), (parse_transfer_args, ["--tasks", "cifar100"]),
                        (parse_cog_args, ["--backbone", "tiny", "--feature-cache", str(tmp_path)])):
        with pytest.raises(SystemExit) as stop:
            parse("torch", [*common, *rest])
        assert stop.value.code == 2
        assert capsys.readouterr().err.strip().endswith("error: arguments --tls-cert/--tls-key: expected both or "
                                                        "neither")


def test_one_error_to_exit_mapping_for_every_trainer():
    from clients.core import SamplerClientError
    from clients.trainer_shell import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_SERVER, exit_for
    from clients.errors import UsageError

    assert exit_for(UsageError("argument --x: got 1"), "h:1") == (EXIT_BAD_INPUT, "argument --x: got 1")
    refused = SamplerClientError("ListTasks on h:1: NOT_FOUND: no task", grpc.StatusCode.NOT_FOUND)
    assert exit_for(refused, "h:1") == (EXIT_BAD_INPUT, "server h:1: ListTasks on h:1: NOT_FOUND: no task")
    for code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION):  # the request's fault
        assert exit_for(SamplerClientError("refused", code), "h:1")[0] == EXIT_BAD_INPUT
    for code in (grpc.StatusCode.DATA_LOSS, grpc.StatusCode.INTERNAL, grpc.StatusCode.RESOURCE_EXHAUSTED):
        assert exit_for(SamplerClientError("fault", code), "h:1")[0] == EXIT_SERVER  # the server's
    assert exit_for(KeyboardInterrupt(), "h:1", interrupted="interrupted; saved") == (EXIT_INTERRUPTED,
                                                                                      "interrupted; saved")
    assert exit_for(MemoryError("oom"), "h:1", lambda error: (1, f"out of memory: {error}")) == (1, "out of memory: oom")
    assert exit_for(RuntimeError("a bug"), "h:1", lambda error: None) is None
    assert exit_for(RuntimeError("a bug"), "h:1") is None
    assert exit_for(SystemExit(4), "h:1", lambda error: (1, "never asked")) is None
    assert (EXIT_BAD_INPUT, EXIT_SERVER, EXIT_INTERRUPTED) == (2, 3, 130)


def test_a_connection_mismatch_names_the_library_setting_or_the_trainer_flag_and_pickles():
    import pickle

    from clients.errors import ConnectionMismatch
    from clients.trainer_shell import EXIT_SERVER, exit_for

    error = ConnectionMismatch("h:1", "uses TLS and this client connects in plaintext", "give its CA with {tls_ca}")
    assert str(error) == "server h:1 uses TLS and this client connects in plaintext: give its CA with tls_ca=FILE " \
                         "(or SAMPLER_TLS_CA)"
    assert exit_for(error, "h:1") == (EXIT_SERVER, "server h:1 uses TLS and this client connects in plaintext: give "
                                                   "its CA with --tls-ca FILE (or SAMPLER_TLS_CA)")
    again = pickle.loads(pickle.dumps(error))  # from a DataLoader worker
    assert type(again) is ConnectionMismatch and str(again) == str(error) and again.code == grpc.StatusCode.UNAVAILABLE


def test_an_adapters_client_options_are_the_clients_keywords_refused_at_once_otherwise():
    from clients.adapter_options import connection_options

    assert connection_options(None) == {}
    assert connection_options({"tls_ca": "ca.pem", "token": "t"}) == {"tls_ca": "ca.pem", "token": "t"}
    with pytest.raises(ValueError, match=r"^client_options: got 'tls-ca', expected keywords of SamplerClient: "
                                         r"retry, prefetch, .*tls_ca, tls_cert, tls_key, token, "):
        connection_options({"tls-ca": "ca.pem", "token": "t"})
