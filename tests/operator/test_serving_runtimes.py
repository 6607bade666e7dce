"""Each shipped runtime's predictor is KServe's ClusterServingRuntime: the desired Deployment and Service are checked
against the upstream definitions recorded in kserve_runtimes/ (kserve/kserve v0.20.0), and the probes against the
servers' own health APIs."""

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
# GET /v1/models/<name>, TorchServe's GET /ping on its inference address (8085 in KServe's config.properties).
PROBES = {"triton": (("/v2/health/ready", 8080), ("/v2/health/live", 8080)),
          "tensorflow-serving": (("/v1/models/sent", 8080), ("/v1/models/sent", 8080)),
          "torchserve": (("/ping", 8085), ("/ping", 8085))}


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
