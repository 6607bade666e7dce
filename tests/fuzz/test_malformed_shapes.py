"""Malformed shapes the fuzzer found, each once: a minimal valid object with one change, and what the rule
must say about it. Before the fix each of these ended in a rule raising (the engine reported `error` with a
note such as "TypeError: 'int' object is not iterable"), or in a mutation writing what the user did not ask
for (a container named "None", an env var holding "None").

The rule for shapes the API server would refuse anyway: checks judge what they can read (a container list
of the wrong type holds no containers; a GPU count of inf or NaN is no count), and mutations decline with one
`skip` that names the field, rather than overwrite the user's value or guess which container is meant.
"""

from __future__ import annotations

import pytest
from builders import DELETE, change, decide, pod, pytorchjob, trainingjob

from mlgate.engine import evaluate
from mlgate.loading.policies import default_policy_dir, load_policy_paths
from mlgate.model.facts import StaticFacts
from mlgate.model.results import Outcome, RuleResult

SHIPPED = load_policy_paths([default_policy_dir()])
GPU_LIMIT = "/spec/containers/0/resources/limits/nvidia.com~1gpu"
GPU_REQUEST = "/spec/containers/0/resources/requests/nvidia.com~1gpu"
MIG_LIMIT = "/spec/containers/0/resources/limits/nvidia.com~1mig-1g.5gb"
WORKER = "/spec/pytorchReplicaSpecs/Worker/template/spec"
MASTER = "/spec/pytorchReplicaSpecs/Master/template/spec"
INF, NAN = float("inf"), float("nan")


def result(obj, rule, params=None, **kwargs) -> RuleResult:
    (found,) = [r for r in decide(obj, rule, params, **kwargs).results if r.rule == rule]
    return found


def with_checkpoint_claim(obj, claim="ckpt", mount=None):
    obj = change(obj, "/spec/volumes", [{"name": "c", "persistentVolumeClaim": {"claimName": claim}}])
    return change(obj, "/spec/containers/0/volumeMounts", [mount if mount is not None else
                                                           {"name": "c", "mountPath": "/ckpt"}])


# --- numbers that are no GPU count -------------------------------------------------------------------------


@pytest.mark.parametrize("count", [INF, -INF, NAN], ids=["inf", "-inf", "nan"])
def test_a_gpu_count_of_inf_or_nan_is_reported_as_not_whole_instead_of_raising(count):
    obj = change(change(pod(), GPU_LIMIT, count), GPU_REQUEST, count)
    verdict = result(obj, "gpu.limits")
    assert verdict.outcome is Outcome.FAIL
    assert [f.reason for f in verdict.findings] == ["gpu count not whole"]


def test_an_infinite_gpu_count_counts_for_nothing_in_gpu_max():
    obj = change(change(pod(), GPU_LIMIT, INF), GPU_REQUEST, INF)
    assert result(obj, "gpu.max", {"perContainer": 8}).outcome is Outcome.PASS


@pytest.mark.parametrize("count", [INF, NAN], ids=["inf", "nan"])
def test_a_mig_device_count_of_inf_or_nan_is_no_ask_for_mig_profile_exists(count):
    verdict = result(change(pod(gpus=0), MIG_LIMIT, count), "mig.profile-exists")
    assert (verdict.outcome, verdict.note) == (Outcome.SKIP, "no MIG resources or MIG product selectors")


def test_an_infinite_gpu_limit_is_not_copied_into_requests():
    obj = change(change(pod(), GPU_LIMIT, INF), "/spec/containers/0/resources/requests", DELETE)
    verdict = result(obj, "defaults.gpu-requests")
    assert (verdict.outcome, verdict.note) == (Outcome.SKIP, "nothing to change")


# --- container lists that are no list -----------------------------------------------------------------------


@pytest.mark.parametrize(("field", "value"), [("containers", 5), ("initContainers", True),
                                              ("ephemeralContainers", 1.5)])
def test_a_container_list_of_the_wrong_type_makes_no_rule_raise(field, value):
    decision = evaluate(change(pod(), f"/spec/{field}", value), SHIPPED)
    assert [(r.rule, r.note) for r in decision.results if r.outcome is Outcome.ERROR] == []


def test_containers_5_in_one_template_still_lets_pod_security_judge_the_others():
    obj = change(change(pytorchjob(), f"{WORKER}/containers", 5),
                 f"{MASTER}/containers/0/securityContext/privileged", True)
    verdict = result(obj, "pod-security.baseline")
    assert verdict.outcome is Outcome.FAIL
    assert [f.path for f in verdict.findings] == [f"{MASTER}/containers/0/securityContext/privileged"]


# --- mutations that cannot tell which container is meant -----------------------------------------------------


