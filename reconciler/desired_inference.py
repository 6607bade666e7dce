"""Desired children of an InferenceService, as full Kubernetes objects (pure; no I/O).

Same input, same output, as desired.py for a TrainingJob. The model server is data: the runtime named by
spec.runtime in the catalog (runtimes.py: KServe's ClusterServingRuntimes plus a platform's file).
"""

from __future__ import annotations

import copy
from typing import Any

from mlgate.rules.gang_markers import label_value
from mlgate.workloads import render

from .desired import child_object, main_container, name_of
from .model_storage import mount_model, uri_problem
from .reasons import Reason
from .runtimes import Catalog, Runtime, active_runtimes, render_template

__all__ = ["COMPONENT_LABEL", "HTTPROUTE_API", "ISVC_LABEL", "canary_split", "desired_inference_children",
           "has_canary", "inference_problem"]

# --- InferenceService ----------------------------------------------------------------------------------
#
# InferenceService -> in this order: Deployment `<name>-predictor`, Deployment `<name>-canary` (only with
# canaryTrafficPercent > 0 and spec.canary), Service `<name>` (ClusterIP: port 80 "http" -> the runtime's HTTP
# port, and the runtime's gRPC port "grpc" -> itself), with a canary and `routed` (the Gateway API is served) the
# Services `<name>-predictor` and `<name>-canary` and an HTTPRoute `<name>`, and when `scaling` is set an
# `autoscaling/v2` HorizontalPodAutoscaler per Deployment that has replicas: `<name>` on the predictor,
# `<name>-canary` on the canary.
#
# Each pod runs the runtime's image, command, args, ports, probes, default requests and security context (unless
# the template's predictor container sets its own), and gets its model as model_storage.py says (init container,
# or a pvc:// claim mounted).
#
# Traffic split, routed: the HTTPRoute (gateway.networking.k8s.io/v1) attaches to the Service `<name>`'s http
# port (a GAMMA "producer" route: a mesh, or a Gateway the platform points at it, applies it) and sends
# weight 100 - pct to `<name>-predictor` and pct to `<name>-canary`: exactly canaryTrafficPercent of requests,
# once an implementation accepts the route (inference.py reads its status before it says so).
# Not routed: both Deployments' pods carry the Service's selector label `mlgate.dev/inference-service`, so
# kube-proxy spreads connections evenly over all ready pods of both; the split is the pod ratio. In both cases
# the replicas follow the share; with total = scaling.minReplicas (default 1; 0 is served as 1, see
# render.serving_replicas) and pct = canaryTrafficPercent:
#   canary  = max(1, round_half_up(total * pct / 100))     (integer math: (total * pct + 50) // 100)
#   primary = total - canary, but at least 1 while pct < 100 (never send 100% to a canary asked for less)
# so the pod-ratio share is canary / (primary + canary): total 10 at 10% -> 9 + 1; total 1 at 10% -> 1 + 1 (50%).
# That split is per connection, not per request (keep-alive clients stick to one pod); status.canary says what
# it is. Each Deployment selects its own pods with `mlgate.dev/component` (predictor | canary), so the two
# selectors never overlap. Each has its own HPA, floor and ceiling split the same way (minReplicas -> the
# replicas above, maxReplicas -> split by the same formula), so no HPA lifts one component to the other's
# total: one HPA over the predictor with the total as its floor undid the split (4 at 50% became 4 + 2, 33%).
# Under the pod ratio both see the same per-pod load and scale alike. When an HPA exists the reconciler leaves
# its Deployment's spec.replicas to it.

ISVC_LABEL = "mlgate.dev/inference-service"
COMPONENT_LABEL = "mlgate.dev/component"
SERVICE_PORT = 80
HTTPROUTE_API = "gateway.networking.k8s.io/v1"
GRPC_APP_PROTOCOL = "kubernetes.io/h2c"  # KEP-3726 standard appProtocol: gRPC is HTTP/2 without TLS here
DEFAULT_TARGET_UTILIZATION = 80  # autoscaling/v2's own default when no metric is given
DEFAULT_PERIOD = 10  # a probe's periodSeconds when unset (core/v1 Probe)
DEFAULT_STARTUP_SECONDS = 600  # a runtime with a liveness probe and no startupProbe: 10 minutes to load
POD_IDENTITY = ("runAsUser", "runAsGroup", "runAsNonRoot")  # fields a pod's securityContext sets for all containers


