"""Policies as cluster objects: `kubectl apply` of an MLPolicy or ClusterMLPolicy changes the next verdict
without restarting the webhook; a broken one is refused or reported, and the old set stays in force."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from control_plane import ControlPlane
from e2e_objects import pytorchjob
from e2e_webhook import WebhookProcess, dry_run, eventually, until_verdict

pytestmark = pytest.mark.e2e
TIMEOUT = 30.0


def gpu_policy(kind: str, name: str, per_container: Any, namespace: str, **rule: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    spec: dict[str, Any] = {"rules": [{"rule": "gpu.max", "action": "deny", "params": {"perContainer": per_container},
                                       **rule}]}
    if kind == "MLPolicy":
        meta["namespace"] = namespace
    else:
        spec["match"] = {"namespaces": [namespace]}
    return {"apiVersion": "mlgate.dev/v1alpha1", "kind": kind, "metadata": meta, "spec": spec}


@pytest.mark.parametrize("kind", ["MLPolicy", "ClusterMLPolicy"])
def test_applied_policy_changes_the_next_apply_without_a_restart(
        webhook: WebhookProcess, cluster: ControlPlane, namespace: str, kind: str) -> None:
    pid = webhook.process.pid if webhook.process else None
    job = pytorchjob("four-gpus", {"nvidia.com/gpu": 4})
    assert dry_run(cluster, job, namespace).ok  # the shipped limit is 8 per container
    name = f"team-gpu-{namespace}"[:63] if kind == "ClusterMLPolicy" else "team-gpu"
    key = f"{namespace}/{name}" if kind == "MLPolicy" else name
    try:
        cluster.kubectl("apply", "-f", "-", stdin=gpu_policy(kind, name, 2, namespace)).check()
        until_verdict(cluster, job, namespace, denied_with=f"[{key}/gpu.max]")
        real = cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=job)
        assert real.code == 1 and f"[{key}/gpu.max] too many gpus per container" in real.stderr, real
        assert "the limit is 2" in real.stderr, real

        cluster.kubectl("apply", "-f", "-", stdin=gpu_policy(kind, name, 4, namespace)).check()
        until_verdict(cluster, job, namespace)
        cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=job).check()
    finally:
        if kind == "ClusterMLPolicy":
            cluster.kubectl("delete", "clustermlpolicy", name, "--ignore-not-found")
    assert webhook.process is not None and webhook.process.pid == pid and webhook.process.running()


def test_policy_the_crd_schema_rejects_is_refused_by_kubectl(
        webhook: WebhookProcess, cluster: ControlPlane, namespace: str) -> None:
    broken = gpu_policy("MLPolicy", "team-gpu", 2, namespace, action="block")
    result = cluster.kubectl("apply", "-f", "-", stdin=broken)
    assert result.code == 1, result
    assert "spec.rules[0].action" in result.stderr and '"block"' in result.stderr, result
    assert cluster.kubectl("get", "mlpolicy", "team-gpu", "-n", namespace).code == 1


def test_policy_the_loader_would_refuse_is_refused_by_kubectl(
        webhook: WebhookProcess, cluster: ControlPlane, namespace: str) -> None:
    # valid for the CRD schema (params are free-form), wrong for the rule: `perContainer` must be a number
    result = cluster.kubectl("apply", "-f", "-", stdin=gpu_policy("MLPolicy", "team-gpu", "many", namespace))
    assert result.code == 1, result
    assert 'admission webhook "policies.validate.mlgate.dev" denied the request' in result.stderr, result
    assert f"cluster:MLPolicy/{namespace}/team-gpu: spec.rules[0].params.perContainer: " in result.stderr, result
    assert cluster.kubectl("get", "mlpolicy", "team-gpu", "-n", namespace).code == 1
    assert not webhook.readyz()[1]["policies"]["lastError"]


def test_broken_policy_is_reported_and_the_old_set_stays_in_force(
        webhook: WebhookProcess, cluster: ControlPlane, namespace: str, make_namespace: Callable[..., str]) -> None:
    job = pytorchjob("four-gpus", {"nvidia.com/gpu": 4})
    cluster.kubectl("apply", "-f", "-", stdin=gpu_policy("MLPolicy", "team-gpu", 2, namespace)).check()
    until_verdict(cluster, job, namespace, denied_with=f"[{namespace}/team-gpu/gpu.max]")
    generation = webhook.readyz()[1]["policies"]["generation"]
    # stored past admission, as during a webhook outage: the opted-out namespace is not sent to the webhook
    opted_out = make_namespace({"mlgate.dev/ignore": "true"})
    broken = gpu_policy("MLPolicy", "team-gpu-typo", "many", opted_out)
    cluster.kubectl("apply", "-f", "-", stdin=broken).check()
    where = f"cluster:MLPolicy/{opted_out}/team-gpu-typo"

    def reported() -> list[str] | None:
        errors = webhook.readyz()[1]["policies"]["lastError"]
        return errors if any(where in e and "perContainer" in e for e in errors) else None

    try:
        errors = eventually(f"the webhook to report {where}", reported, TIMEOUT)
        status, ready = webhook.readyz()
        assert status == 200 and ready["policies"]["generation"] == generation, (errors, ready)
        denied = cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=job)
        assert denied.code == 1 and f"[{namespace}/team-gpu/gpu.max]" in denied.stderr, denied

        def load_error(name: str, ns: str) -> str | None:
            status = cluster.get_object("mlpolicy", name, ns).get("status") or {}
            return status.get("loadError") if "loadError" in status else None

        written = eventually("the broken policy's status.loadError", lambda: load_error("team-gpu-typo", opted_out),
                             TIMEOUT)
        assert written.startswith("spec.rules[0].params.perContainer: input should be a valid integer"), written
        assert eventually("the good policy's status", lambda: load_error("team-gpu", namespace) == "" or None,
                          TIMEOUT)
        listed = cluster.kubectl("get", "mlpolicy", "team-gpu-typo", "-n", opted_out).check().stdout
        assert "LOAD-ERROR" in listed and "spec.rules[0].params.perContainer" in listed, listed
    finally:
        cluster.kubectl("delete", "mlpolicy", "team-gpu-typo", "-n", opted_out, "--ignore-not-found").check()
    eventually("the webhook to load the set again", lambda: True if not webhook.readyz()[1]["policies"][
        "lastError"] else None, TIMEOUT)


def cel_policy(namespace: str, expression: str) -> dict[str, Any]:
    return {"apiVersion": "mlgate.dev/v1alpha1", "kind": "MLPolicy", "metadata": {"name": "team-label",
                                                                                  "namespace": namespace},
            "spec": {"validations": [{"name": "team-label", "expression": expression,
                                      "message": "every training job names its team in the label team"}]}}


def test_a_cel_validation_denies_a_matching_job_at_kubectl_apply_with_the_policys_message(
        webhook: WebhookProcess, cluster: ControlPlane, namespace: str) -> None:
    job = pytorchjob("no-team", {"nvidia.com/gpu": 1})
    cluster.kubectl("apply", "-f", "-",
                    stdin=cel_policy(namespace, "object.metadata.?labels.team.orValue('') != ''")).check()
    until_verdict(cluster, job, namespace, denied_with=f"[{namespace}/team-label/team-label]")
    denied = cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=job)
    assert denied.code == 1, denied
    assert (f"[{namespace}/team-label/team-label] every training job names its team in the label team"
            in denied.stderr), denied
    labelled = {**job, "metadata": {**job["metadata"], "labels": {"team": "vision"}}}
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=labelled).check()


def test_a_cel_validation_that_does_not_compile_is_refused_by_kubectl_at_its_column(
        webhook: WebhookProcess, cluster: ControlPlane, namespace: str) -> None:
    result = cluster.kubectl("apply", "-f", "-", stdin=cel_policy(namespace, "object.metadata.name + 1 == 'a'"))
    assert result.code == 1, result
    assert (f"cluster:MLPolicy/{namespace}/team-label: spec.validations[0].expression: CEL 1:26: found no matching "
            "overload" in result.stderr), result
    assert cluster.kubectl("get", "mlpolicy", "team-label", "-n", namespace).code == 1


def test_a_cel_mutation_makes_kubectl_apply_of_a_matching_job_store_the_mutated_fields(
        webhook: WebhookProcess, cluster: ControlPlane, namespace: str) -> None:
    policy = {"apiVersion": "mlgate.dev/v1alpha1", "kind": "MLPolicy",
              "metadata": {"name": "job-defaults", "namespace": namespace},
              "spec": {"match": {"kinds": ["Job"]}, "mutations": [
                  {"name": "ttl", "patchType": "ApplyConfiguration",
                   "applyConfiguration": {"expression": "has(object.spec.ttlSecondsAfterFinished) ? Object{} : "
                                                        "Object{spec: Object.spec{ttlSecondsAfterFinished: 600}}"}},
                  {"name": "team", "patchType": "JSONPatch", "forEach": "template",
                   "jsonPatch": {"expression": "template.metadata.?labels.team.orValue('') == 'ml' ? [] : "
                                              "(has(template.metadata.labels) ? [] : [JSONPatch{op: 'add', "
                                              "path: '/metadata/labels', value: {}}]) + [JSONPatch{op: 'add', "
                                              "path: '/metadata/labels/team', value: 'ml'}]"}}]}}
    cluster.kubectl("apply", "-f", "-", stdin=policy).check()
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "etl"},
           "spec": {"template": {"spec": {"restartPolicy": "Never",
                                          "containers": [{"name": "etl", "image": "registry.example/etl:1.0"}]}}}}

    def mutated() -> bool | None:
        result = cluster.kubectl("create", "--dry-run=server", "-o", "json", "-n", namespace, "-f", "-", stdin=job)
        return True if result.ok and '"ttlSecondsAfterFinished": 600' in result.stdout else None

    eventually("the CEL mutation in the webhook's policy set", mutated, TIMEOUT)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=job).check()
    stored = cluster.get_object("job", "etl", namespace)
    assert stored["spec"]["ttlSecondsAfterFinished"] == 600
    assert stored["spec"]["template"]["metadata"]["labels"]["team"] == "ml"


def test_a_cel_mutation_that_does_not_compile_is_refused_by_kubectl_at_its_column_as_written(
        webhook: WebhookProcess, cluster: ControlPlane, namespace: str) -> None:
    policy = {"apiVersion": "mlgate.dev/v1alpha1", "kind": "MLPolicy",
              "metadata": {"name": "broken-mutation", "namespace": namespace},
              "spec": {"mutations": [{"patchType": "JSONPatch", "jsonPatch": {
                  "expression": "[JSONPatch{op: 'add', path: '/x', value: nope}]"}}]}}
    result = cluster.kubectl("apply", "-f", "-", stdin=policy)
    assert result.code == 1, result
    assert (f"cluster:MLPolicy/{namespace}/broken-mutation: spec.mutations[0].jsonPatch.expression: CEL 1:42: "
            "undeclared reference to 'nope'" in result.stderr), result
    assert cluster.kubectl("get", "mlpolicy", "broken-mutation", "-n", namespace).code == 1