@pytest.mark.parametrize("name", [None, 5, ""], ids=["none", "number", "empty"])
def test_security_context_defaults_decline_a_container_without_a_name(name):
    obj = change(change(pod(), "/spec/containers/0/name", name), "/spec/containers/0/securityContext", DELETE)
    verdict = result(obj, "defaults.security-context")
    assert verdict.outcome is Outcome.SKIP
    assert verdict.note == "the container at /spec/containers/0 has no name, which the API server requires: not mutated"


def test_a_nameless_trainingjob_overlay_container_gets_no_container_named_none_added():
    obj = change(trainingjob(), "/spec/template/spec/containers/-", {"image": "registry.example/sidecar:1"})
    decision = decide(obj, "defaults.security-context")
    assert decision.patch == []
    assert decision.results[0].note.startswith("the container at /spec/template/spec/containers/1 has no name")


def test_security_context_defaults_decline_two_containers_of_one_name():
    obj = change(pod(), "/spec/containers/-", {"name": "main", "image": "registry.example/train:1.0"})
    verdict = result(obj, "defaults.security-context")
    assert (verdict.outcome, verdict.note) == (
        Outcome.SKIP, '2 containers are named "main" at /spec; the API server requires unique names: not mutated')


def test_a_container_name_that_is_a_mapping_makes_no_default_raise():
    obj = change(change(pod(gpus=2), "/spec/containers/0/name", {"a": 1}), "/spec/containers/0/securityContext",
                 DELETE)
    decision = evaluate(obj, SHIPPED)
    assert [(r.rule, r.note) for r in decision.results if r.outcome is Outcome.ERROR] == []


# --- fields of the wrong type are the user's to fix, not the mutation's to overwrite ------------------------


@pytest.mark.parametrize(("ptr", "value", "note"), [
    ("/spec/containers/0/securityContext", "x",
     "/spec/containers/0/securityContext is a string, not a mapping: not mutated"),
    ("/spec/containers/0/securityContext/capabilities", "x",
     "/spec/containers/0/securityContext/capabilities is a string, not a mapping: not mutated"),
    ("/spec/securityContext", ["x"], "/spec/securityContext is a list, not a mapping: not mutated"),
])
def test_security_context_defaults_leave_a_security_context_of_the_wrong_type_alone(ptr, value, note):
    verdict = result(change(pod(), ptr, value), "defaults.security-context")
    assert (verdict.outcome, verdict.note) == (Outcome.SKIP, note)


def test_an_os_that_is_a_string_does_not_stop_the_security_context_defaults():
    obj = change(change(pod(), "/spec/os", "linux"), "/spec/containers/0/securityContext", DELETE)
    assert result(obj, "defaults.security-context").outcome is Outcome.PASS


@pytest.mark.parametrize("tolerations", [5, "x"])
def test_gpu_toleration_declines_tolerations_that_are_no_list(tolerations):
    verdict = result(change(pod(), "/spec/tolerations", tolerations), "defaults.gpu-toleration")
    assert verdict.outcome is Outcome.SKIP
    assert verdict.note.startswith("/spec/tolerations is a ") and verdict.note.endswith(", not a list: not mutated")


@pytest.mark.parametrize(("ptr", "value"), [("/spec/volumes", 5), ("/spec/containers/0/volumeMounts", True)])
def test_shm_declines_volumes_or_mounts_that_are_no_list(ptr, value):
    verdict = result(change(pod(gpus=2), ptr, value), "defaults.shm")
    assert verdict.outcome is Outcome.SKIP
    assert verdict.note.startswith(f"{ptr} is a ")


def test_shm_reads_past_a_volume_whose_name_is_a_mapping():
    obj = change(pod(gpus=2), "/spec/volumes", [{"name": {"a": 1}, "emptyDir": {}}])
    assert result(obj, "defaults.shm").outcome is Outcome.PASS


def test_run_policy_defaults_decline_a_run_policy_that_is_a_string():
    verdict = result(change(pytorchjob(), "/spec/runPolicy", "x"), "defaults.run-policy")
    assert (verdict.outcome, verdict.note) == (Outcome.SKIP, "/spec/runPolicy is a string, not a mapping: not mutated")


# --- checkpoint env and storage ------------------------------------------------------------------------------


