from typing import Any

from builders import DELETE, change, decide, job, outcome, pytorchjob, trainingjob

from mlgate.loading.policies import compile_policy
from mlgate.model.facts import StaticFacts
from mlgate.model.results import Outcome

JOB_SPEC = "/spec/template/spec"
MASTER_SPEC = "/spec/pytorchReplicaSpecs/Master/template/spec"
WORKER_SPEC = "/spec/pytorchReplicaSpecs/Worker/template/spec"
JOB_CLAIM = JOB_SPEC + "/volumes/0/persistentVolumeClaim/claimName"

PVC: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "PersistentVolumeClaim",
    "metadata": {"name": "data", "namespace": "ml"},
    "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "shared",
             "resources": {"requests": {"storage": "100Gi"}}},
}
CLASS: dict[str, Any] = {
    "apiVersion": "storage.k8s.io/v1",
    "kind": "StorageClass",
    "metadata": {"name": "shared"},
    "provisioner": "efs.csi.aws.com",
}


def facts(pvc: dict[str, Any] | None = PVC, storage_class: dict[str, Any] = CLASS) -> StaticFacts:
    return StaticFacts.from_objects([o for o in (pvc, storage_class) if o is not None])


def mounted(obj: dict[str, Any], spec: str, claim: str = "data", path: str = "/data") -> dict[str, Any]:
    """`obj` whose pod spec at `spec` mounts claim `claim` at `path` in its first container."""
    obj = change(obj, spec + "/volumes", [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}])
    return change(obj, spec + "/containers/0/volumeMounts", [{"name": "data", "mountPath": path}])


SHARED_JOB = mounted(job(parallelism=3), JOB_SPEC)
CHECKPOINTED = change(trainingjob(replicas=4), "/spec/checkpoint",
                      {"claimName": "data", "mountPath": "/ckpt", "uri": "s3://ckpt-bucket/llm"})


def rwx(obj: dict[str, Any], params: dict[str, Any] | None = None, with_facts: StaticFacts | None = None) -> Outcome:
    return outcome(obj, "storage.shared-claim-rwx", params, facts=with_facts or facts())


# --- storage.shared-claim-rwx


def test_allow_readwritemany_claim_on_efs_shared_by_three_job_pods():
    assert rwx(SHARED_JOB) is Outcome.PASS


def test_deny_readwriteonce_claim_shared_by_three_pods_at_the_volume():
    rwo = change(PVC, "/spec/accessModes", ["ReadWriteOnce"])
    decision = decide(SHARED_JOB, "storage.shared-claim-rwx", facts=facts(rwo))
    (finding,) = decision.violations[0].findings
    assert finding.reason == "shared claim not ReadWriteMany"
    assert finding.path == JOB_CLAIM
    assert finding.detail == ('claim "data" has accessModes [ReadWriteOnce]: ReadWriteOnce lets pods on one node '
                              "share it, but these pods may run on several nodes; 3 pods (job ×3) mount it read-write")


def test_deny_readwriteoncepod_claim_shared_by_three_pods():
    rwop = change(PVC, "/spec/accessModes", ["ReadWriteOncePod"])
    assert rwx(SHARED_JOB, with_facts=facts(rwop)) is Outcome.FAIL


def test_skip_without_cluster_facts():
    assert rwx(SHARED_JOB, with_facts=StaticFacts(known=False)) is Outcome.SKIP


def test_skip_claim_mounted_by_a_single_pod():
    one_pod = change(SHARED_JOB, "/spec/parallelism", 1)
    rwo = change(PVC, "/spec/accessModes", ["ReadWriteOnce"])
    assert rwx(one_pod, with_facts=facts(rwo)) is Outcome.SKIP


def test_skip_claim_every_pod_mounts_read_only():
    read_only = change(SHARED_JOB, JOB_SPEC + "/containers/0/volumeMounts/0/readOnly", True)
    rwo = change(PVC, "/spec/accessModes", ["ReadWriteOnce"])
    assert rwx(read_only, with_facts=facts(rwo)) is Outcome.SKIP


