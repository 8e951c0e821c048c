"""The control-baselines reference's results CSV as calibration entries.

The Simple Control Baselines code (EPFL-VILAB/transfer-controls) publishes its results as
``assets/ssl-results.csv`` (a copy: ../shared/reference/control_baselines/ssl-results.csv):
columns ``domain,method,train_size,test_loss,seed`` after a leading row-number column
(pandas' index; optional here). Per domain (our task), the ``blind-guess`` row gives
R_blind and the ``gold`` row R_max (``train_size`` and ``seed`` -1 in both); ``scratch``
rows are the scratch role, every other method a model run, each row one (n, seed). A
``train_size`` is kept as written (an int when integral: the file also has 3161.25).

Rows of one method with the same (n, seed) are averaged, as the notebook's
``groupby(['train_size', 'seed']).agg(np.mean)`` does; two scratch rows with the same
(n, seed) are refused, as the notebook's assertion refuses them. Pure: text in, entries
out; every refusal is one line naming the row.
"""

from __future__ import annotations

import csv
import io
import math

from sampler_server.core.baselines.calibration import RiskEntry
from sampler_server.errors import InvalidArgument
from sampler_server.quoting import quoted

COLUMNS = ("domain", "method", "train_size", "test_loss", "seed")
BLIND_METHOD = "blind-guess"
MAX_METHOD = "gold"
SCRATCH_METHOD = "scratch"


def is_reference_csv(text: str) -> bool:
    """Whether ``text`` starts with the reference's header (with or without the row-number column)."""
    first = text.lstrip("\ufeff").split("\n", 1)[0].strip().split(",")
    return tuple(first[1:] if first[:1] == [""] else first) == COLUMNS


def _number(value: str, what: str, *, integral: bool) -> int | float:
    """``value`` as an int when it is integral (``100.0`` -> 100), else as a float (only when
    ``integral`` is false: the reference has regimes such as ``3161.25``)."""
    expected = "an integer" if integral else "a number"
    try:
        number = float(value)
    except ValueError:
        raise InvalidArgument(f"{what} got {quoted(value)}, expected {expected}") from None
    if not math.isfinite(number) or (integral and not number.is_integer()):
        raise InvalidArgument(f"{what} got {quoted(value)}, expected {expected}")
    return int(number) if number.is_integer() else number


def parse_reference_csv(text: str, *, where: str = "input") -> list[RiskEntry]:
    """The calibration entries of a results CSV in the reference's format (see the module).

    Raises:
        InvalidArgument: not that header, a short row, a non-numeric value, a regime n < 1 for a
            run, or a repeated scratch (n, seed); the message names the row (1 = the first after
            the header).
    """
    if not is_reference_csv(text):
        raise InvalidArgument(f"{where}: not the reference's results CSV (expected the header "
                              f"[,]{','.join(COLUMNS)})")
    rows = csv.reader(io.StringIO(text.lstrip("\ufeff")))
    header = next(rows)
    skip = 1 if header[:1] == [""] else 0
    width = skip + len(COLUMNS)
    runs: dict[tuple[str, str, int | float, int], list[float]] = {}
    entries: list[RiskEntry] = []
    for number, row in enumerate(rows, start=1):
        if not row:
            continue
        at = f"{where} row {number}"
        if len(row) != width:
            raise InvalidArgument(f"{at}: {len(row)} columns, expected {width}")
        domain, method, train_size, test_loss, seed_text = row[skip:]
        if not domain or not method:
            raise InvalidArgument(f"{at}: empty domain or method")
        try:
            risk = float(test_loss)
        except ValueError:
            raise InvalidArgument(f"{at}: test_loss got {quoted(test_loss)}, expected a number") from None
        if not math.isfinite(risk):
            raise InvalidArgument(f"{at}: test_loss got {quoted(test_loss)}, expected a finite number")
        if method in (BLIND_METHOD, MAX_METHOD):
            role = "blind" if method == BLIND_METHOD else "max"
            entries.append(RiskEntry(task=domain, role=role, risk=risk, run="" if role == "blind" else method))
            continue
        n = _number(train_size, f"{at}: train_size", integral=False)
        seed = int(_number(seed_text, f"{at}: seed", integral=True))
        if n <= 0:
            raise InvalidArgument(f"{at}: train_size got {quoted(train_size)} for method {method}, expected a "
                                  "positive regime size (-1 only on the blind-guess and gold rows)")
        key = (domain, method, n, seed)
        if method == SCRATCH_METHOD and key in runs:
            raise InvalidArgument(f"{at}: a second scratch row of domain {domain} at train_size {n}, seed {seed}")
        runs.setdefault(key, []).append(risk)
    for (domain, method, n, seed), risks in sorted(runs.items()):
        role = "scratch" if method == SCRATCH_METHOD else "model"
        entries.append(RiskEntry(task=domain, role=role, risk=math.fsum(risks) / len(risks), run=method, n=n,
                                 seed=seed))
    return entries


__all__ = ["BLIND_METHOD", "COLUMNS", "MAX_METHOD", "SCRATCH_METHOD", "is_reference_csv", "parse_reference_csv"]
