"""Facts from the live cluster: StorageClass provisioners and Node MIG inventory, read by the webhook's watches.

There is no kubelet and no provisioner: Nodes (labels and status.allocatable) and claims are created
through the API and simply stored, which is all the webhook reads.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from control_plane import ControlPlane
from e2e_objects import pytorchjob, trainingjob
from e2e_webhook import WebhookProcess, dry_run, eventually, until_verdict

pytestmark = pytest.mark.e2e


def storage_class(name: str, provisioner: str) -> dict[str, Any]:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
            "provisioner": provisioner}


def claim(name: str, class_name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": class_name,
                     "resources": {"requests": {"storage": "100Gi"}}}}


def checkpointed_job(name: str, claim_name: str) -> dict[str, Any]:
    job = trainingjob(name, replicas=4, checkpoint={"claimName": claim_name, "mountPath": "/checkpoints"})
    return job


def static_volume(name: str, driver: str) -> dict[str, Any]:
    """A pre-created PersistentVolume, as S3 Mountpoint and most EFS volumes are: no StorageClass names its driver."""
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"capacity": {"storage": "1Ti"}, "accessModes": ["ReadWriteMany"], "storageClassName": "",
                     "persistentVolumeReclaimPolicy": "Retain",
                     "csi": {"driver": driver, "volumeHandle": f"{name}-handle"}}}


def bound_claim(name: str, volume: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": volume,
                     "resources": {"requests": {"storage": "1Ti"}}}}


def mig_node(name: str, allocatable: dict[str, str]) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name, "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
              "nvidia.com/mig.strategy": "mixed", "nvidia.com/gpu.present": "true"}
    resources = {"cpu": "96", "memory": "1Ti", "pods": "110", **allocatable}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "status": {"capacity": resources, "allocatable": resources}}


def test_checkpoint_claim_on_a_single_node_provisioner_is_refused_for_four_replicas(
        webhook: WebhookProcess, cluster: ControlPlane, namespace: str) -> None:
    suffix = uuid.uuid4().hex[:5]
    ebs, efs = f"e2e-ebs-{suffix}", f"e2e-efs-{suffix}"
    cluster.kubectl("create", "-f", "-", stdin=[storage_class(ebs, "ebs.csi.aws.com"),
                                                storage_class(efs, "efs.csi.aws.com")]).check()
    # the RWX claim first: once the webhook has seen the second claim it has seen the first (one watch, in order)
    claims = [claim("ckpt-efs", efs), claim("ckpt-ebs", ebs)]
    cluster.kubectl("create", "-n", namespace, "-f", "-", stdin=claims).check()

    on_ebs = checkpointed_job("resnet-ebs", "ckpt-ebs")
    tag = "[storage/storage.shared-claim-rwx] provisioner cannot share"
    until_verdict(cluster, on_ebs, namespace, denied_with=tag)  # once the webhook's watch has the claims
    refused = cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=on_ebs)
    assert refused.code == 1, refused
    assert tag in refused.stderr and "/spec/checkpoint/claimName" in refused.stderr, refused
    assert "ebs.csi.aws.com" in refused.stderr and "4 pods" in refused.stderr, refused

    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=checkpointed_job("resnet-efs", "ckpt-efs")).check()
    stored = cluster.get_object("trainingjob", "resnet-efs", namespace)
    assert stored["spec"]["checkpoint"]["claimName"] == "ckpt-efs"


def test_an_in_tree_ebs_class_is_judged_as_the_ebs_driver_it_migrates_to(
        webhook: WebhookProcess, cluster: ControlPlane, namespace: str) -> None:
    gp2 = f"e2e-gp2-{uuid.uuid4().hex[:5]}"  # EKS's default class still names the in-tree provisioner
    cluster.kubectl("create", "-f", "-", stdin=storage_class(gp2, "kubernetes.io/aws-ebs")).check()
    cluster.kubectl("create", "-n", namespace, "-f", "-", stdin=claim("ckpt-gp2", gp2)).check()
    job = checkpointed_job("resnet-gp2", "ckpt-gp2")
    tag = "[storage/storage.shared-claim-rwx] provisioner cannot share"
    until_verdict(cluster, job, namespace, denied_with=tag)
    refused = cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=job)
    assert refused.code == 1 and tag in refused.stderr, refused
    assert f"kubernetes.io/aws-ebs (StorageClass {gp2})" in refused.stderr, refused


def test_a_static_volume_is_judged_by_its_driver_and_an_object_store_gets_the_rename_warning(
        webhook: WebhookProcess, cluster: ControlPlane, namespace: str) -> None:
    suffix = uuid.uuid4().hex[:5]
    efs, s3 = f"e2e-efs-pv-{suffix}", f"e2e-s3-pv-{suffix}"
    cluster.kubectl("create", "-f", "-", stdin=[static_volume(efs, "efs.csi.aws.com"),
                                                static_volume(s3, "s3.csi.aws.com")]).check()
    cluster.kubectl("create", "-n", namespace, "-f", "-", stdin=[bound_claim("ckpt-efs", efs),
                                                                 bound_claim("ckpt-s3", s3)]).check()
    warning = "Warning: [storage/storage.checkpoint-posix] claim cannot rename"
    on_s3 = checkpointed_job("resnet-s3", "ckpt-s3")
    eventually("the rename warning for a checkpoint on S3 Mountpoint",  # once the watches have the PVs and claims
               lambda: (r if (r := dry_run(cluster, on_s3, namespace)).ok and warning in r.stderr else None), 30.0)
    stored = cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=on_s3)
    assert stored.ok and warning in stored.stderr, stored

    on_efs = cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=checkpointed_job("resnet-efs", "ckpt-efs"))
    assert on_efs.ok and "storage.checkpoint-posix" not in on_efs.stderr, on_efs
    assert "storage.shared-claim-rwx" not in on_efs.stderr, on_efs  # efs shares, and the rule could look


def test_mig_profile_no_node_advertises_is_refused_when_the_policy_reads_node_inventory(
        webhook: WebhookProcess, cluster: ControlPlane, namespace: str) -> None:
    node = f"e2e-a100-{uuid.uuid4().hex[:5]}"
    cluster.kubectl("create", "-f", "-", stdin=mig_node(node, {"nvidia.com/mig-1g.5gb": "7"})).check()
    stored = cluster.get_object("node", node)
    assert stored["status"]["allocatable"]["nvidia.com/mig-1g.5gb"] == "7", stored.get("status")

    missing = pytorchjob("wide-mig", {"nvidia.com/mig-3g.20gb": 1})
    tag = "[mig/mig.node-inventory] mig devices not offered"
    until_verdict(cluster, missing, namespace, denied_with=tag)  # once the webhook's watch has the node
    refused = cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=missing)
    assert refused.code == 1 and tag in refused.stderr, refused
    assert "/spec/pytorchReplicaSpecs/Master/template/spec/containers/0/resources/limits" in refused.stderr, refused
    assert "nvidia.com/mig-1g.5gb" in refused.stderr, refused  # the fix names what nodes do offer

    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=pytorchjob("small-mig", {"nvidia.com/mig-1g.5gb": 1})
                    ).check()
    assert cluster.get_object("pytorchjob", "small-mig", namespace)["metadata"]["name"] == "small-mig"


def capacity_policy(namespace: str, *rules: tuple[str, str]) -> dict[str, Any]:
    """A ClusterMLPolicy for this test's namespace only, binding each (rule, action)."""
    bound = [{"rule": rule, "action": action} for rule, action in rules]
    return {"apiVersion": "mlgate.dev/v1alpha1", "kind": "ClusterMLPolicy", "metadata": {"name": f"cap-{namespace}"},
            "spec": {"match": {"namespaces": [namespace]}, "rules": bound}}


