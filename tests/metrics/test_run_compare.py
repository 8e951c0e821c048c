"""`report --run A --run B`: whether two runs are the same computation (configuration equal
but for the run's own name, stored results identical) and, where not, in what: the keys that
define the results, those it was computed with, the result fingerprint, the results."""

from __future__ import annotations

import hashlib
import json

import pytest
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from sampler_server.cli.main import main
from sampler_server.metrics.compare import (
    Group, RunRecord, Verdict, compare, compare_with_first, describe, group_of, render_comparisons, run_record,
)
from sampler_server.metrics.store import CogResult, MetricsStore, StoredReport, TaskResult
from sampler_server.service.metrics import MetricsHandlers
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb

SHA_A, SHA_B = "a" * 64, "b" * 64
CONFIG = {"backbone": "conv4", "lr": 0.001, "framework": "torch", "torch_version": "2.5.1", "numpy_version": "2.1.0",
          "python_version": "3.11.9", "device": "cpu", "deterministic": True, "requested_deterministic": "auto",
          "intra_op_threads": 2, "inter_op_threads": 2, "preprocessing": {"mean": [0.5, 0.5, 0.5], "size": 84},
          "result_sha256": SHA_A}


def _episode(run: str, index: int, accuracy: float, predicted: tuple[int, ...] = (0, 1, 1)) -> StoredReport:
    return StoredReport(run_id=run, protocol="md-episode", source="dtd", split="test", index=index, seed=3,
                        fingerprint=f"{index:064x}", metrics={"accuracy": accuracy, "loss": 1.25},
                        request={"sources": ["dtd"], "split": "SPLIT_TEST"}, predicted=predicted)


def _record(run: str, config=CONFIG, accuracies=(0.5, 0.75), cog=0.25, task=0.5) -> RunRecord:
    return run_record(run, {**config, "run": run}, [_episode(run, i, a) for i, a in enumerate(accuracies)],
                      [TaskResult(run, "clevr_count", "test", task, 100)], [CogResult(run, "L1", 0, 1, cog, 50)])


# ---- the pure comparison --------------------------------------------------------------------


def test_identical_runs_are_the_same_computation_whatever_their_names():
    (comparison,) = compare_with_first([_record("first"), _record("second")])
    assert comparison.verdict is Verdict.SAME and comparison.config == () and comparison.results.total == 4
    assert describe(comparison) == "same computation (configuration and result_sha256 equal, 4 results identical)"


@pytest.mark.parametrize(("key", "group"), [
    ("torch_version", Group.ENVIRONMENT), ("tensorflow_version", Group.ENVIRONMENT),
    ("cuda_version", Group.ENVIRONMENT), ("op_determinism", Group.ENVIRONMENT),
    ("intra_op_threads", Group.ENVIRONMENT), ("deterministic", Group.ENVIRONMENT), ("device", Group.ENVIRONMENT),
    ("lr", Group.DEFINITION), ("framework", Group.DEFINITION), ("backbone_sha256", Group.DEFINITION),
    ("result_sha256", Group.FINGERPRINT),
])
def test_keys_fall_in_their_group(key, group):
    assert group_of(key) is group


def test_a_different_configuration_lists_each_key_with_both_values_grouped():
    other = {**CONFIG, "lr": 0.01, "torch_version": "2.6.0", "intra_op_threads": 4, "result_sha256": SHA_B,
             "preprocessing": {"mean": [0.5, 0.5, 0.5], "size": 96}}
    del other["numpy_version"]
    comparison = compare(_record("a"), _record("b", other, accuracies=(0.5, 0.5)))
    assert comparison.verdict is Verdict.DIFFERENT_CONFIGURATION and comparison.fingerprint_differs
    shown = {(d.key, d.group, d.first, d.second, d.in_second) for d in comparison.config}
    assert shown == {("lr", Group.DEFINITION, 0.001, 0.01, True),
                     ("preprocessing.size", Group.DEFINITION, 84, 96, True),
                     ("torch_version", Group.ENVIRONMENT, "2.5.1", "2.6.0", True),
                     ("numpy_version", Group.ENVIRONMENT, "2.1.0", None, False),
                     ("intra_op_threads", Group.ENVIRONMENT, 2, 4, True),
                     ("result_sha256", Group.FINGERPRINT, SHA_A, SHA_B, True)}
    assert describe(comparison) == (
        'differ in what defines the results (lr 0.001 vs 0.01, preprocessing.size 84 vs 96), what it was computed '
        'with (intra_op_threads 2 vs 4, numpy_version "2.1.0" vs absent, torch_version "2.5.1" vs "2.6.0"), the '
        'result fingerprint (result_sha256 aaaaaaaaaaaa… vs bbbbbbbbbbbb…); results: 1 of 4 differ (1 with other '
        'values; first: md-episode dtd/test seed 3 episode 1)')


