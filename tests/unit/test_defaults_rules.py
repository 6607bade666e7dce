import jsonpatch
import pytest
from builders import DELETE, change, decide, pod, policy_set, pytorchjob, trainingjob

from mlgate.engine import evaluate
from mlgate.model.results import Outcome

ALL_DEFAULTS = [
    {"rule": "defaults.gpu-requests"},
    {"rule": "defaults.gpu-toleration"},
    {"rule": "defaults.security-context"},
    {"rule": "defaults.run-policy"},
    {"rule": "defaults.shm"},
    {"rule": "defaults.checkpoint-env"},
]


def patched(obj, rule, params=None):
    decision = decide(obj, rule, params)
    return jsonpatch.apply_patch(obj, decision.patch), decision


def test_gpu_requests_are_set_equal_to_limits_where_unset():
    obj = change(pod(), "/spec/containers/0/resources/requests", DELETE)
    result, decision = patched(obj, "defaults.gpu-requests")
    assert result["spec"]["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": 1}
    assert decision.patch == [
        {"op": "add", "path": "/spec/containers/0/resources/requests", "value": {"nvidia.com/gpu": 1}}
    ]


def test_a_conflicting_gpu_request_is_not_overwritten():
    obj = change(pod(), "/spec/containers/0/resources/requests/nvidia.com~1gpu", 2)
    result, decision = patched(obj, "defaults.gpu-requests")
    assert decision.patch == []
    assert result == obj


@pytest.mark.parametrize("limit", [-2, "1.5", 1.5, True, "lots"])
def test_a_gpu_limit_the_api_server_would_refuse_is_not_copied_into_requests(limit):
    obj = change(change(pod(), "/spec/containers/0/resources/requests", DELETE),
                 "/spec/containers/0/resources/limits/nvidia.com~1gpu", limit)
    assert decide(obj, "defaults.gpu-requests").patch == []


