"""manifests/reconciler/: two leader-elected replicas, locked down, probed, and RBAC without wildcards."""

from pathlib import Path

import yaml

from mlgate_reconciler.children import OwnerKind
from mlgate_reconciler.controller import OWNERS

RECONCILER = Path(__file__).resolve().parents[2] / "manifests" / "reconciler"
RESOURCES = {"Pod": "pods", "Service": "services", "ConfigMap": "configmaps", "Deployment": "deployments",
             "HorizontalPodAutoscaler": "horizontalpodautoscalers", "PodGroup": "podgroups",
             "HTTPRoute": "httproutes", "Job": "jobs"}


def documents(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((RECONCILER / name).read_text()) if d]


def granted(kind: str) -> set[tuple[str, str, str]]:
    (role,) = [d for d in documents("rbac.yaml") if d["kind"] == kind]
    return {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def test_the_deployment_runs_two_leader_elected_replicas_locked_down_and_probed():
    (deployment,) = documents("deployment.yaml")
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["mlgate", "operator"]
    assert {"--leader-elect", "--in-cluster"} <= set(container["args"])
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_rbac_covers_every_child_kind_and_grants_no_wildcard_secret_listing_or_update_on_children():
    rules = granted("ClusterRole")
    owners: list[OwnerKind] = [owner for owner, _ in OWNERS.values()]
    for owner in owners:
        for api_version, kind in owner.children:
            group = api_version.rpartition("/")[0]
            for verb in ("list", "watch", "create", "patch", "delete"):
                assert (group, RESOURCES[kind], verb) in rules, (group, kind, verb)
    for owner in owners:  # children set blockOwnerDeletion (OwnerReferencesPermissionEnforcement)
        assert ("mlgate.dev", f"{owner.kind.lower()}s/finalizers", "update") in rules, owner
    assert not any("*" in part for rule in rules for part in rule)
    secrets = {verb for _, resource, verb in rules if resource == "secrets"}  # an MPI job's SSH Secret, by name
    assert secrets == {"get", "create", "patch", "delete"}
    assert not any(verb == "update" and resource in RESOURCES.values() for _, resource, verb in rules)


def test_the_lease_is_the_only_namespaced_grant():
    assert granted("Role") == {("coordination.k8s.io", "leases", v) for v in ("create", "get", "patch")}
