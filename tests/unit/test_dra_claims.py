"""GPUs through Dynamic Resource Allocation: a pod's claims count as GPUs in every GPU rule (maxima, quota,
capacity, launcher) when their DeviceClass hands out GPUs, and a claim the facts cannot show is said to be
uncounted rather than counted as none."""

from __future__ import annotations

from typing import Any

import pytest
from builders import DELETE, change, decide, pod, pytorchjob

from mlgate.model.facts import StaticFacts
from mlgate.model.results import Outcome
from mlgate.rules.devices import dra_gpu_class

# resource.k8s.io/v1 shapes, as in kubernetes/api resource/v1/types.go
TEMPLATE: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
    "metadata": {"name": "four-gpus", "namespace": "ml"},
    "spec": {"spec": {"devices": {"requests": [
        {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 4}}]}}}}
NVIDIA_CLASS: dict[str, Any] = {  # k8s-dra-driver-gpu v25.12.0 deviceclass-gpu.yaml
    "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"},
    "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com' && "
                                                  "device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]}}
NIC_CLASS: dict[str, Any] = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "nic"},
                             "spec": {"selectors": [{"cel": {"expression": "device.driver == 'dra.net'"}}]}}


def claiming(obj: dict[str, Any], spec: str, claim: str = "four-gpus", source: str = "resourceClaimTemplateName",
             ) -> dict[str, Any]:
    """`obj` with its first container's GPUs asked for through a pod claim instead of resources.limits."""
    obj = change(obj, f"{spec}/resourceClaims", [{"name": "gpu", source: claim}])
    return change(obj, f"{spec}/containers/0/resources", {"claims": [{"name": "gpu"}]})


def facts(*objects: dict[str, Any]) -> StaticFacts:
    return StaticFacts.from_objects(objects)


DRA_POD = claiming(pod(), "/spec")


def test_a_claim_template_with_count_four_counts_as_four_gpus_in_gpu_max():
    (result,) = decide(DRA_POD, "gpu.max", {"perPod": 2}, facts=facts(TEMPLATE)).results
    (finding,) = result.findings
    assert finding.detail == "the pod asks for 4 GPUs, the limit is 2"


def test_a_container_over_its_maximum_through_a_claim_is_refused_at_its_claims():
    (result,) = decide(DRA_POD, "gpu.max", {"perContainer": 1}, facts=facts(TEMPLATE)).results
    assert [f.path for f in result.findings] == ["/spec/containers/0/resources/claims"]


def test_within_the_maximum_a_claimed_pod_passes():
    (result,) = decide(DRA_POD, "gpu.max", {"perPod": 4}, facts=facts(TEMPLATE)).results
    assert result.outcome is Outcome.PASS and not result.unchecked


def test_without_facts_the_claims_gpus_are_said_to_be_uncounted():
    (result,) = decide(DRA_POD, "gpu.max", {"perPod": 2}).results
    assert result.outcome is Outcome.SKIP  # nothing else to judge: the rule could not look
    assert result.unchecked == ('claim "gpu" (ResourceClaimTemplate "four-gpus") no cluster facts to find it in, '
                                "so its GPUs were not counted",)


def test_a_template_missing_from_facts_that_serve_dra_is_said_to_be_not_in_the_cluster():
    (result,) = decide(DRA_POD, "gpu.max", {"perPod": 2}, facts=facts(NVIDIA_CLASS)).results
    assert result.unchecked and "is not in the cluster (namespace ml)" in result.unchecked[0]


def test_a_class_that_is_no_gpu_is_not_counted():
    nic = change(TEMPLATE, "/spec/spec/devices/requests/0/exactly/deviceClassName", "nic")
    (result,) = decide(DRA_POD, "gpu.max", {"perPod": 0}, facts=facts(nic, NIC_CLASS)).results
    assert result.outcome is Outcome.PASS and not result.unchecked


def test_a_class_is_known_as_a_gpu_class_by_its_driver_selector_not_only_its_name():
    renamed = change(NVIDIA_CLASS, "/metadata/name", "a100")
    template = change(TEMPLATE, "/spec/spec/devices/requests/0/exactly/deviceClassName", "a100")
    (result,) = decide(DRA_POD, "gpu.max", {"perPod": 2}, facts=facts(template, renamed)).results
    assert result.outcome is Outcome.FAIL