def test_skip_claim_whose_volume_is_read_only():
    read_only = change(SHARED_JOB, JOB_SPEC + "/volumes/0/persistentVolumeClaim/readOnly", True)
    rwo = change(PVC, "/spec/accessModes", ["ReadWriteOnce"])
    assert rwx(read_only, with_facts=facts(rwo)) is Outcome.SKIP


def test_deny_readwritemany_claim_whose_provisioner_only_attaches_to_one_node():
    ebs = change(CLASS, "/provisioner", "ebs.csi.aws.com")
    decision = decide(SHARED_JOB, "storage.shared-claim-rwx", facts=facts(storage_class=ebs))
    assert decision.violations[0].findings[0].reason == "provisioner cannot share"
    assert "ebs.csi.aws.com" in decision.deny_message()


def test_allow_rook_namespace_prefixed_cephfs_and_deny_rook_rbd():
    cephfs = change(CLASS, "/provisioner", "rook-ceph.cephfs.csi.ceph.com")
    rbd = change(CLASS, "/provisioner", "rook-ceph.rbd.csi.ceph.com")
    assert rwx(SHARED_JOB, with_facts=facts(storage_class=cephfs)) is Outcome.PASS
    assert rwx(SHARED_JOB, with_facts=facts(storage_class=rbd)) is Outcome.FAIL


def test_unknown_provisioner_is_a_skip_naming_it_unless_a_known_one_is_required():
    in_house = change(CLASS, "/provisioner", "team.nas.example.com")
    strict = {"requireKnownProvisioner": True}
    (result,) = decide(SHARED_JOB, "storage.shared-claim-rwx", facts=facts(storage_class=in_house)).results
    assert result.outcome is Outcome.SKIP
    assert result.unchecked == ('claim "data" is provisioned by team.nas.example.com (StorageClass shared), which the '
                                "driver table does not know, so whether it shares ReadWriteMany is not checked",)
    assert rwx(SHARED_JOB, strict, with_facts=facts(storage_class=in_house)) is Outcome.FAIL


def test_allow_in_house_rwx_driver_listed_in_params_even_with_a_namespace_prefix():
    in_house = change(CLASS, "/provisioner", "prod.nas.example.com")
    params = {"requireKnownProvisioner": True, "extraRwxProvisioners": ["nas.example.com"]}
    assert rwx(SHARED_JOB, params, with_facts=facts(storage_class=in_house)) is Outcome.PASS


def test_claim_without_a_class_uses_the_default_class():
    no_class = change(PVC, "/spec/storageClassName", DELETE)
    ebs_default = change(change(CLASS, "/provisioner", "ebs.csi.aws.com"),
                         "/metadata/annotations", {"storageclass.kubernetes.io/is-default-class": "true"})
    assert rwx(SHARED_JOB, with_facts=facts(no_class, ebs_default)) is Outcome.FAIL


def test_claim_with_empty_class_name_is_pre_provisioned_and_never_takes_the_default():
    static = change(PVC, "/spec/storageClassName", "")
    ebs_default = change(change(CLASS, "/provisioner", "ebs.csi.aws.com"),
                         "/metadata/annotations", {"storageclass.kubernetes.io/is-default-class": "true"})
    (result,) = decide(SHARED_JOB, "storage.shared-claim-rwx", facts=facts(static, ebs_default)).results
    assert result.outcome is Outcome.SKIP and "provisioned by no known driver" in result.unchecked[0]


def test_deny_claim_missing_from_the_cluster_and_warn_when_bound_with_warn():
    decision = decide(SHARED_JOB, "storage.shared-claim-rwx", facts=facts(None))
    assert decision.violations[0].findings[0].reason == "claim not found"
    assert 'PersistentVolumeClaim "ml/data"' in decision.deny_message()
    warned = decide(SHARED_JOB, "storage.shared-claim-rwx", action="warn", facts=facts(None))
    assert warned.allowed and warned.results[0].outcome is Outcome.WARN


def test_a_missing_claim_allowed_by_params_is_admitted_as_a_skip_that_says_it_was_not_checked():
    decision = decide(SHARED_JOB, "storage.shared-claim-rwx", params={"allowMissingClaims": True}, facts=facts(None))
    (result,) = decision.results
    assert decision.allowed and result.outcome is Outcome.SKIP
    assert result.unchecked == ('claim "ml/data" is not in the cluster yet, so its access mode is unknown; '
                                "3 pods (job ×3) mount it read-write",)
    (line,) = decision.unchecked_lines
    assert line.render().startswith("[test/storage.shared-claim-rwx] could not check: claim \"ml/data\"")


