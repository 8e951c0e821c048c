"""Failures that say what to do (issue 27, item 3): an address where nothing listens is
refused within 2 s in one line that says what to check, from the Python client and from
the trainer's command line, while a server that answered once (a restart, a lost replica)
keeps its retries, and a dead replica among live ones is failed over, not refused."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clients.channel import RetryPolicy
from clients.client import SamplerClient
from clients.core import EpisodeSpec
from clients.errors import NothingListens, SamplerClientError

REPO_ROOT = Path(__file__).resolve().parents[2]
REFUSAL_SECONDS = 2.0
SLACK_SECONDS = 1.0
"""Added to the promised 2 s: a refusal measured 0.21 s on an idle 2-core machine (gRPC's
first failed connect plus one TCP probe per address); the slack is for a loaded CI host."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _told(address: str) -> str:
    return (f"nothing listens at {address}: is `sampler-server serve` running there? "
            "It prints its address when ready")


@pytest.mark.timing
@pytest.mark.parametrize("form", ["host", "localhost", "list"])
def test_the_client_refuses_an_address_where_nothing_listens_within_2_s(form):
    port, other = _free_port(), _free_port()
    address = {"host": f"127.0.0.1:{port}", "localhost": f"localhost:{port}",
               "list": f"ipv4:127.0.0.1:{port},127.0.0.1:{other}"}[form]
    client = SamplerClient(address)  # the defaults a user has: 10 s to connect, 8 attempts
    for ask in (client.list_sources, lambda: next(iter(client.episodes(EpisodeSpec(sources=("folder",)), count=1)))):
        started = time.monotonic()
        with pytest.raises(NothingListens) as caught:
            ask()
        elapsed = time.monotonic() - started
        assert str(caught.value) == _told(address)
        assert elapsed < REFUSAL_SECONDS + SLACK_SECONDS, f"refused after {elapsed:.2f} s"
    client.close()


@pytest.mark.timing
def test_the_trainer_exits_3_within_2_s_with_one_line_and_no_traceback(capfd):
    from clients.torch.md_train import main

    address = f"127.0.0.1:{_free_port()}"
    started = time.monotonic()
    code = main(["--server", address, "--run", "nothing-listens", "--sources", "folder"])
    elapsed = time.monotonic() - started
    err = capfd.readouterr().err.strip()
    assert code == 3 and elapsed < REFUSAL_SECONDS + SLACK_SECONDS, (code, elapsed, err)
    assert err == f"python -m clients.torch: error: {_told(address)}"


