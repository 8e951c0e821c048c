"""deploy/k8s: every kustomization renders with the real kustomize (``kubectl kustomize``),
every rendered object validates against the Kubernetes JSON schemas offline
(kubernetes-validate's vendored schemas, strict: unknown fields fail; the Prometheus
Operator's kinds against its CRDs, tests/deploy/crds), and the objects agree with the
server they run: probe service names, the serve options behind every SAMPLER_* variable,
the pack command line each shard runs, the read-only stores, the metrics port scraped, and
the metrics the alerts and the Grafana dashboard name (each one the server exports)."""

from __future__ import annotations

import contextlib
import functools
import io
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from deploy_files import DEPLOY, K8S, dockerfile_stages, kustomization_dirs, load_script, render

from sampler_server.cli.main import build_parser
from sampler_server.service import telemetry
from sampler_server.service.server import SERVICE_NAME
from sampler_server.store.shards import parse_shard

# The oldest Kubernetes the manifests need (Job backoffLimitPerIndex is GA in 1.33) and
# the newest whose schemas kubernetes-validate ships
K8S_VERSIONS = ("1.33", kubernetes_validate.latest_version())
CLUSTER_SCOPED = {"PersistentVolume", "Namespace", "StorageClass", "ClusterRole", "ClusterRoleBinding"}
DIRS = kustomization_dirs()
IDS = [str(d.relative_to(K8S)) for d in DIRS]


@functools.cache
def rendered(directory: Path) -> tuple[dict[str, Any], ...]:
    return tuple(render(directory))


def objects(directory: Path, kind: str) -> list[dict[str, Any]]:
    return [item for item in rendered(directory) if item["kind"] == kind]


def one(directory: Path, kind: str) -> dict[str, Any]:
    found = objects(directory, kind)
    assert len(found) == 1, f"{directory.relative_to(K8S)}: expected one {kind}, got {len(found)}"
    return found[0]


def serving_dirs() -> list[Path]:
    return [d for d in DIRS if objects(d, "Deployment")]


def pack_dirs() -> list[Path]:
    return [d for d in DIRS if objects(d, "Job")]


def container(pod_spec: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in pod_spec["containers"] if c["name"] == name)


def env_of(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in spec.get("env", [])}


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


CRDS = Path(__file__).parent / "crds"
OPERATOR_GROUP = "monitoring.coreos.com/"


