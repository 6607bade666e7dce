"""Each shipped runtime's predictor is KServe's ClusterServingRuntime: the desired Deployment and Service are checked
against the upstream definitions recorded in kserve_runtimes/ (kserve/kserve v0.20.0: image, args, ports, requests,
security context), and the probes against the servers' own health APIs, on the port the Service sends to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from mlgate_reconciler.desired_inference import desired_inference_children
from mlgate_reconciler.runtimes import load_runtimes

UPSTREAM = Path(__file__).with_name("kserve_runtimes")
RUNTIMES = {"triton": "kserve-tritonserver", "torchserve": "kserve-torchserve",
            "tensorflow-serving": "kserve-tensorflow-serving"}
# The KServe container's ports: what the upstream args set; TorchServe's sit in its image's KServe wrapper
# (pytorch/serve kubernetes/kserve/kserve_wrapper/__main__.py: http_port=8080, grpc_port=7070).
PORT_FLAGS = {"triton": ("--http-port", "--grpc-port"), "tensorflow-serving": ("--rest_api_port", "--port")}
WRAPPER_PORTS = {"torchserve": (8080, 7070)}
# Health APIs: Triton's /v2/health/{ready,live} (KServe v2 protocol), TF-Serving's model status
# GET /v1/models/<name>, TorchServe's KServe wrapper (a kserve ModelServer: /v2/health/{ready,live}); TorchServe's
# own /ping on 8085 is bound to 127.0.0.1 in pytorch/serve's kubernetes/kserve/config.properties.
PROBES = {"triton": (("/v2/health/ready", 8080), ("/v2/health/live", 8080)),
          "tensorflow-serving": (("/v1/models/sent", 8080), ("/v1/models/sent", 8080)),
          "torchserve": (("/v2/health/ready", 8080), ("/v2/health/live", 8080))}
PROBE_FIELDS = ("readinessProbe", "livenessProbe", "startupProbe")


def upstream(runtime: str) -> dict[str, Any]:
    doc = yaml.safe_load((UPSTREAM / f"{RUNTIMES[runtime]}.yaml").read_text(encoding="utf-8"))
    (container,) = doc["spec"]["containers"]
    return dict(container)


def upstream_image(runtime: str) -> str:
    images = yaml.safe_load((UPSTREAM / "images-kustomization.yaml").read_text(encoding="utf-8"))["images"]
    placeholder = upstream(runtime)["image"].split(":")[0]
    (entry,) = [i for i in images if i["name"] == placeholder]
    return f"{entry['newName']}:{entry['newTag']}"


def isvc(runtime: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "mlgate.dev/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "sent", "namespace": "ml", "uid": "u-2", "labels": {"serviceEnvelope": "kservev2"}},
            "spec": {"modelUri": "s3://models/sent/v3", "runtime": runtime, **spec}}


def children(runtime: str, **spec: Any) -> dict[str, dict[str, Any]]:
    return {f"{c['kind']}/{c['metadata']['name']}": c for c in desired_inference_children(isvc(runtime, **spec))}


def predictor(runtime: str, **spec: Any) -> dict[str, Any]:
    pod: dict[str, Any] = children(runtime, **spec)["Deployment/sent-predictor"]["spec"]["template"]["spec"]
    return pod


def flag(args: list[str], name: str) -> str:
    (value,) = [a.split("=", 1)[1] for a in args if a.startswith(name + "=")]
    return value


def upstream_ports(runtime: str) -> tuple[int, int]:
    if runtime in WRAPPER_PORTS:
        return WRAPPER_PORTS[runtime]
    http, grpc = PORT_FLAGS[runtime]
    args = upstream(runtime)["args"]
    return int(flag(args, http)), int(flag(args, grpc))


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_the_predictor_runs_the_upstream_image_command_and_args_with_the_name_filled_in(runtime):
    main = predictor(runtime)["containers"][0]
    expected = upstream(runtime)
    assert main["image"] == upstream_image(runtime)
    assert main.get("command") == expected.get("command")
    assert main["args"] == [a.replace("{{.Name}}", "sent") for a in expected["args"]]


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_the_container_and_the_service_expose_the_ports_the_upstream_args_set(runtime):
    http, grpc = upstream_ports(runtime)
    main = predictor(runtime)["containers"][0]
    assert {(p["name"], p["containerPort"]) for p in main["ports"]} == {("http", http), ("grpc", grpc)}
    ports = {p["name"]: p for p in children(runtime)["Service/sent"]["spec"]["ports"]}
    assert (ports["http"]["port"], ports["http"]["targetPort"]) == (80, http)
    assert (ports["grpc"]["port"], ports["grpc"]["targetPort"]) == (grpc, grpc)


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_the_model_is_mounted_where_the_upstream_args_read_it(runtime):
    store_flag = {"triton": "--model-store", "tensorflow-serving": "--model_base_path",
                  "torchserve": "--model-store"}[runtime]
    read_from = flag(upstream(runtime)["args"], store_flag).removesuffix("/model-store")  # TorchServe: a subdir
    pod = predictor(runtime)
    (mount,) = pod["containers"][0]["volumeMounts"]
    assert (mount["mountPath"], mount["readOnly"]) == (read_from, True)
    (init,) = pod["initContainers"]
    assert init["args"] == ["s3://models/sent/v3", read_from]


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_readiness_and_liveness_probe_the_servers_health_api(runtime):
    main = predictor(runtime)["containers"][0]
    (ready_path, ready_port), (live_path, live_port) = PROBES[runtime]
    assert main["readinessProbe"]["httpGet"] == {"path": ready_path, "port": ready_port}
    assert main["livenessProbe"]["httpGet"] == {"path": live_path, "port": live_port}


def test_torchserve_gets_the_service_envelope_from_the_label_as_kserve_templates_it():
    main = predictor("torchserve")["containers"][0]
    assert {"name": "TS_SERVICE_ENVELOPE", "value": "kservev2"} in main["env"]


def test_a_template_predictor_with_its_own_args_and_probe_keeps_them():
    own = {"name": "predictor", "args": ["--strict-model-config=false"],
           "readinessProbe": {"tcpSocket": {"port": 8080}}}
    main = predictor("triton", template={"spec": {"containers": [own]}})["containers"][0]
    assert main["args"] == ["--strict-model-config=false"]
    assert main["readinessProbe"] == {"tcpSocket": {"port": 8080}}
    assert main["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"


def test_an_image_in_the_spec_replaces_the_runtime_image_only():
    main = predictor("triton", image="registry.local/triton:24.01-py3")["containers"][0]
    assert main["image"] == "registry.local/triton:24.01-py3"
    assert main["args"][0] == "tritonserver"


def test_the_shipped_catalog_is_exactly_the_three_kserve_runtimes():
    assert sorted(load_runtimes().runtimes) == sorted(RUNTIMES)


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_every_probe_hits_the_port_the_service_sends_traffic_to(runtime):
    main = predictor(runtime)["containers"][0]
    target = {p["name"]: p["targetPort"] for p in children(runtime)["Service/sent"]["spec"]["ports"]}["http"]
    assert {main[field]["httpGet"]["port"] for field in PROBE_FIELDS} == {target}


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_a_startup_probe_on_the_liveness_check_holds_the_liveness_probe_off_for_ten_minutes(runtime):
    main = predictor(runtime)["containers"][0]
    startup = main["startupProbe"]
    assert startup["httpGet"] == main["livenessProbe"]["httpGet"]
    assert startup["periodSeconds"] * startup["failureThreshold"] == 600


@pytest.mark.parametrize(("seconds", "threshold"), [(1800, 180), (45, 5), (10, 1)])
def test_start_up_timeout_seconds_sets_how_long_the_startup_probe_waits_rounded_up(seconds, threshold):
    startup = predictor("triton", startupTimeoutSeconds=seconds)["containers"][0]["startupProbe"]
    assert (startup["periodSeconds"], startup["failureThreshold"]) == (10, threshold)


def test_a_runtime_without_a_startup_probe_gets_one_from_its_liveness_check():
    catalog = load_runtimes()
    bare = catalog.runtimes["triton"].model_copy(update={"startup_probe": None})
    catalog = catalog.model_copy(update={"runtimes": {**catalog.runtimes, "triton": bare}})
    (deployment, *_) = desired_inference_children(isvc("triton"), catalog)
    startup = deployment["spec"]["template"]["spec"]["containers"][0]["startupProbe"]
    assert startup == {"httpGet": {"path": "/v2/health/live", "port": 8080}, "periodSeconds": 10,
                       "failureThreshold": 60}


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_the_predictor_requests_what_the_upstream_runtime_declares(runtime):
    main = predictor(runtime)["containers"][0]
    assert main["resources"] == upstream(runtime)["resources"]


def test_the_services_own_resources_win_per_resource_and_the_runtimes_fill_the_rest():
    main = predictor("triton", resources={"gpu": 1, "memory": "16Gi"})["containers"][0]
    assert main["resources"] == {"limits": {"nvidia.com/gpu": 1, "memory": "16Gi", "cpu": "1"},
                                 "requests": {"nvidia.com/gpu": 1, "memory": "16Gi", "cpu": "1"}}


def test_a_cpu_the_template_only_limits_takes_no_runtime_request_above_it():
    own = {"name": "predictor", "resources": {"limits": {"cpu": "500m"}}}
    main = predictor("triton", template={"spec": {"containers": [own]}})["containers"][0]
    assert main["resources"]["limits"]["cpu"] == "500m"
    assert "cpu" not in main["resources"]["requests"]  # the API server defaults it to the limit


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_the_predictor_runs_with_the_upstream_security_context(runtime):
    main = predictor(runtime)["containers"][0]
    assert main["securityContext"] == upstream(runtime)["securityContext"]
    assert (main["securityContext"]["runAsUser"], main["securityContext"]["runAsNonRoot"]) == (1000, True)


def test_the_templates_own_security_context_wins_key_by_key():
    own = {"name": "predictor", "securityContext": {"readOnlyRootFilesystem": True, "runAsUser": 2000}}
    context = predictor("triton", template={"spec": {"containers": [own]}})["containers"][0]["securityContext"]
    assert (context["runAsUser"], context["readOnlyRootFilesystem"], context["capabilities"]) == (
        2000, True, {"drop": ["ALL"]})


def test_a_user_the_pod_sets_is_not_overridden_by_the_runtimes_container_user():
    pod = predictor("torchserve", template={"spec": {"securityContext": {"runAsUser": 1001, "runAsNonRoot": True}}})
    context = pod["containers"][0]["securityContext"]
    assert "runAsUser" not in context and "runAsNonRoot" not in context
    assert context["allowPrivilegeEscalation"] is False