def test_without_cluster_facts_a_shared_claim_is_reported_as_not_checked():
    decision = decide(SHARED_JOB, "storage.shared-claim-rwx")
    (result,) = decision.results
    assert result.outcome is Outcome.SKIP and decision.allowed
    assert result.unchecked == ('no cluster facts to look up the access mode of claim "data", which several pods '
                                "mount read-write",)


def test_a_rule_that_does_not_apply_reports_nothing_unchecked():
    single = change(SHARED_JOB, "/spec/parallelism", 1)
    decision = decide(single, "storage.shared-claim-rwx")
    assert decision.results[0].outcome is Outcome.SKIP and decision.unchecked_lines == []


def test_min_replicas_param_raises_the_threshold():
    rwo = change(PVC, "/spec/accessModes", ["ReadWriteOnce"])
    assert rwx(SHARED_JOB, {"minReplicas": 4}, with_facts=facts(rwo)) is Outcome.SKIP
    assert rwx(SHARED_JOB, {"minReplicas": 3}, with_facts=facts(rwo)) is Outcome.FAIL


def test_pytorchjob_claim_counts_pods_of_every_role_that_mounts_it():
    master_only = mounted(pytorchjob(workers=2), MASTER_SPEC)
    both = mounted(master_only, WORKER_SPEC)
    rwo = facts(change(PVC, "/spec/accessModes", ["ReadWriteOnce"]))
    assert rwx(master_only, with_facts=rwo) is Outcome.SKIP
    decision = decide(both, "storage.shared-claim-rwx", facts=rwo)
    assert "3 pods (Master ×1, Worker ×2)" in decision.deny_message()


def test_trainingjob_checkpoint_claim_counts_as_mounted_by_every_replica():
    rwo = facts(change(PVC, "/spec/accessModes", ["ReadWriteOnce"]))
    decision = decide(CHECKPOINTED, "storage.shared-claim-rwx", facts=rwo)
    (finding,) = decision.violations[0].findings
    assert finding.path == "/spec/checkpoint/claimName"
    assert "4 pods" in finding.detail
    assert rwx(change(CHECKPOINTED, "/spec/replicas", 1), with_facts=rwo) is Outcome.SKIP


# --- storage.checkpoint-uri


def inference_service(uri: str) -> dict[str, Any]:
    return {
        "apiVersion": "mlgate.dev/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": "chat", "namespace": "ml"},
        "spec": {"image": "registry.example/serve:1.0", "modelUri": uri, "resources": {"gpu": 1}},
    }


def test_allow_s3_checkpoint_uri_with_bucket_and_key():
    assert outcome(CHECKPOINTED, "storage.checkpoint-uri") is Outcome.PASS


def test_deny_file_checkpoint_uri_by_default():
    decision = decide(change(CHECKPOINTED, "/spec/checkpoint/uri", "file:///tmp/ckpt"), "storage.checkpoint-uri")
    (finding,) = decision.violations[0].findings
    assert (finding.path, finding.reason) == ("/spec/checkpoint/uri", "uri scheme not allowed")


def test_deny_s3_uri_without_a_bucket():
    decision = decide(change(CHECKPOINTED, "/spec/checkpoint/uri", "s3:///llm"), "storage.checkpoint-uri")
    assert decision.violations[0].findings[0].reason == "uri malformed"


def test_deny_uri_without_a_scheme():
    decision = decide(change(CHECKPOINTED, "/spec/checkpoint/uri", "ckpt-bucket/llm"), "storage.checkpoint-uri")
    assert decision.violations[0].findings[0].reason == "uri has no scheme"


def test_pvc_uri_needs_a_claim_name():
    assert outcome(change(CHECKPOINTED, "/spec/checkpoint/uri", "pvc://data/llm"), "storage.checkpoint-uri") \
        is Outcome.PASS
    assert outcome(change(CHECKPOINTED, "/spec/checkpoint/uri", "pvc:///llm"), "storage.checkpoint-uri") \
        is Outcome.FAIL


