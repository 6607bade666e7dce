"""Renderers for kinds whose pods are not a plain template, by the name a kind description gives (`render:`).

Each adds the workload's pod templates (and any job context it finds) from the object at `root`, found at
pointer `base` of the workload's object, reading the kind's spec at `at` (the description's `renderAt`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mlgate.model.facts import ClusterFacts
from mlgate.model.workload import Workload
from mlgate.workloads.renderers import argo, kserve, mlgate_kinds, spark, trainjob

Renderer = Callable[[Workload, dict[str, Any], str, str, ClusterFacts], None]

RENDERERS: dict[str, Renderer] = {
    "trainingjob": mlgate_kinds.training_job,
    "mlgate-inference": mlgate_kinds.inference_service,
    "spark": spark.spark_application,
    "kserve": kserve.inference_service,
    "trainjob": trainjob.train_job,
    "argo": argo.workflow,
}
