"""The monitoring objects: `kubectl kustomize manifests/monitoring` and the chart's `metrics.*` values render the
same ServiceMonitor, PodMonitor, PrometheusRule and dashboard ConfigMap, and each is valid under the Prometheus
Operator's own CRD schema (tests/helm/prometheus-operator-crds/, copied from upstream); the e2e test has the real
API server store them from both."""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from control_plane import ControlPlane
from helm_chart import CHART, MANIFESTS, NAMESPACE, RELEASE, Helm, Obj, by_key, kustomize
from test_helm_e2e import reference, stored

MONITORING = MANIFESTS / "monitoring"
UPSTREAM_CRDS = Path(__file__).parent / "prometheus-operator-crds"
ALL_ON = {"metrics": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True},
                      "dashboard": {"enabled": True}}}
MONITORING_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}


def upstream_schemas() -> dict[str, dict[str, Any]]:
    """kind -> the openAPIV3Schema of its served version, from the upstream CRDs."""
    schemas = {}
    for path in sorted(UPSTREAM_CRDS.glob("*.yaml")):
        crd = next(d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d)
        (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1" and v["served"]]
        schemas[crd["spec"]["names"]["kind"]] = version["schema"]["openAPIV3Schema"]
    return schemas


def monitoring(objects: list[Obj]) -> list[Obj]:
    return [o for o in objects if o["kind"] in MONITORING_KINDS or o["metadata"]["name"] == "mlgate-dashboard"]


def without_labels(obj: Obj) -> Obj:
    obj = copy.deepcopy(obj)
    obj["metadata"].pop("labels", None)
    return obj


def schema_errors(obj: Obj, schemas: dict[str, dict[str, Any]]) -> list[str]:
    validator = jsonschema.Draft7Validator(schemas[obj["kind"]])
    return [f"{obj['kind']}/{obj['metadata']['name']} {'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in validator.iter_errors(obj)]


def test_default_values_render_no_monitoring_object(helm: Helm) -> None:
    assert monitoring(helm.render()) == []


def test_the_chart_renders_what_kustomize_renders_for_monitoring_but_for_labels(helm: Helm) -> None:
    ours, theirs = by_key(monitoring(helm.render(values=ALL_ON))), by_key(kustomize(MONITORING))
    assert sorted(ours) == sorted(theirs) and len(ours) == 4
    for key, want in theirs.items():
        assert without_labels(ours[key]) == without_labels(want), key
        assert want["metadata"]["labels"].items() <= ours[key]["metadata"]["labels"].items(), key


def test_the_dashboard_configmap_carries_the_dashboard_json_and_the_sidecar_label(helm: Helm) -> None:
    (configmap,) = [o for o in helm.render(values=ALL_ON) if o["kind"] == "ConfigMap"
                    and o["metadata"]["name"] == "mlgate-dashboard"]
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["mlgate.json"]) == json.loads((MONITORING / "dashboard.json").read_text())


def test_labels_interval_and_dashboard_namespace_come_from_the_values(helm: Helm) -> None:
    values = {"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "kps"}, "interval": "1m"},
                          "prometheusRule": {"enabled": True, "labels": {"role": "alert-rules"}},
                          "dashboard": {"enabled": True, "labels": {"dashboards": "mlgate"},
                                        "namespace": "grafana"}}}
    objects = {o["kind"]: o for o in monitoring(helm.render(values=values))}
    for kind in ("ServiceMonitor", "PodMonitor"):
        assert objects[kind]["metadata"]["labels"]["release"] == "kps"
    assert [e["interval"] for e in objects["ServiceMonitor"]["spec"]["endpoints"]] == ["1m"]
    assert [e["interval"] for e in objects["PodMonitor"]["spec"]["podMetricsEndpoints"]] == ["1m"]
    assert objects["PrometheusRule"]["metadata"]["labels"]["role"] == "alert-rules"
    assert "release" not in objects["PrometheusRule"]["metadata"]["labels"]
    dashboard = objects["ConfigMap"]["metadata"]
    assert dashboard["namespace"] == "grafana" and dashboard["labels"]["dashboards"] == "mlgate"
    assert dashboard["labels"]["grafana_dashboard"] == "1"  # Helm merges maps: `grafana_dashboard: null` drops it