def desired_inference_children(isvc: dict[str, Any], catalog: Catalog | None = None, *,
                               routed: bool = True) -> list[dict[str, Any]]:
    """The children; `routed`: the API server serves HTTPRoute (the pass found out). Call only when
    `inference_problem` found nothing."""
    catalog = catalog or active_runtimes()
    spec = isvc.get("spec") or {}
    name = name_of(isvc)
    runtime = catalog.runtimes[str(spec.get("runtime"))]
    primary, canary = canary_split(spec)
    children = [_deployment(isvc, catalog, "predictor", primary, image=spec.get("image"),
                            model_uri=spec.get("modelUri"))]
    if has_canary(spec):
        overrides = spec.get("canary") or {}
        children.append(_deployment(isvc, catalog, "canary", canary,
                                    image=overrides.get("image") or spec.get("image"),
                                    model_uri=overrides.get("modelUri") or spec.get("modelUri")))
    children.append(_service(isvc, name, runtime, None))
    if has_canary(spec) and routed:
        children += [_service(isvc, f"{name}-{c}", runtime, c) for c in ("predictor", "canary")]
        children.append(_route(isvc, int(spec["canaryTrafficPercent"])))
    if spec.get("scaling"):
        children += _hpas(isvc, spec["scaling"], {"predictor": primary, "canary": canary})
    return children


def inference_problem(isvc: dict[str, Any], catalog: Catalog | None = None) -> Reason | None:
    """(reason, message) when the spec cannot be served as written: an unknown runtime, a model URI the
    reconciler cannot fetch, an autoscaler that could never scale."""
    catalog = catalog or active_runtimes()
    spec = isvc.get("spec") or {}
    runtime = str(spec.get("runtime"))
    if runtime not in catalog.runtimes:
        known = ", ".join(sorted(catalog.runtimes))
        return Reason("UnknownRuntime", f"spec.runtime: runtime {runtime!r} is not configured; use one of: {known} "
                                        "(or add it to the reconciler's --runtimes file)")
    uris = [("spec.modelUri", spec.get("modelUri"))]
    if has_canary(spec) and (spec.get("canary") or {}).get("modelUri"):
        uris.append(("spec.canary.modelUri", spec["canary"]["modelUri"]))
    for field, uri in uris:
        problem = uri_problem(field, str(uri or ""))
        if problem is not None:
            return Reason("UnsupportedModelUri", problem)
    return _unrequested(desired_inference_children(isvc, catalog, routed=False))


def _unrequested(children: list[dict[str, Any]]) -> Reason | None:
    """An HPA on CPU utilization over a pod with a container that requests no CPU never scales: the HPA controller
    reports "missing request for cpu in container ..." (kubernetes/kubernetes pkg/controller/podautoscaler/
    replica_calculator.go calculatePodRequests). Refused here, naming the containers."""
    scaled = {h["spec"]["scaleTargetRef"]["name"] for h in children if h["kind"] == "HorizontalPodAutoscaler"}
    for deployment in children:
        if deployment["kind"] != "Deployment" or deployment["metadata"]["name"] not in scaled:
            continue
        missing = sorted(str(c.get("name")) for c in deployment["spec"]["template"]["spec"]["containers"]
                         if not _requests_cpu(c))
        if missing:
            names = ", ".join(f'"{n}"' for n in missing)
            return Reason("MissingCPURequest", f"spec.scaling: the autoscaler scales on CPU utilization, but "
                                               f"container(s) {names} of {deployment['metadata']['name']} request "
                                               "no cpu, so it would never scale; set resources.requests.cpu on "
                                               "them in spec.template (or resources.cpu for the predictor)")
    return None


def _requests_cpu(container: dict[str, Any]) -> bool:
    resources = container.get("resources") or {}  # a limit alone defaults the request to it
    return any("cpu" in (resources.get(section) or {}) for section in ("requests", "limits"))


