"""Checkpoint storage as the drivers define it (mlgate/rules/storage_drivers.yaml): in-tree and local
provisioners, Block volumes, static volumes, ReadWriteOnce on one node, and object stores that cannot rename.

Each fixture is the shared job of test_storage_rules (three pods writing claim "data") with one change.
"""

from __future__ import annotations

from typing import Any

import pytest
from builders import DELETE, change, decide, job

from mlgate.model.facts import StaticFacts
from mlgate.model.results import Outcome
from mlgate.rules.storage_drivers import DRIVERS

JOB_SPEC = "/spec/template/spec"
PVC: dict[str, Any] = {
    "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": "ml"},
    "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "shared",
             "resources": {"requests": {"storage": "100Gi"}}},
}
CLASS: dict[str, Any] = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "shared"},
                         "provisioner": "efs.csi.aws.com"}
PV: dict[str, Any] = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-data"},
                      "spec": {"accessModes": ["ReadWriteMany"], "csi": {"driver": "efs.csi.aws.com",
                                                                         "volumeHandle": "fs-1"}}}
STATIC = change(change(PVC, "/spec/storageClassName", ""), "/spec/volumeName", "pv-data")


def shared_job() -> dict[str, Any]:
    obj = change(job(parallelism=3), JOB_SPEC + "/volumes", [{"name": "data", "persistentVolumeClaim":
                                                             {"claimName": "data"}}])
    return change(obj, JOB_SPEC + "/containers/0/volumeMounts", [{"name": "data", "mountPath": "/ckpt"}])


def judged(*objects: dict[str, Any], obj: dict[str, Any] | None = None, rule: str = "storage.shared-claim-rwx",
           params: dict[str, Any] | None = None):
    (result,) = decide(obj or shared_job(), rule, params, facts=StaticFacts.from_objects(objects)).results
    return result


def reasons(result) -> list[str]:
    return [f.reason for f in result.findings]


@pytest.mark.parametrize("provisioner", ["kubernetes.io/aws-ebs", "kubernetes.io/gce-pd", "kubernetes.io/azure-disk",
                                         "rancher.io/local-path", "openebs.io/local", "hostpath.csi.k8s.io"])
def test_an_in_tree_or_node_local_provisioner_cannot_share_a_file_system(provisioner: str):
    result = judged(PVC, change(CLASS, "/provisioner", provisioner))
    assert reasons(result) == ["provisioner cannot share"]
    assert provisioner in result.findings[0].detail


def test_in_tree_azure_file_shares_as_its_csi_driver_does():
    assert judged(PVC, change(CLASS, "/provisioner", "kubernetes.io/azure-file")).outcome is Outcome.PASS


def test_a_block_claim_on_a_multi_attach_driver_shares_but_cannot_be_mounted_as_a_directory():
    block = change(PVC, "/spec/volumeMode", "Block")
    ebs = change(CLASS, "/provisioner", "ebs.csi.aws.com")
    result = judged(block, ebs)
    assert reasons(result) == ["block claim mounted as a directory"]
    assert result.findings[0].path == JOB_SPEC + "/containers/0/volumeMounts/0/mountPath"
    assert DRIVERS.find("ebs.csi.aws.com").sharing("Block") == "rwx"  # type: ignore[union-attr]


def test_a_static_volume_is_classified_by_its_persistent_volumes_driver():
    assert judged(STATIC, PV).outcome is Outcome.PASS
    on_ebs = change(PV, "/spec/csi/driver", "ebs.csi.aws.com")
    result = judged(STATIC, on_ebs)
    assert reasons(result) == ["provisioner cannot share"]
    assert "ebs.csi.aws.com (PersistentVolume pv-data)" in result.findings[0].detail


def test_a_static_volume_with_an_in_tree_nfs_source_shares():
    nfs = change(change(PV, "/spec/csi", DELETE), "/spec/nfs", {"server": "nas", "path": "/exports"})
    assert judged(STATIC, nfs).outcome is Outcome.PASS


def test_the_claims_provisioner_annotation_comes_before_its_class():
    annotated = change(PVC, "/metadata/annotations", {"volume.kubernetes.io/storage-provisioner": "ebs.csi.aws.com"})
    result = judged(annotated, CLASS)
    assert "ebs.csi.aws.com (annotation volume.kubernetes.io/storage-provisioner)" in result.findings[0].detail


def test_a_bound_claim_is_judged_by_the_access_modes_its_volume_has():
    bound = change(PVC, "/status", {"phase": "Bound", "accessModes": ["ReadWriteOnce"]})
    assert reasons(judged(bound, CLASS)) == ["shared claim not ReadWriteMany"]


def test_readwriteonce_is_fine_for_pods_pinned_to_one_node():
    rwo = change(PVC, "/spec/accessModes", ["ReadWriteOnce"])
    pinned = change(shared_job(), JOB_SPEC + "/nodeSelector", {"kubernetes.io/hostname": "gpu-node-1"})
    assert judged(rwo, CLASS, obj=pinned).outcome is Outcome.PASS
    assert reasons(judged(rwo, CLASS)) == ["shared claim not ReadWriteMany"]


