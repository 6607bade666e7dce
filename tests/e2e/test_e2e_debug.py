"""`kubectl debug` into a training pod: a privileged debug container is refused through pods/ephemeralcontainers,
one within Pod Security baseline is added. kubectl's `general` profile adds SYS_PTRACE, which baseline forbids
(as upstream pod-security-admission does), so it is refused too; `--profile=baseline` is the one that fits."""

from __future__ import annotations

import pytest
from control_plane import ControlPlane, Result
from e2e_webhook import WebhookProcess

from tests.builders import pod_spec

pytestmark = pytest.mark.e2e
DEBUG = 'admission webhook "debug-containers.validate.mlgate.dev" denied the request'


def training_pod(namespace: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "mnist-worker-0", "namespace": namespace,
                         "labels": {"training.kubeflow.org/job-name": "mnist"}},
            "spec": {**pod_spec("pytorch", 1), "restartPolicy": "OnFailure"}}


def debug(cluster: ControlPlane, namespace: str, profile: str, container: str) -> Result:
    return cluster.kubectl("debug", "pod/mnist-worker-0", "-n", namespace, "--image=busybox:1.36",
                           f"--profile={profile}", f"--container={container}", "--attach=false")


def test_a_sysadmin_debug_container_is_refused_and_a_baseline_one_is_added(
        webhook: WebhookProcess, cluster: ControlPlane, namespace: str) -> None:
    cluster.kubectl("apply", "-f", "-", stdin=training_pod(namespace)).check()
    refused = debug(cluster, namespace, "sysadmin", "root-shell")
    assert refused.code != 0 and DEBUG in refused.stderr, refused
    assert "/spec/ephemeralContainers/0/securityContext/privileged" in refused.stderr
    general = debug(cluster, namespace, "general", "ptrace")
    assert general.code != 0 and '"SYS_PTRACE" in securityContext.capabilities.add' in general.stderr, general
    debug(cluster, namespace, "baseline", "shell").check()
    pod = cluster.get_object("pod", "mnist-worker-0", namespace)
    assert [c["name"] for c in pod["spec"]["ephemeralContainers"]] == ["shell"]