def test_gpu_pods_get_the_gpu_toleration_once():
    obj = change(pod(), "/spec/tolerations", DELETE)
    result, _ = patched(obj, "defaults.gpu-toleration")
    assert result["spec"]["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert patched(result, "defaults.gpu-toleration")[1].patch == []


def test_cpu_only_pods_get_no_gpu_toleration():
    obj = change(pod(gpus=0), "/spec/tolerations", DELETE)
    assert patched(obj, "defaults.gpu-toleration")[1].patch == []


def test_security_context_defaults_fill_only_unset_fields():
    obj = change(pod(), "/spec/containers/0/securityContext", {"capabilities": {"drop": ["NET_RAW"]}})
    obj = change(obj, "/spec/securityContext/seccompProfile", DELETE)
    result, _ = patched(obj, "defaults.security-context")
    container_sc = result["spec"]["containers"][0]["securityContext"]
    assert container_sc == {"capabilities": {"drop": ["NET_RAW"]}, "allowPrivilegeEscalation": False}
    assert result["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}


def test_privileged_containers_are_not_given_allow_privilege_escalation_false():
    obj = change(pod(), "/spec/containers/0/securityContext", {"privileged": True})
    result, _ = patched(obj, "defaults.security-context")
    assert result["spec"]["containers"][0]["securityContext"] == {"privileged": True}


def test_run_as_non_root_is_only_set_when_the_policy_asks():
    obj = change(pod(), "/spec/securityContext/runAsNonRoot", DELETE)
    assert "runAsNonRoot" not in patched(obj, "defaults.security-context")[0]["spec"]["securityContext"]
    result, _ = patched(obj, "defaults.security-context", {"runAsNonRoot": True})
    assert result["spec"]["securityContext"]["runAsNonRoot"] is True


def test_trainingjob_security_defaults_land_in_the_template_overlay():
    obj = change(trainingjob(), "/spec/template", DELETE)
    result, decision = patched(obj, "defaults.security-context")
    overlay = result["spec"]["template"]["spec"]
    assert overlay["containers"] == [{"name": "pytorch", "securityContext": {"allowPrivilegeEscalation": False}}]
    assert overlay["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    assert decision.notes == ["capabilities kept: the container at /spec/template/spec/containers/0 may run as root"]


def root_pod(pod_sc=None, container_sc=None):
    obj = change(pod(), "/spec/securityContext", pod_sc or {})
    return change(obj, "/spec/containers/0/securityContext", container_sc or {})


@pytest.mark.parametrize("pod_sc, container_sc", [
    ({}, {}),
    ({"runAsUser": 0}, {}),
    ({"runAsUser": 1000}, {"runAsUser": 0}),
    ({"runAsNonRoot": True, "runAsUser": 0}, {}),
    ({"runAsNonRoot": True}, {"runAsNonRoot": False}),
    ({"runAsGroup": 1000, "fsGroup": 1000}, {}),
])
def test_a_container_that_may_run_as_root_keeps_its_capabilities(pod_sc, container_sc):
    result, decision = patched(root_pod(pod_sc, container_sc), "defaults.security-context")
    assert "capabilities" not in result["spec"]["containers"][0]["securityContext"]
    assert decision.notes == ["capabilities kept: the container at /spec/containers/0 may run as root"]


@pytest.mark.parametrize("pod_sc, container_sc", [
    ({"runAsUser": 1000}, {}),
    ({}, {"runAsUser": 1000}),
    ({"runAsUser": 0}, {"runAsUser": 1000}),
    ({"runAsNonRoot": True}, {}),
    ({}, {"runAsNonRoot": True}),
])
def test_a_container_that_provably_runs_as_non_root_drops_all_but_net_bind_service(pod_sc, container_sc):
    result, decision = patched(root_pod(pod_sc, container_sc), "defaults.security-context")
    capabilities = result["spec"]["containers"][0]["securityContext"]["capabilities"]
    assert capabilities == {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}
    assert decision.notes == []


def test_run_as_non_root_asked_of_the_policy_makes_the_drop_safe():
    result, decision = patched(root_pod(), "defaults.security-context", {"runAsNonRoot": True})
    assert result["spec"]["containers"][0]["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert decision.notes == []


def test_capabilities_a_non_root_container_adds_are_kept_beside_the_drop():
    obj = root_pod({"runAsUser": 1000}, {"capabilities": {"add": ["IPC_LOCK"]}})
    result, _ = patched(obj, "defaults.security-context")
    capabilities = result["spec"]["containers"][0]["securityContext"]["capabilities"]
    assert capabilities == {"add": ["IPC_LOCK", "NET_BIND_SERVICE"], "drop": ["ALL"]}


def test_no_capability_is_added_back_when_the_policy_keeps_none():
    obj = root_pod({"runAsUser": 1000})
    result, _ = patched(obj, "defaults.security-context", {"keepCapabilities": []})
    assert result["spec"]["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_a_container_with_its_own_drop_gets_no_note():
    obj = root_pod({}, {"capabilities": {"drop": ["NET_RAW"]}})
    assert patched(obj, "defaults.security-context")[1].notes == []


def test_run_policy_defaults_for_a_pytorchjob():
    obj = change(pytorchjob(), "/spec/runPolicy", DELETE)
    obj = change(obj, "/spec/pytorchReplicaSpecs/Worker/restartPolicy", DELETE)
    result, _ = patched(obj, "defaults.run-policy")
    assert result["spec"]["runPolicy"] == {"cleanPodPolicy": "Running"}
    assert result["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] == "OnFailure"


def test_no_backoff_limit_is_set_unless_the_policy_asks_because_the_operators_default_is_no_limit():
    obj = change(pytorchjob(), "/spec/runPolicy", DELETE)
    assert "backoffLimit" not in patched(obj, "defaults.run-policy")[0]["spec"]["runPolicy"]
    assert patched(obj, "defaults.run-policy", {"backoffLimit": 5})[0]["spec"]["runPolicy"]["backoffLimit"] == 5


def test_the_shipped_defaults_set_no_backoff_limit():
    from mlgate.loading.policies import default_policy_dir, load_policy_paths

    (policy,) = [p for p in load_policy_paths([default_policy_dir()]).policies if p.name == "defaults"]
    (binding,) = [b for b in policy.bindings if b.rule.id == "defaults.run-policy"]
    assert binding.params.backoff_limit is None  # type: ignore[attr-defined]


def test_multi_gpu_pods_get_a_memory_backed_dev_shm():
    result, _ = patched(pytorchjob(workers=3), "defaults.shm", {"sizeLimit": "4Gi"})
    worker = result["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "4Gi"}} in worker["volumes"]
    assert worker["containers"][0]["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}]


def test_a_single_gpu_single_pod_gets_no_dev_shm():
    assert patched(pod(), "defaults.shm")[1].patch == []


def test_checkpoint_dir_env_for_a_trainingjob():
    obj = change(trainingjob(), "/spec/checkpoint", {"claimName": "ckpt", "mountPath": "/ckpt"})
    result, _ = patched(obj, "defaults.checkpoint-env")
    assert {"name": "CHECKPOINT_DIR", "value": "/ckpt"} in result["spec"]["template"]["spec"]["containers"][0]["env"]


@pytest.mark.parametrize("build", [pod, pytorchjob, trainingjob], ids=["pod", "pytorchjob", "trainingjob"])
def test_all_defaults_applied_twice_add_nothing(build):
    bare = build()
    for ptr in ("/spec/securityContext", "/spec/tolerations"):
        bare = change(bare, ptr, DELETE) if build is pod else bare
    policies = policy_set(*ALL_DEFAULTS)
    first = evaluate(bare, policies)
    once = jsonpatch.apply_patch(bare, first.patch)
    second = evaluate(once, policies)
    assert second.patch == []
    assert all(r.outcome in (Outcome.PASS, Outcome.SKIP) for r in first.results)


def test_patch_escapes_slashes_in_keys():
    obj = change(pod(), "/spec/containers/0/resources/requests", DELETE)
    obj = change(obj, "/spec/containers/0/resources/limits", {"nvidia.com/gpu": 1, "example.com/x~y": 1})
    obj = change(obj, "/spec/containers/0/resources/requests", {"example.com/x~y": 1})
    decision = decide(obj, "defaults.gpu-requests")
    assert decision.patch == [
        {"op": "add", "path": "/spec/containers/0/resources/requests/nvidia.com~1gpu", "value": 1}
    ]


@pytest.mark.parametrize("rule", [r["rule"] for r in ALL_DEFAULTS])
@pytest.mark.parametrize(
    "build",
    [pod, pytorchjob, trainingjob, lambda: change(pod(), "/spec/tolerations", DELETE),
     lambda: change(pytorchjob(), "/spec/runPolicy", DELETE),
     lambda: change(change(trainingjob(), "/spec/template", DELETE), "/spec/checkpoint", {"uri": "s3://b/k"})],
    ids=["pod", "pytorchjob", "trainingjob", "pod-bare", "pytorchjob-bare", "trainingjob-bare"],
)
def test_defaults_report_exactly_when_they_change_the_object(rule, build):
    import copy

    from mlgate.rules.registry import Context, catalog
    from mlgate.workloads.extract import extract

    spec = catalog()[rule]
    obj = build()
    before = copy.deepcopy(obj)
    claimed = spec.mutate(extract(obj), spec.params(), Context())
    assert claimed is (obj != before)


def test_a_pod_with_several_root_containers_gets_one_note_naming_the_first():
    obj = root_pod()
    obj["spec"]["containers"].append({"name": "sidecar", "image": "registry.example/side:1.0"})
    decision = patched(obj, "defaults.security-context")[1]
    assert decision.notes == ["capabilities kept: 2 containers may run as root, the first at /spec/containers/0"]
