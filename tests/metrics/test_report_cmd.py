"""``sampler-server report``: the table's numbers, ranks, plots and refusals."""

from __future__ import annotations

import json
import math
import sqlite3

import numpy as np
import pytest
from PIL import Image

from clients.core import EpisodeSpec, SamplerClient
from sampler_server.cli.main import main
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb

SPEC = EpisodeSpec(sources=("folder",), split="test", seed=3, image_size=16)


def _report_run(client, run, accuracy_of, count=12):
    request = SPEC.to_request()
    reports = []
    for episode in client.episodes(SPEC, count=count):
        truth = episode.query_labels.tolist()
        accuracy = accuracy_of(episode.index)
        # predictions: the first round(accuracy * n) right, the rest shifted by one class
        right = round(accuracy * len(truth))
        predicted = truth[:right] + [(t + 1) % episode.ways for t in truth[right:]]
        reports.append(pb.MetricReport(
            run_id=run, protocol="md-episode", source=episode.source, split=pb.SPLIT_TEST, seed=SPEC.seed,
            index=episode.index, fingerprint=episode.fingerprint, request=request,
            metrics={"accuracy": right / len(truth), "loss": 1.0}, predicted_labels=predicted,
        ))
    client.report(reports, run_config_json=json.dumps({"run": run}))
    return [r.metrics["accuracy"] for r in reports]


@pytest.fixture(scope="module")
def runs(served):
    with SamplerClient(served.address) as client:
        good = _report_run(client, "report-good", lambda i: 0.9 - 0.02 * (i % 3))
        same = _report_run(client, "report-same", lambda i: 0.9 - 0.02 * ((i + 1) % 3))
        bad = _report_run(client, "report-bad", lambda i: 0.3 + 0.05 * (i % 2))
    return {"report-good": good, "report-same": same, "report-bad": bad}


def test_mean_and_ci_equal_a_direct_computation(served, runs, capsys):
    argv = ["report", "--data", str(served.data), "--format", "json"]
    for run in runs:
        argv += ["--run", run]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    for run, values in runs.items():
        cell = data["sources"]["folder/test"][run]
        n = len(values)
        mean = sum(values) / n
        sd = math.sqrt(sum((v - mean) ** 2 for v in values) / n)  # np.std: ddof = 0, as MD's Trainer.evaluate
        assert cell["episodes"] == n == 12
        assert cell["mean_accuracy"] == pytest.approx(mean, abs=1e-12)
        assert cell["ci95"] == pytest.approx(1.96 * sd / math.sqrt(n), abs=1e-12)
    # good and same have equal means within their intervals: tied for first; bad is third
    assert data["average_rank"] == {"report-good": 1.5, "report-same": 1.5, "report-bad": 3.0}
    assert data["fingerprint_mismatches"] == [] and data["fingerprints_checked"]


def test_table_and_plots(served, runs, capsys, tmp_path):
    assert main(["report", "--data", str(served.data), "--run", "report-good", "--run", "report-bad",
                 "--plots", str(tmp_path / "plots")]) == 0
    out = capsys.readouterr().out
    assert "average rank (1 sources)" in out and "[rank 1]" in out and "[rank 2]" in out
    pngs = sorted(p.name for p in (tmp_path / "plots").glob("*.png"))
    assert pngs == ["shots_all.png", "shots_folder.png", "ways_all.png", "ways_folder.png"]
    for name in pngs:
        path = tmp_path / "plots" / name
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        with Image.open(path) as image:
            image.verify()
        with Image.open(path) as image:
            assert image.size == (600, 400)
            assert np.asarray(image.convert("L")).std() > 5  # something was drawn


def test_unknown_run_and_mismatching_fingerprint_are_reported(served, runs, capsys):
    assert main(["report", "--data", str(served.data), "--run", "never-ran"]) == 2
    assert "run 'never-ran' has no reports" in capsys.readouterr().err
    db = sqlite3.connect(served.data / "metrics.sqlite")
    row = db.execute("SELECT * FROM reports WHERE run_id='report-bad' AND idx=0").fetchone()
    db.execute("INSERT INTO runs(run_id) VALUES ('tampered')")
    db.execute("INSERT INTO reports VALUES (?,?,?,?,?,?,?,?,?,?)", ("tampered", *row[1:6], "0" * 64, *row[7:]))
    db.commit()
    db.close()
    assert main(["report", "--data", str(served.data), "--run", "tampered"]) == 2
    captured = capsys.readouterr()
    assert "does not match the episode the store now gives" in captured.err
    assert "fingerprints: 1 mismatches" in captured.out