def test_readwriteoncepod_has_its_own_message_even_on_one_node():
    rwop = change(PVC, "/spec/accessModes", ["ReadWriteOncePod"])
    pinned = change(shared_job(), JOB_SPEC + "/nodeName", "gpu-node-1")
    result = judged(rwop, CLASS, obj=pinned)
    assert reasons(result) == ["shared claim is ReadWriteOncePod"]
    assert "one pod only, even on one node" in result.findings[0].detail


@pytest.mark.parametrize(("provisioner", "condition"), [("csi.trident.netapp.io", "NAS backends"),
                                                        ("pxd.portworx.com", "sharedv4"),
                                                        ("csi.vsphere.vmware.com", "vSAN File Services")])
def test_a_driver_that_shares_only_in_some_setups_says_what_it_could_not_check(provisioner: str, condition: str):
    result = judged(PVC, change(CLASS, "/provisioner", provisioner))
    assert result.outcome is Outcome.SKIP and condition in result.unchecked[0]


@pytest.mark.parametrize("provisioner", ["azurelustre.csi.azure.com", "lustre.csi.storage.gke.io",
                                         "parallelstore.csi.storage.gke.io", "csi.juicefs.com", "exa.csi.ddn.com",
                                         "nfs.csi.ceph.com"])
def test_a_shared_file_system_driver_shares(provisioner: str):
    assert judged(PVC, change(CLASS, "/provisioner", provisioner)).outcome is Outcome.PASS


# --- storage.checkpoint-posix -------------------------------------------------------------------------------


def test_a_checkpoint_on_s3_mountpoint_is_refused_with_why():
    s3 = change(PV, "/spec/csi/driver", "s3.csi.aws.com")
    result = judged(STATIC, s3, rule="storage.checkpoint-posix")
    assert reasons(result) == ["claim cannot rename"]
    assert "does not rename files" in result.findings[0].detail


def test_a_checkpoint_on_efs_can_rename():
    assert judged(STATIC, PV, rule="storage.checkpoint-posix").outcome is Outcome.PASS


def test_a_read_only_object_store_is_not_judged_for_renames():
    read_only = change(shared_job(), JOB_SPEC + "/containers/0/volumeMounts/0/readOnly", True)
    s3 = change(PV, "/spec/csi/driver", "s3.csi.aws.com")
    assert judged(STATIC, s3, obj=read_only, rule="storage.checkpoint-posix").outcome is Outcome.SKIP


def test_without_facts_the_rename_check_says_it_could_not_look():
    (result,) = decide(shared_job(), "storage.checkpoint-posix").results
    assert result.outcome is Outcome.SKIP and result.unchecked


# --- storage.checkpoint-uri: the forms each store really takes ----------------------------------------------


def model(uri: str) -> dict[str, Any]:
    return {"apiVersion": "mlgate.dev/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "chat", "namespace": "ml"},
            "spec": {"image": "registry.example/serve:1.0", "modelUri": uri, "resources": {"gpu": 1}}}


def uri_reasons(uri: str, params: dict[str, Any] | None = None) -> list[str]:
    (result,) = decide(model(uri), "storage.checkpoint-uri", params).results
    return reasons(result)


@pytest.mark.parametrize("uri", ["s3://models/llm", "gs://models/llm", "gcs://models/llm", "az://models/llm",
                                 "abfss://models@acct01.dfs.core.windows.net/llm", "abfs://models@acct01/llm",
                                 "https://acct01.z13.blob.storage.azure.net/models/llm",
                                 "https://acct01.dfs.core.windows.net/models/llm", "hf://meta-llama/Llama-3.1-8B/sub",
                                 "hf://meta-llama/Llama-3.1-8B:main/sub/dir"])
def test_a_store_in_any_of_its_spellings_is_allowed(uri: str):
    assert uri_reasons(uri) == []


@pytest.mark.parametrize(("uri", "reason"), [("gcs:///llm", "uri malformed"), ("az:///llm", "uri malformed"),
                                             ("abfss://models/llm", "uri malformed"),
                                             ("hdfs://namenode/models", "uri scheme not allowed"),
                                             ("HTTPS://example.com/llm.tar", "uri scheme not allowed")])
def test_a_store_written_wrong_or_not_allowed_is_refused(uri: str, reason: str):
    assert uri_reasons(uri) == [reason]


def test_hdfs_and_webhdfs_are_allowed_when_a_policy_lists_them():
    allowed = {"allowedSchemes": ["hdfs", "webhdfs"]}
    assert uri_reasons("hdfs://namenode/models", allowed) == []
    assert uri_reasons("webhdfs://namenode/models", allowed) == []


@pytest.mark.parametrize("uri", ["S3://models/llm", "Gs://models/llm", "PVC://claim/llm", "Hf://meta-llama/Llama-3.1-8B"])
def test_a_scheme_not_in_lower_case_is_refused_because_it_is_never_fetched(uri: str):
    (result,) = decide(model(uri), "storage.checkpoint-uri").results
    (finding,) = result.findings
    assert finding.reason == "uri scheme not lower case"
    assert finding.fix == f"write {uri.split(':', maxsplit=1)[0].lower()}://"