def _strict(schema: Any) -> Any:
    """An openAPIV3Schema as JSON Schema that refuses unknown fields, as the API server
    prunes them (an object that lists its properties and says nothing else takes no other)."""
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    strict = {key: _strict(value) for key, value in schema.items()}
    if ("properties" in schema and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")):
        strict["additionalProperties"] = False
    return strict


@functools.cache
def operator_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> the strict schema of each vendored Prometheus Operator CRD."""
    schemas = {}
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        for version in crd["spec"]["versions"]:
            schema = version["schema"]["openAPIV3Schema"]
            schemas[(f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"])] = _strict(schema)
    return schemas


def validate_operator_object(item: dict[str, Any]) -> None:
    schema = operator_schemas().get((item["apiVersion"], item["kind"]))
    assert schema is not None, f"{item['apiVersion']} {item['kind']}: no CRD for it in {CRDS}"
    # not jsonschema.validate: that checks the schema too, whose patterns are Go's (``^(?i)...``)
    jsonschema.Draft202012Validator(schema).validate(item)


def test_the_tree_has_a_base_overlays_and_a_pack_job() -> None:
    assert {"base", "pack", "overlays/lab", "overlays/large"} <= set(IDS), IDS
    assert len(serving_dirs()) >= 3 and len(pack_dirs()) >= 3


@pytest.mark.parametrize("directory", DIRS, ids=IDS)
def test_renders_and_validates_against_the_schemas(directory: Path) -> None:
    items = rendered(directory)
    assert items, f"{directory} rendered nothing"
    for item in items:
        if item["apiVersion"].startswith(OPERATOR_GROUP):  # the Prometheus Operator's kinds: its CRDs
            try:
                validate_operator_object(item)
            except jsonschema.ValidationError as error:
                path = ".".join(str(p) for p in error.absolute_path)
                pytest.fail(f"{item['kind']}/{item['metadata']['name']}: {path}: {error.message}")
            continue
        for version in K8S_VERSIONS:
            try:
                kubernetes_validate.validate(item, version, strict=True)
            except kubernetes_validate.ValidationError as error:
                path = ".".join(str(p) for p in error.path)
                pytest.fail(f"{item['kind']}/{item['metadata']['name']} against {version}: {path}: {error.message}")
            except kubernetes_validate.SchemaNotFoundError as error:
                pytest.fail(error.message)
        if "overlays" in directory.parts and item["kind"] not in CLUSTER_SCOPED:
            assert item["metadata"].get("namespace") == "sampler", f"{item['kind']}/{item['metadata']['name']}"


@pytest.mark.parametrize("directory", serving_dirs(), ids=lambda d: str(d.relative_to(K8S)))
def test_replicas_serve_read_only_stores_behind_a_headless_service(directory: Path) -> None:
    deployment = one(directory, "Deployment")
    assert "replicas" not in deployment["spec"], "the HorizontalPodAutoscaler owns the replica count"
    pod = deployment["spec"]["template"]
    labels = pod["metadata"]["labels"]
    spec = pod["spec"]
    sampler = container(spec, "sampler")
    port = next(p for p in sampler["ports"] if p["name"] == "grpc")["containerPort"]

    service = next(s for s in objects(directory, "Service") if matches(s["spec"]["selector"], labels))
    assert service["spec"]["clusterIP"] == "None", "clients must resolve every replica (headless)"
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(port, "grpc")]
    assert matches(deployment["spec"]["selector"]["matchLabels"], labels)

    # the stores: read-only at the path serve reads (the image's SAMPLER_DATA unless set here)
    env = env_of(sampler)
    data = env.get("SAMPLER_DATA", {}).get("value") or dockerfile_stages()["runtime"].env()["SAMPLER_DATA"]
    mount = next(m for m in sampler["volumeMounts"] if m["mountPath"] == data)
    assert mount.get("readOnly") is True
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    claim = volume["persistentVolumeClaim"]
    assert claim.get("readOnly") is True
    assert any(c["metadata"]["name"] == claim["claimName"] for c in objects(directory, "PersistentVolumeClaim"))
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] != 0

    # one decode worker per requested core; the requests are set
    requests = sampler["resources"]["requests"]
    assert {"cpu", "memory"} <= set(requests)
    assert env["SAMPLER_WORKERS"]["valueFrom"]["resourceFieldRef"] == {
        "containerName": "sampler", "resource": "requests.cpu", "divisor": "1"}


@pytest.mark.parametrize("directory", serving_dirs(), ids=lambda d: str(d.relative_to(K8S)))
def test_probes_ask_the_health_service_the_server_registers(directory: Path) -> None:
    sampler = container(one(directory, "Deployment")["spec"]["template"]["spec"], "sampler")
    port = next(p for p in sampler["ports"] if p["name"] == "grpc")["containerPort"]
    tls = "SAMPLER_TLS_CERT" in env_of(sampler)
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        check = sampler[probe]
        if tls:  # the kubelet's gRPC probes cannot speak TLS
            assert "grpc" not in check and check["tcpSocket"]["port"] in (port, "grpc"), probe
            continue
        assert check["grpc"]["port"] == port, probe
        allowed = {"", SERVICE_NAME} if probe == "livenessProbe" else {SERVICE_NAME}
        assert check["grpc"].get("service", "") in allowed, f"{probe}: {check['grpc']}"


@pytest.mark.parametrize("directory", serving_dirs(), ids=lambda d: str(d.relative_to(K8S)))
def test_every_sampler_variable_is_a_serve_option_with_a_valid_value(directory: Path) -> None:
    entrypoint = load_script("entrypoint")
    options = entrypoint.serve_options()
    sampler = container(one(directory, "Deployment")["spec"]["template"]["spec"], "sampler")
    env = env_of(sampler)
    names = [name for name in env if name.startswith("SAMPLER_")]
    assert set(names) <= set(options), sorted(set(names) - set(options))
    literal = {name: item["value"] for name, item in env.items() if name in options and "value" in item}
    arguments = entrypoint.arguments_from_environment(literal, options)  # raises on a bad value
    assert arguments
    # metric reports of all replicas go to one database, its URL from a Secret
    assert env["SAMPLER_METRICS"]["valueFrom"]["secretKeyRef"]["key"] == "url"


@pytest.mark.parametrize("directory", serving_dirs(), ids=lambda d: str(d.relative_to(K8S)))
def test_autoscaler_disruption_budget_and_metrics_database(directory: Path) -> None:
    deployment = one(directory, "Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    hpa = one(directory, "HorizontalPodAutoscaler")["spec"]
    assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                     "name": deployment["metadata"]["name"]}
    assert 1 <= hpa["minReplicas"] <= hpa["maxReplicas"]
    assert [m["resource"]["name"] for m in hpa["metrics"] if m["type"] == "Resource"] == ["cpu"]
    assert matches(one(directory, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"], labels)

    secret = env_of(container(deployment["spec"]["template"]["spec"], "sampler"))["SAMPLER_METRICS"]
    secret_name = secret["valueFrom"]["secretKeyRef"]["name"]
    databases = objects(directory, "StatefulSet")
    if not databases:  # components/external-postgres: an existing instance, named in the Secret's url
        assert (K8S / "components" / "external-postgres").is_dir()
        return
    postgres = databases[0]["spec"]
    assert postgres["volumeClaimTemplates"], "PostgreSQL keeps its data on a volume of its own"
    env = env_of(container(postgres["template"]["spec"], "postgres"))
    assert env["POSTGRES_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == secret_name
    service = next(s for s in objects(directory, "Service") if s["metadata"]["name"] == postgres["serviceName"])
    assert matches(service["spec"]["selector"], postgres["template"]["metadata"]["labels"])
    assert service["spec"]["ports"][0]["port"] == 5432


def _pack_args(job: dict[str, Any], index: int) -> list[str]:
    """The pack container's command line as the kubelet expands it for completion index ``index``."""
    pack = container(job["spec"]["template"]["spec"], "pack")
    values = {"JOB_COMPLETION_INDEX": str(index)}
    for name, item in env_of(pack).items():
        if "value" in item:
            values[name] = item["value"]
        elif "resourceFieldRef" in item.get("valueFrom", {}):
            values[name] = str(pack["resources"]["requests"]["cpu"])
    return [re.sub(r"\$\((\w+)\)", lambda m: values[m.group(1)], word) for word in pack["command"] + pack["args"]]


@pytest.mark.parametrize("directory", pack_dirs(), ids=lambda d: str(d.relative_to(K8S)))
def test_each_index_packs_its_shard(directory: Path) -> None:
    job = one(directory, "Job")
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    shards = spec["completions"]
    assert 1 <= spec["parallelism"] <= shards
    pack = container(spec["template"]["spec"], "pack")
    assert env_of(pack)["SHARDS"]["value"] == str(shards), "SHARDS must equal the Job's completions"
    assert "JOB_COMPLETION_INDEX" in env_of(pack), "declared, so that $(JOB_COMPLETION_INDEX) expands in args"
    for index in (0, shards - 1):
        argv = _pack_args(job, index)
        assert argv[0] == "sampler-server", argv
        with contextlib.redirect_stderr(io.StringIO()) as errors:
            try:
                args = build_parser("pack").parse_args(argv[1:])
            except SystemExit:
                pytest.fail(f"the pack command line does not parse: {argv}: {errors.getvalue().strip()}")
        assert (args.command, args.source) == ("pack", "imagenet21k")
        assert parse_shard(args.shard) == (index, shards)
        assert args.workers == int(pack["resources"]["requests"]["cpu"])
        mounts = {m["mountPath"]: m for m in pack["volumeMounts"]}
        assert mounts[str(args.input)].get("readOnly") is True and not mounts[str(args.output)].get("readOnly")


@pytest.mark.parametrize("directory", [d for d in pack_dirs() if d.parent in serving_dirs()],
                         ids=lambda d: str(d.relative_to(K8S)))
def test_a_pack_overlay_writes_where_its_replicas_read(directory: Path) -> None:
    """overlays/X/pack writes into the stores claim of overlays/X, with the same image."""
    job_spec = one(directory, "Job")["spec"]["template"]["spec"]
    pack = container(job_spec, "pack")
    output = build_parser("pack").parse_args(_pack_args(one(directory, "Job"), 0)[1:]).output
    mount = next(m for m in pack["volumeMounts"] if m["mountPath"] == str(output))
    claim = next(v for v in job_spec["volumes"] if v["name"] == mount["name"])["persistentVolumeClaim"]["claimName"]
    serving = one(directory.parent, "Deployment")["spec"]["template"]["spec"]
    served_claims = {v["persistentVolumeClaim"]["claimName"] for v in serving["volumes"] if "persistentVolumeClaim" in v}
    assert claim in served_claims
    assert pack["image"] == container(serving, "sampler")["image"]


def test_the_readme_says_how_to_create_every_secret_the_manifests_use() -> None:
    readme = (DEPLOY / "README.md").read_text()
    names = set()
    for directory in DIRS:
        for item in rendered(directory):
            text = repr(item)
            names.update(re.findall(r"'secretName': '([^']+)'", text))
            names.update(re.findall(r"'secretKeyRef': \{'key': '[^']+', 'name': '([^']+)'", text))
    assert names >= {"sampler-postgres", "sampler-tokens", "sampler-tls"}, names
    for name in sorted(names):
        assert f"create secret generic {name}" in readme or f"create secret tls {name}" in readme, name


def test_kustomize_reports_a_broken_overlay(tmp_path: Path) -> None:
    """The rendering step can fail: an overlay naming a missing base is an error, not an empty list."""
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - ../no-such-base\n")
    with pytest.raises(AssertionError, match="kubectl kustomize"):
        render(tmp_path)


def test_validation_rejects_what_the_api_server_would() -> None:
    sampler = container(one(K8S / "base", "Deployment")["spec"]["template"]["spec"], "sampler")
    broken = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
              "spec": {"selector": {}, "template": {"spec": {"containers": [
                  {**sampler, "readinessProbe": {"grpc": {"port": "grpc"}}}]}}}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSIONS[-1], strict=True)


