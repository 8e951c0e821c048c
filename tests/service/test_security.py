"""A shared deployment: TLS, bearer tokens, run ownership and the per-call log.

A real server on 127.0.0.1 with TLS (a CA and a server certificate made with the
``openssl`` command: ``tests/pki.py``) and a tokens file of four callers: ``lab-read`` (read),
``team-a`` and ``team-b`` (report) and ``root`` (admin).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from pki import make_pki

from clients.core import EpisodeSpec, RetryPolicy, SamplerClient, SamplerClientError
from sampler_server.errors import InvalidArgument
from sampler_server.service.auth import load_tokens
from sampler_server.service.server import RunningServer, ServerConfig, TlsFiles


SPEC = EpisodeSpec(sources=("folder",), split="test", seed=3, image_size=32, ways=5, shots=1, query=2)
TOKENS = {"lab-read": ("read", "tok-read-1"), "team-a": ("report", "tok-a-1"), "team-b": ("report", "tok-b-1"),
          "root": ("admin", "tok-root-1")}


def write_tokens(path: Path) -> Path:
    path.write_text("".join(json.dumps({"name": n, "token": t, "role": r}) + "\n" for n, (r, t) in TOKENS.items()))
    return path


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def secure(served, pki, tmp_path_factory):
    root = tmp_path_factory.mktemp("secure")
    server = RunningServer(ServerConfig(
        data_dir=served.data, port=0, workers=1, threads=8, metrics_path=root / "metrics.sqlite", grace_seconds=0.5,
        tls=TlsFiles(cert=pki / "server.pem", key=pki / "server.key"), tokens=write_tokens(root / "tokens.jsonl"),
    )).start()
    yield server
    server.stop(grace=0.2)


def client(server: RunningServer, pki: Path, who: str | None, **kwargs) -> SamplerClient:
    token = TOKENS[who][1] if who in TOKENS else who
    kwargs.setdefault("tls_ca", pki / "ca.pem")
    kwargs.setdefault("connect_timeout", 3.0)
    return SamplerClient(server.address, token=token, retry=RetryPolicy(max_attempts=1), **kwargs)


def report(c: SamplerClient, run: str, index: int = 0):
    episode = c.episode(SPEC, index)
    return c.report_episode(run, episode, episode.query_labels, run_config={"model": "test"})


def code_of(call) -> grpc.StatusCode:
    with pytest.raises(SamplerClientError) as caught:
        call()
    return caught.value.code, str(caught.value)


def test_a_call_without_a_token_or_with_an_unknown_one_is_unauthenticated(secure, pki):
    with client(secure, pki, None) as c:
        code, message = code_of(lambda: c.list_sources())
        assert code == grpc.StatusCode.UNAUTHENTICATED and "requires a token" in message and "token=" in message
    with client(secure, pki, "not-a-token") as c:
        code, message = code_of(lambda: c.episode(SPEC, 0))
        assert code == grpc.StatusCode.UNAUTHENTICATED and "not-a-token" not in message
        code, _ = code_of(lambda: next(iter(c.episodes(SPEC, count=1))))  # streams too
        assert code == grpc.StatusCode.UNAUTHENTICATED


def test_health_stays_open_without_a_token(secure, pki):
    credentials = grpc.ssl_channel_credentials((pki / "ca.pem").read_bytes())
    with grpc.secure_channel(secure.address, credentials) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_a_read_token_streams_and_reads_but_cannot_report(secure, pki):
    with client(secure, pki, "lab-read") as c:
        assert [e.index for e in c.episodes(SPEC, count=2)] == [0, 1]
        code, message = code_of(lambda: report(c, "read-run"))
        assert code == grpc.StatusCode.PERMISSION_DENIED and "lab-read" in message and "report" in message


def test_a_run_belongs_to_the_token_that_created_it(secure, pki):
    with client(secure, pki, "team-a") as a, client(secure, pki, "team-b") as b:
        assert report(a, "a-run", 0).stored == 1
        assert report(a, "a-run", 1).stored == 1  # the owner writes again
        code, message = code_of(lambda: report(b, "a-run", 2))
        assert code == grpc.StatusCode.PERMISSION_DENIED and "a-run" in message
        assert "team-a" not in message
        code, message = code_of(lambda: b.get_report(["a-run"]))
        assert code == grpc.StatusCode.NOT_FOUND and message.endswith("run 'a-run' has no reports")
        assert report(b, "b-run", 0).stored == 1
        code, message = code_of(lambda: b.get_report(["no-such-run"]))
        assert code == grpc.StatusCode.NOT_FOUND and "a-run" not in message and "b-run" not in message
        assert "a-run" in a.get_report(["a-run"])
    with client(secure, pki, "lab-read") as r:
        text = r.get_report(["a-run", "b-run"])
        assert "a-run" in text and "b-run" in text
    with client(secure, pki, "root") as root:
        assert report(root, "a-run", 3).stored == 1  # admin writes to any run
        assert "a-run" in root.get_report(["a-run"])


def test_an_unknown_run_names_no_other_run_for_anyone(secure, pki):
    with client(secure, pki, "root") as root:
        report(root, "root-run", 0)
        code, message = code_of(lambda: root.get_report(["missing"]))
        assert code == grpc.StatusCode.NOT_FOUND and "root-run" not in message and "missing" in message


def test_one_log_line_per_call_names_method_peer_token_and_status(secure, pki, caplog):
    caplog.set_level(logging.INFO, logger="sampler_server.calls")
    with client(secure, pki, "lab-read") as c:
        c.list_sources()
        code_of(lambda: report(c, "read-run-2"))
        assert len(list(c.episodes(SPEC, count=2))) == 2
    lines = [r for r in caplog.records if r.name == "sampler_server.calls"]
    listed = [r for r in lines if r.call["method"] == "/sampler.v1.Sampler/ListSources"]
    assert len(listed) == 1
    fields = listed[0].call
    assert fields["token"] == "lab-read" and fields["status"] == "OK" and fields["peer"].startswith("ipv4:127.0.0.1")
    assert fields["ms"] >= 0 and "token=lab-read" in listed[0].getMessage()
    denied = [r.call for r in lines if r.call["method"] == "/sampler.v1.Sampler/ReportMetrics"]
    assert [d["status"] for d in denied] == ["PERMISSION_DENIED"]
    streamed = [r.call for r in lines if r.call["method"] == "/sampler.v1.Sampler/StreamEpisodes"]
    assert [(d["token"], d["status"]) for d in streamed] == [("lab-read", "OK")]


def test_a_client_without_the_ca_fails_clearly(secure, pki):
    with SamplerClient(secure.address, token=TOKENS["root"][1], retry=RetryPolicy(max_attempts=1),
                       connect_timeout=1.0) as c:  # plaintext against TLS
        code, message = code_of(lambda: c.list_sources())
    assert code == grpc.StatusCode.UNAVAILABLE and secure.address in message
    with client(secure, pki, "root", tls_ca=pki / "client.pem", connect_timeout=1.0) as c:  # the wrong root
        code, _ = code_of(lambda: c.list_sources())
    assert code == grpc.StatusCode.UNAVAILABLE


def test_client_certificates_are_required_with_a_client_ca(served, pki, tmp_path):
    server = RunningServer(ServerConfig(
        data_dir=served.data, port=0, workers=1, threads=4, metrics_path=tmp_path / "m.sqlite", grace_seconds=0.2,
        tls=TlsFiles(cert=pki / "server.pem", key=pki / "server.key", client_ca=pki / "ca.pem"),
    )).start()
    try:
        with client(server, pki, None, connect_timeout=1.0) as c:
            code, _ = code_of(lambda: c.list_sources())
        assert code == grpc.StatusCode.UNAVAILABLE
        with client(server, pki, None, tls_cert=pki / "client.pem", tls_key=pki / "client.key") as c:
            assert [s.name for s in c.list_sources()] == ["folder", "folder_raw32"]
    finally:
        server.stop(grace=0.2)


def test_the_python_client_reads_its_ca_and_token_from_the_environment(secure, pki, monkeypatch):
    monkeypatch.setenv("SAMPLER_TLS_CA", str(pki / "ca.pem"))
    monkeypatch.setenv("SAMPLER_TOKEN", TOKENS["team-a"][1])
    with SamplerClient(secure.address, retry=RetryPolicy(max_attempts=1), connect_timeout=3.0) as c:
        assert report(c, "env-run").stored == 1
    monkeypatch.setenv("SAMPLER_TOKEN", TOKENS["team-b"][1])
    with SamplerClient(secure.address, retry=RetryPolicy(max_attempts=1), connect_timeout=3.0) as c:
        code, _ = code_of(lambda: report(c, "env-run", 1))
    assert code == grpc.StatusCode.PERMISSION_DENIED


def test_trainer_flags_carry_tls_and_token_but_stay_out_of_the_run_config(pki, tmp_path):
    from clients.trainer_args import parse_args, run_config

    token_file = tmp_path / "token"
    token_file.write_text("tok-a-1\n")
    args = parse_args("torch", ["--server", "h:1", "--run", "r", "--sources", "a", "--tls-ca", str(pki / "ca.pem"),
                                "--token-file", str(token_file)])
    assert args.tls_ca == str(pki / "ca.pem") and args.token_file == str(token_file)
    assert not {"tls_ca", "token_file", "tls_cert", "tls_key"} & set(run_config(args, {}))


def test_tokens_file_errors_name_the_line(tmp_path):
    path = tmp_path / "tokens.jsonl"
    good = '{"name": "a", "token": "t1", "role": "read"}\n'
    for text, expected in (
        (good + '{"name": "b", "token": "t1", "role": "report"}\n', "line 2: token of 'b' repeats line 1"),
        (good + '{"name": "a", "token": "t2", "role": "report"}\n', "line 2: name 'a' repeats line 1"),
        (good + '{"name": "b", "token": "t2", "role": "owner"}\n', "line 2: role: got 'owner'"),
        ('{"name": "b", "token": "t2"\n', "line 1: not a JSON object"),
        ('{"name": "b", "role": "read"}\n', "line 1: token: missing"),
        ("\n", "no tokens"),
    ):
        path.write_text(text)
        with pytest.raises(InvalidArgument, match=expected):
            load_tokens(path)
    path.write_text(good + "\n")  # blank lines are skipped
    assert [(t.name, t.role.value) for t in load_tokens(path).values()] == [("a", "read")]


def _serve(served, *flags: str) -> subprocess.Popen:
    from conftest import REPO_ROOT

    return subprocess.Popen(
        [sys.executable, "-m", "sampler_server", "serve", "--data", str(served.data), "--port", "0", "--workers", "1",
         *flags], env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )


def _stop(process: subprocess.Popen) -> str:
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0
    return process.stderr.read()


@pytest.mark.slow
def test_serve_warns_when_exposed_without_tokens(served, tmp_path):
    process = _serve(served, "--host", "0.0.0.0", "--metrics", str(tmp_path / "m.sqlite"))
    line = process.stdout.readline()
    assert line.startswith("listening on 0.0.0.0:") and "; tls off, tokens off, metrics off; ready in " in line, line
    warnings = [line for line in _stop(process).splitlines() if "WARNING" in line]
    assert len(warnings) == 1 and "without --tokens" in warnings[0] and "plaintext" in warnings[0]


@pytest.mark.slow
def test_serve_with_tls_tokens_and_json_call_log(served, pki, tmp_path):
    process = _serve(served, "--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key"),
                     "--tokens", str(write_tokens(tmp_path / "tokens.jsonl")), "--log-json",
                     "--metrics", str(tmp_path / "m.sqlite"))
    line = process.stdout.readline()
    assert "; tls on, tokens on, metrics off; ready in " in line, line  # what a user sharing it must give
    address = line.split()[2]
    with SamplerClient(address, tls_ca=pki / "ca.pem", token=TOKENS["team-a"][1], connect_timeout=5.0) as c:
        assert [s.name for s in c.list_sources()] == ["folder", "folder_raw32"]
    entries = [json.loads(line) for line in _stop(process).splitlines() if line.startswith("{")]
    calls = [e for e in entries if e.get("method") == "/sampler.v1.Sampler/ListSources"]
    assert len(calls) == 1 and calls[0]["token"] == "team-a" and calls[0]["status"] == "OK"
    assert calls[0]["level"] == "INFO" and calls[0]["peer"].startswith("ipv4:127.0.0.1:")
    assert not [e for e in entries if e["level"] == "WARNING"]  # loopback: no warning


def test_serve_refuses_a_bad_tokens_file_in_one_line(served, tmp_path):
    path = tmp_path / "tokens.jsonl"
    path.write_text('{"name": "a", "token": "t", "role": "owner"}\n')
    process = _serve(served, "--tokens", str(path))
    out, err = process.communicate(timeout=60)
    assert process.returncode != 0 and not out
    assert err.strip().splitlines()[-1].endswith("line 1: role: got 'owner', expected one of read, report, admin")
    assert len(err.strip().splitlines()) == 1
