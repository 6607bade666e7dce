"""Serving children on the real API server, without the Gateway API CRDs (the session's API server does not serve
HTTPRoute): every shipped runtime's Deployment and Service are accepted, the Service targets the runtime's port,
the model arrives by init container for s3:// and gs:// and by a read-only claim for pvc://, each stored predictor
can start as non-root with a startup probe, a CPU request and probes on the served port, each Deployment has its
own HPA, and the canary's realized pod-ratio split is in the status."""

from __future__ import annotations

from typing import Any

import pytest
from control_plane import ControlPlane
from e2e_objects import example, in_namespace

from mlgate.engine import PolicySet
from mlgate_reconciler.client import KubeClient, Transport
from mlgate_reconciler.inference import reconcile_inference_service
from mlgate_reconciler.results import PassResult

pytestmark = pytest.mark.e2e

FRAMEWORKS = {"triton": "onnx", "torchserve": "pytorch", "tensorflow-serving": "tensorflow"}
PORTS = {"triton": (8080, 9000), "torchserve": (8080, 7070), "tensorflow-serving": (8080, 9000)}
# kserve/kserve v0.20.0 config/runtimes/kserve-*.yaml, the same for the three runtimes
KSERVE_SECURITY = {"runAsUser": 1000, "runAsNonRoot": True, "allowPrivilegeEscalation": False, "privileged": False,
                   "capabilities": {"drop": ["ALL"]}}


def create_isvc(cluster: ControlPlane, namespace: str, **spec: Any) -> None:
    obj = in_namespace(example("inferenceservice.yaml"), namespace)
    obj["spec"].update(spec)
    cluster.kubectl("create", "-f", "-", stdin=obj).check()


def reconcile(transport: Transport, policies: PolicySet, namespace: str) -> tuple[PassResult, KubeClient]:
    client = KubeClient(transport)
    return reconcile_inference_service(client, namespace, "sentiment", policies), client


def pod_spec(cluster: ControlPlane, namespace: str, deployment: str = "sentiment-predictor") -> dict[str, Any]:
    spec: dict[str, Any] = cluster.get_object("deployment", deployment, namespace)["spec"]["template"]["spec"]
    return spec


@pytest.mark.parametrize("runtime", sorted(FRAMEWORKS))
def test_each_runtimes_children_are_accepted_and_the_service_targets_the_runtimes_ports(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet, runtime: str):
    create_isvc(cluster, namespace, runtime=runtime, framework=FRAMEWORKS[runtime], canaryTrafficPercent=0)
    outcome, _ = reconcile(transport, policies, namespace)
    assert sorted(outcome.created) == ["Deployment/sentiment-predictor", "HorizontalPodAutoscaler/sentiment",
                                       "Service/sentiment"]
    main = pod_spec(cluster, namespace)["containers"][0]
    container_ports = {p["name"]: p["containerPort"] for p in main["ports"]}
    service_ports = {p["name"]: p for p in cluster.get_object("service", "sentiment", namespace)["spec"]["ports"]}
    http, grpc = PORTS[runtime]
    assert (container_ports["http"], service_ports["http"]["port"], service_ports["http"]["targetPort"]) == (
        http, 80, http)
    assert (container_ports["grpc"], service_ports["grpc"]["targetPort"]) == (grpc, grpc)
    assert main["readinessProbe"]["httpGet"]["path"] in ("/v2/health/ready", "/ping", "/v1/models/sentiment")


