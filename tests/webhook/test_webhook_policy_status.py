"""status.loadError of policy objects: computed from the last load, written only where it differs."""

from __future__ import annotations

import copy
from typing import Any

from mlgate_webhook.policy_status import PolicyStatusWriter
from mlgate_webhook.policy_store import ClusterPolicySource, PolicyStore


def policy(name: str, per_container: Any, generation: int = 1, status: dict[str, Any] | None = None,
           version: str = "1") -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "mlgate.dev/v1alpha1", "kind": "MLPolicy",
        "metadata": {"name": name, "namespace": "team-a", "generation": generation, "resourceVersion": version},
        "spec": {"rules": [{"rule": "gpu.max", "action": "deny", "params": {"perContainer": per_container}}]},
    }
    if status is not None:
        obj["status"] = status
    return obj


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str, dict[str, Any]]] = []

    def __call__(self, kind: str, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.calls.append((kind, namespace, name, copy.deepcopy(status)))


def loaded(*objects: dict[str, Any]) -> tuple[ClusterPolicySource, PolicyStore]:
    source = ClusterPolicySource()
    source.replace("MLPolicy", list(objects))
    source.replace("ClusterMLPolicy", [])
    source.replace("ClusterWorkloadKind", [])
    store = PolicyStore([source])
    store.refresh()
    return source, store


def test_a_status_only_change_does_not_reload_the_policy_set():
    source, store = loaded(policy("gpu", 2))
    generation = store.current.generation if store.current else None
    source.apply("MLPolicy", "MODIFIED", policy("gpu", 2, status={"loadError": ""}, version="2"))
    assert not store.refresh() and store.current is not None and store.current.generation == generation
    source.apply("MLPolicy", "MODIFIED", policy("gpu", 4, generation=2, version="3"))
    assert store.refresh() and store.current.generation == (generation or 0) + 1


def test_a_relist_that_finds_every_spec_as_it_was_does_not_reload():
    source, store = loaded(policy("gpu", 2))
    generation = store.current.generation if store.current else None
    source.replace("MLPolicy", [policy("gpu", 2, status={"loadError": ""}, version="7")])
    assert not store.refresh() and store.current is not None and store.current.generation == generation
    source.replace("MLPolicy", [policy("gpu", 2), policy("gpu-b", 3)])
    assert store.refresh()


def test_each_object_gets_its_own_errors_and_a_good_one_an_empty_load_error():
    source, _ = loaded(policy("gpu", 2), policy("typo", "many"))
    recorder = Recorder()
    assert PolicyStatusWriter(source, recorder).sync() == 2
    statuses = {name: status for _, _, name, status in recorder.calls}
    assert statuses["gpu"] == {"observedGeneration": 1, "loadError": ""}
    assert statuses["typo"]["loadError"].startswith("spec.rules[0].params.perContainer: input should be a valid ")


def test_nothing_is_written_twice_or_when_the_object_already_says_it():
    source, _ = loaded(policy("gpu", 2, status={"observedGeneration": 1, "loadError": ""}), policy("typo", "x"))
    recorder = Recorder()
    writer = PolicyStatusWriter(source, recorder)
    assert writer.sync() == 1 and [c[2] for c in recorder.calls] == ["typo"]
    assert writer.sync() == 0  # sent; the watch has not shown it yet
    written = recorder.calls[0][3]
    source.apply("MLPolicy", "MODIFIED", policy("typo", "x", status=written, version="2"))
    assert writer.sync() == 0
    source.apply("MLPolicy", "MODIFIED", policy("typo", "x", status={"loadError": "edited by hand"}, version="3"))
    assert writer.sync() == 1  # someone overwrote it: put it back


def test_a_failed_write_is_logged_and_the_others_still_written(caplog):
    source, _ = loaded(policy("a-gone", "x"), policy("b-typo", "y"))
    recorder = Recorder()

    def patch(kind: str, namespace: str, name: str, status: dict[str, Any]) -> None:
        if name == "a-gone":
            raise RuntimeError("404 not found")
        recorder(kind, namespace, name, status)

    assert PolicyStatusWriter(source, patch).sync() == 1
    assert [c[2] for c in recorder.calls] == ["b-typo"]
    assert "could not write the status of MLPolicy team-a/a-gone: 404 not found" in caplog.text


def test_nothing_is_written_before_both_kinds_are_listed():
    source = ClusterPolicySource()
    source.replace("MLPolicy", [policy("typo", "x")])
    PolicyStore([source]).refresh()
    assert PolicyStatusWriter(source, Recorder()).sync() == 0


def test_of_two_cluster_workload_kinds_for_one_kind_the_older_describes_it_and_the_newer_says_why_not():
    kind = {"apiVersion": "mlgate.dev/v1alpha1", "kind": "ClusterWorkloadKind",
            "spec": {"group": "x.io", "kind": "Foo", "resource": "foos",
                     "templates": [{"pointer": "/spec/template", "role": "foo"}]}}
    source, store = loaded(policy("gpu", 2))
    source.apply("ClusterWorkloadKind", "ADDED", {**kind, "metadata": {
        "name": "a-newer", "generation": 1, "creationTimestamp": "2026-02-01T00:00:00Z"}})
    source.apply("ClusterWorkloadKind", "ADDED", {**kind, "metadata": {
        "name": "b-older", "generation": 1, "creationTimestamp": "2026-01-01T00:00:00Z"}})
    assert store.refresh() is True
    assert store.errors == ["cluster:ClusterWorkloadKind/a-newer: spec.kind: x.io/Foo is also described in "
                            "cluster:ClusterWorkloadKind/b-older"]
    assert store.current is not None and store.current.kinds.find("x.io/v1", "Foo") is not None
    recorder = Recorder()
    PolicyStatusWriter(source, recorder).sync()
    statuses = {name: status["loadError"] for _, _, name, status in recorder.calls}
    assert statuses == {"gpu": "", "a-newer": "spec.kind: x.io/Foo is also described in "
                        "cluster:ClusterWorkloadKind/b-older", "b-older": ""}
