"""What the suite needs from the machine, and the one way a test may be skipped for lack of it.

`make test` installs everything the tests use (the Python extras, Debian's wordnet-base,
PostgreSQL and Chromium), and CI always has ../shared beside the repo. So a missing
prerequisite is a failure, never a silent skip: the test fails naming what is missing and
how to get it, unless the checkout opts out of it on purpose with its ``SAMPLER_TESTS_WITHOUT_*``
variable, and then the skip names that variable. The only other skip is a missing device
(CUDA), through ``needs_cuda``. ``tests/test_skip_policy.py`` holds every test file to this,
and ``.ci/run`` fails on a skip whose reason ``tests/allowed_skips.txt`` does not allow.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

OPT_OUTS = {
    "SAMPLER_TESTS_WITHOUT_SHARED": "../shared/reference beside the repo",
    "SAMPLER_TESTS_WITHOUT_POSTGRES": "PostgreSQL's initdb and pg_ctl",
    "SAMPLER_TESTS_WITHOUT_CHROMIUM": "Debian's chromium",
    "SAMPLER_TESTS_WITHOUT_WORDNET": "Debian's wordnet-base (/usr/share/wordnet)",
    "SAMPLER_TESTS_WITHOUT_OPENSSL": "the openssl command",
    "SAMPLER_TESTS_WITHOUT_NETNS": "network namespaces (ip netns add, as root)",
    "SAMPLER_TESTS_WITHOUT_SHM": "POSIX shared memory (/dev/shm)",
    "SAMPLER_TESTS_WITHOUT_SS": "the ss command (iproute2)",
}
"""Each opt-out variable and the prerequisite it lets a checkout do without."""

CUDA_REASON = "no CUDA device"


def missing(variable: str, message: str) -> NoReturn:
    """A prerequisite is absent: fail with ``message``, or skip when ``$variable=1`` opts out."""
    if variable not in OPT_OUTS:
        raise ValueError(f"{variable!r} is not an opt-out variable; known: {', '.join(OPT_OUTS)}")
    if os.environ.get(variable) == "1":
        pytest.skip(f"{message} ({variable}=1)")
    pytest.fail(f"{message}; set {variable}=1 to skip the tests that need it", pytrace=False)


def needs_cuda(available: bool) -> pytest.MarkDecorator:
    """The mark of a case that runs on a CUDA device (``available``: torch.cuda.is_available())."""
    return pytest.mark.skipif(not available, reason=CUDA_REASON)


def require_shared_memory() -> None:
    """Same-host transport tests need POSIX shared memory (segments under /dev/shm)."""
    from sampler_common.wire import segments

    reason = segments.available()
    if reason:
        missing("SAMPLER_TESTS_WITHOUT_SHM", f"no shared memory: {reason}")