@pytest.mark.parametrize("obj", [
    with_checkpoint_claim(pod(), claim=5),
    change(with_checkpoint_claim(pod()), "/spec/volumes/0/persistentVolumeClaim", 5),
    change(change(with_checkpoint_claim(pod()), "/spec/volumes/0/name", ["c"]),
           "/spec/containers/0/volumeMounts/0/name", ["c"]),
    with_checkpoint_claim(pod(), mount={"name": "c"}),
], ids=["claim-name-number", "pvc-number", "volume-name-list", "no-mount-path"])
def test_checkpoint_env_is_not_set_from_a_claim_or_mount_of_the_wrong_shape(obj):
    verdict = result(obj, "defaults.checkpoint-env")
    assert (verdict.outcome, verdict.note) == (Outcome.SKIP, "nothing to change")


def test_checkpoint_env_declines_an_env_that_is_no_list():
    verdict = result(change(with_checkpoint_claim(pod()), "/spec/containers/0/env", 5), "defaults.checkpoint-env")
    assert (verdict.outcome, verdict.note) == (
        Outcome.SKIP, "/spec/containers/0/env is a number, not a list: not mutated")


def test_a_trainingjob_checkpoint_mount_path_that_is_a_mapping_is_no_env_value():
    obj = change(trainingjob(), "/spec/checkpoint", {"claimName": "ckpt", "mountPath": {"a": 1}})
    assert result(obj, "defaults.checkpoint-env").outcome is Outcome.SKIP


def shared_claim():
    """A PyTorchJob whose Worker pods (2) mount claim "ckpt" read-write."""
    obj = change(pytorchjob(), f"{WORKER}/volumes", [{"name": "c", "persistentVolumeClaim": {"claimName": "ckpt"}}])
    return change(obj, f"{WORKER}/containers/0/volumeMounts", [{"name": "c", "mountPath": "/ckpt"}])


CLAIM = StaticFacts.from_objects([{"kind": "PersistentVolumeClaim", "metadata": {"name": "ckpt", "namespace": "ml"},
                                   "spec": {"accessModes": ["ReadWriteOnce"]}}])


@pytest.mark.parametrize(("ptr", "value"), [(f"{WORKER}/volumes", 5), (f"{WORKER}/containers/0/volumeMounts", 5)])
def test_shared_claim_rwx_reads_volumes_or_mounts_that_are_no_list_as_none(ptr, value):
    verdict = result(change(shared_claim(), ptr, value), "storage.shared-claim-rwx", facts=CLAIM)
    assert (verdict.outcome, verdict.note) == (Outcome.SKIP, "no claim is mounted read-write by 2 or more pods")


def test_consistent_mounts_reads_volumes_that_are_no_list_as_none():
    assert result(change(pod(), "/spec/volumes", 5), "storage.consistent-mounts").outcome is Outcome.SKIP


def test_a_trainingjob_checkpoint_claim_name_that_is_a_mapping_is_no_claim():
    obj = change(trainingjob(), "/spec/checkpoint", {"claimName": {"a": 1}, "mountPath": "/ckpt"})
    verdict = result(obj, "storage.shared-claim-rwx", facts=CLAIM)
    assert (verdict.outcome, verdict.note) == (Outcome.SKIP, "no claim is mounted read-write by 2 or more pods")


def test_a_claim_whose_access_modes_in_the_facts_are_no_list_is_not_read_write_many():
    obj = shared_claim()
    facts = StaticFacts.from_objects([{"kind": "PersistentVolumeClaim", "metadata": {"name": "ckpt", "namespace": "ml"},
                                       "spec": {"accessModes": 5}}])
    verdict = result(obj, "storage.shared-claim-rwx", facts=facts)
    assert [f.reason for f in verdict.findings] == ["shared claim not ReadWriteMany"]


# --- node affinity operands --------------------------------------------------------------------------------

RANKED_NODE = StaticFacts.from_objects([{"kind": "Node", "metadata": {"name": "n", "labels": {"rank": "5"}},
                                         "status": {"allocatable": {"nvidia.com/mig-1g.5gb": 7}}}])


@pytest.mark.parametrize("operand", ["²", "9" * 5000, "5\n", "1e3"], ids=["superscript", "5000-digits", "newline",
                                                                          "exponent"])
def test_a_gt_operand_that_is_no_int64_matches_no_node_instead_of_raising(operand):
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "rank", "operator": "Gt", "values": [operand]}]}]}}}
    obj = change(change(pod(gpus=0), MIG_LIMIT, 1), "/spec/affinity", affinity)
    verdict = result(obj, "mig.node-inventory", facts=RANKED_NODE)
    assert [f.reason for f in verdict.findings] == ["mig devices not offered"]


def test_a_gt_operand_below_the_node_label_still_matches():
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "rank", "operator": "Gt", "values": ["+3"]}]}]}}}
    obj = change(change(pod(gpus=0), MIG_LIMIT, 1), "/spec/affinity", affinity)
    assert result(obj, "mig.node-inventory", facts=RANKED_NODE).outcome is Outcome.PASS
