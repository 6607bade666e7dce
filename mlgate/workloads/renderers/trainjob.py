"""Kubeflow Trainer v2 TrainJob: pods from the referenced runtime, the TrainJob's `trainer` and its patches.

Fields read (kubeflow/trainer v2.3.0 pkg/apis/trainer/v1alpha1/trainjob_types.go, pkg/runtime/core):
- `runtimeRef{name, kind (default ClusterTrainingRuntime)}`: the runtime's `spec.template.spec` is a JobSet
  spec; each `replicatedJobs[]` runs `replicas * parallelism` pods of `template.spec.template`.
- The job labelled `trainer.kubeflow.org/trainjob-ancestor-step: trainer` runs `trainer.numNodes` pods (else
  the runtime's `mlPolicy.numNodes`, else 1); its container `node` takes `trainer.image`, `command`, `args`
  (replaced), `env` (upserted) and `resourcesPerNode` (merged).
- Pod patches, by version: `runtimePatches[].trainingRuntimeSpec.template.spec.replicatedJobs[]{name,
  template.spec.template.spec}` (v2.2+), `podTemplateOverrides[]{targetJobs[].name, spec}` (v2.1) and
  `podSpecOverrides[]{targetJobs[].name, ...}` (v2.0): pod fields replaced, containers merged by name.
With the runtime in cluster facts the pods are judged as the trainer controller builds them; without it,
only what the TrainJob itself says (its trainer node and patches), and the workload's notes say which.
"""

from __future__ import annotations

from typing import Any

from mlgate.model import pointer
from mlgate.model.facts import ClusterFacts
from mlgate.model.workload import Workload, as_dict
from mlgate.workloads.renderers.composed import Composed, merge_by_name
from mlgate.workloads.templates import as_list_of_dicts, whole

ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
NODE = "node"
REPLACED = ("image", "command", "args")


def train_job(workload: Workload, root: dict[str, Any], base: str, at: str, facts: ClusterFacts) -> None:
    spec = as_dict(pointer.resolve(root, at))
    ref = as_dict(spec.get("runtimeRef"))
    kind = str(ref.get("kind") or "ClusterTrainingRuntime")
    runtime = facts.training_runtime(kind, "" if kind == "ClusterTrainingRuntime" else workload.namespace,
                                     str(ref.get("name") or "")) if ref.get("name") else None
    spec_at = base + at
    if runtime is None:
        workload.notes.append(f"{kind} {ref.get('name')!r} is not in the cluster facts: judged the TrainJob's own "
                              "trainer node and patches only, not the runtime's pods")
        pod = Composed(fallback=spec_at + "/trainer")
        pod.add_container("containers", {"name": NODE}, spec_at + "/trainer")
        _trainer(pod, spec, spec_at)
        _patches(pod, spec, spec_at, NODE)
        workload.templates.append(pod.template(NODE, _nodes(spec, {}), workload.kind))
        return
    workload.notes.append(f"judged with {kind} {ref.get('name')!r} from the cluster facts")
    runtime_spec = as_dict(runtime.get("spec"))
    for job in as_list_of_dicts(as_dict(as_dict(runtime_spec.get("template")).get("spec")).get("replicatedJobs")):
        name = str(job.get("name") or "")
        job_template = as_dict(job.get("template"))
        pod_template = as_dict(as_dict(job_template.get("spec")).get("template"))
        pod = Composed(fallback=spec_at + "/runtimeRef")
        for field, value in as_dict(pod_template.get("spec")).items():
            if field not in ("containers", "initContainers"):
                pod.set(field, value, spec_at + "/runtimeRef")
        for key in ("initContainers", "containers"):
            for container in as_list_of_dicts(as_dict(pod_template.get("spec")).get(key)):
                pod.add_container(key, dict(container), spec_at + "/runtimeRef")
        pod.metadata = as_dict(pod_template.get("metadata"))
        trainer_job = as_dict(as_dict(job_template.get("metadata")).get("labels")).get(ANCESTOR) == "trainer"
        if trainer_job:
            _trainer(pod, spec, spec_at)
            pods = _nodes(spec, runtime_spec)
        else:
            pods = whole(job.get("replicas"), 1) * whole(as_dict(job_template.get("spec")).get("parallelism"), 1)
        _patches(pod, spec, spec_at, name)
        workload.templates.append(pod.template(name, pods, workload.kind))


