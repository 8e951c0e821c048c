"""The ``threads`` fixture of the test files that run a trainer command in process for both
frameworks: each framework's extra arguments, ``--threads 1`` for torch (its count restored
after the test). On these tiny networks a second thread only spins, and under ``make test``
the other worker has the other core. TensorFlow's counts are process-wide and fixed at its
first use: its runs keep the worker's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture
def threads() -> Iterator[dict[str, list[str]]]:
    import torch

    before = torch.get_num_threads()
    yield {"torch": ["--threads", "1"], "tf": []}
    torch.set_num_threads(before)