def test_same_configuration_with_other_results_counts_them_and_says_whether_the_fingerprint_differs():
    comparison = compare(_record("a"), _record("b", accuracies=(0.5, 0.5, 0.25), cog=0.5))
    assert comparison.verdict is Verdict.DIFFERENT_RESULTS and not comparison.fingerprint_differs
    assert comparison.results.other_values == ("md-episode dtd/test seed 3 episode 1", "CoG level L1 N=all seed 1")
    assert comparison.results.only_second == ("md-episode dtd/test seed 3 episode 2",)
    assert comparison.results.total == 5 and len(comparison.results.differing) == 3
    assert describe(comparison) == (
        "same configuration, different results: results: 3 of 5 differ (2 with other values, 1 only in b; first: "
        "md-episode dtd/test seed 3 episode 1, CoG level L1 N=all seed 1, md-episode dtd/test seed 3 episode 2)")
    fingerprint = compare(_record("a"), _record("b", {**CONFIG, "result_sha256": SHA_B}))
    assert fingerprint.verdict is Verdict.DIFFERENT_RESULTS and fingerprint.fingerprint_differs
    assert fingerprint.results.identical
    assert describe(fingerprint) == ("same configuration, different results: the result fingerprint (result_sha256 "
                                     "aaaaaaaaaaaa… vs bbbbbbbbbbbb…); results: all 4 identical")


def test_every_stored_field_of_a_result_counts():
    base = _record("a")
    predictions = run_record("b", CONFIG, [_episode("b", 0, 0.5, predicted=(1, 1, 1)), _episode("b", 1, 0.75)],
                             [TaskResult("b", "clevr_count", "test", 0.5, 100)], [CogResult("b", "L1", 0, 1, 0.25, 50)])
    assert compare(base, predictions).results.other_values == ("md-episode dtd/test seed 3 episode 0",)
    examples = run_record("b", CONFIG, [_episode("b", 0, 0.5), _episode("b", 1, 0.75)],
                          [TaskResult("b", "clevr_count", "test", 0.5, 100, regime=16, regime_seed=1)],
                          [CogResult("b", "L1", 0, 1, 0.25, 50, extras={"learning_rate": 0.1})])
    differs = compare(base, examples).results
    assert differs.other_values == ("CoG level L1 N=all seed 1",)  # extras are part of a CoG result
    assert differs.only_first == ("VTAB task clevr_count split test",)
    assert differs.only_second == ("VTAB task clevr_count split test regime 16 seed 1",)


def test_a_nan_equals_a_nan_and_transfer_runs_without_a_fingerprint_compare_by_results():
    config = {"mode": "linear", "lr": float("nan")}
    first = run_record("a", config, [_episode("a", 0, float("nan"))])
    same = compare(first, run_record("b", config, [_episode("b", 0, float("nan"))]))
    assert same.verdict is Verdict.SAME and describe(same) == ("same computation (configuration equal, 1 result "
                                                               "identical)")


def test_the_section_lists_each_run_against_the_first():
    comparisons = compare_with_first([_record("a"), _record("b"), _record("c", {**CONFIG, "device": "cuda:0"})])
    text = render_comparisons(comparisons, "table").splitlines()
    assert text[0] == "runs compared with a (configuration and stored results of every protocol):"
    assert text[1] == "  b: same computation (configuration and result_sha256 equal, 4 results identical)"
    assert text[2] == ('  c: differ in what it was computed with (device "cpu" vs "cuda:0"); results: all 4 '
                       'identical')
    markdown = render_comparisons(comparisons, "markdown").splitlines()
    assert markdown[1:] == ["", "- " + text[1].strip(), "- " + text[2].strip()]


