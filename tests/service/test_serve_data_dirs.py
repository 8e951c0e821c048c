"""``serve --data DIR [DIR ...]`` (issue 41, item 4) serves the stores of several directories as
one server, refusing two stores of one name in one line; and its ready line says how to
connect (issue 41, item 3): ``tls on|off, tokens on|off, metrics :PORT|off``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT

from clients.core import EpisodeSpec, SamplerClient
from sampler_server.cli.main import main as server_cli
from sampler_server.cli.ready import READY, SETTINGS, ready_line, ready_settings
from sampler_server.errors import InvalidArgument
from sampler_server.service.server import RunningServer, ServerConfig
from sampler_server.store.reader import find_stores_in

SPECS = [EpisodeSpec(sources=(store,), split="test", seed=5, image_size=32, ways=5, shots=1, query=2)
         for store in ("folder", "folder_raw32")]


def two_places(served, root: Path) -> tuple[Path, Path]:
    """The served stores split over two data directories (links to the packed stores)."""
    first, second = root / "lab", root / "mine"
    for directory, store in ((first, "folder"), (second, "folder_raw32")):
        directory.mkdir()
        (directory / store).symlink_to(served.data / store, target_is_directory=True)
    return first, second


def test_the_ready_line_says_tls_tokens_and_the_metrics_port():
    assert ready_settings(False, False, [None]) == "tls off, tokens off, metrics off"
    assert ready_settings(True, True, [9100]) == "tls on, tokens on, metrics :9100"
    assert ready_settings(True, False, [9100, 9101]) == "tls on, tokens off, metrics :9100+:9101"
    line = ready_line("127.0.0.1:5", ["a", "b"], ready_settings(False, True, [9100]), 0.25)
    assert line == "listening on 127.0.0.1:5 (2 stores: a, b; tls off, tokens on, metrics :9100; ready in 0.25 s)"
    ready = READY.match(line)
    assert ready is not None and ready.group(1) == "127.0.0.1:5"
    assert SETTINGS.search(ready.group(2)).groups() == ("off", "on", ":9100")


def test_stores_of_several_directories_are_served_as_one_server_serves_them(served, tmp_path):
    server = RunningServer(ServerConfig(data_dir=two_places(served, tmp_path), port=0, workers=1, threads=4,
                                        grace_seconds=0.2)).start()
    try:
        with SamplerClient(server.address, same_host=False) as split, \
                SamplerClient(served.address, same_host=False) as whole:
            assert [s.name for s in split.list_sources()] == [s.name for s in whole.list_sources()]
            for spec in SPECS:  # a store of each directory
                assert split.episode(spec, 3).fingerprint == whole.episode(spec, 3).fingerprint
    finally:
        server.stop(grace=0.2)
    assert (tmp_path / "lab" / "metrics.sqlite").exists()  # the first directory holds the reports


def test_two_stores_of_one_name_are_refused_in_one_line(served, tmp_path, capsys):
    first, second = two_places(served, tmp_path)
    (second / "folder").symlink_to(served.data / "folder_raw32", target_is_directory=True)
    said = (f"--data: two stores named 'folder', {first / 'folder'} and {second / 'folder'} (a store is served by "
            "its directory's name): leave one directory out of --data, or rename one of the two")
    with pytest.raises(InvalidArgument) as caught:
        find_stores_in([first, second])
    assert str(caught.value) == said
    assert server_cli(["serve", "--data", str(first), str(second), "--port", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"sampler-server serve: error: {said}"
    # one directory named twice, or one store reached through a link, is one store
    assert [p.name for p in find_stores_in([first, first, served.data])] == ["folder", "folder_raw32"]


@pytest.mark.slow
def test_serve_takes_several_data_directories_and_says_so_when_ready(served, tmp_path):
    first, second = two_places(served, tmp_path)
    process = subprocess.Popen(
        [sys.executable, "-m", "sampler_server", "serve", "--data", str(first), str(second), "--port", "0",
         "--workers", "1"], env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline().strip()
        assert READY.match(line), line + process.stderr.read() if process.poll() is not None else line
        assert "(2 stores: folder, folder_raw32; tls off, tokens off, metrics off; ready in " in line, line
        with SamplerClient(line.split()[2], same_host=False) as client:
            assert {s.name for s in client.list_sources()} == {"folder", "folder_raw32"}
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        process.stdout.close()
        process.stderr.close()
