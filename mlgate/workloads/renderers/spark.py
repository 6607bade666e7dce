"""SparkApplication (and a ScheduledSparkApplication's template): driver and executor pods from SparkPodSpecs.

Fields read (spark-operator v2.5.2 api/v1beta2/sparkapplication_types.go, internal/webhook/sparkpod_defaulter.go):
- `image` (application-wide) and per role `image`; `cores`, `coreLimit`, `memory`, `memoryLimit`;
  `gpu{name, quantity}` (a container limit `<name>: quantity`); `env`, `envVars`, `envFrom`; `securityContext`
  (container) and `podSecurityContext` (pod); `hostNetwork`, `volumeMounts`, `sidecars`, `initContainers`,
  `serviceAccount`, `nodeSelector`, `tolerations`, `affinity`, `schedulerName`, `labels`, `annotations`;
  `template` (a PodTemplateSpec, Spark 3.0+) under them all.
- `volumes` (application-wide, mounted where `volumeMounts` names them).
- Pods: 1 driver, `executor.instances` executors (default 1).
The operator's pod webhook copies these into pods labelled `spark-role`, with containers
`spark-kubernetes-driver` and `spark-kubernetes-executor`.
"""

from __future__ import annotations

from typing import Any

from mlgate.model import pointer
from mlgate.model.facts import ClusterFacts
from mlgate.model.workload import Workload, as_dict
from mlgate.workloads.renderers.composed import Composed
from mlgate.workloads.templates import as_list_of_dicts, whole

ROLES = (("driver", "spark-kubernetes-driver"), ("executor", "spark-kubernetes-executor"))
POD_FIELDS = {"hostNetwork": "hostNetwork", "serviceAccount": "serviceAccountName", "nodeSelector": "nodeSelector",
              "tolerations": "tolerations", "affinity": "affinity", "schedulerName": "schedulerName",
              "podSecurityContext": "securityContext", "hostAliases": "hostAliases", "dnsConfig": "dnsConfig"}
CONTAINER_FIELDS = ("env", "envFrom", "securityContext", "volumeMounts", "ports", "lifecycle")


def spark_application(workload: Workload, root: dict[str, Any], base: str, at: str, facts: ClusterFacts) -> None:
    app = as_dict(pointer.resolve(root, at))
    for role, container_name in ROLES:
        role_at = base + at + "/" + role
        role_spec = as_dict(app.get(role))
        pod = Composed(fallback=role_at)
        _from_template(pod, as_dict(role_spec.get("template")), role_at + "/template")
        for source, name in POD_FIELDS.items():
            pod.set(name, role_spec.get(source), pointer.join(role_at, source))
        volumes = app.get("volumes")
        pod.set("volumes", volumes, base + at + "/volumes")
        pod.add_container("containers", _main(app, role_spec, container_name), role_at)
        if role_spec.get("gpu") is not None:  # the main container's limits come from `gpu`, `cores`, `memory`...
            pod.built_from[("containers", 0, "resources")] = role_at + "/gpu"
        if role_spec.get("image") is None:  # the application-wide image
            pod.field_of_container[("containers", 0, "image")] = base + at + "/image"
        for key, source in (("containers", "sidecars"), ("initContainers", "initContainers")):
            for index, container in enumerate(as_list_of_dicts(role_spec.get(source))):
                pod.add_container(key, container, pointer.join(role_at, source, index))
        pod.metadata = {"labels": {**as_dict(role_spec.get("labels")), "spark-role": role},
                        "annotations": dict(as_dict(role_spec.get("annotations")))}
        replicas = 1 if role == "driver" else whole(role_spec.get("instances"), 1)
        workload.templates.append(pod.template(role, replicas, workload.kind))


def _from_template(pod: Composed, template: dict[str, Any], template_at: str) -> None:
    """The role's pod template under everything else: its pod fields, and its extra containers."""
    for name, value in as_dict(template.get("spec")).items():
        if name not in ("containers", "initContainers"):
            pod.set(name, value, pointer.join(template_at, "spec", name))
    for key in ("initContainers", "containers"):
        for index, container in enumerate(as_list_of_dicts(as_dict(template.get("spec")).get(key))):
            if not (key == "containers" and index == 0):  # the first container becomes the main one
                pod.add_container(key, container, pointer.join(template_at, "spec", key, index))


def _main(app: dict[str, Any], role_spec: dict[str, Any], name: str) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "image": role_spec.get("image") or app.get("image")}
    for field in CONTAINER_FIELDS:
        if role_spec.get(field) is not None:
            container[field] = role_spec[field]
    env = as_dict(role_spec.get("envVars"))
    if env:
        container["env"] = [*(container.get("env") or []), *({"name": k, "value": v} for k, v in env.items())]
    limits: dict[str, Any] = {}
    requests: dict[str, Any] = {}
    for field, resource, section in (("coreLimit", "cpu", limits), ("memoryLimit", "memory", limits),
                                     ("cores", "cpu", requests), ("memory", "memory", requests)):
        if role_spec.get(field) is not None:
            section[resource] = role_spec[field]
    gpu = as_dict(role_spec.get("gpu"))
    if gpu.get("name"):
        limits[str(gpu["name"])] = gpu.get("quantity")
    resources = {k: v for k, v in (("limits", limits), ("requests", requests)) if v}
    if resources:
        container["resources"] = resources
    return container
