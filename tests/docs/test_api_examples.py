"""The examples of docs/api.md run unchanged, in this process as ``python -c`` would run them
(``exec_python``; the fresh-interpreter runs are the quickstart's), against the stores
``make demo`` leaves (``demo_data``); only ``SERVER`` is pointed at the test's server."""

from __future__ import annotations

import pytest
from doc_blocks import exec_python, python_block, where, with_constants


@pytest.mark.slow  # importing torch and tensorflow
def test_the_episode_example_shows_one_schema(demo_data):
    code = with_constants(python_block("docs/api.md", "api-episodes"), SERVER=demo_data.address)
    done = exec_python(code, where=where("docs/api.md", "api-episodes"))
    assert done.stdout.split("\n")[:3] == ["True", "torch.uint8 (28, 28, 3)", "float32 True"], done.stdout


@pytest.mark.slow
def test_the_vtab_example_needs_no_shuffle_argument(demo_data):
    code = with_constants(python_block("docs/api.md", "api-vtab"), SERVER=demo_data.address)
    done = exec_python(code + "assert sum(len(labels) for labels in test) == 100, test\n",  # the demo's KITTI test
                       where=where("docs/api.md", "api-vtab"))
    assert done.stdout.split("\n")[:2] == ["0 torch.Size([32, 64, 64, 3]) torch.uint8",
                                           "1 torch.Size([32, 64, 64, 3]) torch.uint8"], done.stdout