def test_a_job_past_its_gpu_quota_is_refused_and_one_past_what_is_left_is_warned(
        webhook: WebhookProcess, cluster: ControlPlane, namespace: str) -> None:
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpus"},
             "spec": {"hard": {"requests.nvidia.com/gpu": "8"}}}
    cluster.kubectl("create", "-n", namespace, "-f", "-", stdin=quota).check()
    policy = capacity_policy(namespace, ("capacity.quota", "deny"), ("capacity.quota-available", "warn"))
    cluster.kubectl("apply", "-f", "-", stdin=policy).check()
    big = pytorchjob("sixteen", {"nvidia.com/gpu": 4}, workers=3)
    tag = "[cap-" + namespace + "/capacity.quota] quota exceeded"
    until_verdict(cluster, big, namespace, denied_with=tag)  # once the watches have the quota and the policy
    refused = cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=big)
    assert refused.code == 1 and "asks for 16 requests.nvidia.com/gpu in all" in refused.stderr, refused
    assert "allows 8" in refused.stderr, refused
    small = pytorchjob("four", {"nvidia.com/gpu": 2}, workers=1)
    admitted = cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=small)
    assert admitted.ok and "capacity.quota" not in admitted.stderr, admitted

    # 6 GPUs held by other pods (the quota controller would write this; there is none here)
    status = {"status": {"hard": {"requests.nvidia.com/gpu": "8"}, "used": {"requests.nvidia.com/gpu": "6"}}}
    cluster.kubectl("patch", "resourcequota", "gpus", "-n", namespace, "--subresource=status", "--type=merge",
                    "-p", json.dumps(status)).check()
    waiting = pytorchjob("waits", {"nvidia.com/gpu": 2}, workers=1)
    warning = "quota used up"
    eventually("the quota's used GPUs in the webhook's facts",
               lambda: r if (r := dry_run(cluster, waiting, namespace)).ok and warning in r.stderr else None, 30.0)
    stored = cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=waiting)
    # kubectl shows warnings shortened to 120 characters: the rule and reason stay
    assert stored.ok and f"[cap-{namespace}/capacity.quota-available] quota used up" in stored.stderr, stored


