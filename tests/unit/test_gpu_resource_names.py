"""Which resources are GPUs: exact names and documented patterns (mlgate/rules/devices.py), never a prefix.

Sharing resources (HAMi's memory and cores, Intel's millicores, time-slice replicas) are not GPUs; the
`gpu.sharing` rule judges them where a policy asks, and a policy can name more GPUs in `spec.gpuResources`.
"""

from __future__ import annotations

import pytest

from mlgate.engine import evaluate
from mlgate.model.results import Outcome
from mlgate.rules.common import pod_gpu_count
from mlgate.rules.devices import BUILT_IN, GpuResources
from mlgate.workloads.extract import extract
from tests.builders import change, decide, outcome, pod, policy_set

LIMITS = "/spec/containers/0/resources/limits"
REQUESTS = "/spec/containers/0/resources/requests"


def with_limit(resource: str, value: object, base: dict | None = None) -> dict:
    return change(base or pod(), f"{LIMITS}/{resource.replace('/', '~1')}", value)


@pytest.mark.parametrize("name", ["nvidia.com/gpu", "nvidia.com/mig-1g.5gb", "nvidia.com/mig-1g.10gb.me",
                                  "nvidia.com/mig-1g.24gb.me.all", "nvidia.com/mig-1g.24gb-me", "amd.com/gpu",
                                  "amd.com/cpx_nps4", "gpu.intel.com/i915", "gpu.intel.com/xe"])
def test_a_device_plugins_gpu_name_is_a_gpu(name: str):
    assert name in BUILT_IN


@pytest.mark.parametrize("name", ["nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores",
                                  "nvidia.com/priority", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.5gb.shared",
                                  "gpu.intel.com/millicores", "gpu.intel.com/memory.max", "gpu.intel.com/tiles",
                                  "gpu.intel.com/monitoring", "amd.com/gpumem", "amd.com/gpucores",
                                  "nvidia.com/gpu-x", "example.com/npu"])
def test_a_sharing_resource_or_a_name_that_only_starts_like_a_gpu_is_not_one(name: str):
    assert name not in BUILT_IN


def test_hamis_memory_and_cores_do_not_count_as_gpus():
    hami = with_limit("nvidia.com/gpucores", 30, with_limit("nvidia.com/gpumem", 8000, pod(gpus=2)))
    workload = extract(hami)
    assert workload is not None
    assert pod_gpu_count(workload.templates[0]) == 2
    assert outcome(hami, "gpu.max", {"perContainer": 8}) is Outcome.PASS
    assert outcome(hami, "gpu.limits") is Outcome.PASS


def test_intels_millicores_do_not_count_as_gpus():
    shared = with_limit("gpu.intel.com/millicores", 500, with_limit("gpu.intel.com/i915", 1, pod(gpus=0)))
    assert outcome(shared, "gpu.max", {"perContainer": 1}) is Outcome.PASS
    assert outcome(with_limit("gpu.intel.com/i915", 2, shared), "gpu.max", {"perContainer": 1}) is Outcome.FAIL


def test_a_policy_can_count_its_own_device_as_a_gpu():
    npu = with_limit("example.com/npu", 4, pod(gpus=0))
    counting = policy_set({"rule": "gpu.max", "params": {"perContainer": 2}}, gpuResources=["example.com/npu"])
    assert evaluate(npu, counting).allowed is False
    plain = policy_set({"rule": "gpu.max", "params": {"perContainer": 2}})
    assert evaluate(npu, plain).allowed is True


def test_two_policies_counting_different_names_each_see_their_own():
    npu = with_limit("example.com/npu-v2", 4, pod(gpus=1))
    counting = policy_set({"rule": "gpu.max", "params": {"perContainer": 2}}, gpuResources=["example.com/npu-*"])
    plain = policy_set({"rule": "gpu.max", "params": {"perContainer": 2}}, name="plain")
    both = type(counting)((*plain.policies, *counting.policies))
    results = {r.policy: r.outcome for r in evaluate(npu, both).results}
    assert results == {"plain": Outcome.PASS, "test": Outcome.FAIL}
    assert "example.com/npu-v2" in GpuResources(("example.com/npu-*",))


def test_a_gpu_resources_entry_that_is_no_resource_name_is_a_load_error():
    from mlgate.loading.policies import compile_policy

    document = {"apiVersion": "mlgate.dev/v1alpha1", "kind": "ClusterMLPolicy", "metadata": {"name": "p"},
                "spec": {"gpuResources": ["example.com/npu", "not a name!"], "rules": [{"rule": "gpu.limits"}]}}
    policy, errors = compile_policy(document, "p.yaml")
    assert policy is None
    assert [(e.field, e.message.split(" is not")[0]) for e in errors] == [("spec.gpuResources[1]", "'not a name!'")]


# --- gpu.sharing ------------------------------------------------------------------------------------------

SHARES = {"max": {"nvidia.com/gpumem": 40000, "nvidia.com/gpucores": 100}}


def hami_pod(**limits: object) -> dict:
    shared = pod(gpus=1)
    for name, value in limits.items():
        shared = with_limit(f"nvidia.com/{name}", value, shared)
    return shared


def test_sharing_passes_whole_shares_within_the_maximum():
    assert outcome(hami_pod(gpumem=8000, gpucores=30), "gpu.sharing", SHARES) is Outcome.PASS


def test_sharing_skips_a_pod_that_asks_for_no_listed_share():
    assert outcome(pod(), "gpu.sharing", SHARES) is Outcome.SKIP


@pytest.mark.parametrize(("limits", "reason"), [
    ({"gpumem": 50000}, "gpu share too large"),
    ({"gpumem": "1.5"}, "gpu share not whole"),
    ({"gpucores": -1}, "gpu share not whole"),
])
def test_sharing_refuses_a_share_that_is_not_whole_or_too_large(limits: dict, reason: str):
    decision = decide(hami_pod(**limits), "gpu.sharing", SHARES)
    assert [f.reason for r in decision.results for f in r.findings] == [reason]


def test_sharing_refuses_a_share_only_in_requests():
    requested = change(pod(gpus=1), f"{REQUESTS}/nvidia.com~1gpumem", 8000)
    (finding,) = decide(requested, "gpu.sharing", SHARES).results[0].findings
    assert (finding.reason, finding.path) == ("gpu share limit missing", f"{REQUESTS}/nvidia.com~1gpumem")


def test_sharing_with_require_gpu_refuses_a_share_without_a_gpu():
    alone = with_limit("nvidia.com/gpumem", 8000, pod(gpus=0))
    assert outcome(alone, "gpu.sharing", SHARES) is Outcome.PASS
    required = {**SHARES, "requireGpu": True}
    (finding,) = decide(alone, "gpu.sharing", required).results[0].findings
    assert finding.reason == "gpu share without a gpu"
