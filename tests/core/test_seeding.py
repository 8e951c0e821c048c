"""The one seeding helper: stable, collision-free, random-access, frozen streams; a pure core."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from python_source import parse_file

from sampler_common.checks import MAX_INDEX, MAX_SEED
from sampler_server.core.seeding import (
    Protocol,
    derivation_digest,
    derive_rng,
    legacy_rng,
)
from sampler_server.core.split import Split
from sampler_server.errors import InvalidArgument

REPO = Path(__file__).resolve().parents[2]
CORE = REPO / "sampler_server" / "core"
MD = Protocol.META_DATASET


def test_golden_digest_and_stream() -> None:
    # Pinned once: a change in the key encoding, the hash or NumPy's legacy MT19937
    # (seeding, randint, random_sample, permutation, uniform) fails here.
    digest = derivation_digest(7, MD, "aircraft", Split.TEST, 42)
    assert digest.hex() == "e70714b6c91bc61ea370b4fa5f97323013f9ea2f95281c37d585eeee3f8ac3a6"
    rng = derive_rng(7, MD, "aircraft", Split.TEST, 42)
    assert rng.randint(0, 1000, size=5).tolist() == [288, 212, 499, 198, 920]
    assert rng.random_sample(2).tolist() == [0.6504722961139245, 0.5015133767786532]
    assert rng.permutation(8).tolist() == [4, 3, 7, 0, 2, 6, 1, 5]
    assert rng.uniform(-0.5, 0.5, 2).tolist() == [-0.056543698352629845, -0.45789953447931975]


@settings(max_examples=examples(200), deadline=None)
@given(seed=st.one_of(st.integers(0, 2**32 - 1),
                      st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=16).map(
                          lambda words: np.array(words, dtype=np.uint32))))
def test_the_fast_constructor_is_the_legacy_constructor(seed: int | np.ndarray) -> None:
    expected, got = np.random.RandomState(seed), legacy_rng(seed)
    _, key, position, *_ = expected.get_state()
    assert np.array_equal(got.get_state()[1], key) and got.get_state()[2] == position
    assert got.randint(0, 2**31 - 1, size=8).tolist() == expected.randint(0, 2**31 - 1, size=8).tolist()


def _first(rng: np.random.RandomState) -> tuple[int, ...]:
    return tuple(rng.randint(0, 2**31 - 1, size=4).tolist())


@settings(max_examples=examples(200), deadline=None)
@given(seed=st.integers(0, MAX_SEED - 1), index=st.integers(0, MAX_INDEX - 1))
def test_seed_and_index_are_hashed_not_added(seed: int, index: int) -> None:
    shifted = derivation_digest(seed + 1, MD, "dtd", Split.TRAIN, index)
    assert derivation_digest(seed, MD, "dtd", Split.TRAIN, index + 1) != shifted


def test_every_key_part_changes_the_stream() -> None:
    base = (3, MD, "omniglot", Split.VALID, 5)
    variants = [
        (4, MD, "omniglot", Split.VALID, 5),
        (3, Protocol.VTAB_1K, "omniglot", Split.VALID, 5),
        (3, MD, "omniglo", Split.VALID, 5),
        (3, MD, "omniglot", Split.TEST, 5),
        (3, MD, "omniglot", Split.VALID, 6),
    ]
    streams = {_first(derive_rng(*key)) for key in [base, *variants]}
    assert len(streams) == 1 + len(variants)
    # Length prefixes: moving a character between fields is another key.
    assert derivation_digest(1, MD, "ab", Split.TRAIN, 0) != derivation_digest(1, MD, "a", Split.TRAIN, 0)


def test_same_key_same_stream_in_any_order() -> None:
    keys = [(s, MD, "fungi", Split.TRAIN, i) for s in range(3) for i in range(5)]
    forward = [_first(derive_rng(*key)) for key in keys]
    backward = [_first(derive_rng(*key)) for key in reversed(keys)]
    assert forward == list(reversed(backward))


def test_extreme_seeds_and_indices_work() -> None:
    draws = {}
    for seed, index in ((0, 0), (MAX_SEED, MAX_INDEX), (MAX_SEED, 5)):
        draw = derive_rng(seed, MD, "x", Split.TRAIN, index).random_sample()
        assert 0.0 <= draw < 1.0
        draws[(seed, index)] = draw
    assert len(set(draws.values())) == 3  # the extremes are distinct keys, not clamped or wrapped
    # NumPy integer types are the same key as the plain ints they hold
    assert derive_rng(np.uint64(MAX_SEED), MD, "x", Split.TRAIN, np.int64(5)).random_sample() == draws[(MAX_SEED, 5)]
    assert derive_rng(np.uint64(MAX_SEED), MD, "x", Split.TRAIN, np.int64(MAX_INDEX)).random_sample() == draws[
        (MAX_SEED, MAX_INDEX)
    ]


@pytest.mark.parametrize(
    "seed, index, message",
    [
        (-1, 0, "seed: got -1, expected an integer in [0, 18446744073709551615]"),
        (MAX_SEED + 1, 0, "seed: got 18446744073709551616"),
        (1.5, 0, "seed: got 1.5"),
        (True, 0, "seed: got True"),
        (0, -3, "index: got -3, expected an integer in [0, 9223372036854775807]"),
        (0, MAX_INDEX + 1, "index: got 9223372036854775808"),
        (0, "4", "index: got '4'"),
    ],
)
def test_bad_seed_or_index(seed: object, index: object, message: str) -> None:
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        derive_rng(seed, MD, "x", Split.TRAIN, index)  # type: ignore[arg-type]


def test_bad_source_split_protocol() -> None:
    with pytest.raises(InvalidArgument, match="source: got ''"):
        derive_rng(0, MD, "", Split.TRAIN, 0)
    with pytest.raises(ValueError):
        derive_rng(0, MD, "x", "nosuch", 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        derive_rng(0, "nosuch", "x", Split.TRAIN, 0)  # type: ignore[arg-type]


_HASH_SEED_PROBE = """
from sampler_server.core.md.config import EpisodeConfig
from sampler_server.core.md import MultiSourceSampler
from sampler_server.core.seeding import Protocol, derivation_digest
from sampler_server.core.spec import DatasetSpec
from sampler_server.core.split import Split
specs = {
    name: DatasetSpec.from_counts(name, [20 + 3 * i for i in range(30)], [Split.TEST] * 30, fingerprint=name)
    for name in ("b_source", "a_source", "c_source")
}
groups = [f"alpha_{i % 4}" for i in range(30)]
specs["grouped"] = DatasetSpec.from_counts("grouped", [20] * 30, [Split.TEST] * 30, groups=groups)
sampler = MultiSourceSampler(specs, set(specs), "test", EpisodeConfig())
print(derivation_digest(1, Protocol.META_DATASET, "x", Split.TEST, 2).hex())
for index in range(40):
    print(sampler.sample(11, index).fingerprint)