def test_the_trainer_command_line_says_it_in_one_line_without_a_traceback():
    address = f"127.0.0.1:{_free_port()}"
    done = subprocess.run(
        [sys.executable, "-m", "clients.torch", "train", "--server", address, "--run", "nothing-listens",
         "--sources", "folder"],
        capture_output=True, text=True, timeout=40, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 3, done.stderr
    assert lines == [f"python -m clients.torch: error: {_told(address)}"], lines


def test_a_dead_replica_among_live_ones_is_failed_over_not_refused(served):
    dead = f"127.0.0.1:{_free_port()}"
    live = served.address.rpartition(":")[2]
    with SamplerClient(f"ipv4:{dead},127.0.0.1:{live}") as client:
        assert "folder" in {source.name for source in client.list_sources()}
        episode = next(iter(client.episodes(EpisodeSpec(sources=("folder",), ways=5, shots=1, query=2), count=1)))
        assert episode.index == 0


def test_a_server_that_answered_once_is_retried_after_it_stops(served):
    """A server gone after the client reached it is a restart or a crash: the retries run
    (a refusal now is no reason to give up), and the error after them says so."""
    from sampler_server.service.server import RunningServer, ServerConfig

    server = RunningServer(ServerConfig(data_dir=served.data, port=0, workers=1, grace_seconds=0.1)).start()
    client = SamplerClient(server.address, connect_timeout=0.5,
                           retry=RetryPolicy(max_attempts=3, initial_backoff=0.3, max_backoff=0.3))
    assert client.list_sources()
    server.stop(grace=0.1)
    started = time.monotonic()
    with pytest.raises(SamplerClientError) as caught:
        client.list_sources()
    assert not isinstance(caught.value, NothingListens)
    assert f"server {server.address} unreachable after 3 attempts" in str(caught.value)
    assert time.monotonic() - started >= 0.6  # two backoffs of 0.3 s: it was retried
    client.close()


# ---- --init / --weights that do not fit: what the file is, which flag to change ----------------------


def _transfer_refusal(capsys, weights: Path) -> str:
    """The one stderr line of ``python -m clients.torch transfer --init FILE`` (default resnet18);
    it is refused before any server is asked."""
    from clients.torch.vtab_transfer import main

    code = main(["--server", "127.0.0.1:1", "--run", "r", "--tasks", "kitti_distance", "--image-size", "32",
                 "--init", str(weights), "--device", "cpu"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1, (code, lines)
    return lines[0]


def _state_with_names(backbone: str) -> dict:
    """A state dict with ``backbone``'s names (torch's layout, ``clients.init_weights.layout``),
    each tensor empty: names are what a refusal reads, and the file stays small."""
    import torch

    from clients.init_weights import layout

    return {tensor.name: torch.zeros(0) for tensor in layout(backbone, 32)}


def test_a_resnet50_state_dict_given_to_resnet18_names_resnet50_and_the_flag(tmp_path, capsys):
    import torch
    path = tmp_path / "resnet50_state_dict.pt"
    torch.save({**_state_with_names("resnet50"), "fc.weight": torch.zeros(0)}, path)
    line = _transfer_refusal(capsys, path)
    assert line.startswith(f"python -m clients.torch transfer: error: argument --weights: {path} does not fit "
                           "--backbone resnet18"), line
    assert "its keys match resnet50: use --backbone resnet50 (" in line and "--image-size" not in line, line


def test_a_file_that_is_no_state_dict_says_so(tmp_path, capsys):
    import torch
    held = tmp_path / "trainer_state.pt"
    torch.save({"epoch": 3, "optimizer": [0.1]}, held)
    assert (f"argument --weights: {held} is not a state dict (it holds a dict of keys epoch, optimizer); expected "
            "a state dict (name -> tensor)") in _transfer_refusal(capsys, held)
    text = tmp_path / "notes.pt"
    text.write_text("not a checkpoint at all")
    line = _transfer_refusal(capsys, text)
    assert f"argument --weights: {text} is not a state dict torch can read (" in line, line
    assert line.endswith("expected one saved with torch.save(model.state_dict(), FILE)"), line


def test_keys_of_no_named_backbone_say_to_pass_the_model(tmp_path, capsys):
    import torch
    path = tmp_path / "vit.pt"
    torch.save({"patch_embed.proj.weight": torch.zeros(0), "blocks.0.attn.qkv.weight": torch.zeros(0)}, path)
    line = _transfer_refusal(capsys, path)
    assert ("its keys match no named backbone (conv4, resnet18, resnet50, tiny, md-conv4, md-resnet18, md-wrn, "
            "md-relationnet-convnet): pass the model they were saved from as --backbone module:callable (") in line, line


def test_tf_names_the_backbone_keras_weights_and_neutral_weights_belong_to(tmp_path):
    from clients.errors import UsageError
    from clients.init_weights import neutral_weights, write_npz
    from clients.tf import backbones, models
    from clients.trainer_args import parse_args

    def refusal(backbone: str, weights: Path) -> str:
        args = parse_args("tf", ["--server", "h:1", "--run", "r", "--sources", "a", "--device", "cpu",
                                 "--image-size", "16", "--backbone", backbone, "--weights", str(weights)])
        with pytest.raises(UsageError) as caught:
            backbones.load_backbone(args, 84, "backbone")
        assert "\n" not in str(caught.value)
        return str(caught.value)

    keras_file = tmp_path / "conv4.weights.h5"
    models.build_backbone("conv4", 16).save_weights(str(keras_file))
    assert "its arrays match conv4: use --backbone conv4 (" in refusal("tiny", keras_file)
    neutral = tmp_path / "tiny.npz"
    write_npz(neutral, neutral_weights("tiny", 16, 0))
    assert "its keys match tiny: use --backbone tiny (" in refusal("conv4", neutral)
