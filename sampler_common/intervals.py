"""The one 95% confidence interval of Meta-Dataset's numbers (reports, ranks and both trainers).

Convention, Meta-Dataset's own: the interval of a mean over n episodes is
mean ± 1.96 x s / sqrt(n), with s the population standard deviation (NumPy's default
ddof = 0), as the reference's ``Trainer.evaluate`` computes it (google-research/
meta-dataset ``trainer.py``; ../shared/reference/md_learners.md, section 4, "Metric and
CI"). One value has no spread to estimate, so its half-width is ``None`` (written as JSON
``null``, shown as the episode count alone), never 0.0, which would claim certainty
(the reference would print 0), and never NaN, which is not JSON. No values at all is an
error. CoG's std over seeds and VTAB's pooled accuracies follow their own papers
(``sampler_server.metrics.cog``, ``.vtab``).

Pure Python (no NumPy): clients import this module without the server's dependencies.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Z_95 = 1.96  # two-sided 95% normal quantile, as the paper uses it


def standard_error(values: Sequence[float]) -> float | None:
    """Population standard deviation (ddof = 0) over sqrt(n); ``None`` for fewer than two values.

    Raises:
        ValueError: ``values`` is empty.
    """
    n = len(values)
    if n == 0:
        raise ValueError("values: got none, expected at least one")
    if n == 1:
        return None
    mean = math.fsum(values) / n
    variance = math.fsum((float(v) - mean) ** 2 for v in values) / n
    return math.sqrt(variance / n)


def mean_ci95(values: Sequence[float]) -> tuple[float, float | None]:
    """(mean, half-width of the 95% interval); the half-width is ``None`` for one value.

    Raises:
        ValueError: ``values`` is empty.
    """
    error = standard_error(values)
    return math.fsum(values) / len(values), (None if error is None else Z_95 * error)
