"""Denials through the real API server: `kubectl apply` shows the policy, rule, field and fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from control_plane import ControlPlane
from e2e_objects import EXAMPLES, example, in_namespace, offline_violations, pytorchjob
from e2e_webhook import WebhookProcess

pytestmark = pytest.mark.e2e
VALIDATING = 'admission webhook "ml-jobs.validate.mlgate.dev" denied the request'


def assert_denied_as_offline(cluster: ControlPlane, name: str, kind: str, namespace: str, tmp_path: Path) -> str:
    obj = in_namespace(example(name), namespace)
    expected = offline_violations(obj, tmp_path)
    assert expected, f"{name} should be denied offline"
    result = cluster.kubectl("apply", "-f", str(EXAMPLES / name), "-n", namespace)
    assert result.code == 1, result
    assert VALIDATING in result.stderr, result
    for violation in expected:
        tag = f"[{violation['policy']}/{violation['rule']}]"
        if violation["action"] == "deny":  # the denial: the whole message, with the field path and the fix
            assert violation["message"] in result.stderr, result
            for part in (tag, violation["path"], violation["fix"]):
                assert part in result.stderr, result
        else:  # warnings come back as HTTP 299 warnings, shortened to 120 characters
            assert f"Warning: {tag} {violation['reason']}" in result.stderr, result
    assert any(v["action"] == "deny" for v in expected)
    gone = cluster.kubectl("get", kind, obj["metadata"]["name"], "-n", namespace)
    assert gone.code == 1 and "NotFound" in gone.stderr, gone
    return result.stderr


def test_trainingjob_asking_more_gpus_than_the_policy_allows_is_refused(
        webhook: WebhookProcess, cluster: ControlPlane, namespace: str, tmp_path: Path) -> None:
    stderr = assert_denied_as_offline(cluster, "trainingjob-too-many-gpus.yaml", "trainingjob", namespace, tmp_path)
    assert "[gpu/gpu.max] too many gpus per container: /spec/resources/gpu:" in stderr
    assert "asks for 12 GPUs, the limit is 8" in stderr


def test_privileged_pytorchjob_is_refused_naming_the_container_field(
        webhook: WebhookProcess, cluster: ControlPlane, namespace: str, tmp_path: Path) -> None:
    stderr = assert_denied_as_offline(cluster, "pytorchjob-privileged.yaml", "pytorchjob", namespace, tmp_path)
    assert "[pod-security/pod-security.baseline] privileged: " in stderr
    assert "/spec/pytorchReplicaSpecs/Worker/template/spec/containers/0/securityContext/privileged" in stderr
    assert 'container "pytorch"' in stderr


def test_compliant_trainingjob_is_stored(webhook: WebhookProcess, cluster: ControlPlane, namespace: str) -> None:
    result = cluster.kubectl("apply", "-f", str(EXAMPLES / "trainingjob-ok.yaml"), "-n", namespace)
    assert result.ok, result
    assert cluster.get_object("trainingjob", "llm-finetune", namespace)["spec"]["resources"]["gpu"] == 1


def test_torchrun_with_eight_processes_on_one_gpu_is_refused_naming_the_command(
        webhook: WebhookProcess, cluster: ControlPlane, namespace: str) -> None:
    job = pytorchjob("eight-on-one", {"nvidia.com/gpu": 1})
    for role in ("Master", "Worker"):
        container = job["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]["containers"][0]
        container["command"] = ["torchrun", "--nproc-per-node=8", "--nnodes=2", "train.py"]
    refused = cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=job)
    assert refused.code == 1 and VALIDATING in refused.stderr, refused
    assert "[launch/launch.torchrun] torchrun processes differ from gpus: " in refused.stderr, refused
    assert "/spec/pytorchReplicaSpecs/Worker/template/spec/containers/0/command" in refused.stderr, refused
    assert 'runs torchrun with 8 process(es) per pod but asks for 1 GPU(s)' in refused.stderr, refused
