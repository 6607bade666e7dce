"""Desired children of an InferenceService, as full Kubernetes objects (pure; no I/O).

Same input, same output, as desired.py for a TrainingJob.
"""

from __future__ import annotations

import copy
from typing import Any

from mlgate.rules.gang_markers import label_value
from mlgate.workloads import render

from .desired import child_object, main_container, name_of, set_env

__all__ = ["COMPONENT_LABEL", "ISVC_LABEL", "canary_split", "desired_inference_children", "has_canary"]

# --- InferenceService ----------------------------------------------------------------------------------
#
# InferenceService -> in this order: Deployment `<name>-predictor`, Deployment `<name>-canary` (only with
# canaryTrafficPercent > 0 and spec.canary), Service `<name>` (ClusterIP, port 80 -> container port 8080, named
# "http"), and an `autoscaling/v2` HorizontalPodAutoscaler `<name>` on the predictor when `scaling` is set.
#
# Traffic split: both Deployments' pods carry the Service's selector label `mlgate.dev/inference-service`, so
# kube-proxy spreads connections evenly over all ready pods of both; the split is the pod ratio. With
# total = scaling.minReplicas (default 1) and pct = canaryTrafficPercent:
#   canary  = max(1, round_half_up(total * pct / 100))     (integer math: (total * pct + 50) // 100)
#   primary = total - canary, but at least 1 while pct < 100 (never send 100% to a canary asked for less)
# so the realized share is canary / (primary + canary): total 10 at 10% -> 9 + 1; total 1 at 10% -> 1 + 1 (50%).
# The split is per connection, not per request (keep-alive clients stick to one pod), and the HPA scales only
# the predictor, so the canary's share falls as the predictor scales out.
# Each Deployment selects its own pods with `mlgate.dev/component` (predictor | canary), so the two selectors
# never overlap. When an HPA exists the reconciler must leave the predictor's spec.replicas to it.

ISVC_LABEL = "mlgate.dev/inference-service"
COMPONENT_LABEL = "mlgate.dev/component"
SERVING_PORT, SERVICE_PORT = 8080, 80
DEFAULT_TARGET_UTILIZATION = 80  # autoscaling/v2's own default when no metric is given
# Used when spec.image is unset: the images KServe's ClusterServingRuntimes use
# (kserve/kserve config/runtimes/kustomization.yaml @031922cb).
DEFAULT_IMAGES = {
    "triton": "nvcr.io/nvidia/tritonserver:21.09-py3",
    "torchserve": "pytorch/torchserve-kfs:0.7.0",
    "tensorflow-serving": "tensorflow/serving:2.6.2",
}


def desired_inference_children(isvc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = isvc.get("spec") or {}
    name = name_of(isvc)
    primary, canary = canary_split(spec)
    children = [_deployment(isvc, "predictor", primary, spec.get("image"), spec.get("modelUri"))]
    if has_canary(spec):
        overrides = spec.get("canary") or {}
        children.append(_deployment(isvc, "canary", canary, overrides.get("image") or spec.get("image"),
                                    overrides.get("modelUri") or spec.get("modelUri")))
    children.append(_isvc_object("v1", "Service", isvc, name, spec={
        "type": "ClusterIP",
        "selector": {ISVC_LABEL: label_value(name)},
        "ports": [{"name": "http", "port": SERVICE_PORT, "targetPort": SERVING_PORT, "protocol": "TCP"}],
    }))
    if spec.get("scaling"):
        children.append(_hpa(isvc, spec["scaling"]))
    return children


def canary_split(spec: dict[str, Any]) -> tuple[int, int]:
    """(predictor replicas, canary replicas); see the traffic-split comment above."""
    total = render.serving_replicas(spec)
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


def _deployment(isvc: dict[str, Any], component: str, replicas: int, image: Any, model_uri: Any) -> dict[str, Any]:
    spec = isvc.get("spec") or {}
    name = name_of(isvc)
    template_meta = (spec.get("template") or {}).get("metadata") or {}
    pod_spec = copy.deepcopy(render.render_pod_spec("InferenceService", spec))
    main = main_container(pod_spec, render.SERVING_CONTAINER)
    main["image"] = str(image or DEFAULT_IMAGES.get(str(spec.get("runtime")), ""))
    ports = [p for p in main.get("ports") or [] if not (isinstance(p, dict) and p.get("name") == "http")]
    main["ports"] = [*ports, {"name": "http", "containerPort": SERVING_PORT, "protocol": "TCP"}]
    set_env(main, [("MODEL_URI", str(model_uri or ""))])
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


def _hpa(isvc: dict[str, Any], scaling: dict[str, Any]) -> dict[str, Any]:
    name = name_of(isvc)
    low = max(1, render.serving_replicas(isvc.get("spec") or {}))  # minReplicas 0 needs the HPAScaleToZero gate
    high = scaling.get("maxReplicas")
    target = scaling.get("targetUtilization") or DEFAULT_TARGET_UTILIZATION
    return _isvc_object("autoscaling/v2", "HorizontalPodAutoscaler", isvc, name, spec={
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": f"{name}-predictor"},
        "minReplicas": low,
        "maxReplicas": max(low, high) if isinstance(high, int) else low,
        "metrics": [{"type": "Resource", "resource": {
            "name": "cpu", "target": {"type": "Utilization", "averageUtilization": int(target)}}}],
    })
