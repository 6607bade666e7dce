"""Every kind a GPU platform receives, through the real API server with the kinds' upstream CRDs
(tests/e2e_crds) and the shipped webhook configuration: privileged pods are refused at `kubectl apply`
whatever kind carries them, defaults are stored in a JobSet, and a platform team's own kind is judged once a
ClusterWorkloadKind describes it."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from control_plane import ControlPlane
from e2e_webhook import WebhookProcess, eventually, until_verdict

from tests.builders import DELETE, change
from tests.kinds.minimal import Case, cases

pytestmark = pytest.mark.e2e
VALIDATING = 'admission webhook "ml-jobs.validate.mlgate.dev" denied the request'
BY_KIND = {(c.obj["apiVersion"], c.kind): c for c in cases()}
DENIED_KINDS = [("batch.volcano.sh/v1alpha1", "Job"), ("jobset.x-k8s.io/v1alpha2", "JobSet"),
                ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"), ("ray.io/v1", "RayCluster")]


def named(case: Case, namespace: str) -> dict[str, Any]:
    obj = copy.deepcopy(case.obj)
    obj["metadata"] = {"name": f"e2e-{case.kind.lower()}", "namespace": namespace}
    return obj


@pytest.mark.parametrize("key", DENIED_KINDS, ids=[k for _, k in DENIED_KINDS])
def test_a_privileged_pod_template_is_refused_at_kubectl_apply_in_every_ml_kind(
        webhook: WebhookProcess, cluster: ControlPlane, namespace: str, key: tuple[str, str]) -> None:
    case = BY_KIND[key]
    field = case.container + "/securityContext/privileged"
    assert cluster.kubectl("apply", "--dry-run=server", "-f", "-", stdin=named(case, namespace)).ok
    result = cluster.kubectl("apply", "-f", "-", stdin=change(named(case, namespace), field, True))
    assert result.code == 1, result
    assert VALIDATING in result.stderr, result
    assert f"[pod-security/pod-security.baseline] privileged: {field}:" in result.stderr, result


def test_a_jobset_is_stored_with_its_defaults(webhook: WebhookProcess, cluster: ControlPlane, namespace: str) -> None:
    case = BY_KIND[("jobset.x-k8s.io/v1alpha2", "JobSet")]
    pod_at = case.volumes.rsplit("/", 1)[0]
    bare = change(change(named(case, namespace), pod_at + "/tolerations", DELETE),
                  case.container + "/securityContext", DELETE)
    cluster.kubectl("apply", "-f", "-", stdin=bare).check()
    stored = cluster.get_object("jobset", bare["metadata"]["name"], namespace)
    pod = stored["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert pod["containers"][0]["securityContext"] == {"allowPrivilegeEscalation": False,  # runAsUser 1000
                                                       "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}
    assert pod["volumes"][0]["emptyDir"]["medium"] == "Memory"  # /dev/shm for an 8-pod GPU job


FEATURE_STORE = "kueue.x-k8s.io"
WORKLOAD_KIND = {
    "apiVersion": "mlgate.dev/v1alpha1", "kind": "ClusterWorkloadKind",
    "metadata": {"name": "workloads.kueue.x-k8s.io"},
    "spec": {"group": FEATURE_STORE, "versions": ["v1beta2"], "kind": "Workload", "resource": "workloads",
             "templates": [{"pointer": "/spec/podSets/*/template", "role": "{name}",
                            "replicas": {"at": "count", "default": 1}}]},
}


def workload(namespace: str, *, privileged: bool) -> dict[str, Any]:
    container = {"name": "train", "image": "registry.example/train:1.0",
                 "securityContext": {"privileged": privileged}}
    return {"apiVersion": f"{FEATURE_STORE}/v1beta2", "kind": "Workload",
            "metadata": {"name": "custom-kind", "namespace": namespace},
            "spec": {"queueName": "team-a", "podSets": [
                {"name": "workers", "count": 2, "template": {"spec": {"containers": [container]}}}]}}


def register_own_kind(webhook: WebhookProcess, cluster: ControlPlane) -> None:
    """What docs/kinds.md tells a platform team: one more webhook rule naming the resource, same service."""
    (validating,) = [c for c in webhook.configurations() if c["kind"] == "ValidatingWebhookConfiguration"]
    hook = copy.deepcopy(next(h for h in validating["webhooks"] if h["name"] == "ml-jobs.validate.mlgate.dev"))
    hook["rules"] = [{"apiGroups": [FEATURE_STORE], "apiVersions": ["v1beta2"], "operations": ["CREATE", "UPDATE"],
                      "resources": ["workloads"], "scope": "Namespaced"}]
    hook.pop("matchConditions", None)
    own = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
           "metadata": {"name": "mlgate-own-kinds"}, "webhooks": [hook]}
    cluster.kubectl("apply", "-f", "-", stdin=own).check()


def test_a_platform_team_s_own_kind_is_judged_unknown_then_as_its_workload_kind_describes_it(
        webhook: WebhookProcess, cluster: ControlPlane, namespace: str) -> None:
    register_own_kind(webhook, cluster)
    field = "/spec/podSets/0/template/spec/containers/0/securityContext/privileged"
    # before any description: the pod spec is found by search, judged, and the kind named unknown
    before = until_verdict(cluster, workload(namespace, privileged=True), namespace, denied_with=field)
    assert "unknown kind" in before.stderr and "WorkloadKind" in before.stderr, before
    broken = copy.deepcopy(WORKLOAD_KIND)
    broken["spec"]["templates"][0]["pointer"] = "spec/podSets/*/template"
    refused = cluster.kubectl("apply", "-f", "-", stdin=broken)
    assert refused.code == 1 and 'admission webhook "policies.validate.mlgate.dev" denied' in refused.stderr, refused
    assert "cluster:ClusterWorkloadKind/workloads.kueue.x-k8s.io: spec.templates[0].pointer: value error, " \
           "'spec/podSets/*/template' is not a JSON pointer" in refused.stderr, refused
    cluster.kubectl("apply", "-f", "-", stdin=WORKLOAD_KIND).check()

    def described() -> Any:
        result = cluster.kubectl("apply", "-f", "-", stdin=workload(namespace, privileged=True))
        return result if result.code == 1 and field in result.stderr and "unknown kind" not in result.stderr \
            else None

    after = eventually("the ClusterWorkloadKind to take effect", described, 30)
    assert VALIDATING in after.stderr, after
    assert cluster.kubectl("apply", "-f", "-", stdin=workload(namespace, privileged=False)).ok
    cluster.kubectl("delete", "validatingwebhookconfiguration", "mlgate-own-kinds").check()
    cluster.kubectl("delete", "clusterworkloadkind", "workloads.kueue.x-k8s.io").check()
