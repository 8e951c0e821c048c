"""Learners side by side (issue 38, "Tables"): the MD table with each learner's column, MD's
rank rule over the test sources every learner reports, one preset per table; the VTAB+MD
table's MD-v2 side from episode reports beside each learner's VTAB-v2 side; the card
showing both. The md-v1 episodes are real ones of the served store (``report --data``
recomputes them); the md-v2 ones, of the MD-v2 test sources no fixture packs, are stored
as the server stores them (their request names the preset) and read without ``--data``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from google.protobuf import json_format

from sampler_server.cli.main import main
from sampler_server.cli.report_cmd import StoresContext
from sampler_server.core.md.presets import Benchmark, benchmark_sources
from sampler_server.core.vtab.presets import VtabBenchmark, vtab_groups
from sampler_server.errors import InvalidArgument
from sampler_server.metrics.md.report import build_report, render_report
from sampler_server.metrics.ranks import estimate, ranks_for_source
from sampler_server.metrics.store import MetricsStore, StoredReport, TaskResult
from sampler_server.metrics.tables import column_labels, learner_of
from sampler_server.metrics.vtab.report import build_vtab_md_report, render_vtab_md_report
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb

SEED = 5
TEST_EPISODES = 8
# md-v1 test accuracy of episode i: prototypes and matchingnet within each other's interval
# (MD's tie: both 1.5), knn far below (3); on valid episodes knn is best, which must not count.
MD_V1 = {"prototypes": lambda i: 0.80 + 0.02 * (i % 3), "matchingnet": lambda i: 0.79 + 0.02 * ((i + 1) % 3),
         "knn": lambda i: 0.50 + 0.05 * (i % 2)}
VALID = {"prototypes": 0.30, "matchingnet": 0.31, "knn": 0.95}
# md-v2 test accuracy per source of each evaluate learner (3 episodes: x - 0.01, x, x + 0.01)
MD_V2_SOURCES = benchmark_sources(Benchmark.MD_V2, "test")
MD_V2 = {"prototypes": {s: 0.50 + 0.05 * k for k, s in enumerate(MD_V2_SOURCES)},
         "knn": {s: 0.40 + 0.02 * k for k, s in enumerate(MD_V2_SOURCES)}}
VTAB_V2 = [name for names in vtab_groups(VtabBenchmark.VTAB_V2).values() for name in names]
TRAINERS = {"tr-proto": {"model": "protonet", "eval_learner": None, "preset": None},
            "tr-base": {"model": "baseline", "eval_learner": "matchingnet", "preset": None}}


def _vtab_accuracy(k: int) -> float:
    return 0.30 + 0.02 * k


def _stored(run: str, request: pb.EpisodeRequest, episode, index: int, accuracy: float, split: str) -> StoredReport:
    return StoredReport(run_id=run, protocol="md-episode", source=episode.source, split=split, index=index, seed=SEED,
                        fingerprint=episode.fingerprint, metrics={"accuracy": accuracy},
                        request=json_format.MessageToDict(request, preserving_proto_field_name=True))


@pytest.fixture(scope="module")
def metrics(served, tmp_path_factory) -> Path:
    """``evaluate``'s runs of checkpoint ck (three md-v1 learners, two md-v2 ones, its VTAB
    run), two trainer runs (md-v1) and a VTAB-only run, in one metrics file."""
    path = tmp_path_factory.mktemp("learners") / "metrics.sqlite"
    store = MetricsStore(path)
    context = StoresContext(served.data)
    test = pb.EpisodeRequest(sources=["folder"], split=pb.SPLIT_TEST, seed=SEED)
    valid = pb.EpisodeRequest(sources=["folder"], split=pb.SPLIT_VALID, seed=SEED)
    tests = [context.episode(test, SEED, i) for i in range(TEST_EPISODES)]
    valids = [context.episode(valid, SEED, i) for i in range(2)]
    for learner, accuracy in MD_V1.items():
        run = f"ck/md-v1/{learner}"
        reports = [_stored(run, test, e, i, accuracy(i), "test") for i, e in enumerate(tests)]
        reports += [_stored(run, valid, e, i, VALID[learner], "valid") for i, e in enumerate(valids)]
        store.add(reports, run_config_json=json.dumps({"command": "evaluate", "learner": learner, "preset": "md-v1"}))
    for run, config in TRAINERS.items():
        accuracy = MD_V1["prototypes" if run == "tr-proto" else "knn"]
        store.add([_stored(run, test, e, i, accuracy(i), "test") for i, e in enumerate(tests)],
                  run_config_json=json.dumps(config))
    for learner, by_source in MD_V2.items():
        run = f"ck/md-v2/{learner}"
        reports = [StoredReport(run_id=run, protocol="md-episode", source=source, split="test", index=i, seed=SEED,
                                fingerprint=f"{source}-{i}", metrics={"accuracy": mean + 0.01 * (i - 1)},
                                request={"sources": [source], "preset": "md-v2", "split": "SPLIT_TEST"})
                   for source, mean in by_source.items() for i in range(3)]
        store.add(reports, run_config_json=json.dumps({"command": "evaluate", "learner": learner, "preset": "md-v2"}))
    store.add_task_results([TaskResult("ck/vtab", task, "test", _vtab_accuracy(k), 100)
                            for k, task in enumerate(VTAB_V2)])
    store.add_task_results([TaskResult("vtab-only", "cifar100", "test", 0.5, 100)])
    store.close()
    return path


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _rows(text: str) -> dict[str, list[str]]:
    rows = {}
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            rows[cells[0]] = cells[1:]
    return rows


def test_labels_say_the_learner():
    assert learner_of({"learner": "knn", "model": "x"}) == "knn"  # evaluate's
    assert learner_of({"model": "protonet", "eval_learner": None}) == "protonet"
    assert learner_of({"model": "baseline", "eval_learner": "matchingnet"}) == "baseline, matchingnet head"
    assert learner_of({"model": "knn", "eval_learner": "knn"}) == "knn" and learner_of({"run": "x"}) is None
    runs = ["ck/md-v1/knn", "ck/md-v1/prototypes"]
    assert column_labels(runs, {r: r.rsplit("/", 1)[1] for r in runs}) == (
        {"ck/md-v1/knn": "knn", "ck/md-v1/prototypes": "prototypes"}, "columns: the runs ck/md-v1/<column>")
    mixed = ["ck/md-v1/knn", "mine", "theirs"]
    assert column_labels(mixed, {"ck/md-v1/knn": "knn", "mine": "protonet", "theirs": None}) == (
        {"ck/md-v1/knn": "ck/md-v1/knn", "mine": "mine (protonet)", "theirs": "theirs"}, "")


def test_one_evaluate_run_gives_its_learners_side_by_side_ranked_by_mds_rule(served, metrics, capsys):
    """``report --run ck/md-v1`` stands for the learners under it: one column each, headed by
    the learner, every test cell with its rank, the average rank row; the valid row is
    shown but not ranked (knn, best there, stays third)."""
    code, out, err = _run(["report", "--data", str(served.data), "--metrics", str(metrics), "--run", "ck/md-v1",
                           "--format", "markdown"], capsys)
    assert code == 0, err
    assert out.startswith("| source | knn | matchingnet | prototypes | chance |\n")
    rows = _rows(out)
    estimates = {learner: estimate([accuracy(i) for i in range(TEST_EPISODES)]) for learner, accuracy in MD_V1.items()}
    ranks = ranks_for_source(estimates)
    assert ranks == {"prototypes": 1.5, "matchingnet": 1.5, "knn": 3.0}  # tied by the 95% test, knn apart
    for learner, cell in zip(("knn", "matchingnet", "prototypes"), rows["folder/test"]):
        e = estimates[learner]
        assert cell == f"{100 * e.mean:.2f} ± {100 * e.ci95:.2f} ({TEST_EPISODES}) [rank {ranks[learner]:g}]"
    assert rows["folder/valid"][:3] == ["95.00 ± 0.00 (2)", "31.00 ± 0.00 (2)", "30.00 ± 0.00 (2)"]  # no rank
    assert rows["average rank (1 sources)"] == ["3.00", "1.50", "1.50", ""]
    assert "columns: the runs ck/md-v1/<column>" in out and "preset md-v1" in out
    assert "fingerprints: every reported episode matches its recomputed composition" in out
    code, out, _ = _run(["report", "--data", str(served.data), "--metrics", str(metrics), "--run", "ck/md-v1",
                         "--format", "json"], capsys)
    data = json.loads(out)
    assert data["runs"] == ["ck/md-v1/knn", "ck/md-v1/matchingnet", "ck/md-v1/prototypes"]
    assert data["learners"] == {run: run.rsplit("/", 1)[1] for run in data["runs"]} and data["preset"] == "md-v1"
    assert data["average_rank"] == {"ck/md-v1/knn": 3.0, "ck/md-v1/matchingnet": 1.5, "ck/md-v1/prototypes": 1.5}
    assert data["ranked_sources"] == ["folder/test"]


def test_validation_episodes_are_shown_and_never_ranked(metrics):
    """MD's average rank is over its test sources ("ILSVRC (valid)" is left out): knn, best on
    the valid episodes, would otherwise average (3 + 1) / 2 = 2."""
    report = build_report(MetricsStore(metrics), [f"ck/md-v1/{learner}" for learner in MD_V1])
    assert report.ranked_sources == ["folder/test"] and set(report.source_ranks) == {"folder/test"}
    assert report.average_rank["ck/md-v1/knn"] == 3.0
    assert report.accuracy["folder/valid"]["ck/md-v1/knn"].mean == pytest.approx(0.95)


def test_trainer_runs_are_headed_by_the_learner_their_configuration_names(metrics):
    report = build_report(MetricsStore(metrics), ["tr-proto", "tr-base", "ck/md-v1/knn"])
    text = render_report(report, "markdown")
    assert text.startswith("| source | tr-proto (protonet) | tr-base (baseline, matchingnet head) | ck/md-v1/knn |")
    assert report.average_rank == {"tr-proto": 1.0, "tr-base": 2.5, "ck/md-v1/knn": 2.5}  # equal runs tie


def test_a_run_without_md_episodes_beside_ranked_runs_leaves_the_ranks_empty(metrics):
    """No test source is reported by every run asked for, so none is ranked (it crashed)."""
    text = render_report(build_report(MetricsStore(metrics), ["ck/md-v1/knn", "ck/md-v1/prototypes", "vtab-only"]))
    assert "[rank" not in text and "average rank" not in text
    assert "rank: none, no test source is reported by every run" in text


def test_runs_of_two_presets_are_refused_naming_them(served, metrics, capsys):
    with pytest.raises(InvalidArgument, match=r"^run: episodes of several presets \(md-v1: ck/md-v1/knn; md-v2: "
                                              r"ck/md-v2/knn\); an MD table ranks the runs of one preset, one of "
                                              r"md-v1, md-v2"):
        build_report(MetricsStore(metrics), ["ck/md-v1/knn", "ck/md-v2/knn"])
    code, _, err = _run(["report", "--data", str(served.data), "--metrics", str(metrics), "--run", "ck"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "md-v1: ck/md-v1/knn, ck/md-v1/matchingnet, ck/md-v1/prototypes; md-v2: ck/md-v2/knn, " \
           "ck/md-v2/prototypes" in err
    code, _, err = _run(["report", "--data", str(served.data), "--metrics", str(metrics), "--run", "nobody"], capsys)
    assert code == 2 and "run 'nobody' has no reports; " in err and "ck/md-v1/knn" in err


def _v2_mean(learner: str) -> float:
    by_source = MD_V2[learner]
    return math.fsum(by_source.values()) / len(by_source)  # the mean over sources of each source's mean


def test_vtab_md_puts_each_md_v2_learner_beside_its_vtab_v2_side(metrics, capsys):
    """``RUN/md-v2/<learner>`` with ``RUN/vtab``: one column per learner, its MD-v2 average
    (mean over the 8 test sources of the per-source means) and the VTAB-v2 averages; md-v1
    episodes are not counted in MD-v2."""
    store = MetricsStore(metrics)
    report = build_vtab_md_report(store, ["ck/md-v2/knn", "ck/md-v2/prototypes", "ck/vtab"])
    assert report.runs == ["ck/md-v2/knn", "ck/md-v2/prototypes"]
    assert report.vtab_runs == {"ck/md-v2/knn": "ck/vtab", "ck/md-v2/prototypes": "ck/vtab"}
    vtab_mean = math.fsum(_vtab_accuracy(k) for k in range(len(VTAB_V2))) / len(VTAB_V2)
    for learner in MD_V2:
        column = f"ck/md-v2/{learner}"
        assert report.md[column].overall.mean == pytest.approx(_v2_mean(learner)) and report.md[column].overall.complete
        assert report.vtab[column].overall.mean == pytest.approx(vtab_mean) and report.vtab[column].overall.complete
    text = render_vtab_md_report(report, "markdown")
    assert text.startswith("| part | source / task | knn | prototypes |\n")
    aggregate = [line for line in text.splitlines() if line.startswith("| aggregate | md-v2 |")]
    assert aggregate == [f"| aggregate | md-v2 | {100 * _v2_mean('knn'):.2f} | {100 * _v2_mean('prototypes'):.2f} |"]
    assert f"| aggregate | vtab-v2 | {100 * vtab_mean:.2f} | {100 * vtab_mean:.2f} |" in text
    assert "vtab-v2 side of knn: ck/vtab, prototypes: ck/vtab" in text
    assert "columns: the runs ck/md-v2/<column>" in text
    md_v1 = build_vtab_md_report(store, ["ck/md-v1/knn"])
    assert md_v1.md["ck/md-v1/knn"].sources == {} and md_v1.md["ck/md-v1/knn"].other_presets == {"md-v1": 8}
    assert "ck/md-v1/knn: 8 md-v1 test episodes, not counted (md-v2 only)" in render_vtab_md_report(md_v1)
    # the command: --run ck stands for the runs under it that have MD-v2 episodes, and their VTAB run
    code, out, err = _run(["report", "--table", "vtab-md", "--metrics", str(metrics), "--run", "ck", "--format",
                           "json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["runs"] == ["ck/md-v2/knn", "ck/md-v2/prototypes"] and data["labels"]["ck/md-v2/knn"] == "knn"
    assert data["scores"]["ck/md-v2/knn"]["vtab_run"] == "ck/vtab"
    assert data["scores"]["ck/md-v2/prototypes"]["md"]["overall"]["mean"] == pytest.approx(_v2_mean("prototypes"))
    code, _, err = _run(["report", "--table", "vtab-md", "--metrics", str(metrics), "--run", "ck/md-v1"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "run 'ck/md-v1': no reports of its own, and none of the runs under it (ck/md-v1/knn, " \
           "ck/md-v1/matchingnet, ck/md-v1/prototypes) has MD-v2 test episode reports" in err


def test_the_card_ranks_the_learners_of_each_preset_and_shows_the_vtab_md_side(metrics, capsys, tmp_path):
    code, out, err = _run(["report", "--card", "--metrics", str(metrics), "--run", "ck", "--html",
                           str(tmp_path / "card.html"), "--plots", str(tmp_path / "plots")], capsys)
    assert code == 0, err
    v1 = out[out.index("## Meta-Dataset (md-v1)\n"):out.index("## Meta-Dataset (md-v2)\n")]
    (lacking,) = [line for line in v1.splitlines() if "(not in this table)" in line]  # one line for every run
    assert lacking.startswith("no Meta-Dataset episode reports (not in this table): ") and "ck/vtab" in lacking
    assert "| source | knn | matchingnet | prototypes |" in v1
    assert _rows(v1)["average rank (1 sources)"] == ["3.00", "1.50", "1.50"]
    v2 = out[out.index("## Meta-Dataset (md-v2)\n"):out.index("## VTAB-1k\n")]
    assert "| source | knn | prototypes |" in v2
    assert _rows(v2)[f"average rank ({len(MD_V2_SOURCES)} sources)"] == ["2.00", "1.00"]  # prototypes ahead on all 8
    both = out[out.index("## VTAB+MD\n"):]
    assert "| part | source / task | knn | prototypes |" in both
    assert f"| aggregate | md-v2 | {100 * _v2_mean('knn'):.2f} | {100 * _v2_mean('prototypes'):.2f} |" in both
    (lacking,) = [line for line in both.splitlines() if "(not in this table)" in line]
    assert lacking.startswith("no MD-v2 test episode reports (not in this table): ")
    assert {"ck/md-v1/knn", "ck/md-v1/matchingnet", "ck/md-v1/prototypes"} <= set(lacking.split(": ", 1)[1].split(", "))
    page = (tmp_path / "card.html").read_text(encoding="utf-8")
    assert "<h2>VTAB+MD</h2>" in page and "<h2>Meta-Dataset (md-v1)</h2>" in page
    assert (tmp_path / "plots" / "vtab-md" / "vtab_ck_vtab.png").is_file()  # one VTAB-v2 plot, apart from VTAB-1k's