def test_an_s3_model_is_fetched_by_an_init_container_with_the_secret_as_its_environment(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_isvc(cluster, namespace, canaryTrafficPercent=0, storage={"secretName": "s3-creds"})
    reconcile(transport, policies, namespace)
    spec = pod_spec(cluster, namespace)
    (init,) = spec["initContainers"]
    assert (init["name"], init["args"]) == ("storage-initializer", ["s3://ml-models/sentiment/v3", "/mnt/models"])
    assert init["envFrom"] == [{"secretRef": {"name": "s3-creds"}}]
    assert {"name": "kserve-provision-location", "emptyDir": {}} in spec["volumes"]


def test_a_pvc_model_is_mounted_read_only_without_an_init_container(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_isvc(cluster, namespace, canaryTrafficPercent=0, modelUri="pvc://models/sentiment/v3")
    reconcile(transport, policies, namespace)
    spec = pod_spec(cluster, namespace)
    assert "initContainers" not in spec
    assert {"name": "kserve-pvc-source", "persistentVolumeClaim": {"claimName": "models", "readOnly": True}} in \
        spec["volumes"]
    (mount,) = spec["containers"][0]["volumeMounts"]
    assert (mount["mountPath"], mount["subPath"], mount["readOnly"]) == ("/mnt/models", "sentiment/v3", True)


def test_a_second_pass_over_served_children_makes_zero_writes(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_isvc(cluster, namespace, runtime="tensorflow-serving", framework="tensorflow",
                storage={"secretName": "s3-creds"})
    reconcile(transport, policies, namespace)
    outcome, client = reconcile(transport, policies, namespace)
    assert sum(client.writes.values()) == 0, (client.writes, outcome)


def test_without_the_gateway_api_the_status_reports_the_realized_pod_ratio_split(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_isvc(cluster, namespace)  # 1 replica at 10%: 1 predictor + 1 canary pod
    outcome, _ = reconcile(transport, policies, namespace)
    assert not any(c.startswith("HTTPRoute/") for c in outcome.created)
    status = cluster.get_object("inferenceservice", "sentiment", namespace)["status"]
    assert status["canary"] == {"trafficPercent": 50, "requestedPercent": 10, "split": "PodRatio"}
    split = next(c for c in status["conditions"] if c["type"] == "CanarySplitExact")
    assert (split["status"], split["reason"]) == ("False", "PodRatio")
    assert not any(c["type"] == "Stalled" for c in status["conditions"])


def test_a_model_uri_the_reconciler_cannot_fetch_is_refused_before_any_child(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_isvc(cluster, namespace, canaryTrafficPercent=0, modelUri="oci://registry.local/models/sentiment:v3")
    outcome, _ = reconcile(transport, policies, namespace)
    assert outcome.created == []
    status = cluster.get_object("inferenceservice", "sentiment", namespace)["status"]
    admitted = next(c for c in status["conditions"] if c["type"] == "Admitted")
    assert (status["phase"], admitted["reason"]) == ("Failed", "UnsupportedModelUri")


@pytest.mark.parametrize("runtime", sorted(FRAMEWORKS))
def test_each_stored_predictor_starts_as_non_root_with_a_startup_probe_a_cpu_request_and_probes_on_the_served_port(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet, runtime: str):
    template = example("inferenceservice.yaml")["spec"]["template"]
    del template["spec"]["securityContext"]["runAsUser"]  # runAsNonRoot with no user: torchserve-kfs's USER is a name
    del template["spec"]["containers"][0]["securityContext"]
    create_isvc(cluster, namespace, runtime=runtime, framework=FRAMEWORKS[runtime], canaryTrafficPercent=0,
                resources={"gpu": 1}, template=template)
    reconcile(transport, policies, namespace)
    main = pod_spec(cluster, namespace)["containers"][0]
    assert main["securityContext"] == {k: v for k, v in KSERVE_SECURITY.items() if k != "runAsNonRoot"}  # the pod's
    assert (main["resources"]["requests"]["cpu"], main["resources"]["requests"]["memory"]) == ("1", "2Gi")
    assert main["startupProbe"]["periodSeconds"] * main["startupProbe"]["failureThreshold"] == 600
    ports = cluster.get_object("service", "sentiment", namespace)["spec"]["ports"]
    target = {p["name"]: p["targetPort"] for p in ports}
    assert {main[f]["httpGet"]["port"] for f in ("readinessProbe", "livenessProbe", "startupProbe")} == {target["http"]}


def test_start_up_timeout_seconds_is_stored_and_sets_how_long_the_startup_probe_waits(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_isvc(cluster, namespace, canaryTrafficPercent=0, startupTimeoutSeconds=1800)
    reconcile(transport, policies, namespace)
    assert pod_spec(cluster, namespace)["containers"][0]["startupProbe"]["failureThreshold"] == 180


def test_min_replicas_zero_is_stored_as_one_serving_replica_under_an_hpa_floor_of_one(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_isvc(cluster, namespace, canaryTrafficPercent=0, scaling={"minReplicas": 0, "maxReplicas": 3})
    reconcile(transport, policies, namespace)
    assert cluster.get_object("deployment", "sentiment-predictor", namespace)["spec"]["replicas"] == 1
    hpa = cluster.get_object("horizontalpodautoscaler", "sentiment", namespace)["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (1, 3)


def test_each_stored_deployment_has_its_own_hpa_whose_floor_keeps_the_canary_share(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_isvc(cluster, namespace, canaryTrafficPercent=50, scaling={"minReplicas": 4, "maxReplicas": 8})
    reconcile(transport, policies, namespace)
    for hpa_name, component in (("sentiment", "predictor"), ("sentiment-canary", "canary")):
        hpa = cluster.get_object("horizontalpodautoscaler", hpa_name, namespace)["spec"]
        replicas = cluster.get_object("deployment", f"sentiment-{component}", namespace)["spec"]["replicas"]
        assert (hpa["scaleTargetRef"]["name"], replicas, hpa["minReplicas"], hpa["maxReplicas"]) == (
            f"sentiment-{component}", 2, 2, 4)


def test_a_gs_model_mounts_the_secret_as_a_key_file_named_by_google_application_credentials(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_isvc(cluster, namespace, canaryTrafficPercent=0, modelUri="gs://ml-models/sentiment/v3",
                storage={"secretName": "gcs-key"})
    reconcile(transport, policies, namespace)
    spec = pod_spec(cluster, namespace)
    (init,) = spec["initContainers"]
    assert init["env"] == [{"name": "GOOGLE_APPLICATION_CREDENTIALS",
                            "value": "/var/secrets/gcloud-application-credentials.json"}]
    assert {"name": "user-gcp-sa", "mountPath": "/var/secrets/", "readOnly": True} in init["volumeMounts"]
    (volume,) = [v for v in spec["volumes"] if v["name"] == "user-gcp-sa"]
    assert volume["secret"]["secretName"] == "gcs-key"
