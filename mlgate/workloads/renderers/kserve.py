"""KServe InferenceService (serving.kserve.io/v1beta1): one pod per component, from its inline PodSpec.

Fields read (kserve v0.20.0 pkg/apis/serving/v1beta1/{predictor,component,transformer,explainer}.go):
- `predictor`, `transformer`, `explainer`: KServe's PodSpec inline (every core PodSpec field, `containers`
  optional) plus component fields; `minReplicas` (default 1) pods each. A worker spec without containers
  takes the runtime's, so only its own pod fields are judged.
- `predictor.model` and the framework shorthands (`sklearn`, `xgboost`, `tensorflow`, `pytorch`, `triton`,
  `onnx`, `huggingface`, `pmml`, `lightgbm`, `paddle`) and `explainer.art`: a Container that runs as
  `kserve-container`, merged with a `containers` entry of that name; `storageUri` is the model's URI.
- `predictor.workerSpec`: an inline PodSpec for multi-node serving; the
  reference counts `RAY_NODE_COUNT - 1` workers, RAY_NODE_COUNT being `pipelineParallelSize` (default 1), so at
  least one worker pod per predictor pod is judged.
"""

from __future__ import annotations

from typing import Any

from mlgate.model import pointer
from mlgate.model.facts import ClusterFacts
from mlgate.model.workload import CONTAINER_LISTS, Workload, as_dict
from mlgate.workloads.renderers.composed import Composed
from mlgate.workloads.templates import as_list_of_dicts, whole

COMPONENTS = ("predictor", "transformer", "explainer")
MODEL_FIELDS = ("model", "sklearn", "xgboost", "tensorflow", "pytorch", "triton", "onnx", "huggingface", "pmml",
                "lightgbm", "paddle", "art")
MAIN = "kserve-container"
# ComponentExtensionSpec and the predictor's own fields: not pod fields
NOT_POD = frozenset((*MODEL_FIELDS, "workerSpec", "minReplicas", "maxReplicas", "scaleTarget", "scaleMetric",
                     "scaleMetricType", "autoScaling", "containerConcurrency", "timeout", "canaryTrafficPercent",
                     "logger", "batcher", "labels", "annotations", "deploymentStrategy", "storageUri", "storage",
                     "pipelineParallelSize", "tensorParallelSize", "runtime", "modelFormat", "protocolVersion"))


def inference_service(workload: Workload, root: dict[str, Any], base: str, at: str, facts: ClusterFacts) -> None:
    spec = as_dict(pointer.resolve(root, at))
    metadata = as_dict(root.get("metadata"))
    for component in COMPONENTS:
        body = spec.get(component)
        if not isinstance(body, dict):
            continue
        component_at = base + at + "/" + component
        replicas = whole(body.get("minReplicas"), 1)
        pod = _pod(body, component_at)
        pod.metadata = {"labels": {**as_dict(metadata.get("labels")), **as_dict(body.get("labels"))},
                        "annotations": {**as_dict(metadata.get("annotations")), **as_dict(body.get("annotations"))}}
        workload.templates.append(pod.template(component, replicas, workload.kind))
        for field in MODEL_FIELDS:
            uri = as_dict(body.get(field)).get("storageUri")
            if isinstance(uri, str) and uri and workload.model_uri is None:
                workload.model_uri = (pointer.join(component_at, field, "storageUri"), uri)
        worker = body.get("workerSpec")
        if isinstance(worker, dict):
            workers = max(whole(worker.get("pipelineParallelSize"), 1) - 1, 1)
            worker_pod = _pod(worker, component_at + "/workerSpec")
            workload.templates.append(worker_pod.template(component + "-worker", replicas * workers, workload.kind))


def _pod(body: dict[str, Any], body_at: str) -> Composed:
    pod = Composed(fallback=body_at)
    for name, value in body.items():
        if name not in NOT_POD and name not in CONTAINER_LISTS:
            pod.set(name, value, pointer.join(body_at, name))
    containers = as_list_of_dicts(body.get("containers"))
    model = next(((f, body[f]) for f in MODEL_FIELDS if isinstance(body.get(f), dict)), None)
    if model is not None:
        field, container = model
        named = next((c for c in containers if c.get("name") == MAIN), {})
        pod.add_container("containers", {**named, **container, "name": MAIN}, pointer.join(body_at, field))
    for key in CONTAINER_LISTS:
        for index, container in enumerate(as_list_of_dicts(body.get(key))):
            if not (model is not None and key == "containers" and container.get("name") == MAIN):
                pod.add_container(key, container, pointer.join(body_at, key, index))
    return pod
