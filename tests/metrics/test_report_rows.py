"""A report's MD rows name what the user knows the source by: a store of the user's own images
(every one of kind image_folder) under the name it was served as, which the episodes' request
carries; Meta-Dataset's sources under their kind, the name MD's tables and ranks key on."""

from __future__ import annotations

import json

from sampler_server.metrics.md.report import build_report, render_report
from sampler_server.metrics.store import MetricsStore, StoredReport


def _stored(index: int, kind: str, served: str, accuracy: float) -> StoredReport:
    return StoredReport(run_id="mine", protocol="md-episode", source=kind, split="test", index=index, seed=0,
                        fingerprint=f"{index:064x}", metrics={"accuracy": accuracy},
                        request={"sources": [served], "split": "SPLIT_TEST", "seed": "0"}, predicted=(0, 1))


def test_a_folder_of_own_images_is_a_row_under_its_served_name_and_md_sources_keep_their_kind(tmp_path):
    store = MetricsStore(tmp_path / "metrics.sqlite")
    garden = "birds-of-my-garden"
    store.add([_stored(0, "image_folder", garden, 0.5), _stored(1, "image_folder", garden, 0.7),
               _stored(2, "aircraft", "aircraft_126", 0.9)], json.dumps({"run": "mine", "framework": "torch"}))
    report = build_report(store, ["mine"])
    assert set(report.accuracy) == {"birds-of-my-garden/test", "aircraft/test"}
    assert report.accuracy["birds-of-my-garden/test"]["mine"].episodes == 2
    table = render_report(report)
    assert "birds-of-my-garden/test" in table and "image_folder" not in table
