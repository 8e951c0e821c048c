"""The control-baselines reference's results CSV (``core.baselines.reference_csv``): its rows as
calibration entries (duplicates averaged as the notebook's groupby mean, fractional regime
sizes kept, the scratch method calibrated too), and one-line refusals naming the row."""

from __future__ import annotations

import pytest

from sampler_server.core.baselines.calibration import RiskEntry, calibrate
from sampler_server.core.baselines.reference_csv import is_reference_csv, parse_reference_csv
from sampler_server.errors import InvalidArgument

REFERENCE_CCI = 2 / 3  # the hand-computed case of test_reference_cci.py (rows 2-10 below)


CSV = """,domain,method,train_size,test_loss,seed
0,t,blind-guess,-1.0,1.0,-1.0
1,t,gold,-1.0,0.0,-1.0
2,t,scratch,10.0,0.9,0.0
3,t,scratch,10.0,0.7,1.0
4,t,scratch,100.0,0.5,0.0
5,t,scratch,100.0,0.3,1.0
6,t,m,10.0,0.5,0.0
7,t,m,10.0,0.1,1.0
8,t,m,100.0,0.2,0.0
9,t,m,100.0,0.4,0.0
10,t,m,100.0,0.1,1.0
11,t,one,10.0,0.5,0.0
12,t,odd,12.5,0.5,0.0
13,t,odd,100.0,0.5,0.0
"""


def test_the_reference_csv_reader():
    assert is_reference_csv(CSV) and is_reference_csv(CSV.replace(",domain", "domain", 1).replace("\n0,", "\n", 1))
    entries = parse_reference_csv(CSV)
    assert RiskEntry("t", "blind", 1.0) in entries and RiskEntry("t", "max", 0.0, "gold") in entries
    # two rows of m at (100, 0) are averaged (the notebook's groupby mean): the MODEL case again
    assert RiskEntry("t", "model", pytest.approx(0.3), "m", 100, 0) in entries
    result = calibrate(entries, scratch_cci=True)["tasks"]["t"]["runs"]
    assert result["m"]["cci"] == pytest.approx(REFERENCE_CCI)
    assert result["one"]["cci"] is None  # a single point
    assert result["odd"]["cci"] is None and result["odd"]["regimes"][0]["n"] == 12.5  # no scratch value at 12.5
    # the scratch method too, against its own seed mean: the middle segment's x - y goes 0.1 -> -0.1
    assert result["scratch"]["cci"] == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize(("text", "message"), [
    ("a,b\n1,2\n", "input: not the reference's results CSV"),
    (",domain,method,train_size,test_loss,seed\n0,t,m,10,x,0\n", "input row 1: test_loss got 'x', expected a number"),
    (",domain,method,train_size,test_loss,seed\n0,t,m,10,0.5\n", "input row 1: 5 columns, expected 6"),
    (",domain,method,train_size,test_loss,seed\n0,t,m,-1,0.5,0\n", "input row 1: train_size got '-1' for method m"),
    (",domain,method,train_size,test_loss,seed\n0,t,m,10,0.5,0.5\n", "input row 1: seed got '0.5', expected an integer"),
    (",domain,method,train_size,test_loss,seed\n0,t,scratch,10,0.5,0\n1,t,scratch,10,0.4,0\n",
     "input row 2: a second scratch row of domain t at train_size 10, seed 0"),
])
def test_bad_reference_csv_is_one_line(text, message):
    with pytest.raises(InvalidArgument) as caught:
        parse_reference_csv(text)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)