JSON_LEAVES = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6)
JSON_VALUES = st.recursive(JSON_LEAVES, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=8)
KEYS = st.sampled_from(["lr", "backbone", "torch_version", "intra_op_threads", "deterministic", "result_sha256",
                        "device", "preprocessing"]) | st.text(min_size=1, max_size=6).filter(lambda k: k != "run_id")
CONFIGS = st.dictionaries(KEYS, JSON_VALUES, max_size=6)


@settings(max_examples=examples(80), deadline=None)
@given(config=CONFIGS, first=st.text(min_size=1, max_size=5), second=st.text(min_size=1, max_size=5))
def test_a_configuration_compared_with_itself_is_the_same_computation(config, first, second):
    config = {k: v for k, v in config.items() if k != "run"}
    comparison = compare(RunRecord(first, {**config, "run": first}, {"r": "1"}),
                         RunRecord(second, {**config, "run": second}, {"r": "1"}))
    assert comparison.verdict is Verdict.SAME and describe(comparison).startswith("same computation (")


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True)


@settings(max_examples=examples(80), deadline=None)
@given(config=CONFIGS, key=KEYS, data=st.data())
def test_any_single_changed_key_is_named_in_its_group(config, key, data):
    config = {k: v for k, v in config.items() if k != "run"}
    if key == "run":
        return
    new = data.draw(JSON_VALUES.filter(lambda v: key not in config or _canonical(v) != _canonical(config[key])))
    changed = data.draw(st.sampled_from(["changed", "removed"])) if key in config else "added"
    other = {**config, key: new} if changed != "removed" else {k: v for k, v in config.items() if k != key}
    comparison = compare(RunRecord("a", config, {}), RunRecord("b", other, {}))
    assert comparison.config, (config, other)
    assert all(d.key == key or d.key.startswith(key + ".") for d in comparison.config)
    assert {d.group for d in comparison.config} == {group_of(key)}
    expected = Verdict.DIFFERENT_RESULTS if group_of(key) is Group.FINGERPRINT else Verdict.DIFFERENT_CONFIGURATION
    assert comparison.verdict is expected
    assert f"({key}" in describe(comparison)


# ---- the report command and GetReport -------------------------------------------------------


def _write_run(store: MetricsStore, run: str, config: dict, md=(0.5, 0.75), cog=0.25, task=0.5) -> None:
    results = [*(_episode(run, i, a) for i, a in enumerate(md)), TaskResult(run, "clevr_count", "test", task, 100),
               CogResult(run, "L1", 0, 1, cog, 50)]
    store.add_batch(results, run_config_json=json.dumps({**config, "run": run}))


@pytest.fixture
def metrics(tmp_path):
    store = MetricsStore(tmp_path / "metrics.sqlite")
    _write_run(store, "torch-1", CONFIG)
    _write_run(store, "torch-2", CONFIG)  # the same command again
    _write_run(store, "torch-threads", {**CONFIG, "torch_version": "2.6.0", "intra_op_threads": 4,
                                        "result_sha256": SHA_B}, cog=0.5)
    _write_run(store, "torch-weights", {**CONFIG, "result_sha256": SHA_B}, md=(0.5, 0.5))
    return store


def _report(metrics: MetricsStore, capsys, *argv: str) -> str:
    assert main(["report", "--metrics", str(metrics.path), *argv]) == 0
    return capsys.readouterr().out


def test_report_says_which_runs_are_the_same_computation_and_how_others_differ(metrics, capsys):
    runs = ["--run", "torch-1", "--run", "torch-2", "--run", "torch-threads", "--run", "torch-weights"]
    out = _report(metrics, capsys, "--table", "cog", *runs)
    section = out[out.index("runs compared with torch-1"):].splitlines()
    assert section[1] == "  torch-2: same computation (configuration and result_sha256 equal, 4 results identical)"
    assert section[2].startswith('  torch-threads: differ in what it was computed with (intra_op_threads 2 vs 4, '
                                 'torch_version "2.5.1" vs "2.6.0"), the result fingerprint (result_sha256 ')
    assert section[2].endswith("results: 1 of 4 differ (1 with other values; first: CoG level L1 N=all seed 1)")
    assert section[3].startswith("  torch-weights: same configuration, different results: the result fingerprint "
                                 "(result_sha256 aaaaaaaaaaaa… vs bbbbbbbbbbbb…); results: 1 of 4 differ")
    assert len(section) == 4 and out.startswith("run ") and out.index("torch-weights  L1") < out.index(section[0])
    # every table ends with it (VTAB here), markdown as a list; one run alone has none
    markdown = _report(metrics, capsys, "--table", "vtab", "--format", "markdown", "--run", "torch-1", "--run",
                       "torch-2")
    assert markdown.endswith("- torch-2: same computation (configuration and result_sha256 equal, 4 results "
                             "identical)\n")
    assert "runs compared" not in _report(metrics, capsys, "--table", "cog", "--run", "torch-1")


