from builders import DELETE, change, decide, outcome, pod, pytorchjob, trainingjob

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
