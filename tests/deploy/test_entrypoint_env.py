"""deploy/entrypoint.py (serve's options from SAMPLER_* variables) and deploy/healthcheck.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from deploy_files import DEPLOY, load_script

from sampler_server.cli.main import build_parser

entrypoint = load_script("entrypoint")
healthcheck = load_script("healthcheck")


def test_every_serve_option_has_its_variable() -> None:
    options = entrypoint.serve_options()
    usage = subprocess.run([sys.executable, "-m", "sampler_server", "serve", "--help"], capture_output=True,
                           text=True, check=True).stdout
    flags = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", usage)) - {"--help"}
    assert {"SAMPLER_" + f[2:].upper().replace("-", "_") for f in flags} == set(options)
    assert {"SAMPLER_DATA", "SAMPLER_HOST", "SAMPLER_PORT", "SAMPLER_WORKERS", "SAMPLER_METRICS", "SAMPLER_TLS_CERT",
            "SAMPLER_TLS_KEY", "SAMPLER_TLS_CLIENT_CA", "SAMPLER_TOKENS", "SAMPLER_LOG_JSON"} <= set(options)


def test_variables_become_serve_arguments() -> None:
    environ = {"SAMPLER_DATA": "/data", "SAMPLER_PORT": "50052", "SAMPLER_WORKERS": "4", "SAMPLER_LOG_JSON": "true",
               "SAMPLER_STREAM_IDLE_SECONDS": "30.5", "SAMPLER_TLS_CERT": "", "SAMPLER_TOKEN": "not ours",
               "HOME": "/root"}
    arguments = entrypoint.arguments_from_environment(environ)
    assert "--log-json" in arguments and "--tls-cert" not in arguments  # empty counts as unset
    rest = [a for a in arguments if a != "--log-json"]
    pairs = dict(zip(rest[::2], rest[1::2]))
    assert pairs == {"--data": "/data", "--port": "50052", "--workers": "4", "--stream-idle-seconds": "30.5"}
    args = build_parser("serve").parse_args(["serve", *arguments])
    assert (args.port, args.workers, args.log_json, args.stream_idle_seconds) == (50052, 4, True, 30.5)
    assert entrypoint.arguments_from_environment({"SAMPLER_LOG_JSON": "off"}) == []


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("SAMPLER_PORT", "http", "SAMPLER_PORT: got 'http', expected an integer (serve --port)"),
    ("SAMPLER_STREAM_SHED_SECONDS", "5s", "SAMPLER_STREAM_SHED_SECONDS: got '5s', expected a number "
     "(serve --stream-shed-seconds)"),
    ("SAMPLER_LOG_JSON", "maybe", "SAMPLER_LOG_JSON: got 'maybe', expected 1, true, yes or on (serve --log-json) "
     "or 0, false, no or off (no --log-json)"),
])
def test_a_bad_value_names_the_variable(variable: str, value: str, message: str) -> None:
    with pytest.raises(entrypoint.EnvironmentValueError) as caught:
        entrypoint.arguments_from_environment({variable: value})
    assert str(caught.value) == message


def test_a_near_miss_is_warned_about_and_other_names_are_not() -> None:
    options = entrypoint.serve_options()
    warnings = entrypoint.near_misses({"SAMPLER_WORKER": "2", "SAMPLER_SAME_HOST": "0", "PATH": "/bin"}, options)
    assert warnings == ["sampler-server entrypoint: warning: SAMPLER_WORKER is not read "
                        "(a serve option's variable is SAMPLER_WORKERS)"]


def test_passwords_in_urls_are_masked_in_the_log_line() -> None:
    line = entrypoint.shown(["--metrics", "postgresql://sampler:s3cret@db.lab:5432/sampler?sslmode=require",
                             "--data", "/data"])
    assert line == "--metrics postgresql://sampler:***@db.lab:5432/sampler?sslmode=require --data /data"
    assert "s3cret" not in entrypoint.shown(["postgresql://u:s3cret@[::1]/x"])


def _run(argv: list[str], environ: dict[str, str]) -> subprocess.CompletedProcess:
    """The entry point as the image runs it: its own process (serve configures logging and
    starts a forkserver, which no test process should get)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("SAMPLER_")}
    return subprocess.run([sys.executable, str(DEPLOY / "entrypoint.py"), *argv], env={**env, **environ},
                          capture_output=True, text=True, timeout=60)


def test_main_runs_serve_and_arguments_win_over_variables(tmp_path: Path) -> None:
    missing = tmp_path / "no-stores"
    done = _run([], {"SAMPLER_DATA": str(missing), "SAMPLER_PORT": "0"})
    assert done.returncode == 2
    assert f"sampler-server entrypoint: serve --data {missing} --port 0" in done.stderr
    assert f"sampler-server serve: error: {missing}" in done.stderr  # serve itself got the arguments
    # the same option as an argument: the argument wins (serve checks the port first)
    done = _run(["--port", "70000"], {"SAMPLER_DATA": str(missing), "SAMPLER_PORT": "0"})
    assert done.returncode == 2
    assert "sampler-server serve: error: --port: got 70000, expected 0 to 65535" in done.stderr


def test_main_stops_on_a_bad_variable_before_serve(capsys) -> None:
    assert entrypoint.main([], {"SAMPLER_DATA": "/data", "SAMPLER_WORKERS": "-"}) == 2
    assert capsys.readouterr().err.strip() == ("sampler-server entrypoint: error: SAMPLER_WORKERS: got '-', "
                                               "expected an integer (serve --workers)")


def test_the_health_check_asks_the_server(served, monkeypatch, capsys) -> None:
    monkeypatch.setenv("SAMPLER_PORT", str(served.server.port))
    monkeypatch.delenv("SAMPLER_TLS_CERT", raising=False)
    assert healthcheck.main([]) == 0
    assert "'sampler.v1.Sampler': SERVING" in capsys.readouterr().out
    assert healthcheck.main(["--service", "sampler.v1.Sampler/no-such-store"]) == 1
    assert "NOT_FOUND" in capsys.readouterr().err
    monkeypatch.setenv("SAMPLER_TLS_CERT", "/etc/sampler/tls/tls.crt")
    assert healthcheck.main([]) == 0
    assert "accepts TCP connections (TLS is on" in capsys.readouterr().out


def test_the_health_check_fails_without_a_server(monkeypatch, capsys) -> None:
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("SAMPLER_PORT", str(port))
    monkeypatch.delenv("SAMPLER_TLS_CERT", raising=False)
    assert healthcheck.main(["--timeout", "2"]) == 1
    assert "UNAVAILABLE" in capsys.readouterr().err
    monkeypatch.setenv("SAMPLER_PORT", "http")
    assert healthcheck.main([]) == 1
    assert capsys.readouterr().err.strip() == "healthcheck: error: SAMPLER_PORT: got 'http', expected 1 to 65535"
