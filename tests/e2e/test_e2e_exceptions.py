"""MLPolicyExceptions as cluster objects: `kubectl apply` of one lets the job it names through, with a warning
that names it; one that grants more than its policy allows exceptions for is refused at `kubectl apply`."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from control_plane import ControlPlane
from e2e_objects import pytorchjob
from e2e_webhook import WebhookProcess, eventually, until_verdict

pytestmark = pytest.mark.e2e
BASELINE = "[pod-security/pod-security.baseline]"  # the shipped ClusterMLPolicy pod-security denies NET_ADMIN


def net_admin_job(name: str) -> dict[str, Any]:
    job = pytorchjob(name, {"nvidia.com/gpu": 1})
    for role in job["spec"]["pytorchReplicaSpecs"].values():
        role["template"]["spec"]["containers"][0]["securityContext"] = {"capabilities": {"add": ["NET_ADMIN"]}}
    return job


def exception(name: str, namespace: str, policy: str, rules: list[str], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "mlgate.dev/v1alpha1", "kind": "MLPolicyException",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"policy": policy, "rules": rules, "match": {"names": ["rdma"]},
                     "expiresAt": "2099-01-31T00:00:00Z", "reason": "RDMA needs NET_ADMIN until NET-1234 ships",
                     **spec}}


def test_an_applied_exception_lets_the_job_through_with_a_warning_naming_it(
        webhook: WebhookProcess, cluster: ControlPlane, namespace: str) -> None:
    job = net_admin_job("rdma")
    until_verdict(cluster, job, namespace, denied_with=BASELINE)
    narrow = exception("rdma-net-admin", namespace, "pod-security", ["pod-security.baseline"],
                       containers=["pytorch"], capabilities=["NET_ADMIN"])
    cluster.kubectl("apply", "-f", "-", stdin=narrow).check()
    until_verdict(cluster, job, namespace)
    applied = cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=job)
    assert applied.ok, applied
    # kubectl shows 120 characters of a warning: the name stays, the date goes first (namespaces here are long)
    assert f"Warning: {BASELINE} excepted by {namespace}/rdma-net-admin" in applied.stderr, applied
    listed = cluster.kubectl("get", "mlpolicyexceptions", "-n", namespace)
    assert "rdma-net-admin" in listed.stdout and "2099-01-31T00:00:00Z" in listed.stdout, listed


def test_an_exception_for_another_container_lets_nothing_through(
        webhook: WebhookProcess, cluster: ControlPlane, namespace: str) -> None:
    job = net_admin_job("rdma")
    elsewhere = exception("sidecar-net-admin", namespace, "pod-security", ["pod-security.baseline"],
                          containers=["sidecar"])
    cluster.kubectl("apply", "-f", "-", stdin=elsewhere).check()
    eventually("the exception to be in force", lambda: f"{namespace}/sidecar-net-admin" in
               webhook.readyz()[1].get("exceptions", {}).get("inForce", []) or None, 30.0)
    refused = cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=job)
    assert refused.code == 1 and f"{BASELINE} non-default capabilities" in refused.stderr, refused


@pytest.mark.parametrize(("allow", "why"), [
    (False, "allows no exceptions (allowExceptions: false)"),
    (["pod-security.baseline"], "allows exceptions only for pod-security.baseline"),
])
def test_an_exception_broader_than_the_policy_allows_is_refused_at_kubectl_apply(
        webhook: WebhookProcess, cluster: ControlPlane, namespace: str, allow: Any, why: str) -> None:
    policy_name = f"locked-{namespace}"[:63]
    policy = {"apiVersion": "mlgate.dev/v1alpha1", "kind": "ClusterMLPolicy", "metadata": {"name": policy_name},
              "spec": {"allowExceptions": copy.deepcopy(allow), "match": {"namespaces": [namespace]},
                       "rules": [{"rule": "pod-security.baseline"},
                                 {"rule": "gpu.max", "params": {"perContainer": 8}}]}}
    try:
        cluster.kubectl("apply", "-f", "-", stdin=policy).check()
        broad = exception("too-broad", namespace, policy_name, ["pod-security.baseline", "gpu.max"])

        def refused_by_the_policy_in_force() -> Any:  # the webhook learns of the policy through its watch
            result = cluster.kubectl("apply", "-f", "-", stdin=broad)
            return result if result.code == 1 and why in result.stderr else None

        result = eventually("the exception to be refused", refused_by_the_policy_in_force, 30.0)
        assert 'admission webhook "policies.validate.mlgate.dev" denied the request' in result.stderr, result
        assert f"cluster:MLPolicyException/{namespace}/too-broad: spec.rules[" in result.stderr, result
        assert cluster.kubectl("get", "mlpolicyexception", "too-broad", "-n", namespace).code == 1
    finally:
        cluster.kubectl("delete", "clustermlpolicy", policy_name, "--ignore-not-found")
