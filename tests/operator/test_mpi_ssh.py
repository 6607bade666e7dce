"""An MPI TrainingJob's workers run an sshd that can start under the securityContext admission leaves them:
the shipped defaults and the reconciler's pods agree (reconciler/mpi.py, mlgate/rules/defaults.py)."""

from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import change, trainingjob

from mlgate.engine import evaluate
from mlgate.loading.policies import default_policy_dir, load_policy_paths
from mlgate_reconciler.desired import desired_children
from mlgate_reconciler.mpi import sshd_blockers

SHIPPED = load_policy_paths([default_policy_dir()])
NON_ROOT = "/home/mpiuser/.ssh"


def mpi_job(pod_sc: dict[str, Any], container_sc: dict[str, Any] | None = None,
            mount_path: str | None = None) -> dict[str, Any]:
    job = change(trainingjob(replicas=2, gpu=0), "/spec/framework", "mpi")
    job = change(job, "/spec/command", ["mpirun", "-n", "2", "/home/mpiuser/pi"])
    job = change(job, "/spec/template/spec/securityContext", pod_sc)
    job = change(job, "/spec/template/spec/containers/0", {"name": "mpi", **(
        {"securityContext": container_sc} if container_sc is not None else {})})
    return change(job, "/spec/mpi", {"sshAuthMountPath": mount_path}) if mount_path else job


def mutated(obj: dict[str, Any]) -> dict[str, Any]:
    decision = evaluate(obj, SHIPPED)
    assert decision.allowed, decision.violations
    return decision.mutated or obj


def workers(job: dict[str, Any]) -> list[dict[str, Any]]:
    children = desired_children(job)
    return [c for c in children if c["kind"] == "Pod" and c["metadata"]["labels"]["mlgate.dev/replica-type"]
            == "worker"]


def blockers(pod: dict[str, Any]) -> list[str]:
    return sshd_blockers(pod["spec"], pod["spec"]["containers"][0])


@pytest.mark.parametrize("pod_sc, container_sc, mount_path", [
    ({}, None, None),  # root, as most MPI images run
    ({"seccompProfile": {"type": "RuntimeDefault"}}, {"allowPrivilegeEscalation": False}, None),
    ({"runAsUser": 1000}, None, NON_ROOT),  # mpi-operator v2's pi example
    ({}, {"runAsUser": 1000}, NON_ROOT),
    ({"runAsNonRoot": True, "runAsUser": 1000}, None, NON_ROOT),
])
def test_worker_sshd_can_run_after_the_shipped_defaults_mutate_the_job_and_then_each_pod(
        pod_sc, container_sc, mount_path):
    job = mutated(mpi_job(pod_sc, container_sc, mount_path))
    found = workers(job)
    assert len(found) == 2
    for pod in found:
        assert blockers(pod) == []
        assert blockers(mutated(pod)) == []  # the webhook judges the reconciler's pods too


def test_a_root_worker_keeps_its_capabilities_and_a_non_root_one_drops_all_but_net_bind_service():
    root = workers(mutated(mpi_job({})))[0]["spec"]["containers"][0]
    assert "capabilities" not in root.get("securityContext", {})
    non_root = workers(mutated(mpi_job({"runAsUser": 1000}, None, NON_ROOT)))[0]["spec"]["containers"][0]
    assert non_root["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}


def test_root_workers_run_the_images_sshd_with_keys_in_root_ssh_at_mode_0600():
    pod = workers(mpi_job({}))[0]
    assert pod["spec"]["containers"][0]["command"] == ["/usr/sbin/sshd", "-De"]
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "ssh-auth")
    assert volume["secret"]["defaultMode"] == 0o600
    assert {"name": "ssh-auth", "mountPath": "/root/.ssh"} in pod["spec"]["containers"][0]["volumeMounts"]


def test_non_root_pods_mount_keys_in_the_users_home_and_workers_run_its_sshd_config():
    children = desired_children(mpi_job({"runAsUser": 1000}, None, NON_ROOT))
    specs = [c["spec"] for c in children if c["kind"] == "Pod"]
    specs += [c["spec"]["template"]["spec"] for c in children if c["kind"] == "Job"]  # the launcher
    assert len(specs) == 3
    for spec in specs:
        volume = next(v for v in spec["volumes"] if v["name"] == "ssh-auth")
        assert "defaultMode" not in volume["secret"]  # 0644, as mpi-operator: readable by the non-root user
        assert {"name": "ssh-auth", "mountPath": NON_ROOT} in spec["containers"][0]["volumeMounts"]
    assert workers(mpi_job({"runAsUser": 1000}, None, NON_ROOT))[0]["spec"]["containers"][0]["command"] == [
        "/usr/sbin/sshd", "-De", "-f", "/home/mpiuser/.sshd_config"]


@pytest.mark.parametrize("pod_sc, container_sc, said", [
    ({}, {"capabilities": {"drop": ["ALL"]}}, "root sshd's privilege separation needs SYS_CHROOT, SETUID, SETGID"),
    ({}, {"capabilities": {"drop": ["SETUID"]}}, "needs SETUID"),
    ({"runAsUser": 1000}, {"capabilities": {"drop": ["ALL"]}}, "file capability needs NET_BIND_SERVICE"),
])
def test_a_security_context_that_stops_sshd_is_named(pod_sc, container_sc, said):
    pod = workers(mpi_job(pod_sc, container_sc, NON_ROOT if pod_sc else None))[0]
    assert any(said in why for why in blockers(pod))


def test_a_root_sshd_whose_capabilities_are_added_back_can_run():
    sc = {"capabilities": {"drop": ["ALL"], "add": ["SYS_CHROOT", "SETUID", "SETGID"]}}
    assert blockers(workers(mpi_job({}, sc))[0]) == []


def test_a_non_root_sshd_without_its_own_config_is_named():
    pod = workers(mpi_job({"runAsUser": 1000}))[0]  # keys at /root/.ssh: the image's root config
    assert blockers(pod) == ["a non-root sshd cannot read /etc/ssh's host keys: it needs -f <home>/.sshd_config"]


REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"


def real(name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(d for d in yaml.safe_load_all((REAL / name).read_text()) if d)
    return found


def test_volcanos_mindspore_example_keeps_the_capabilities_its_root_sshd_needs():
    job = real("volcano-job-mindspore-gpu.yaml")
    decision = evaluate(job, SHIPPED)
    result = decision.mutated or job
    for index, task in enumerate(result["spec"]["tasks"]):
        spec = task["template"]["spec"]
        container = spec["containers"][0]
        assert "capabilities" not in (container.get("securityContext") or {})
        assert blockers({"spec": spec}) == []
        assert f"capabilities kept: the container at /spec/tasks/{index}/template/spec/containers/0 may run as " \
               "root" in decision.notes


def test_mpi_operators_pi_example_as_uid_1000_is_hardened_and_its_workers_sshd_still_runs():
    job = real("mpi-operator-v2beta1-pi.yaml")
    result = mutated(job)
    for role in ("Launcher", "Worker"):
        spec = result["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]
        capabilities = spec["containers"][0]["securityContext"]["capabilities"]
        assert capabilities == {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}
    assert blockers({"spec": result["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]}) == []
