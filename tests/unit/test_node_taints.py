"""Which nodes a pod may run on as far as taints go, as the scheduler's TaintToleration filter and core/v1
`Toleration.ToleratesTaint` decide (rules/node_index.py)."""

from __future__ import annotations

from typing import Any

import pytest

from mlgate.rules.node_index import node_index, tolerates_node


def tainted(*taints: dict[str, str]) -> Any:
    node = {"metadata": {"name": "gpu-a"}, "spec": {"taints": list(taints)},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}}}
    (indexed,) = node_index([node]).nodes
    return indexed


DEDICATED = {"key": "dedicated", "value": "training", "effect": "NoSchedule"}


@pytest.mark.parametrize("toleration", [
    {"key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoSchedule"},
    {"key": "dedicated", "value": "training"},
    {"key": "dedicated", "operator": "Exists"},
    {"operator": "Exists"},
    {"operator": "Exists", "effect": "NoSchedule"},
])
def test_a_matching_toleration_lets_the_pod_on_the_node(toleration: dict[str, str]):
    assert tolerates_node([toleration], tainted(DEDICATED))


@pytest.mark.parametrize("toleration", [
    {"key": "dedicated", "operator": "Exists", "effect": "NoExecute"},
    {"key": "dedicated", "value": "inference"},
    {"key": "other", "operator": "Exists"},
    {"operator": "Exists", "effect": "PreferNoSchedule"},
])
def test_a_toleration_that_does_not_match_keeps_the_pod_off(toleration: dict[str, str]):
    assert not tolerates_node([toleration], tainted(DEDICATED))


def test_a_prefer_no_schedule_taint_keeps_no_pod_off():
    node = tainted({"key": "spot", "value": "true", "effect": "PreferNoSchedule"})
    assert node.taints == ()
    assert tolerates_node(None, node)


def test_every_taint_must_be_tolerated_not_just_one():
    node = tainted(DEDICATED, {"key": "nvidia.com/gpu", "effect": "NoSchedule"})
    assert not tolerates_node([{"key": "dedicated", "operator": "Exists"}], node)
    assert tolerates_node([{"key": "dedicated", "operator": "Exists"}, {"key": "nvidia.com/gpu", "operator": "Exists"}],
                          node)


@pytest.mark.parametrize("key", ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable",
                                 "node.kubernetes.io/memory-pressure",
                                 "node.cloudprovider.kubernetes.io/uninitialized"])
def test_a_taint_for_a_passing_node_condition_keeps_no_pod_off_because_the_pod_waits_it_out(key: str):
    assert tainted({"key": key, "effect": "NoSchedule"}).taints == ()
    assert tolerates_node([], tainted({"key": key, "effect": "NoExecute"}))


def test_an_operator_this_table_does_not_know_is_taken_as_tolerating_so_no_refusal_rests_on_it():
    assert tolerates_node([{"key": "dedicated", "operator": "Gt", "value": "1"}], tainted(DEDICATED))


def test_the_index_says_whether_any_node_is_tainted():
    clean = {"metadata": {"name": "gpu-b"}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}}
    assert not node_index([clean]).tainted
    assert node_index([clean, {**clean, "spec": {"taints": [DEDICATED]}}]).tainted
