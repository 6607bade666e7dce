"""Cluster policy objects load one by one: a broken MLPolicy is left out (or keeps its last good version), says
why in its status.loadError, /readyz and a metric, and never holds back the other objects or readiness."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from builders import change, job
from prometheus_client.parser import text_string_to_metric_families

from mlgate.engine import evaluate
from mlgate.model.results import Outcome
from mlgate_webhook.metrics import Metrics
from mlgate_webhook.policy_status import PolicyStatusWriter, desired_status
from mlgate_webhook.policy_store import ClusterPolicySource, DirectorySource, PolicyStore
from mlgate_webhook.service import Service

TYPO = "cluster:MLPolicy/team-a/typo"


def mlpolicy(name: str, per_container: Any, generation: int = 1, kind: str = "MLPolicy") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "generation": generation, "resourceVersion": str(generation)}
    if kind == "MLPolicy":
        meta["namespace"] = "team-a"
    return {"apiVersion": "mlgate.dev/v1alpha1", "kind": kind, "metadata": meta,
            "spec": {"rules": [{"rule": "gpu.max", "action": "deny", "params": {"perContainer": per_container}}]}}


def listed(*objects: dict[str, Any]) -> ClusterPolicySource:
    source = ClusterPolicySource()
    source.replace("MLPolicy", [o for o in objects if o["kind"] == "MLPolicy"])
    source.replace("ClusterMLPolicy", [o for o in objects if o["kind"] == "ClusterMLPolicy"])
    source.replace("ClusterWorkloadKind", [])
    return source


def failing(store: PolicyStore, gpus: int) -> list[str]:
    """The policy/rule pairs that deny a Job in team-a with `gpus` GPUs per container."""
    assert store.current is not None
    decision = evaluate(change(job(gpus), "/metadata/namespace", "team-a"), store.current)
    return [f"{r.policy}/{r.rule}" for r in decision.results if r.outcome is Outcome.FAIL]


def rejected_series(metrics: Metrics) -> list[dict[str, str]]:
    families = text_string_to_metric_families(metrics.render().decode())
    return [dict(s.labels) for f in families if f.name == "mlgate_policy_object_rejected" for s in f.samples
            if s.value == 1]


def test_a_broken_object_stored_before_the_start_is_left_out_and_the_rest_load_and_serve():
    metrics = Metrics()
    store = PolicyStore([listed(mlpolicy("gpu", 2), mlpolicy("typo", "many"))], metrics)
    assert store.refresh() is True
    assert store.current is not None and [p.key for p in store.current.policies] == ["team-a/gpu"]
    assert failing(store, 4) == ["team-a/gpu/gpu.max"]
    _, detail = Service(store, metrics).readiness()
    assert detail["missing"] == ["TLS not ready"]  # not "no policy set loaded": the broken tenant does not count
    assert detail["policies"]["rejected"] == {TYPO: {
        "errors": ["spec.rules[0].params.perContainer: input should be a valid integer"], "inForce": "none"}}
    assert rejected_series(metrics) == [{"kind": "MLPolicy", "namespace": "team-a", "name": "typo",
                                         "in_force": "none"}]
    assert metrics.policy_last_reload_ok._value.get() == 1 and metrics.policy_reload_errors._value.get() == 0


def test_a_broken_new_version_keeps_the_last_good_one_until_a_good_version_replaces_it():
    source = listed(mlpolicy("gpu", 2))
    metrics = Metrics()
    store = PolicyStore([source], metrics)
    assert store.refresh() is True and failing(store, 4) == ["team-a/gpu/gpu.max"]
    generation = store.current.generation if store.current else 0

    source.apply("MLPolicy", "MODIFIED", mlpolicy("gpu", "many", generation=2))
    assert store.refresh() is False  # nothing new in force
    assert store.current is not None and store.current.generation == generation
    assert failing(store, 4) == ["team-a/gpu/gpu.max"]  # the limit of 2 still holds
    assert store.status()["rejected"]["cluster:MLPolicy/team-a/gpu"]["inForce"] == "lastGood"
    assert rejected_series(metrics) == [{"kind": "MLPolicy", "namespace": "team-a", "name": "gpu",
                                         "in_force": "last_good"}]

    source.apply("MLPolicy", "MODIFIED", mlpolicy("gpu", 8, generation=3))
    assert store.refresh() is True and store.current.generation == generation + 1
    assert failing(store, 4) == []
    assert store.status()["rejected"] == {} and store.status()["lastError"] == []
    assert rejected_series(metrics) == []


def test_a_deleted_broken_object_leaves_no_error_and_no_series():
    source = listed(mlpolicy("gpu", 2), mlpolicy("typo", "many"))
    metrics = Metrics()
    store = PolicyStore([source], metrics)
    store.refresh()
    assert store.errors and rejected_series(metrics)
    source.apply("MLPolicy", "DELETED", mlpolicy("typo", "many"))
    assert store.refresh() is False  # the set in force did not change
    assert store.errors == [] and rejected_series(metrics) == []


def test_every_replica_writes_the_same_load_error_whether_or_not_it_has_the_last_good_version():
    running = listed(mlpolicy("gpu", 2))
    PolicyStore([running]).refresh()
    broken = mlpolicy("gpu", "many", generation=2)
    running.apply("MLPolicy", "MODIFIED", broken)
    started_later = listed(broken)
    for source in (running, started_later):
        PolicyStore([source]).refresh()
    key = ("MLPolicy", "team-a", "gpu")
    assert running.rejected == {key: True} and started_later.rejected == {key: False}
    assert desired_status(broken, running.load_errors[key]) == desired_status(broken, started_later.load_errors[key])


def test_a_cluster_policy_named_like_a_file_policy_is_left_out_and_says_which_file(tmp_path: Path):
    (tmp_path / "gpu.yaml").write_text(json.dumps(mlpolicy("gpu", 2, kind="ClusterMLPolicy")))
    source = listed(mlpolicy("gpu", 8, kind="ClusterMLPolicy"), mlpolicy("team", 3))
    store = PolicyStore([DirectorySource([tmp_path]), source])
    assert store.refresh() is True
    assert store.current is not None and [p.key for p in store.current.policies] == ["gpu", "team-a/team"]
    assert failing(store, 4) == ["gpu/gpu.max", "team-a/team/gpu.max"]  # the file's limit of 2, not the object's 8
    written: dict[str, str] = {}
    PolicyStatusWriter(source, lambda kind, ns, name, status: written.update({name: status["loadError"]})).sync()
    assert written == {"gpu": f"metadata.name: policy 'gpu' is also defined in {tmp_path / 'gpu.yaml'}", "team": ""}


def test_broken_policy_files_still_hold_the_whole_set_and_cluster_changes_wait_for_them(tmp_path: Path):
    (tmp_path / "gpu.yaml").write_text(json.dumps(mlpolicy("gpu", 2, kind="ClusterMLPolicy")))
    files = DirectorySource([tmp_path], settle=0.0)
    source = listed()
    store = PolicyStore([files, source])
    assert store.refresh() is True
    good = store.current
    (tmp_path / "gpu.yaml").write_text(json.dumps(mlpolicy("gpu", "many", kind="ClusterMLPolicy")))
    files.version()  # seen once; the next poll that reads the same finds it settled
    source.apply("MLPolicy", "ADDED", mlpolicy("team", 3))
    assert store.refresh() is False and store.current is good
    assert store.errors[0].startswith(f"{tmp_path / 'gpu.yaml'}:1: spec.rules[0].params.perContainer"), store.errors
    (tmp_path / "gpu.yaml").write_text(json.dumps(mlpolicy("gpu", 2, kind="ClusterMLPolicy")))
    files.version()
    assert store.refresh() is True
    assert store.current is not None and [p.key for p in store.current.policies] == ["gpu", "team-a/team"]