@pytest.mark.parametrize(("device_class", "expected"), [
    ({"spec": {"extendedResourceName": "nvidia.com/gpu"}}, "gpu"),
    ({"spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.nvidia.com" && '
                                                    'device.attributes["gpu.nvidia.com"].type == "mig"'}}]}}, "mig"),
    ({"spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.amd.com'"}}]}}, "gpu"),
    ({"spec": {"selectors": [{"cel": {"expression": "device.driver == 'dra.net'"}}]}}, None),
    ({"spec": {}}, None),
])
def test_a_device_class_is_a_gpu_class_by_its_extended_resource_or_driver(device_class: Any, expected: Any):
    assert dra_gpu_class("any", device_class) == expected


def test_first_available_alternatives_count_the_fewest_gpus_any_of_them_asks():
    alternatives = change(TEMPLATE, "/spec/spec/devices/requests/0", {"name": "gpus", "firstAvailable": [
        {"name": "big", "deviceClassName": "gpu.nvidia.com", "count": 8},
        {"name": "small", "deviceClassName": "gpu.nvidia.com", "count": 2}]})
    assert decide(DRA_POD, "gpu.max", {"perPod": 2}, facts=facts(alternatives)).results[0].outcome is Outcome.PASS
    assert decide(DRA_POD, "gpu.max", {"perPod": 1}, facts=facts(alternatives)).results[0].outcome is Outcome.FAIL


def test_allocation_mode_all_is_said_to_be_uncounted():
    every = change(TEMPLATE, "/spec/spec/devices/requests/0/exactly",
                   {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"})
    (result,) = decide(DRA_POD, "gpu.max", {"perPod": 0}, facts=facts(every)).results
    assert result.outcome is Outcome.SKIP
    assert result.unchecked == ('claim "gpu" request "gpus" takes all matching devices of a node, so its GPUs were '
                                "not counted",)


def test_a_container_naming_one_request_of_a_claim_counts_only_that_request():
    two = change(TEMPLATE, "/spec/spec/devices/requests/-",
                 {"name": "more", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}})
    one_request = change(DRA_POD, "/spec/containers/0/resources/claims/0/request", "more")
    (result,) = decide(one_request, "gpu.max", {"perContainer": 2}, facts=facts(two)).results
    assert result.outcome is Outcome.PASS
    (result,) = decide(one_request, "gpu.max", {"perPod": 2}, facts=facts(two)).results
    assert result.outcome is Outcome.FAIL  # the pod holds the whole claim: 6


def test_a_shared_resource_claim_counts_once_for_the_whole_job():
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "shared", "namespace": "ml"}, "spec": TEMPLATE["spec"]["spec"]}
    job = claiming(pytorchjob(workers=3), "/spec/pytorchReplicaSpecs/Worker/template/spec", "shared",
                   "resourceClaimName")
    job = change(job, "/spec/pytorchReplicaSpecs/Master/template/spec/containers/0/resources", DELETE)
    (result,) = decide(job, "gpu.max", {"perJob": 4}, facts=facts(claim)).results
    assert result.outcome is Outcome.PASS
    (result,) = decide(job, "gpu.max", {"perJob": 3}, facts=facts(claim)).results
    assert [f.detail for f in result.findings] == ["PyTorchJob 'mnist' asks for 4 GPUs in all, the limit is 3"]


def test_a_claimed_job_is_charged_its_devices_per_pod_in_a_device_class_quota():
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "dra", "namespace": "ml"},
             "spec": {"hard": {"gpu.nvidia.com.deviceclass.resource.k8s.io/devices": "8"}}}
    job = claiming(pytorchjob(workers=2), "/spec/pytorchReplicaSpecs/Worker/template/spec")
    (result,) = decide(job, "capacity.quota", facts=facts(TEMPLATE, quota)).results
    assert result.outcome is Outcome.PASS  # two workers of four: eight
    three = change(job, "/spec/pytorchReplicaSpecs/Worker/replicas", 3)
    (result,) = decide(three, "capacity.quota", facts=facts(TEMPLATE, quota)).results
    assert [f.detail for f in result.findings] == [
        "PyTorchJob 'mnist' asks for 12 gpu.nvidia.com.deviceclass.resource.k8s.io/devices in all, but "
        "ResourceQuota 'dra' in namespace ml allows 8"]


