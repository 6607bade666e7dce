"""check_policy_object: what the webhook answers for an MLPolicy or ClusterMLPolicy before it is stored."""

from __future__ import annotations

import copy
from typing import Any

from mlgate.loading.policies import (
    check_policy_object,
    cluster_source,
    compile_policy,
    default_policy_dir,
    load_policy_paths,
)

SHIPPED = load_policy_paths([default_policy_dir()]).policies


def policy(kind: str = "MLPolicy", **changes: Any) -> dict[str, Any]:
    """A minimal valid policy object; `changes` replace whole top-level sections."""
    obj: dict[str, Any] = {
        "apiVersion": "mlgate.dev/v1alpha1", "kind": kind,
        "metadata": {"name": "team-gpu", **({"namespace": "team-a"} if kind == "MLPolicy" else {})},
        "spec": {"rules": [{"rule": "gpu.max", "action": "deny", "params": {"perContainer": 2}}]},
    }
    obj.update(copy.deepcopy(changes))
    return obj


def messages(obj: dict[str, Any], in_force=()) -> list[str]:
    return [str(e) for e in check_policy_object(obj, in_force)]


def test_a_valid_policy_has_nothing_to_report():
    assert messages(policy()) == []
    assert messages(policy("ClusterMLPolicy"), SHIPPED) == []


def test_a_wrong_parameter_type_names_the_object_and_the_field():
    bad = policy(spec={"rules": [{"rule": "gpu.max", "action": "deny", "params": {"perContainer": "many"}}]})
    (message,) = messages(bad)
    assert message.startswith("cluster:MLPolicy/team-a/team-gpu: spec.rules[0].params.perContainer: ")
    assert "integer" in message


def test_a_misspelt_rule_gets_a_suggestion():
    bad = policy(spec={"rules": [{"rule": "gpu.maximum", "action": "deny"}]})
    assert messages(bad) == ["cluster:MLPolicy/team-a/team-gpu: spec.rules[0].rule: unknown rule 'gpu.maximum'; "
                             "did you mean 'gpu.max'?"]


def test_an_unknown_field_is_refused():
    bad = policy(spec={"rules": [], "mach": {"kinds": ["PyTorchJob"]}})
    assert any("spec.mach" in m for m in messages(bad)), messages(bad)


def test_a_cluster_policy_may_not_take_the_name_of_a_policy_loaded_from_files():
    taken = policy("ClusterMLPolicy", metadata={"name": "gpu"})
    (message,) = messages(taken, SHIPPED)
    assert message.startswith("cluster:ClusterMLPolicy/gpu: metadata.name: policy 'gpu' is also defined in ")
    assert message.endswith("gpu.yaml")


def test_updating_a_cluster_policy_in_force_is_not_a_name_clash():
    in_force, _ = compile_policy(policy("ClusterMLPolicy"), cluster_source("ClusterMLPolicy", "", "team-gpu"))
    assert in_force is not None
    assert messages(policy("ClusterMLPolicy"), [in_force]) == []
