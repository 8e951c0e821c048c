"""``--feature-cache`` is not required (issue: no required flag that could have a default): the
``cog`` and ``evaluate`` commands cache frozen features in the user's cache directory unless
told otherwise, ``$XDG_CACHE_HOME/sampler-server/features`` or ``~/.cache/...`` without it."""

from __future__ import annotations

from pathlib import Path

import pytest

from clients.evaluate_args import parse_evaluate_args
from clients.trainer_args import parse_cog_args

BASE = ["--server", "127.0.0.1:1", "--run", "r", "--backbone", "tiny"]


@pytest.mark.parametrize("parse", [parse_evaluate_args, parse_cog_args], ids=["evaluate", "cog"])
def test_the_feature_cache_defaults_to_the_users_cache_directory(parse, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert parse("torch", BASE).feature_cache == str(tmp_path / "xdg" / "sampler-server" / "features")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert parse("tf", BASE).feature_cache == str(Path.home() / ".cache" / "sampler-server" / "features")
    assert parse("torch", [*BASE, "--feature-cache", "mine"]).feature_cache == "mine"