def canary_split(spec: dict[str, Any], total: int | None = None) -> tuple[int, int]:
    """(predictor replicas, canary replicas) of `total` (default: the floor, scaling.minReplicas); see the
    traffic-split comment above."""
    total = render.serving_replicas(spec) if total is None else total
    if not has_canary(spec) or total == 0:
        return total, 0
    pct = int(spec["canaryTrafficPercent"])
    canary = max(1, (total * pct + 50) // 100)
    primary = total - canary
    if pct < 100:
        primary = max(1, primary)
    return primary, canary


def has_canary(spec: dict[str, Any]) -> bool:
    pct = spec.get("canaryTrafficPercent")
    return isinstance(pct, int) and pct > 0 and bool(spec.get("canary"))


def _isvc_object(api_version: str, kind: str, isvc: dict[str, Any], name: str, **body: Any) -> dict[str, Any]:
    obj = child_object(api_version, kind, isvc, name, **body)
    obj["metadata"]["labels"] = {ISVC_LABEL: label_value(name_of(isvc))}
    return obj


def _service(isvc: dict[str, Any], name: str, runtime: Runtime, component: str | None) -> dict[str, Any]:
    selector = {ISVC_LABEL: label_value(name_of(isvc)), **({COMPONENT_LABEL: component} if component else {})}
    ports: list[dict[str, Any]] = [
        {"name": "http", "port": SERVICE_PORT, "targetPort": runtime.http_port, "protocol": "TCP"}]
    if runtime.grpc_port is not None:
        ports.append({"name": "grpc", "port": runtime.grpc_port, "targetPort": runtime.grpc_port,
                      "protocol": "TCP", "appProtocol": GRPC_APP_PROTOCOL})
    service = _isvc_object("v1", "Service", isvc, name, spec={"type": "ClusterIP", "selector": selector,
                                                              "ports": ports})
    if component:
        service["metadata"]["labels"][COMPONENT_LABEL] = component
    return service


def _route(isvc: dict[str, Any], pct: int) -> dict[str, Any]:
    """HTTPRoute v1 (kubernetes-sigs/gateway-api v1.6.1 apis/v1/httproute_types.go, shared_types.go): a
    ParentReference to the Service's http port (group "" and kind Service: the mesh case; sectionName is the
    Service port's name), one rule whose BackendRefs carry the weights (weight/sum of weights; 0 sends nothing)."""
    name = name_of(isvc)

    def backend(component: str, weight: int) -> dict[str, Any]:
        return {"group": "", "kind": "Service", "name": f"{name}-{component}", "port": SERVICE_PORT,
                "weight": weight}

    return _isvc_object(HTTPROUTE_API, "HTTPRoute", isvc, name, spec={
        "parentRefs": [{"group": "", "kind": "Service", "name": name, "sectionName": "http"}],
        "rules": [{"backendRefs": [backend("predictor", 100 - pct), backend("canary", pct)]}],
    })


def _deployment(isvc: dict[str, Any], catalog: Catalog, component: str, replicas: int, *, image: Any,
                model_uri: Any) -> dict[str, Any]:
    spec = isvc.get("spec") or {}
    name = name_of(isvc)
    runtime = catalog.runtimes[str(spec.get("runtime"))]
    template_meta = (spec.get("template") or {}).get("metadata") or {}
    pod_spec = copy.deepcopy(render.render_pod_spec("InferenceService", spec))
    main = main_container(pod_spec, render.SERVING_CONTAINER)
    main["image"] = str(image or runtime.image)
    _run_runtime(pod_spec, main, runtime, isvc)
    storage = spec.get("storage") or {}
    mount_model(pod_spec, main, str(model_uri or ""), runtime, initializer=catalog.storage_initializer,
                secret=storage.get("secretName"))
    selector = {ISVC_LABEL: label_value(name), COMPONENT_LABEL: component}
    pod_meta: dict[str, Any] = {"labels": {**(template_meta.get("labels") or {}), **selector}}
    if template_meta.get("annotations"):
        pod_meta["annotations"] = dict(template_meta["annotations"])
    deployment = _isvc_object("apps/v1", "Deployment", isvc, f"{name}-{component}", spec={
        "replicas": replicas,
        "selector": {"matchLabels": selector},
        "template": {"metadata": pod_meta, "spec": pod_spec},
    })
    deployment["metadata"]["labels"][COMPONENT_LABEL] = component
    return deployment


def _run_runtime(pod_spec: dict[str, Any], main: dict[str, Any], runtime: Runtime, isvc: dict[str, Any]) -> None:
    """The runtime's command, args, env, ports, probes, requests and security context on the predictor container;
    what the template's predictor container sets itself wins (a command or args of its own replace the runtime's
    both; a resource it names, request or limit, takes none of the runtime's for that resource)."""
    name = name_of(isvc)
    labels = (isvc.get("metadata") or {}).get("labels") or {}
    if not main.get("command") and not main.get("args"):
        if runtime.command:
            main["command"] = render_template(runtime.command, name, labels)
        if runtime.args:
            main["args"] = render_template(runtime.args, name, labels)
    own = {e.get("name") for e in main.get("env") or [] if isinstance(e, dict)}
    added = [{"name": k, "value": render_template(v, name, labels)} for k, v in runtime.env.items() if k not in own]
    if added:
        main["env"] = [*(main.get("env") or []), *added]
    ports = [p for p in main.get("ports") or [] if not (isinstance(p, dict) and p.get("name") in ("http", "grpc"))]
    ports.append({"name": "http", "containerPort": runtime.http_port, "protocol": "TCP"})
    if runtime.grpc_port is not None:
        ports.append({"name": "grpc", "containerPort": runtime.grpc_port, "protocol": "TCP"})
    main["ports"] = ports
    probes = (("readinessProbe", runtime.readiness_probe), ("livenessProbe", runtime.liveness_probe),
              ("startupProbe", _startup_probe(runtime, (isvc.get("spec") or {}).get("startupTimeoutSeconds"))))
    for field, probe in probes:
        if probe and field not in main:
            main[field] = render_template(copy.deepcopy(probe), name, labels)
    _default_resources(main, runtime.resources)
    _default_security(pod_spec, main, runtime.security_context)


def _startup_probe(runtime: Runtime, timeout: Any) -> dict[str, Any] | None:
    """The runtime's startupProbe (else its liveness probe's check), given `timeout` seconds when the service sets
    spec.startupTimeoutSeconds: failureThreshold x periodSeconds (10, the kubelet's default) covers it."""
    base = runtime.startup_probe or runtime.liveness_probe
    if base is None:
        return None
    probe = copy.deepcopy(base)
    if runtime.startup_probe is None:
        probe = {k: v for k, v in probe.items() if k not in ("failureThreshold", "successThreshold")}
        probe.setdefault("periodSeconds", DEFAULT_PERIOD)
        probe["failureThreshold"] = DEFAULT_STARTUP_SECONDS // int(probe["periodSeconds"])
    if isinstance(timeout, int) and not isinstance(timeout, bool) and timeout > 0:
        period = int(probe.get("periodSeconds") or DEFAULT_PERIOD)
        probe["failureThreshold"] = max(1, -(-timeout // period))  # ceiling: never shorter than asked
    return probe


def _default_resources(main: dict[str, Any], defaults: dict[str, Any]) -> None:
    """The runtime's requests and limits for each resource the container names in neither. KServe merges the
    runtime's container under the service's (pkg/controller/v1beta1/inferenceservice/utils/utils.go
    MergeRuntimeContainers, a strategic merge in which the service's values win); here per resource rather than
    per key, so a limit of the service's never sits under a request of the runtime's."""
    resources = copy.deepcopy(main.get("resources") or {})
    named = {r for section in ("requests", "limits") for r in resources.get(section) or {}}
    for section in ("requests", "limits"):
        for resource, amount in (defaults.get(section) or {}).items():
            if resource not in named:
                resources.setdefault(section, {})[resource] = amount
    if resources:
        main["resources"] = resources


def _default_security(pod_spec: dict[str, Any], main: dict[str, Any], defaults: dict[str, Any]) -> None:
    """The runtime's container securityContext under the container's own; a user or group the pod's
    securityContext sets is left to it (a container-level runAsUser would override the pod's)."""
    pod_level = pod_spec.get("securityContext") or {}
    kept = {k: copy.deepcopy(v) for k, v in defaults.items() if not (k in POD_IDENTITY and k in pod_level)}
    merged = {**kept, **(main.get("securityContext") or {})}
    if merged:
        main["securityContext"] = merged


def _hpas(isvc: dict[str, Any], scaling: dict[str, Any], floors: dict[str, int]) -> list[dict[str, Any]]:
    """One HPA per Deployment with replicas, floor and ceiling split as the replicas are (see the comment above);
    the predictor's keeps the name `<name>`."""
    name = name_of(isvc)
    spec = isvc.get("spec") or {}
    high = scaling.get("maxReplicas")
    ceilings = dict(zip(("predictor", "canary"), canary_split(spec, high), strict=True)) if isinstance(
        high, int) else floors
    target = scaling.get("targetUtilization") or DEFAULT_TARGET_UTILIZATION
    hpas = []
    for component, low in floors.items():
        if low < 1:  # a component the split gives nothing (the predictor at 100%) has nothing to scale
            continue
        hpa = _isvc_object("autoscaling/v2", "HorizontalPodAutoscaler", isvc,
                           name if component == "predictor" else f"{name}-{component}", spec={
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": f"{name}-{component}"},
            "minReplicas": low,
            "maxReplicas": max(low, ceilings[component]),
            "metrics": [{"type": "Resource", "resource": {
                "name": "cpu", "target": {"type": "Utilization", "averageUtilization": int(target)}}}],
        })
        hpa["metadata"]["labels"][COMPONENT_LABEL] = component
        hpas.append(hpa)
    return hpas
