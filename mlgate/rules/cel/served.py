"""The object as the API server holds it when admission policies run: what CEL's `object` is.

A ValidatingAdmissionPolicy sees the object after the API server decoded it into its Go type: the defaults of
k8s.io/kubernetes `pkg/apis/core/v1/defaults.go` (SetDefaults_Pod, _PodSpec, _Container, _Probe, _Service,
_ServicePort, ...), `pkg/apis/apps/v1/defaults.go` and `pkg/apis/batch/v1/defaults.go` are set, and every
quantity is its string (`nvidia.com/gpu: 8` in YAML reaches CEL as "8"). Offline, mlgate applies the defaults in
the tables below to built-in kinds only: custom resources keep what their CRD schema says (an int-or-string
quantity stays an integer there). Fields the registry fills in (uid, creationTimestamp, a Service's clusterIP,
a Job's generated selector and labels) are not made up: docs/authoring.md names them.
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["guess_resource", "served"]

# SetDefaults_PodSpec (and SetDefaults_Pod's enableServiceLinks, which pod templates get through the same code)
_POD_SPEC = {"restartPolicy": "Always", "dnsPolicy": "ClusterFirst", "terminationGracePeriodSeconds": 30,
             "schedulerName": "default-scheduler", "securityContext": {}, "enableServiceLinks": True}
_CONTAINER = {"terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}
_PROBE = {"timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3}
_SERVICE = {"type": "ClusterIP", "sessionAffinity": "None"}
_JOB = {"backoffLimit": 6, "completionMode": "NonIndexed", "suspend": False,
        "podReplacementPolicy": "TerminatingOrFailed"}
_DEPLOYMENT = {"replicas": 1, "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600,
               "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}}
_TEMPLATED = {("batch", "Job"), ("apps", "Deployment"), ("apps", "StatefulSet"), ("apps", "DaemonSet"),
              ("apps", "ReplicaSet"), ("", "ReplicationController"), ("", "PodTemplate")}


def guess_resource(kind: str) -> str:
    """The resource of a kind, as k8s.io/apimachinery meta.UnsafeGuessKindToResource guesses it (right for the
    built-in kinds and for CRDs that keep the usual plural)."""
    lower = kind.lower()
    if not lower or lower.endswith("endpoints"):
        return lower
    if lower.endswith("s"):
        return lower + "es"
    if lower.endswith("y"):
        return lower[:-1] + "ies"
    return lower + "s"


def served(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` with the API server's defaults, for the built-in kinds these tables cover; else `obj` itself."""
    group = str(obj.get("apiVersion") or "").rpartition("/")[0]
    kind = obj.get("kind")
    spec = obj.get("spec")
    if group not in ("", "apps", "batch") or not isinstance(spec, dict):
        return obj
    # copies only along the paths written: the rest is shared with `obj`, which nothing writes to
    out = {**obj, "spec": dict(spec)}
    spec = out["spec"]
    if (group, kind) == ("", "Pod"):
        _pod_spec(spec, pod=True)
    elif (group, kind) == ("", "Service"):
        _service(spec)
    elif (group, kind) in _TEMPLATED:
        if kind == "Job":
            _setdefault(spec, _JOB)
            if "completions" not in spec and "parallelism" not in spec:
                spec["completions"], spec["parallelism"] = 1, 1
        elif kind == "Deployment":
            _setdefault(spec, _DEPLOYMENT)
        template = spec.get("template")
        if isinstance(template, dict) and isinstance(template.get("spec"), dict):
            spec["template"] = {**template, "spec": dict(template["spec"])}
            _pod_spec(spec["template"]["spec"], pod=False)
    return out


def _setdefault(target: dict[str, Any], defaults: dict[str, Any]) -> None:
    for key, value in defaults.items():
        target.setdefault(key, copy.deepcopy(value))


def _pod_spec(spec: dict[str, Any], *, pod: bool) -> None:
    _setdefault(spec, _POD_SPEC)
    for key in ("initContainers", "containers", "ephemeralContainers"):
        if isinstance(spec.get(key), list):
            spec[key] = [_container(dict(c), pod=pod) if isinstance(c, dict) else c for c in spec[key]]


def _container(container: dict[str, Any], *, pod: bool) -> dict[str, Any]:
    _setdefault(container, _CONTAINER)
    image = str(container.get("image") or "")
    if "imagePullPolicy" not in container:  # SetDefaults_Container: latest, or no tag, pulls Always
        tagged = ":" in image.rsplit("/", 1)[-1] and not image.endswith(":latest")
        container["imagePullPolicy"] = "IfNotPresent" if tagged or "@" in image else "Always"
    if isinstance(container.get("ports"), list):
        container["ports"] = _ports(container["ports"])
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        if isinstance(container.get(probe), dict):
            container[probe] = {**_PROBE, **container[probe]}
    resources = container.get("resources")
    if isinstance(resources, dict):
        resources = container["resources"] = dict(resources)
        for which in ("limits", "requests"):
            if isinstance(resources.get(which), dict):
                resources[which] = {k: _quantity(v) for k, v in resources[which].items()}
        # SetDefaults_Pod (a Pod only, not a template): a limit with no request requests the limit
        limits = resources.get("limits")
        if pod and isinstance(limits, dict) and limits:
            resources["requests"] = {**limits, **(resources.get("requests") or {})}
    return container


def _ports(ports: list[Any]) -> list[Any]:
    return [{"protocol": "TCP", **p} if isinstance(p, dict) else p for p in ports]


def _quantity(value: Any) -> Any:
    """A YAML number as the string the API server's resource.Quantity prints: 8 -> "8", 0.5 -> "500m"."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    if isinstance(value, float) and not value.is_integer():
        return f"{round(value * 1000)}m"
    return str(int(value))


def _service(spec: dict[str, Any]) -> None:
    _setdefault(spec, _SERVICE)
    if isinstance(spec.get("ports"), list):
        spec["ports"] = [{"targetPort": p["port"], **p} if isinstance(p, dict) and "port" in p else p
                         for p in _ports(spec["ports"])]
    if spec.get("type") in ("NodePort", "LoadBalancer"):
        spec.setdefault("externalTrafficPolicy", "Cluster")
    spec.setdefault("internalTrafficPolicy", "Cluster")