def test_report_json_has_the_comparison_and_get_report_answers_what_the_command_prints(metrics, capsys):
    data = json.loads(_report(metrics, capsys, "--table", "cog", "--format", "json", "--run", "torch-1", "--run",
                              "torch-threads", "--run", "torch-2"))
    assert data["runs"] == ["torch-1", "torch-threads", "torch-2"]  # the table's own keys are kept
    comparison = data["comparison"]
    assert comparison["against"] == "torch-1"
    assert comparison["runs"]["torch-2"]["same_computation"] is True
    threads = comparison["runs"]["torch-threads"]
    assert threads["verdict"] == "different configuration" and threads["result_sha256_differs"] is True
    assert {entry["key"]: (entry["group"], entry["first"], entry["second"]) for entry in threads["configuration"]} == {
        "torch_version": ("environment", "2.5.1", "2.6.0"), "intra_op_threads": ("environment", 2, 4),
        "result_sha256": ("fingerprint", SHA_A, SHA_B)}
    assert threads["results"]["differing"] == 1 and threads["results"]["total"] == 4
    handlers = MetricsHandlers(metrics, 100, context=None)
    for fmt in ("table", "json"):
        text = handlers.get_report(pb.GetReportRequest(run_ids=["torch-1", "torch-weights"], table="cog",
                                                       format=fmt)).text
        out = _report(metrics, capsys, "--table", "cog", "--format", fmt, "--run", "torch-1", "--run",
                      "torch-weights")
        assert out == text + "\n" and ("torch-weights: same configuration, different results" in text
                                       or json.loads(text)["comparison"]["runs"]["torch-weights"]["verdict"]
                                       == "same configuration, different results")
    # the held table, read by resuming clients, stays as it was: no comparison, an unknown run is null
    held = json.loads(handlers.get_report(pb.GetReportRequest(run_ids=["torch-1", "never"], table="held",
                                                              format="json")).text)
    assert set(held) == {"runs"} and held["runs"]["never"] is None


def test_the_docs_example_is_what_report_prints(tmp_path, capsys):
    """docs/protocols/md.md's "compared-runs" block: three MD runs of 10 dtd episodes, the
    third with --threads 4 (two episodes' predictions moved). The section does not depend
    on the table, so the CoG table (no packed stores needed) ends with the same one."""
    from doc_blocks import blocks

    (block,) = [b for b in blocks("docs/protocols/md.md") if b.title == "compared-runs"]
    store = MetricsStore(tmp_path / "metrics.sqlite")
    config = {"framework": "torch", "sources": ["dtd"], "eval_episodes": 10, "torch_version": "2.5.1",
              "deterministic": True, "requested_deterministic": "auto", "threads": None, "intra_op_threads": 8,
              "inter_op_threads": 8}
    runs = {"my-run": ({}, ()), "my-run-again": ({}, ()),
            "my-run-4-threads": ({"threads": 4, "intra_op_threads": 4, "inter_op_threads": 4}, (3, 7))}
    for run, (changed, moved) in runs.items():
        weights = hashlib.sha256(("my-run" if run == "my-run-again" else run).encode()).hexdigest()
        episodes = [StoredReport(run_id=run, protocol="md-episode", source="dtd", split="test", index=i, seed=0,
                                 fingerprint=f"{i:064x}", metrics={"accuracy": 0.6 if i in moved else 0.8},
                                 predicted=(0, 1, 2, 3, 4) if i in moved else (0, 1, 2, 3, 3))
                    for i in range(10)]
        store.add(episodes, json.dumps({**config, **changed, "run": run, "result_sha256": weights}))
    out = _report(store, capsys, "--table", "cog", *(f"--run={run}" for run in runs))
    assert out[out.index("runs compared with "):] == block.code