"""


def test_independent_of_python_hash_seed() -> None:
    outputs = []
    for hash_seed in ("0", "12345", "random"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        done = subprocess.run(
            [sys.executable, "-c", _HASH_SEED_PROBE], env=env, cwd=REPO, capture_output=True, text=True, check=True
        )
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1] == outputs[2]
    assert len(set(outputs[0].split())) == 41


def test_core_is_pure_at_import() -> None:
    probe = (
        "import sys\n"
        "import sampler_server.core.md, sampler_server.core.md.imagenet_spec, sampler_server.core.md.config\n"
        "bad = [m for m in ('lmdb', 'grpc', 'torch', 'tensorflow') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", probe], cwd=REPO, check=True)


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def test_no_global_or_unfrozen_randomness_in_core() -> None:
    """Only ``np.random.RandomState`` (constructed by the seeding helper, over the legacy MT19937
    it seeds itself); no ``random``, no clock."""
    offenders = []
    for path in sorted(CORE.rglob("*.py")):
        tree = parse_file(path)
        allowed = {"RandomState", "MT19937", "bit_generator"} if path.name == "seeding.py" else {"RandomState"}
        for node in ast.walk(tree):
            where = f"{path.relative_to(REPO)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Attribute):
                name = _dotted(node)
                if re.match(r"(np|numpy)\.random\.", name) and name.split(".")[2] not in allowed:
                    offenders.append(f"{where}: {name}")
                if name in ("time.time", "time.monotonic", "time.perf_counter", "datetime.now"):
                    offenders.append(f"{where}: {name}")
            elif isinstance(node, ast.Import):
                offenders += [f"{where}: import {a.name}" for a in node.names if a.name in ("random", "time")]
            elif isinstance(node, ast.ImportFrom) and node.module in ("random", "numpy.random", "time"):
                offenders.append(f"{where}: from {node.module} import ...")
    assert not offenders, offenders
    seeding = (CORE / "seeding.py").read_text(encoding="utf-8")
    users = [p.name for p in CORE.rglob("*.py") if "RandomState(" in p.read_text(encoding="utf-8")]
    assert users == ["seeding.py"] and "np.random.RandomState(" in seeding
