"""`kubectl apply --dry-run=server`: the same verdict and the same mutation, and nothing changes."""

from __future__ import annotations

import json

import pytest
from control_plane import ControlPlane
from e2e_objects import EXAMPLES, example
from e2e_webhook import WebhookProcess

pytestmark = pytest.mark.e2e


def namespace_contents(cluster: ControlPlane, namespace: str) -> list[str]:
    """Every object of every listable namespaced resource in the namespace (events and reports included)."""
    kinds = cluster.kubectl("api-resources", "--verbs=list", "--namespaced", "-o", "name").check().stdout.split()
    assert "events" in kinds and "trainingjobs.mlgate.dev" in kinds, kinds
    listed = cluster.kubectl("get", ",".join(kinds), "-n", namespace, "-o", "name", "--ignore-not-found").check()
    # no kube-controller-manager runs, so not even the kube-root-ca.crt ConfigMap: a fresh namespace lists nothing
    return [line for line in listed.stdout.splitlines() if line.strip()]


def test_dry_run_denial_is_the_same_as_the_real_one_and_stores_nothing(
        webhook: WebhookProcess, cluster: ControlPlane, namespace: str) -> None:
    manifest = str(EXAMPLES / "trainingjob-too-many-gpus.yaml")
    dry = cluster.kubectl("apply", "--dry-run=server", "-f", manifest, "-n", namespace)
    assert dry.code == 1 and "[gpu/gpu.max]" in dry.stderr, dry
    assert namespace_contents(cluster, namespace) == []
    real = cluster.kubectl("apply", "-f", manifest, "-n", namespace)
    assert real.code == 1, real
    assert real.stderr.replace("(server dry run)", "").strip() == dry.stderr.replace("(server dry run)", "").strip()


def test_dry_run_admission_shows_the_mutated_object_and_stores_nothing(
        webhook: WebhookProcess, cluster: ControlPlane, namespace: str) -> None:
    manifest = str(EXAMPLES / "pytorchjob-needs-defaults.yaml")
    dry = cluster.kubectl("apply", "--dry-run=server", "-o", "json", "-f", manifest, "-n", namespace).check()
    shown = json.loads(dry.stdout)
    assert shown["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["tolerations"], shown
    assert namespace_contents(cluster, namespace) == []

    cluster.kubectl("apply", "-f", manifest, "-n", namespace).check()
    stored = cluster.get_object("pytorchjob", example("pytorchjob-needs-defaults.yaml")["metadata"]["name"], namespace)
    assert stored["spec"] == shown["spec"]
    assert namespace_contents(cluster, namespace) == [f"pytorchjob.kubeflow.org/{stored['metadata']['name']}"]

