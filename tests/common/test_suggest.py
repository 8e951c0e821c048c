"""The closest known names to an unknown one, as every layer's refusal words them."""

from __future__ import annotations

import pytest

from sampler_common.suggest import closest, did_you_mean
from sampler_server.core.vtab.tasks import get_task
from sampler_server.errors import InvalidArgument

SOURCES = ("aircraft", "cu_birds", "dtd", "fungi", "ilsvrc_2012", "mscoco", "omniglot", "quickdraw",
           "traffic_sign", "vgg_flower")


def test_a_typo_gets_the_closest_name_and_nothing_close_gets_nothing():
    assert did_you_mean("aircaft", SOURCES) == "; did you mean 'aircraft'?"
    assert did_you_mean("vgg_flowers", SOURCES) == "; did you mean 'vgg_flower'?"
    assert did_you_mean("imagenet", SOURCES) == ""
    assert did_you_mean(3, SOURCES) == "" and did_you_mean("", SOURCES) == ""
    assert closest("cifar", ("cifar10", "cifar100", "clevr_count")) == ["cifar10", "cifar100"]


def test_an_unknown_vtab_task_names_the_closest_task():
    with pytest.raises(InvalidArgument, match=r"unknown VTAB task 'kitti_distanse'; did you mean 'kitti_distance'\?"):
        get_task("kitti_distanse")
