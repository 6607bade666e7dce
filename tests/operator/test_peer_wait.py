"""XGBoost workers wait for the master's name to resolve (xgboost resolves the tracker once, fatally); PyTorch
workers do not (torch >= 1.12 retries the lookup until its timeout). The wait's script is run here for real."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from builders import change, trainingjob

from mlgate_reconciler.desired import desired_children
from mlgate_reconciler.peer_wait import WAIT_CONTAINER


def pods(framework: str, replicas: int = 3, **changes: Any) -> dict[str, dict[str, Any]]:
    job = change(trainingjob(replicas=replicas), "/spec/framework", framework)
    for path, value in changes.items():
        job = change(job, path, value)
    return {c["metadata"]["name"]: c["spec"] for c in desired_children(job) if c["kind"] == "Pod"}


def waits(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in spec.get("initContainers") or [] if c["name"] == WAIT_CONTAINER]


def test_each_xgboost_worker_first_waits_for_the_masters_name_in_its_own_image():
    found = pods("xgboost")
    for name in ("llm-worker-0", "llm-worker-1"):
        spec = found[name]
        (wait,) = waits(spec)
        assert spec["initContainers"][0] is wait
        main = spec["containers"][0]
        assert wait["image"] == main["image"]
        assert wait["command"][:2] == ["python3", "-c"]
        assert wait["command"][3:] == ["llm-master-0.llm", "600"]  # the MASTER_ADDR the worker is given
        assert {e["name"]: e["value"] for e in main["env"]}["MASTER_ADDR"] == wait["command"][3]
        assert wait["resources"]["limits"] == {"cpu": "100m", "memory": "64Mi"}


def test_the_xgboost_master_does_not_wait_for_itself():
    assert waits(pods("xgboost")["llm-master-0"]) == []


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow", "jax"])
def test_frameworks_that_retry_or_coordinate_their_own_lookups_get_no_wait(framework):
    assert not any(waits(spec) for spec in pods(framework).values())


def test_the_wait_runs_under_the_main_containers_security_context():
    context = {"runAsNonRoot": True, "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    found = pods("xgboost", **{"/spec/template": {"spec": {"containers": [
        {"name": "xgboost", "securityContext": context}]}}})
    (wait,) = waits(found["llm-worker-0"])
    assert wait["securityContext"] == context


def run_wait(host: str, seconds: str) -> subprocess.CompletedProcess[str]:
    (wait,) = waits(pods("xgboost")["llm-worker-0"])
    command = [sys.executable, *wait["command"][1:3], host, seconds]
    return subprocess.run(command, check=False, capture_output=True, text=True, timeout=30)


def test_the_wait_ends_at_once_when_the_name_resolves():
    assert run_wait("localhost", "5").returncode == 0


def test_the_wait_fails_the_pod_with_a_message_when_the_name_never_resolves():
    result = run_wait("no-such-host.invalid", "0")  # .invalid never resolves (RFC 6761)
    assert result.returncode == 1
    assert result.stderr.startswith("no-such-host.invalid did not resolve in 0 s")
