"""Lockout safety: with the webhook down, fail-closed covers only ML workloads outside system namespaces."""

from __future__ import annotations

from typing import Any

import pytest
from control_plane import ControlPlane
from e2e_objects import EXAMPLES, example, pytorchjob
from e2e_webhook import WebhookProcess

pytestmark = pytest.mark.e2e
SYSTEM_NAMESPACES = ("kube-system", "mlgate-system")
FAILED_CALL = 'failed calling webhook "ml-jobs.validate.mlgate.dev"'


def configmap(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}}


def batch_job(name: str) -> dict[str, Any]:
    container = {"name": "main", "image": "registry.example/batch:1.0", "command": ["true"]}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}}


def test_webhook_down_blocks_only_ml_jobs_outside_system_namespaces_and_recovers(
        webhook: WebhookProcess, cluster: ControlPlane, namespace: str) -> None:
    if cluster.kubectl("get", "namespace", "mlgate-system").code != 0:
        cluster.kubectl("create", "namespace", "mlgate-system").check()
    denied_example = str(EXAMPLES / "trainingjob-too-many-gpus.yaml")
    webhook.stop()
    try:
        for system in SYSTEM_NAMESPACES:  # not intercepted at all: even a job mlgate would deny is stored
            cluster.kubectl("apply", "-n", system, "-f", denied_example).check()
            cluster.kubectl("apply", "-n", system, "-f", "-", stdin=pytorchjob("ddp", {"nvidia.com/gpu": 1})).check()
            cluster.kubectl("apply", "-n", system, "-f", "-", stdin=configmap("e2e-lockout")).check()

        for obj in (example("trainingjob-ok.yaml"), pytorchjob("ddp", {"nvidia.com/gpu": 1})):
            result = cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=obj)
            assert result.code == 1, result
            assert FAILED_CALL in result.stderr and "connection refused" in result.stderr, result
        # failurePolicy Ignore: plain batch Jobs and everything mlgate does not match are unaffected
        cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=batch_job("nightly")).check()
        cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=configmap("settings")).check()
    finally:
        webhook.start()
    # ready means the policies stored in the cluster are in force too, not only the files
    assert "gang-volcano" in webhook.readyz()[1]["policies"]["policies"]
    webhook.wait_until_called(namespace)
    cluster.kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "trainingjob-ok.yaml")).check()
    again = cluster.kubectl("apply", "-n", namespace, "-f", denied_example)
    assert again.code == 1 and "[gpu/gpu.max]" in again.stderr, again
