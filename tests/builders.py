"""Fixtures from one minimal valid object with one change each.

`change(base, "/spec/x", value)` returns a copy with one field set (parents created);
`change(base, "/spec/x", DELETE)` removes it. `decide()` runs the engine with one rule.
"""

from __future__ import annotations

import copy
from typing import Any

from mlgate.engine import PolicySet, evaluate
from mlgate.loading.policies import compile_policy
from mlgate.model import pointer
from mlgate.model.facts import NO_FACTS, ClusterFacts
from mlgate.model.results import Decision, Outcome

DELETE = object()

HARDENED_CONTAINER_SC = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}
HARDENED_POD_SC = {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}}


def _container(name: str, gpus: int = 1) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": name,
        "image": "registry.example/train:1.0",
        "securityContext": copy.deepcopy(HARDENED_CONTAINER_SC),
    }
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpus}, "requests": {"nvidia.com/gpu": gpus}}
    return container


def pod_spec(name: str = "main", gpus: int = 1) -> dict[str, Any]:
    return {
        "securityContext": copy.deepcopy(HARDENED_POD_SC),
        "containers": [_container(name, gpus)],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}] if gpus else [],
    }


def pod(gpus: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer", "namespace": "ml"},
        "spec": {**pod_spec("main", gpus), "restartPolicy": "OnFailure"},
    }


def job(gpus: int = 1, parallelism: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {
            "parallelism": parallelism,
            "backoffLimit": 3,
            "template": {"spec": {**pod_spec("main", gpus), "restartPolicy": "Never"}},
        },
    }


def pytorchjob(workers: int = 2, gpus: int = 1) -> dict[str, Any]:
    def replica(replicas: int) -> dict[str, Any]:
        return {"replicas": replicas, "restartPolicy": "OnFailure", "template": {"spec": pod_spec("pytorch", gpus)}}

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "mnist", "namespace": "ml"},
        "spec": {
            "runPolicy": {"backoffLimit": 3, "cleanPodPolicy": "Running"},
            "pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(workers)},
        },
    }


def trainingjob(replicas: int = 2, gpu: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "mlgate.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "llm", "namespace": "ml"},
        "spec": {
            "framework": "pytorch",
            "image": "registry.example/train:1.0",
            "replicas": replicas,
            "resources": {"gpu": gpu, "cpu": "4", "memory": "16Gi"},
            "runPolicy": {"backoffLimit": 3, "cleanPodPolicy": "Running"},
            "template": {
                "spec": {
                    "securityContext": copy.deepcopy(HARDENED_POD_SC),
                    "containers": [{"name": "pytorch", "securityContext": copy.deepcopy(HARDENED_CONTAINER_SC)}],
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                }
            },
        },
    }


def stored_job(name: str, gpus: int, generation: int = 1) -> dict[str, Any]:
    """A batch Job as the API server stores it (a uid and a generation), for the audit's state."""
    container = {"name": "train", "image": "registry.example/train:1.0",
                 "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "team-a", "generation": generation, "uid": f"uid-{name}"},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}}


def policy_exception(rule: str, namespace: str, names: list[str], reason: str) -> dict[str, Any]:
    """A minimal valid MLPolicyException of policy "test" (policy_set's name) for one rule."""
    return {
        "apiVersion": "mlgate.dev/v1alpha1",
        "kind": "MLPolicyException",
        "metadata": {"name": "nccl-net-admin", "namespace": namespace},
        "spec": {"policy": "test", "rules": [rule], "match": {"names": names},
                 "expiresAt": "2030-01-31T00:00:00Z", "reason": reason},
    }


def change(base: dict[str, Any], ptr: str, value: Any) -> dict[str, Any]:
    """A deep copy of `base` with one field set (or removed, with DELETE)."""
    obj = copy.deepcopy(base)
    tokens = pointer.split(ptr)
    node: Any = obj
    for token in tokens[:-1]:
        node = node[int(token)] if isinstance(node, list) else node.setdefault(token, {})
    last = tokens[-1]
    if isinstance(node, list):
        if value is DELETE:
            del node[int(last)]
        elif last == "-":
            node.append(value)
        else:
            node[int(last)] = value
    elif value is DELETE:
        node.pop(last, None)
    else:
        node[last] = value
    return obj


def policy_set(*rules: dict[str, Any], name: str = "test", **spec: Any) -> PolicySet:
    """A PolicySet of one ClusterMLPolicy holding the given rule bindings."""
    document = {
        "apiVersion": "mlgate.dev/v1alpha1",
        "kind": "ClusterMLPolicy",
        "metadata": {"name": name},
        "spec": {"rules": list(rules), **spec},
    }
    policy, errors = compile_policy(document, "<test>")
    assert policy is not None, errors
    return PolicySet((policy,))


def decide(
    obj: dict[str, Any],
    rule: str,
    params: dict[str, Any] | None = None,
    action: str = "deny",
    facts: ClusterFacts = NO_FACTS,
    **kwargs: Any,
) -> Decision:
    binding = {"rule": rule, "params": params or {}} | ({} if action == "deny" else {"action": action})
    return evaluate(obj, policy_set(binding), facts=facts, **kwargs)


def outcome(obj: dict[str, Any], rule: str, params: dict[str, Any] | None = None, **kwargs: Any) -> Outcome:
    decision = decide(obj, rule, params, **kwargs)
    (result,) = [r for r in decision.results if r.rule == rule]
    return result.outcome