def _trainer(pod: Composed, spec: dict[str, Any], spec_at: str) -> None:
    """The `trainer` fields, applied to container `node` as the trainer controller does."""
    trainer = as_dict(spec.get("trainer"))
    index, node = next(((i, c) for i, c in enumerate(pod.spec.get("containers", [])) if c.get("name") == NODE),
                       (None, None))
    if index is None or node is None:
        return
    for field in REPLACED:
        if trainer.get(field) is not None:
            node[field] = trainer[field]
            pod.field_of_container[("containers", index, field)] = pointer.join(spec_at, "trainer", field)
    if isinstance(trainer.get("env"), list):
        node["env"] = merge_by_name(node.get("env") or [], trainer["env"])
        pod.built_from[("containers", index, "env")] = spec_at + "/trainer/env"  # merged by name
    resources = as_dict(trainer.get("resourcesPerNode"))
    if resources:
        merged = dict(as_dict(node.get("resources")))
        for section in ("limits", "requests"):
            if isinstance(resources.get(section), dict):
                merged[section] = {**as_dict(merged.get(section)), **resources[section]}
        node["resources"] = merged
        pod.field_of_container[("containers", index, "resources")] = spec_at + "/trainer/resourcesPerNode"


def _patches(pod: Composed, spec: dict[str, Any], spec_at: str, job: str) -> None:
    """Every pod patch that targets `job`, in order: pod fields replaced, containers merged by name."""
    for index, patch in enumerate(as_list_of_dicts(spec.get("runtimePatches"))):
        jobs = as_dict(as_dict(as_dict(patch.get("trainingRuntimeSpec")).get("template")).get("spec"))
        for j, rjob in enumerate(as_list_of_dicts(jobs.get("replicatedJobs"))):
            if rjob.get("name") == job:
                patch_at = pointer.join(spec_at, "runtimePatches", index, "trainingRuntimeSpec", "template", "spec",
                                        "replicatedJobs", j, "template", "spec", "template", "spec")
                _apply(pod, as_dict(pointer.resolve(rjob, "/template/spec/template/spec")), patch_at)
    for field, body in (("podTemplateOverrides", "spec"), ("podSpecOverrides", None)):
        for index, override in enumerate(as_list_of_dicts(spec.get(field))):
            if any(t.get("name") == job for t in as_list_of_dicts(override.get("targetJobs"))):
                patch_at = pointer.join(spec_at, field, index, *([body] if body else []))
                _apply(pod, as_dict(override.get(body)) if body else override, patch_at)


def _apply(pod: Composed, patch: dict[str, Any], patch_at: str) -> None:
    for field, value in patch.items():
        if field in ("containers", "initContainers") and isinstance(value, list):
            names = {c.get("name"): i for i, c in enumerate(pod.spec.get(field, []))}
            for i, container in enumerate(as_list_of_dicts(value)):
                at = pointer.join(patch_at, field, i)
                if container.get("name") in names:
                    position = names[container["name"]]
                    pod.spec[field][position] = {**pod.spec[field][position], **container}
                    for key in container:
                        pod.field_of_container[(field, position, key)] = pointer.join(at, key)
                else:
                    pod.add_container(field, dict(container), at)
        elif field not in ("targetJobs", "metadata"):
            pod.set(field, value, pointer.join(patch_at, field))


def _nodes(spec: dict[str, Any], runtime_spec: dict[str, Any]) -> int:
    fallback = whole(as_dict(runtime_spec.get("mlPolicy")).get("numNodes"), 1)
    return whole(as_dict(spec.get("trainer")).get("numNodes"), fallback)
