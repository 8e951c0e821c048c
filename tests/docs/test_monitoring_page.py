"""docs/operations.md, "Monitoring", says what the server exports and what the deployment
alerts on: its tables list every metric the server declares (``service.telemetry``: the
sampler's with their labels, gRPC's) and name no other, and every alert of
deploy/k8s/components/monitoring with the metrics its rule reads. (Its ``sh`` commands are
checked with the others' in test_doc_commands.py; its Python block runs against a real
server in tests/service/test_metrics_endpoint.py.)"""

from __future__ import annotations

import re

import yaml
from doc_blocks import REPO_ROOT

from sampler_server.service import telemetry

RULES = REPO_ROOT / "deploy" / "k8s" / "components" / "monitoring" / "prometheusrule.yaml"


def _section() -> str:
    text = (REPO_ROOT / "docs" / "operations.md").read_text()
    return text.split("\n## Monitoring\n", 1)[1].split("\n## ", 1)[0]


def _rows(section: str) -> list[list[str]]:
    """Every table row of the section (header and separator rows left out), cells stripped."""
    rows = []
    for line in section.splitlines():
        if line.startswith("| ") and not line.startswith("| ---"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return [row for row in rows if row[0] not in ("metric", "alert")]


def test_the_tables_list_every_exported_metric_with_its_labels_and_no_other():
    rows = _rows(_section())
    listed: dict[str, list[str]] = {}
    for row in rows:
        for name in re.findall(r"`((?:sampler|grpc)_[a-z_]+)`", row[0]):
            listed[name] = row
    sampler = {i.family: i for i in telemetry.INSTRUMENTS}
    grpc = {i.family for i in telemetry.GRPC_INSTRUMENTS}
    assert set(listed) == set(sampler) | grpc, {"not listed": sorted(set(sampler) | grpc - set(listed)),
                                                "not exported": sorted(set(listed) - set(sampler) - grpc)}
    for family, instrument in sampler.items():
        row = listed[family]
        kind = {"counter": "counter", "histogram": "histogram"}.get(instrument.kind, "gauge")
        assert row[1] == kind, (family, row)
        labels = [label.strip() for label in row[2].split(",") if label.strip()]
        assert labels == list(instrument.attributes), (family, row)


def test_every_metric_the_section_names_is_exported():
    named = set(re.findall(r"\b((?:sampler|grpc|process)_[a-z_]+)\b", _section()))
    families = {i.family for i in (*telemetry.INSTRUMENTS, *telemetry.GRPC_INSTRUMENTS)}
    unknown = {name for name in named - families - set(telemetry.PROCESS_FAMILIES)
               if not name.endswith(("_bucket", "_count", "_sum")) or name.rsplit("_", 1)[0] not in families}
    assert not unknown - {"grpc_method", "grpc_status"}, sorted(unknown)  # (those two are labels)


def test_the_alerts_table_is_the_rules_alerts():
    rules = [rule for group in yaml.safe_load(RULES.read_text())["spec"]["groups"] for rule in group["rules"]]
    documented = {row[0].strip("`"): row for row in _rows(_section()) if row[0].startswith("`Sampler")}
    assert set(documented) == {rule["alert"] for rule in rules}
    for rule in rules:
        durations = re.findall(r"\bfor: (\d+)m\b", yaml.safe_dump(rule))
        if durations:
            assert f"{durations[0]} minutes" in documented[rule["alert"]][1], (rule["alert"], documented[rule["alert"]])
