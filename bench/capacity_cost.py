"""What the capacity, queue and DRA checks add to one admission: prints figures, asserts nothing.

    .venv/bin/python bench/capacity_cost.py [--seconds 3]

CPU per review of `parse_review` + `admit` (the webhook's in-process work, no transport) on the webhook
benchmark's 2 KB PyTorchJob, in three settings, all with facts as the webhook's watches hold them (a ResourceQuota,
a LimitRange, a PriorityClass, 50 GPU nodes, Kueue queues and a DRA claim template):
- the shipped policies alone (they include the launch rules);
- the shipped policies and examples/policies/capacity.yaml (quota, what is left, nodes, priority class, limit
  range, Kueue queue and flavors);
- the same, the job also queued to a LocalQueue and its Worker claiming its GPUs through a ResourceClaimTemplate.
Target: the capacity rules add at most 10% to the shipped set's cost. The CRD schema and CEL checks are not in
the webhook's path at all (the API server has applied them); bench/schema_bench.py times them for the CLI.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from webhook_bench import admission_review, pytorchjob  # noqa: E402

from mlgate.loading.policies import default_policy_dir, load_policy_paths  # noqa: E402
from mlgate.model.facts import StaticFacts  # noqa: E402
from mlgate_webhook.review import admit, parse_review  # type: ignore[import-not-found]  # noqa: E402


def facts() -> StaticFacts:
    objects: list[dict[str, Any]] = [
        {"kind": "Namespace", "metadata": {"name": "ml", "labels": {"team": "vision"}}},
        {"kind": "ResourceQuota", "metadata": {"name": "gpus", "namespace": "ml"},
         "spec": {"hard": {"requests.nvidia.com/gpu": "64", "count/pods": "100"}},
         "status": {"used": {"requests.nvidia.com/gpu": "16", "count/pods": "20"}}},
        {"kind": "LimitRange", "metadata": {"name": "limits", "namespace": "ml"},
         "spec": {"limits": [{"type": "Container", "max": {"nvidia.com/gpu": "8", "cpu": "64"}}]}},
        {"kind": "PriorityClass", "metadata": {"name": "training"}, "value": 1000},
        {"kind": "LocalQueue", "metadata": {"name": "vision", "namespace": "ml"}, "spec": {"clusterQueue": "gpus"}},
        {"kind": "ClusterQueue", "metadata": {"name": "gpus"}, "spec": {"namespaceSelector": {}, "resourceGroups": [
            {"coveredResources": ["cpu", "memory", "nvidia.com/gpu"], "flavors": [
                {"name": "a100", "resources": [{"name": "cpu", "nominalQuota": 512},
                                               {"name": "memory", "nominalQuota": "4Ti"},
                                               {"name": "nvidia.com/gpu", "nominalQuota": 64}]}]}]}},
        {"kind": "ResourceClaimTemplate", "metadata": {"name": "one-gpu", "namespace": "ml"},
         "spec": {"spec": {"devices": {"requests": [
             {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 1}}]}}}},
    ]
    objects += [{"kind": "Node", "metadata": {"name": f"gpu-{i}", "labels": {"pool": "a100"}},
                 "status": {"allocatable": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8"}}} for i in range(50)]
    return StaticFacts.from_objects(objects)


def queued_and_claimed() -> dict[str, Any]:
    job = copy.deepcopy(pytorchjob())
    job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "vision"
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    worker["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    worker["containers"][0]["resources"] = {"limits": {"cpu": "8", "memory": "32Gi"}, "claims": [{"name": "gpu"}]}
    return job


def micros(body: bytes, paths: list[str], cluster: StaticFacts, seconds: float) -> float:
    """CPU per review, the fastest of five rounds (the least disturbed by anything else on the machine)."""
    policies = load_policy_paths(paths)
    best = float("inf")
    for _ in range(5):
        count, start = 0, time.process_time()
        while (spent := time.process_time() - start) < seconds / 5:
            for _ in range(50):
                admit(parse_review(body, "application/json"), policies, cluster, "validate")
            count += 50
        best = min(best, spent / count * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    seconds = parser.parse_args().seconds
    cluster = facts()
    shipped = [str(default_policy_dir())]
    with_capacity = [*shipped, str(REPO / "examples" / "policies" / "capacity.yaml")]
    plain = json.dumps(admission_review(pytorchjob())).encode()
    claimed = json.dumps(admission_review(queued_and_claimed())).encode()
    micros(plain, with_capacity, cluster, 0.5)  # warm the caches
    base = micros(plain, shipped, cluster, seconds)
    capacity = micros(plain, with_capacity, cluster, seconds)
    queued = micros(claimed, with_capacity, cluster, seconds)
    print(f"parse_review + admit, validate, 2 KB PyTorchJob, {len(cluster.node_list)} nodes in the facts")
    print(f"  shipped policies                       {base:8.1f} us")
    print(f"  + capacity policy                      {capacity:8.1f} us  ({(capacity / base - 1) * 100:+.1f}%, "
          "target <= +10%)")
    print(f"  + capacity, queued and DRA-claimed job {queued:8.1f} us  ({(queued / base - 1) * 100:+.1f}%)")


if __name__ == "__main__":
    main()
