"""The compile cache's own bookkeeping (``clients.compile_cache``): where it lives, which bucket
shapes of a step it holds, and what the run's first line says about it."""

from __future__ import annotations

import json
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
    assert describe_cache(1, Path("/c")) == "1 bucket shape compiled before, in /c, loaded at the first step"
    assert describe_cache(21, Path("/c")) == "21 bucket shapes compiled before, in /c, loaded at the first step"


def test_a_background_compiler_stopped_at_the_runs_end_names_the_shapes_it_left(tmp_path, monkeypatch, capfd):
    """A child still compiling when the run ends is waited for ``CLOSE_SECONDS``, then
    terminated; the shapes asked for but not in the cache are named, so that the next run
    compiling them again is no mystery (a busy host's CI once met this)."""
    import multiprocessing
    import time

    from clients.torch import compile_ahead

    cache = CompileCache(tmp_path / "cache")
    cache.prepare()
    cache.record(KEY, 304)
    ahead = compile_ahead.CompileAhead(None, cache, KEY)  # type: ignore[arg-type]  # the child below stands in
    ahead.process = multiprocessing.get_context("fork").Process(target=time.sleep, args=(60,), daemon=True)
    ahead.process.start()
    ahead.asked = {304, 608, 416}
    monkeypatch.setattr(compile_ahead, "CLOSE_SECONDS", 0.2)
    ahead.close()
    ahead.process.join(30)  # the terminated child, reaped however busy the host
    assert not ahead.process.is_alive()
    said = ("compile ahead: stopped after 0.2 s with 2 bucket shape(s) not yet compiled (rows 416, 608); "
            "the next run with this --compile-cache compiles them")
    assert said in capfd.readouterr().err.splitlines()  # among lines other parts of the process may log


_CHILD = """
import json, sys
import torch
from clients.torch.compile_ahead import apply_numerics, numerics
if sys.argv[1] == "ieee":
    torch.backends.cuda.matmul.allow_tf32 = False
if sys.argv[2] != "-":
    apply_numerics(json.loads(sys.argv[2]))
print(json.dumps(numerics()))
"""


def _numerics_of_a_fresh_process(state: str, parents: dict | None = None) -> dict:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _CHILD, state, json.dumps(parents) if parents else "-"],
                          capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parents[2])
    return json.loads(done.stdout)


def test_the_background_compiler_takes_the_parents_float32_switches_as_they_are():
    """The switches enter PyTorch's compile-cache keys: a child whose switches differ from the
    trainer's compiles graphs the trainer never finds. Setting a legacy flag to its default
    (``allow_tf32 = False``) turns ``none`` into ``ieee``, so the child sets only what differs:
    it ends with the parent's values whether the parent kept the defaults or changed them."""
    defaults = _numerics_of_a_fresh_process("default")
    changed = _numerics_of_a_fresh_process("ieee")
    assert defaults["cuda.matmul.fp32_precision"] == "none" and changed["cuda.matmul.fp32_precision"] == "ieee"
    for parents in (defaults, changed):
        assert _numerics_of_a_fresh_process("default", parents) == parents
