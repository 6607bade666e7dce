"""Argo Workflows (Workflow, WorkflowTemplate, ClusterWorkflowTemplate, CronWorkflow): one pod per template
that runs a container, a script or a container set.

Fields read (argo-workflows v4.1.2 pkg/apis/workflow/v1alpha1/workflow_types.go, workflow/controller/
workflowpod.go), `P` being the workflow spec (`/spec`, or `/spec/workflowSpec` for a CronWorkflow):
- `P/templates/*/container` and `P/templates/*/script` (also inline in `dag/tasks/*/inline` and
  `steps/*/*/inline`): the container `main`; `P/templates/*/containerSet/
  containers/*`: one container each; `P/templates/*/{initContainers,sidecars}/*`.
- Pod fields, workflow-wide then per template: `securityContext`, `volumes` (the template's added), `nodeSelector`,
  `affinity`, `tolerations`, `serviceAccountName`, `hostNetwork` (workflow-wide only), `automountServiceAccountToken`.
- `podSpecPatch` (a JSON or YAML string, workflow-wide then per template) can change any pod field: its pod
  fields replace, its containers merge by name, and findings about them point at the string.
Each template counts as one pod: loops and retries run it more often, but not at once with a known count.
"""

from __future__ import annotations

from typing import Any

import yaml

from mlgate.model import pointer
from mlgate.model.facts import ClusterFacts
from mlgate.model.workload import Workload, as_dict
from mlgate.workloads.renderers.composed import Composed
from mlgate.workloads.templates import as_list_of_dicts

POD_FIELDS = ("securityContext", "nodeSelector", "affinity", "tolerations", "serviceAccountName",
              "automountServiceAccountToken", "hostNetwork", "priorityClassName", "schedulerName", "runtimeClassName")
RUNS = ("container", "script", "containerSet")


def workflow(workload: Workload, root: dict[str, Any], base: str, at: str, facts: ClusterFacts) -> None:
    spec = as_dict(pointer.resolve(root, at))
    spec_at = base + at
    workload.pods_counted = False  # steps run one after another, loops and retries as often as they say
    for template_at, template in _templates(spec, spec_at):
        pod = Composed(fallback=template_at)
        for source, source_at in ((spec, spec_at), (template, template_at)):
            for field in POD_FIELDS:
                if field != "hostNetwork" or source is spec:
                    pod.set(field, source.get(field), pointer.join(source_at, field))
        volumes = [*as_list_of_dicts(spec.get("volumes")), *as_list_of_dicts(template.get("volumes"))]
        if volumes:
            pod.set("volumes", volumes, template_at + "/volumes" if template.get("volumes") else spec_at + "/volumes")
        for key, field in (("initContainers", "initContainers"), ("containers", "sidecars")):
            for i, container in enumerate(as_list_of_dicts(template.get(field))):
                pod.add_container(key, container, pointer.join(template_at, field, i))
        for run in ("container", "script"):
            if isinstance(template.get(run), dict):
                pod.add_container("containers", {"name": "main", **template[run]}, pointer.join(template_at, run))
        container_set = as_dict(template.get("containerSet"))
        for i, container in enumerate(as_list_of_dicts(container_set.get("containers"))):
            pod.add_container("containers", container, pointer.join(template_at, "containerSet", "containers", i))
        for source, source_at in ((spec, spec_at), (template, template_at)):
            _patch(pod, source.get("podSpecPatch"), pointer.join(source_at, "podSpecPatch"))
        pod.metadata = {section: {**as_dict(as_dict(spec.get("podMetadata")).get(section)),
                                  **as_dict(as_dict(template.get("metadata")).get(section))}
                        for section in ("labels", "annotations")}
        workload.templates.append(pod.template(str(template.get("name") or template_at), 1, workload.kind))


def _templates(spec: dict[str, Any], spec_at: str) -> list[tuple[str, dict[str, Any]]]:
    """Every template that runs a pod: the named ones, and those written inline in a DAG task or a step."""
    found: list[tuple[str, dict[str, Any]]] = []
    for index, template in enumerate(as_list_of_dicts(spec.get("templates"))):
        template_at = pointer.join(spec_at, "templates", index)
        found.append((template_at, template))
        for t, task in enumerate(as_list_of_dicts(as_dict(template.get("dag")).get("tasks"))):
            found.append((pointer.join(template_at, "dag", "tasks", t, "inline"), as_dict(task.get("inline"))))
        for g, group in enumerate(template.get("steps") or [] if isinstance(template.get("steps"), list) else []):
            for s, step in enumerate(as_list_of_dicts(group)):
                found.append((pointer.join(template_at, "steps", g, s, "inline"), as_dict(step.get("inline"))))
    # steps, DAGs, resources and suspends run no pod of their own
    return [(at, t) for at, t in found if any(isinstance(t.get(run), dict) for run in RUNS)]


def _patch(pod: Composed, text: Any, at: str) -> None:
    if not isinstance(text, str) or not text.strip():
        return
    try:
        patch = yaml.safe_load(text)  # JSON is YAML too
    except yaml.YAMLError:
        return  # Argo refuses the workflow itself; nothing here to judge
    for field, value in as_dict(patch).items():
        if field in ("containers", "initContainers") and isinstance(value, list):
            by_name = {c.get("name"): i for i, c in enumerate(pod.spec.get(field, []))}
            for container in as_list_of_dicts(value):
                if container.get("name") in by_name:
                    position = by_name[container["name"]]
                    pod.spec[field][position] = {**pod.spec[field][position], **container}
                    pod.container_at[(field, position)] = at
                else:
                    pod.add_container(field, dict(container), at)
        else:
            pod.set(field, value, at)