def test_model_uri_hf_needs_owner_and_model():
    assert outcome(inference_service("hf://meta-llama/Llama-3.1-8B"), "storage.checkpoint-uri") is Outcome.PASS
    decision = decide(inference_service("hf://llama"), "storage.checkpoint-uri")
    assert decision.violations[0].findings[0].path == "/spec/modelUri"


def test_azure_blob_https_is_allowed_by_default_but_other_https_is_not():
    azure = "https://acct01.blob.core.windows.net/models/llm"
    assert outcome(inference_service(azure), "storage.checkpoint-uri") is Outcome.PASS
    assert outcome(inference_service("https://example.com/llm.tar"), "storage.checkpoint-uri") is Outcome.FAIL
    allowed = {"allowedSchemes": ["https"]}
    assert outcome(inference_service("https://example.com/llm.tar"), "storage.checkpoint-uri", allowed) \
        is Outcome.PASS


def test_allowed_schemes_param_narrows_the_default():
    assert outcome(CHECKPOINTED, "storage.checkpoint-uri", {"allowedSchemes": ["gs"]}) is Outcome.FAIL


def test_skip_workload_without_checkpoint_or_model_uri():
    assert outcome(trainingjob(), "storage.checkpoint-uri") is Outcome.SKIP


def test_allowed_schemes_are_refused_with_the_separator():
    document = {
        "apiVersion": "mlgate.dev/v1alpha1",
        "kind": "ClusterMLPolicy",
        "metadata": {"name": "uris"},
        "spec": {"rules": [{"rule": "storage.checkpoint-uri", "action": "deny",
                            "params": {"allowedSchemes": ["s3://"]}}]},
    }
    policy, errors = compile_policy(document, "<test>")
    assert policy is None and errors


# --- storage.consistent-mounts

BOTH_ROLES = mounted(mounted(pytorchjob(), MASTER_SPEC, path="/ckpt"), WORKER_SPEC, path="/ckpt")


def test_allow_claim_mounted_at_one_path_by_every_role():
    assert outcome(BOTH_ROLES, "storage.consistent-mounts") is Outcome.PASS


def test_deny_roles_mounting_one_claim_at_different_paths_naming_both():
    obj = change(BOTH_ROLES, WORKER_SPEC + "/containers/0/volumeMounts/0/mountPath", "/checkpoints")
    decision = decide(obj, "storage.consistent-mounts")
    (finding,) = decision.violations[0].findings
    assert finding.path == WORKER_SPEC + "/containers/0/volumeMounts/0/mountPath"
    assert '"/ckpt" by Master pods and at "/checkpoints" by Worker pods' in finding.detail


def test_skip_job_with_one_pod_template_and_no_checkpoint():
    assert outcome(SHARED_JOB, "storage.consistent-mounts") is Outcome.SKIP


def test_allow_trainingjob_volume_for_the_checkpoint_at_its_mount_path():
    obj = mounted(CHECKPOINTED, JOB_SPEC, path="/ckpt")
    assert outcome(obj, "storage.consistent-mounts") is Outcome.PASS


def test_deny_trainingjob_volume_for_the_checkpoint_at_another_path():
    obj = mounted(CHECKPOINTED, JOB_SPEC, path="/ckpt")
    decision = decide(change(obj, JOB_SPEC + "/containers/0/volumeMounts/0/mountPath", "/out"),
                      "storage.consistent-mounts")
    (finding,) = decision.violations[0].findings
    assert finding.reason == "checkpoint mounted at different paths"
    assert '"/out"' in finding.detail and '"/ckpt"' in finding.detail


def test_deny_trainingjob_other_volume_mounted_at_the_checkpoint_path():
    obj = mounted(CHECKPOINTED, JOB_SPEC, claim="datasets", path="/datasets")
    assert outcome(obj, "storage.consistent-mounts") is Outcome.PASS
    decision = decide(change(obj, JOB_SPEC + "/containers/0/volumeMounts/0/mountPath", "/ckpt"),
                      "storage.consistent-mounts")
    assert decision.violations[0].findings[0].reason == "checkpoint mount path taken"
    assert 'container "pytorch" mounts volume "data"' in decision.deny_message()