def test_a_pod_asking_more_gpus_than_the_largest_node_has_is_refused(
        webhook: WebhookProcess, cluster: ControlPlane, namespace: str) -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"e2e-gpu8-{uuid.uuid4().hex[:5]}"},
            "status": {"capacity": {"nvidia.com/gpu": "8", "pods": "110"},
                       "allocatable": {"nvidia.com/gpu": "8", "pods": "110"}}}
    cluster.kubectl("create", "-f", "-", stdin=node).check()
    cluster.kubectl("apply", "-f", "-", stdin=capacity_policy(namespace, ("capacity.nodes", "deny"))).check()
    wide = pytorchjob("wide", {"nvidia.com/gpu": 8}, workers=1)
    wide["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"].append(
        {"name": "sidecar", "image": "registry.example/tool:1.0", "resources": {"limits": {"nvidia.com/gpu": 8}}})
    tag = "[cap-" + namespace + "/capacity.nodes] no node large enough"
    until_verdict(cluster, wide, namespace, denied_with=tag)
    refused = cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=wide)
    assert refused.code == 1 and "a Worker pod asks for 16 nvidia.com/gpu, but the largest node it may run on has 8" \
        in refused.stderr, refused


def test_a_pod_that_does_not_tolerate_the_only_large_nodes_taint_is_refused_and_one_that_does_is_admitted(
        webhook: WebhookProcess, cluster: ControlPlane, namespace: str) -> None:
    name = f"e2e-dedicated-{uuid.uuid4().hex[:5]}"
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"pool": name}},
            "spec": {"taints": [{"key": "dedicated", "value": "training", "effect": "NoSchedule"}]},
            "status": {"capacity": {"nvidia.com/gpu": "8", "pods": "110"},
                       "allocatable": {"nvidia.com/gpu": "8", "pods": "110"}}}
    cluster.kubectl("create", "-f", "-", stdin=node).check()
    cluster.kubectl("apply", "-f", "-", stdin=capacity_policy(namespace, ("capacity.nodes", "deny"))).check()

    def job(job_name: str, tolerations: list[dict[str, str]]) -> dict[str, Any]:
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": job_name},
                "spec": {"template": {"spec": {
                    "restartPolicy": "Never", "nodeSelector": {"pool": name}, "tolerations": tolerations,
                    "containers": [{"name": "train", "image": "registry.example/train:1.0",
                                    "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}}}}

    untolerated = job("untolerated", [])
    until_verdict(cluster, untolerated, namespace, denied_with=f"[cap-{namespace}/capacity.nodes] no node large enough")
    refused = cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=untolerated)
    assert refused.code == 1 and "nodes match its node selection and tolerations" in refused.stderr, refused
    tolerated = job("tolerated", [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}])
    admitted = cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=tolerated)
    assert admitted.ok and "capacity.nodes" not in admitted.stderr, admitted


def test_a_dra_claim_template_of_four_gpus_counts_as_four_gpus(
        webhook: WebhookProcess, cluster: ControlPlane, namespace: str) -> None:
    # resource.k8s.io/v1, served by the API server itself since Kubernetes 1.34 (kubernetes/api resource/v1)
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "four"},
                "spec": {"spec": {"devices": {"requests": [
                    {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 4}}]}}}}
    cluster.kubectl("create", "-n", namespace, "-f", "-", stdin=template).check()
    policy = {"apiVersion": "mlgate.dev/v1alpha1", "kind": "ClusterMLPolicy", "metadata": {"name": f"dra-{namespace}"},
              "spec": {"match": {"namespaces": [namespace]},
                       "rules": [{"rule": "gpu.max", "action": "deny", "params": {"perPod": 2}}]}}
    cluster.kubectl("apply", "-f", "-", stdin=policy).check()
    claimed = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "claims-four"},
               "spec": {"template": {"spec": {
                   "restartPolicy": "Never", "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "four"}],
                   "containers": [{"name": "train", "image": "registry.example/train:1.0",
                                   "resources": {"claims": [{"name": "gpu"}]}}]}}}}
    tag = f"[dra-{namespace}/gpu.max] too many gpus per pod"
    until_verdict(cluster, claimed, namespace, denied_with=tag)  # once the watches have the template
    refused = cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=claimed)
    assert refused.code == 1 and "job pods ask for 4 GPUs, the limit is 2" in refused.stderr, refused


