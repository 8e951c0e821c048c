"""The compile cache's own bookkeeping (``clients.compile_cache``): where it lives, which bucket
shapes of a step it holds, and what the run's first line says about it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from clients.compile_cache import CompileCache, CompileKey, default_compile_cache, describe_cache

KEY = CompileKey(backbone="conv4", image_size=84, preprocessing="scale", batch_norm="md", precision="bf16-autocast",
                 deterministic=False, device="NVIDIA H200", versions="torch 2.11.0")


def test_the_default_directory_is_the_users_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_compile_cache() == tmp_path / "sampler-server" / "torch-compile"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_compile_cache() == Path.home() / ".cache" / "sampler-server" / "torch-compile"


def test_shapes_are_recorded_per_step_and_survive_a_new_cache_object(tmp_path):
    cache = CompileCache(tmp_path / "cache")
    cache.prepare()
    assert cache.inductor_dir.is_dir() and cache.cached_rows(KEY) == frozenset()
    cache.record(KEY, 608)
    cache.record(KEY, 304)
    cache.record(KEY, 608)
    assert CompileCache(tmp_path / "cache").cached_rows(KEY) == {304, 608}
    # every field of the key names another step: none of its shapes are this one's
    for field, value in (("backbone", "resnet18"), ("image_size", 126), ("batch_norm", "running"),
                         ("precision", "float32"), ("deterministic", True), ("device", "cpu"),
                         ("versions", "torch 2.13.0"), ("preprocessing", "imagenet")):
        assert cache.cached_rows(replace(KEY, **{field: value})) == frozenset(), field


def test_an_unusable_directory_is_refused_naming_it(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ValueError, match=f"compile cache: cannot create {blocker}/sub"):
        CompileCache(blocker / "sub").prepare()


def test_the_first_line_counts_the_shapes():
    assert describe_cache(0, Path("/c")) == "0 bucket shapes compiled before, in /c"
    assert describe_cache(1, Path("/c")) == "1 bucket shape compiled before, in /c"
    assert describe_cache(21, Path("/c")) == "21 bucket shapes compiled before, in /c"
