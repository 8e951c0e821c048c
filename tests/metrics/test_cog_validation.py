"""A cog report off the wire: each field outside what the protocol allows is one
INVALID_ARGUMENT line naming that field (as the wire spells it) and what is allowed."""

from __future__ import annotations

import math

import pytest

from sampler_server.errors import InvalidArgument
from sampler_server.quoting import QUOTE_LIMIT
from sampler_server.metrics import registry
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb


def cog_result(report: pb.MetricReport):
    """The stored result of one cog report, parsed as ReportMetrics parses it (a cog report needs no context)."""
    (result,) = registry.parse_reports([report], context=None)
    return result


def _report(**fields) -> pb.MetricReport:
    metrics = fields.pop("metrics", {"accuracy": 0.625})
    base = dict(run_id="r", protocol="cog", cog_level="L2", shots=16, seed=3, examples=50_000)
    base.update(fields)
    return pb.MetricReport(metrics=metrics, **base)


def test_a_good_report_becomes_its_result():
    result = cog_result(_report(metrics={"accuracy": 0.625, "val_accuracy": 0.6, "learning_rate": 0.3,
                                         "weight_decay": 0.0}))
    assert result.key() == ("r", "L2", 16, 3)
    assert (result.accuracy, result.examples) == (0.625, 50_000)
    assert dict(result.extras) == {"val_accuracy": 0.6, "learning_rate": 0.3, "weight_decay": 0.0}
    assert cog_result(_report(cog_level="IN-1K", shots=0, seed=1, metrics={"accuracy": 1.0})).shots == 0


@pytest.mark.parametrize(("fields", "message"), [
    ({"cog_level": "L6"}, r"reports.cog_level: got 'L6', expected one of IN-1K, L1, L2, L3, L4, L5"),
    ({"cog_level": ""}, r"reports.cog_level: got '', expected one of IN-1K, L1, L2, L3, L4, L5"),
    ({"cog_level": "in-1k"}, r"reports.cog_level: got 'in-1k', expected one of IN-1K, L1"),
    ({"shots": 3}, r"reports.shots: got 3 for level L2, expected 0 \(all training images\) or one of "
                   r"1, 2, 4, 8, 16, 32, 64, 128"),
    ({"shots": 256}, r"reports.shots: got 256 for level L2, expected 0 \(all"),
    ({"seed": 0}, r"reports.seed: got 0 for level L2 N=16, expected an integer from 1 to 9223372036854775807"),
    ({"seed": 2**63}, r"reports.seed: got 9223372036854775808 for level L2 N=16, expected an integer from 1"),
    ({"metrics": {}}, r'reports.metrics: a cog report needs "accuracy" \(test top-1 in \[0, 1\]\); optional: '
                      r"val_accuracy, learning_rate, weight_decay"),
    ({"metrics": {"accuracy": 1.5}}, r'reports.metrics\["accuracy"\]: got 1.5 for level L2 N=16 seed 3, expected '
                                     r"test top-1 from 0 to 1"),
    ({"metrics": {"accuracy": -0.01}}, r'reports.metrics\["accuracy"\]: got -0.01 for level L2'),
    ({"metrics": {"accuracy": math.nan}}, r'reports.metrics\["accuracy"\]: got nan for level L2'),
    ({"examples": 0}, r"reports.examples: got 0 for level L2 N=16 seed 3, expected the number of test images "
                      r"evaluated, 1 to 9223372036854775807"),
    ({"metrics": {"accuracy": 0.5, "loss": 1.2}},
     r"""reports.metrics: got 'loss' for level L2 N=16 seed 3, expected "accuracy" and optionally val_accuracy, """
     r"learning_rate, weight_decay"),
    ({"metrics": {"accuracy": 0.5, "val_accuracy": 2.0}}, r'reports.metrics\["val_accuracy"\]: got 2.0 for level L2 '
                                                          r"N=16 seed 3, expected a number from 0 to 1"),
    ({"metrics": {"accuracy": 0.5, "learning_rate": 0.0}}, r'reports.metrics\["learning_rate"\]: got 0.0 for level '
                                                           r"L2 N=16 seed 3, expected a finite number > 0"),
    ({"metrics": {"accuracy": 0.5, "learning_rate": math.inf}}, r'reports.metrics\["learning_rate"\]: got inf'),
    ({"metrics": {"accuracy": 0.5, "weight_decay": -1e-5}}, r'reports.metrics\["weight_decay"\]: got -1e-05 for '
                                                            r"level L2 N=16 seed 3, expected a finite number >= 0"),
])
def test_each_bad_field_is_one_line_naming_it_and_what_is_allowed(fields, message):
    with pytest.raises(InvalidArgument, match=f"^{message}") as caught:
        cog_result(_report(**fields))
    assert "\n" not in str(caught.value)


def test_a_long_input_is_quoted_at_a_bounded_length():
    with pytest.raises(InvalidArgument) as caught:
        cog_result(_report(cog_level="L" * 100_000))
    text = str(caught.value)
    assert text.startswith("reports.cog_level: got 'LLL") and "(100002 characters)" in text
    assert len(text) < QUOTE_LIMIT + 150
    with pytest.raises(InvalidArgument) as caught:
        cog_result(_report(metrics={"accuracy": 0.5, "x" * 10_000: 1.0}))
    assert "(10002 characters)" in str(caught.value) and len(str(caught.value)) < QUOTE_LIMIT + 200