def test_torchrun_processes_are_compared_with_claimed_gpus():
    torchrun = change(DRA_POD, "/spec/containers/0/command", ["torchrun", "--nproc-per-node=8", "train.py"])
    (result,) = decide(torchrun, "launch.torchrun", facts=facts(TEMPLATE)).results
    assert [f.detail for f in result.findings] == [
        'container "main" runs torchrun with 8 process(es) per pod but asks for 4 GPU(s)']


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"cpu": "64"}}}


def resource_slice(node_name: str, devices: int, generation: int = 1, driver: str = "gpu.nvidia.com",
                   ) -> dict[str, Any]:
    """A ResourceSlice as a DRA driver's kubelet plugin publishes one (resource.k8s.io/v1 ResourceSliceSpec)."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node_name}-{driver}-{generation}"},
            "spec": {"driver": driver, "nodeName": node_name,
                     "pool": {"name": node_name, "generation": generation, "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}}}
                                 for i in range(devices)]}}


def test_without_resource_slices_claimed_gpus_are_said_not_to_be_compared_with_nodes():
    (result,) = decide(DRA_POD, "capacity.nodes", facts=facts(TEMPLATE, node("n"))).results
    assert result.unchecked == ("the GPUs the pod claims through DRA are not compared with nodes: the facts hold "
                                "no ResourceSlices",)


def test_a_pod_claiming_more_gpus_than_any_node_publishes_is_refused_with_the_driver():
    published = facts(TEMPLATE, node("a"), node("b"), resource_slice("a", 2), resource_slice("b", 3))
    (result,) = decide(DRA_POD, "capacity.nodes", facts=published).results
    assert [f.detail for f in result.findings] == [
        "the pod asks for 4 devices of DRA driver gpu.nvidia.com, but the largest node it may run on has 3 "
        "(2 of 2 nodes match its node selection)"]


def test_a_pod_claiming_what_a_node_publishes_passes():
    published = facts(TEMPLATE, node("a"), resource_slice("a", 8))
    assert decide(DRA_POD, "capacity.nodes", facts=published).results[0].outcome is Outcome.PASS


def test_only_the_newest_generation_of_a_pool_counts():
    replaced = facts(TEMPLATE, node("a"), resource_slice("a", 8, generation=1), resource_slice("a", 2, generation=2))
    assert decide(DRA_POD, "capacity.nodes", facts=replaced).results[0].outcome is Outcome.FAIL


def test_the_node_selection_limits_the_nodes_whose_devices_count():
    pinned = change(DRA_POD, "/spec/nodeSelector", {"pool": "small"})
    published = facts(TEMPLATE, node("a", pool="small"), node("b", pool="big"), resource_slice("a", 2),
                      resource_slice("b", 8))
    (result,) = decide(pinned, "capacity.nodes", facts=published).results
    assert [f.detail for f in result.findings] == [
        "the pod asks for 4 devices of DRA driver gpu.nvidia.com, but the largest node it may run on has 2 "
        "(1 of 2 nodes match its node selection)"]


def test_devices_not_bound_to_one_node_are_said_not_to_be_compared():
    network = change(resource_slice("a", 8), "/spec", {"driver": "gpu.nvidia.com", "allNodes": True,
                                                       "pool": {"name": "fabric", "generation": 1},
                                                       "devices": [{"name": "gpu-0"}]})
    (result,) = decide(DRA_POD, "capacity.nodes", facts=facts(TEMPLATE, node("a"), network)).results
    assert result.outcome is Outcome.SKIP
    assert result.unchecked == ("the gpu.nvidia.com GPUs the pod claims are not compared with nodes: that driver "
                                "publishes devices not bound to one node",)
