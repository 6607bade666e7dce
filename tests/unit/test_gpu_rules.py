from builders import DELETE, change, decide, job, outcome, pod, pytorchjob, trainingjob

from mlgate.model.results import Outcome

GPU_LIMIT = "/spec/containers/0/resources/limits/nvidia.com~1gpu"
GPU_REQUEST = "/spec/containers/0/resources/requests/nvidia.com~1gpu"


def test_allow_whole_gpus_in_limits_with_equal_requests():
    assert outcome(pod(), "gpu.limits") is Outcome.PASS


def test_deny_gpu_only_in_requests_names_the_request_path():
    obj = change(pod(), "/spec/containers/0/resources/limits", DELETE)
    decision = decide(obj, "gpu.limits")
    assert not decision.allowed
    (finding,) = decision.violations[0].findings
    assert finding.reason == "gpu limit missing"
    assert finding.path == GPU_REQUEST


def test_deny_fractional_gpu():
    obj = change(change(pod(), GPU_LIMIT, "0.5"), GPU_REQUEST, "0.5")
    assert outcome(obj, "gpu.limits") is Outcome.FAIL


def test_deny_request_that_differs_from_limit():
    decision = decide(change(pod(), GPU_REQUEST, 2), "gpu.limits")
    assert decision.violations[0].findings[0].path == GPU_REQUEST
    assert "requests 2 but limits 1" in decision.deny_message()


def test_deny_more_gpus_per_container_than_allowed():
    obj = change(pod(), GPU_LIMIT, 12)
    decision = decide(change(obj, GPU_REQUEST, 12), "gpu.max", {"perContainer": 8})
    assert not decision.allowed
    assert 'container "main" asks for 12 GPUs, the limit is 8' in decision.deny_message()


def test_deny_job_total_over_per_job_limit():
    assert outcome(pytorchjob(workers=7, gpus=2), "gpu.max", {"perJob": 15}) is Outcome.FAIL
    assert outcome(pytorchjob(workers=7, gpus=2), "gpu.max", {"perJob": 16}) is Outcome.PASS


def test_trainingjob_gpu_violation_points_at_the_sugar_field():
    decision = decide(change(trainingjob(), "/spec/resources/gpu", 9), "gpu.max", {"perContainer": 8})
    assert decision.violations[0].findings[0].path == "/spec/resources/gpu"


def test_deny_gpu_resource_outside_the_allowed_set():
    obj = change(pod(), "/spec/containers/0/resources/limits/amd.com~1gpu", 1)
    assert outcome(obj, "gpu.allowed-resources", {"allowed": ["nvidia.com/*"]}) is Outcome.FAIL
    assert outcome(pod(), "gpu.allowed-resources", {"allowed": ["nvidia.com/*"]}) is Outcome.PASS


def test_deny_container_mixing_full_gpus_and_mig():
    obj = change(pod(), "/spec/containers/0/resources/limits/nvidia.com~1mig-1g.5gb", 1)
    assert outcome(obj, "gpu.no-mixed-mig") is Outcome.FAIL
    assert outcome(pod(), "gpu.no-mixed-mig") is Outcome.PASS
    assert outcome(pod(gpus=0), "gpu.no-mixed-mig") is Outcome.SKIP


def test_gpu_max_points_at_the_request_when_a_container_only_requests_gpus():
    obj = change(pod(), "/spec/containers/0/resources", {"requests": {"nvidia.com/gpu": 12}})
    decision = decide(obj, "gpu.max", {"perContainer": 8})
    assert decision.violations[0].findings[0].path == GPU_REQUEST


# What a pod holds at once: native sidecars (restartable init containers) run beside the regular containers


def sidecar(name: str, gpus: int, restart_policy: str | None = "Always") -> dict:
    container = {"name": name, "image": "registry.example/side:1.0", "resources": {"limits": {"nvidia.com/gpu": gpus}}}
    return {**container, "restartPolicy": restart_policy} if restart_policy else container