# ---- monitoring (components/monitoring) ------------------------------------------------------

PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
                "offset", "le", "inf", "nan"}
PROMETHEUS_OWN = {"up"}  # what Prometheus records of every scrape itself


def promql_metrics(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: identifiers that are not functions,
    keywords, label names (inside ``{}`` or a ``by (...)``) or durations."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)  # string literals
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        following = text[match.end():].lstrip()
        if following.startswith("(") or match.group().lower() in PROMQL_WORDS:
            continue
        names.add(match.group())
    return names


def monitoring_objects() -> list[tuple[Path, dict[str, Any]]]:
    return [(d, item) for d in serving_dirs() for item in rendered(d) if item["kind"] in ("PrometheusRule", "PodMonitor")
            or (item["kind"] == "ConfigMap" and item["metadata"]["name"] == "sampler-dashboard")]


def test_the_monitoring_component_is_rendered_by_an_overlay() -> None:
    kinds = {item["kind"] for _, item in monitoring_objects()}
    assert kinds == {"PrometheusRule", "PodMonitor", "ConfigMap"}, kinds


@pytest.mark.parametrize("directory", [d for d in serving_dirs() if objects(d, "PodMonitor")],
                         ids=lambda d: str(d.relative_to(K8S)))
def test_prometheus_scrapes_the_port_serve_serves_metrics_on(directory: Path) -> None:
    entrypoint = load_script("entrypoint")
    pod = one(directory, "Deployment")["spec"]["template"]
    sampler = container(pod["spec"], "sampler")
    env = env_of(sampler)
    (flag, value) = entrypoint.arguments_from_environment({"SAMPLER_METRICS_PORT": env["SAMPLER_METRICS_PORT"]["value"]})
    assert flag == "--metrics-port"
    port = next(p for p in sampler["ports"] if p["name"] == "metrics")["containerPort"]
    assert int(value) == port != next(p for p in sampler["ports"] if p["name"] == "grpc")["containerPort"]
    annotations = pod["metadata"]["annotations"]
    assert annotations == {"prometheus.io/scrape": "true", "prometheus.io/port": str(port), "prometheus.io/path": "/metrics"}
    monitor = one(directory, "PodMonitor")["spec"]
    assert matches(monitor["selector"]["matchLabels"], pod["metadata"]["labels"])
    assert [(e["port"], e["path"]) for e in monitor["podMetricsEndpoints"]] == [("metrics", "/metrics")]
    # the job the replica-down alert and the dashboard name is the pods' jobLabel value
    job = pod["metadata"]["labels"][monitor["jobLabel"]]
    rules = [rule for group in one(directory, "PrometheusRule")["spec"]["groups"] for rule in group["rules"]]
    down = next(rule for rule in rules if rule["alert"] == "SamplerReplicaDown")
    assert f'up{{job="{job}"}}' in down["expr"]


def test_the_alerts_and_the_dashboard_name_only_metrics_the_server_exports() -> None:
    # the server's table of what it exports, which tests/service/test_metrics_endpoint.py holds a real scrape to
    exported = telemetry.exported_series() | PROMETHEUS_OWN
    named: dict[str, set[str]] = {}
    for directory, item in monitoring_objects():
        where = f"{directory.relative_to(K8S)}: {item['kind']}/{item['metadata']['name']}"
        if item["kind"] == "PrometheusRule":
            exprs = [rule["expr"] for group in item["spec"]["groups"] for rule in group["rules"]]
        elif item["kind"] == "ConfigMap":
            dashboard = json.loads(item["data"]["sampler-dashboard.json"])
            exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
        else:
            continue
        assert exprs, where
        for expr in exprs:
            metrics = promql_metrics(expr)
            assert metrics, f"{where}: no metric in {expr!r}"
            unknown = metrics - exported
            assert not unknown, f"{where}: {sorted(unknown)} are not exported by the server ({expr!r})"
            named.setdefault(item["kind"], set()).update(metrics)
    # the alerts the issue asks for: a replica down, DATA_LOSS, the refusal rate, p99 latency
    assert {"up", "sampler_data_loss_total", "sampler_admission_refusals_total",
            "grpc_server_call_duration_seconds_bucket"} <= named["PrometheusRule"], named["PrometheusRule"]
    # the dashboard shows every metric of the sampler's own
    shown = {name.removesuffix("_bucket") for name in named["ConfigMap"]}
    assert {i.family for i in telemetry.INSTRUMENTS} <= shown, sorted({i.family for i in telemetry.INSTRUMENTS} - shown)


def test_promql_metric_names_are_read_as_prometheus_reads_them() -> None:
    expr = ('histogram_quantile(0.99, sum by (grpc_method, le) (rate(grpc_server_call_duration_seconds_bucket'
            '{grpc_method=~"sampler.v1.Sampler/(Get|List).*"}[5m]))) > 2 and on(pod) up{job="x"} == 1')
    assert promql_metrics(expr) == {"grpc_server_call_duration_seconds_bucket", "up"}
    assert promql_metrics("sum(rate(sampler_reports_total[5m])) / clamp_min(count(sampler_replica_info), 1)") == {
        "sampler_reports_total", "sampler_replica_info"}