@pytest.mark.parametrize(("change", "where"), [
    ({"metrics": {"dashboard": {"labels": {"grafana_dashboard": 1}}}}, "/metrics/dashboard/labels/grafana_dashboard"),
    ({"metrics": {"serviceMonitor": {"interval": "30 seconds"}}}, "/metrics/serviceMonitor/interval"),
    ({"metrics": {"prometheusRule": {"enable": True}}}, "/metrics/prometheusRule"),
], ids=["a label value that is no string", "an interval Prometheus cannot read", "a misspelt switch"])
def test_helm_refuses_a_wrong_metrics_value_naming_where_it_is(helm: Helm, change: dict[str, Any], where: str) -> None:
    result = helm.template(values=change)
    assert result.code != 0 and where in result.stderr, result.stderr


@pytest.mark.parametrize("source", ["kustomize", "chart"])
def test_each_monitor_and_rule_is_valid_under_the_upstream_crd_schema(helm: Helm, source: str) -> None:
    schemas = upstream_schemas()
    objects = kustomize(MONITORING) if source == "kustomize" else helm.render(values=ALL_ON)
    checked = [o for o in objects if o["kind"] in MONITORING_KINDS]
    assert {o["kind"] for o in checked} == MONITORING_KINDS
    assert [e for o in checked for e in schema_errors(o, schemas)] == []


def test_the_schema_check_sees_a_field_the_crd_does_not_have() -> None:
    (monitor,) = [o for o in kustomize(MONITORING) if o["kind"] == "ServiceMonitor"]
    monitor["spec"]["endpoints"][0]["scheme"] = "tcp"
    assert any("scheme" in e for e in schema_errors(monitor, upstream_schemas()))


def test_the_service_port_the_service_monitor_scrapes_is_the_webhook_metrics_port() -> None:
    (monitor,) = [o for o in kustomize(MONITORING) if o["kind"] == "ServiceMonitor"]
    base = by_key(kustomize())
    service = base[("Service", NAMESPACE, "mlgate-webhook")]
    (port,) = [p for p in service["spec"]["ports"] if p["name"] == monitor["spec"]["endpoints"][0]["port"]]
    (container,) = base[("Deployment", NAMESPACE, "mlgate-webhook")]["spec"]["template"]["spec"]["containers"]
    (target,) = [p for p in container["ports"] if p["name"] == port["targetPort"]]
    assert f"--metrics-port={target['containerPort']}" in container["args"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()


@pytest.mark.e2e
def test_the_api_server_stores_the_monitoring_objects_of_kustomize_and_of_helm_install(
        helm: Helm, bare_cluster: ControlPlane) -> None:
    cluster = bare_cluster
    for path in sorted(UPSTREAM_CRDS.glob("*.yaml")):
        cluster.kubectl("apply", "--server-side", "-f", str(path), timeout=60).check()
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/servicemonitors.monitoring.coreos.com",
                    "crd/podmonitors.monitoring.coreos.com", "crd/prometheusrules.monitoring.coreos.com",
                    timeout=70).check()

    cluster.kubectl("create", "namespace", NAMESPACE)  # may exist from another test: kustomize's namespace is fixed
    applied = cluster.kubectl("apply", "-k", str(MONITORING), timeout=60).check()
    objects = kustomize(MONITORING)
    have, result = stored(cluster, NAMESPACE, objects)
    assert have == {reference(o) for o in objects}, (applied, result)

    namespace = f"mlgate-{uuid.uuid4().hex[:6]}"
    values = helm.home / "monitoring-values.yaml"
    values.write_text(yaml.safe_dump(ALL_ON), encoding="utf-8")
    helm.run("install", RELEASE, str(CHART), "--namespace", namespace, "--create-namespace", "--values",
             str(values), "--timeout", "60s", kubeconfig=cluster.kubeconfig).check()
    rendered = monitoring(helm.render(namespace=namespace, values=ALL_ON))
    have, result = stored(cluster, namespace, rendered)
    assert have == {reference(o) for o in rendered}, result
    rule = cluster.get_object("prometheusrule.monitoring.coreos.com", "mlgate", namespace)
    assert rule["spec"] == yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())["spec"]
    helm.run("uninstall", RELEASE, "--namespace", namespace, "--wait", "--timeout", "60s",
             kubeconfig=cluster.kubeconfig).check()
    cluster.kubectl("delete", "-k", str(MONITORING), "--wait=false", timeout=60)
