"""The shipped policies on manifests from real projects (tests/fixtures/real): what they deny is exactly what a
platform engineer would, and nothing else.

Every file is judged as `mlgate validate` judges it, its Kueue pod groups included (`with_pod_groups`).
Each denial below was read against its manifest: the privileged pods and host paths are really there.
GPU-sharing pods (HAMi), Kueue's plain-pod group and every GPU training job are admitted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mlgate.engine import evaluate
from mlgate.loading.documents import read_documents
from mlgate.loading.peers import with_pod_groups
from mlgate.loading.policies import default_policy_dir, load_policy_paths
from mlgate.model.facts import NO_FACTS

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
SHIPPED_POLICIES = load_policy_paths([default_policy_dir()])

# file -> {document index: the (rule, reason) pairs that deny it}
DENIED: dict[str, dict[int, set[tuple[str, str]]]] = {
    # Spark local dirs on the node's NVMe disks and /tmp, as host paths
    "data-on-eks-sparkapplication-spark-rapids-gpu.yaml": {0: {("pod-security.baseline", "hostPath volumes")}},
    # TPU multislice pods run privileged on the host network
    "jobset-jobset-v6e-tpu-multislice.yaml": {0: {("pod-security.baseline", "host namespaces"),
                                                   ("pod-security.baseline", "privileged")}},
    "mpi-operator-v2beta1-nccl-tests.yaml": {0: {("pod-security.baseline", "privileged")}},
    # the device plugin's privileged variant: a node agent, not a workload (kube-system is excluded in a cluster)
    "nvidia-daemonset-device-plugin-privileged.yaml": {5: {("pod-security.baseline", "hostPath volumes"),
                                                            ("pod-security.baseline", "privileged")}},
    "volcano-job-paddlepaddle-ctr.yaml": {0: {("pod-security.baseline", "hostPath volumes")}},
}


def verdicts(path: Path) -> dict[int, set[tuple[str, str]]]:
    facts = with_pod_groups(NO_FACTS, [str(path)], "default")
    denied: dict[int, set[tuple[str, str]]] = {}
    for document in read_documents([str(path)]):
        obj: Any = document.data
        if not isinstance(obj, dict):
            continue
        decision = evaluate(obj, SHIPPED_POLICIES, facts=facts)
        reasons = {(r.rule, f.reason) for r in decision.violations for f in r.findings}
        reasons |= {(r.rule, f"could not evaluate: {r.note}") for r in decision.violations if not r.findings}
        if reasons:
            denied[document.index] = reasons
    return denied


@pytest.mark.parametrize("name", sorted(p.name for p in REAL.glob("*.yaml")))
def test_the_shipped_policies_deny_a_real_manifest_only_for_what_is_really_there(name: str):
    assert verdicts(REAL / name) == DENIED.get(name, {})


def test_every_expected_denial_names_a_fixture():
    assert set(DENIED) <= {p.name for p in REAL.glob("*.yaml")}