def test_a_job_for_a_kueue_queue_that_does_not_exist_or_has_no_gpu_flavor_is_told_at_apply(
        webhook: WebhookProcess, cluster: ControlPlane, namespace: str) -> None:
    # kueue.x-k8s.io/v1beta2, from the upstream CRDs in tests/e2e_crds (no Kueue controller runs here)
    suffix = namespace[-5:]
    cpu_only = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": f"cpu-{suffix}"},
                "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
                    {"name": "default", "resources": [{"name": "cpu", "nominalQuota": "64"}]}]}]}}
    cluster.kubectl("create", "-f", "-", stdin=cpu_only).check()
    local = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "cpu"},
             "spec": {"clusterQueue": f"cpu-{suffix}"}}
    cluster.kubectl("create", "-n", namespace, "-f", "-", stdin=local).check()
    policy = capacity_policy(namespace, ("capacity.queue", "warn"), ("capacity.queue-gpus", "deny"))
    cluster.kubectl("apply", "-f", "-", stdin=policy).check()

    no_gpu_flavor = pytorchjob("to-cpu", {"nvidia.com/gpu": 1}, workers=1)
    no_gpu_flavor["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "cpu"}
    until_verdict(cluster, no_gpu_flavor, namespace, denied_with=f"[cap-{namespace}/capacity.queue-gpus] no gpu flavor")
    refused = cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=no_gpu_flavor)
    assert refused.code == 1 and f'ClusterQueue "cpu-{suffix}" (of LocalQueue "cpu") covers no nvidia.com/gpu' \
        in refused.stderr, refused

    missing = pytorchjob("to-nowhere", {"nvidia.com/gpu": 1}, workers=1)
    missing["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "research"}
    stored = cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=missing)
    assert stored.ok and f"[cap-{namespace}/capacity.queue] local queue not found" in stored.stderr, stored


def test_a_pod_claiming_more_dra_gpus_than_any_node_publishes_is_refused(
        webhook: WebhookProcess, cluster: ControlPlane, namespace: str) -> None:
    node_name = f"e2e-dra-{uuid.uuid4().hex[:5]}"
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name, "labels": {"dra": node_name}},
            "status": {"capacity": {"pods": "110"}, "allocatable": {"pods": "110"}}}
    cluster.kubectl("create", "-f", "-", stdin=node).check()
    # as the NVIDIA DRA driver's kubelet plugin publishes a node's GPUs (resource.k8s.io/v1 ResourceSliceSpec)
    published = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node_name}-gpus"},
                 "spec": {"driver": "gpu.nvidia.com", "nodeName": node_name,
                          "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
                          "devices": [{"name": f"gpu-{i}"} for i in range(2)]}}
    cluster.kubectl("create", "-f", "-", stdin=published).check()
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "four"},
                "spec": {"spec": {"devices": {"requests": [
                    {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 4}}]}}}}
    cluster.kubectl("create", "-n", namespace, "-f", "-", stdin=template).check()
    cluster.kubectl("apply", "-f", "-", stdin=capacity_policy(namespace, ("capacity.nodes", "deny"))).check()
    claimed = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "claims-four"},
               "spec": {"template": {"spec": {
                   "restartPolicy": "Never", "nodeSelector": {"dra": node_name},
                   "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "four"}],
                   "containers": [{"name": "train", "image": "registry.example/train:1.0",
                                   "resources": {"claims": [{"name": "gpu"}]}}]}}}}
    tag = f"[cap-{namespace}/capacity.nodes] no node large enough"
    until_verdict(cluster, claimed, namespace, denied_with=tag)  # once the watches have the slice and template
    refused = cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=claimed)
    assert refused.code == 1 and "asks for 4 devices of DRA driver gpu.nvidia.com, but the largest node it may " \
        "run on has 2" in refused.stderr, refused
