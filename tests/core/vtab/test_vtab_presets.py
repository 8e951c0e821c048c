"""VTAB-v1/v2 task sets and the VTAB+MD plan, against the two papers' statements."""

from __future__ import annotations

import dataclasses

import pytest

from sampler_server.core.md.presets import Benchmark
from sampler_server.core.split import Split
from sampler_server.core.vtab import TASKS, Group
from sampler_server.core.vtab.presets import (
    REMOVED_IN_V2,
    VTAB_MD_PLAN,
    VtabBenchmark,
    VtabMdPlan,
    vtab_groups,
    vtab_tasks,
)
from sampler_server.errors import InvalidArgument


def test_vtab_v1_is_all_19_tasks_in_registry_order():
    assert vtab_tasks("vtab-v1") == tuple(TASKS)
    assert len(vtab_tasks(VtabBenchmark.VTAB_V1)) == 19
    assert {g: len(t) for g, t in vtab_groups("vtab-v1").items()} == {
        Group.NATURAL: 7, Group.SPECIALIZED: 4, Group.STRUCTURED: 8,
    }


def test_vtab_v2_drops_only_dtd():
    v2 = vtab_tasks("vtab-v2")
    assert REMOVED_IN_V2 == ("dtd",)
    assert len(v2) == 18 and "dtd" not in v2
    assert v2 == tuple(name for name in TASKS if name != "dtd")
    assert {g: len(t) for g, t in vtab_groups("vtab-v2").items()} == {
        Group.NATURAL: 6, Group.SPECIALIZED: 4, Group.STRUCTURED: 8,
    }


def test_unknown_benchmark_names_value_and_allowed():
    with pytest.raises(InvalidArgument, match=r"^VTAB benchmark: got 'vtab-v3', expected one of vtab-v1, vtab-v2$"):
        vtab_tasks("vtab-v3")
    assert VtabBenchmark.parse("vtab-v2") is VtabBenchmark.VTAB_V2


def test_vtab_md_plan_is_the_papers_plan():
    plan = VTAB_MD_PLAN
    assert plan.md_benchmark is Benchmark.MD_V2 and plan.vtab_benchmark is VtabBenchmark.VTAB_V2
    assert (plan.vtab_support_split, plan.vtab_query_split, plan.vtab_full_way) == ("train800val200", "test", True)
    assert plan.md_test_split is Split.TEST and plan.md_validation_split is Split.VALID
    # MD-v2: ImageNet train-only, vgg_flower removed
    assert plan.md_test_sources == (
        "aircraft", "cu_birds", "dtd", "fungi", "mscoco", "omniglot", "quickdraw", "traffic_sign",
    )
    assert "ilsvrc_2012" not in plan.md_validation_sources and "vgg_flower" not in plan.md_validation_sources
    assert plan.vtab_tasks == vtab_tasks("vtab-v2")
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.vtab_query_split = "val200"  # type: ignore[misc]


def test_plan_refuses_bad_fields():
    with pytest.raises(InvalidArgument, match="unknown VTAB split 'nope'"):
        VtabMdPlan(vtab_query_split="nope")
    with pytest.raises(InvalidArgument, match="^vtab_benchmark: got 'vtab-v2', expected a VtabBenchmark$"):
        VtabMdPlan(vtab_benchmark="vtab-v2")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="^md_test_split: got 'test'"):
        VtabMdPlan(md_test_split="test")  # type: ignore[arg-type]