def test_deny_pod_whose_native_sidecar_gpus_add_to_the_main_containers():
    obj = change(pod(gpus=8), "/spec/initContainers", [sidecar("gpu-sidecar", 4)])
    decision = decide(obj, "gpu.max", {"perPod": 8})
    (finding,) = decision.violations[0].findings
    assert finding.reason == "too many gpus per pod"
    assert finding.detail == "the pod asks for 12 GPUs, the limit is 8"


def test_allow_plain_init_container_gpus_that_run_before_the_main_container():
    obj = change(pod(gpus=8), "/spec/initContainers", [sidecar("warm-up", 4, restart_policy=None)])
    assert outcome(obj, "gpu.max", {"perPod": 8}) is Outcome.PASS


def test_an_init_container_runs_beside_the_sidecars_started_before_it():
    obj = change(pod(gpus=1), "/spec/initContainers", [sidecar("proxy", 4), sidecar("warm-up", 8, restart_policy=None)])
    decision = decide(obj, "gpu.max", {"perPod": 11})
    assert "the pod asks for 12 GPUs, the limit is 11" in decision.deny_message()


def test_job_total_counts_sidecar_gpus_for_every_pod():
    obj = change(pytorchjob(workers=1, gpus=2), "/spec/pytorchReplicaSpecs/Worker/template/spec/initContainers",
                 [sidecar("proxy", 1)])
    assert outcome(obj, "gpu.max", {"perJob": 4}) is Outcome.FAIL
    assert outcome(obj, "gpu.max", {"perJob": 5}) is Outcome.PASS


# TrainingJob: GPUs set in the template overlay, not in the spec.resources shorthand

OVERLAY_LIMITS = "/spec/template/spec/containers/0/resources/limits"


def test_trainingjob_gpu_set_only_in_the_overlay_points_at_the_overlay():
    obj = change(change(trainingjob(), "/spec/resources/gpu", DELETE), OVERLAY_LIMITS, {"nvidia.com/gpu": 12})
    decision = decide(obj, "gpu.max", {"perContainer": 8})
    (finding,) = decision.violations[0].findings
    assert finding.path == OVERLAY_LIMITS + "/nvidia.com~1gpu"
    assert 'container "pytorch" asks for 12 GPUs' in finding.detail


def test_trainingjob_gpu_in_the_shorthand_wins_over_the_overlay_and_is_pointed_at():
    obj = change(change(trainingjob(), "/spec/resources/gpu", 12), OVERLAY_LIMITS, {"nvidia.com/gpu": 2})
    decision = decide(obj, "gpu.max", {"perContainer": 8})
    assert [f.path for f in decision.violations[0].findings] == ["/spec/resources/gpu"]


def test_a_mig_device_next_to_whole_gpus_is_not_counted_as_another_gpu():
    obj = change(pod(gpus=12), "/spec/containers/0/resources/limits/nvidia.com~1mig-1g.5gb", 1)
    decision = decide(obj, "gpu.max", {"perContainer": 8})
    (finding,) = decision.violations[0].findings
    assert finding.path == GPU_LIMIT
    assert 'container "main" asks for 12 GPUs, the limit is 8' in finding.detail


def test_the_mixed_container_finding_points_at_the_overlay_that_mixes():
    limits = {"nvidia.com/gpu": 2, "nvidia.com/mig-1g.5gb": 1}
    obj = change(change(trainingjob(), "/spec/resources/gpu", DELETE), OVERLAY_LIMITS, limits)
    decision = decide(obj, "gpu.no-mixed-mig")
    assert [f.path for f in decision.violations[0].findings] == ["/spec/template/spec/containers/0/resources"]


def test_a_job_counts_only_the_pods_that_run_at_once_toward_its_total():
    obj = change(job(gpus=2, parallelism=4), "/spec/completions", 2)
    assert outcome(obj, "gpu.max", {"perJob": 4}) is Outcome.PASS
    assert outcome(job(gpus=2, parallelism=4), "gpu.max", {"perJob": 4}) is Outcome.FAIL
