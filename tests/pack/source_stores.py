"""Each source's generated fixture and its default pack, built once per session.

The per-source test modules and the parametrized ``test_sources.py`` read the same
ones, so a source is generated and packed once however many modules test it. Tests
only read them: a test that damages an input works on ``copy_fixture`` of it.
"""

from __future__ import annotations

import pytest
from conftest import generate_fixture, pack_fixture

from sampler_server.fixtures.base import Fixture
from sampler_server.pack.pipeline import PackSummary

_FIXTURES: dict[str, Fixture] = {}
_PACKS: dict[tuple[str, bool], PackSummary] = {}


def source_fixture(source: str, factory: pytest.TempPathFactory) -> Fixture:
    """The source's fixture at the generator's defaults."""
    if source not in _FIXTURES:
        _FIXTURES[source] = generate_fixture(source, factory.mktemp(source))
    return _FIXTURES[source]


def source_pack(source: str, factory: pytest.TempPathFactory, *, use_split_file: bool = True) -> PackSummary:
    """``source_fixture`` packed with the pipeline's defaults (one worker)."""
    key = (source, use_split_file)
    if key not in _PACKS:
        _PACKS[key] = pack_fixture(source_fixture(source, factory), factory.mktemp(f"{source}_store"),
                                   use_split_file=use_split_file)
    return _PACKS[key]
