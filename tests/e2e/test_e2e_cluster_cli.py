"""`mlgate validate --cluster` and `mlgate facts dump` against the real API server.

Objects are stored in a namespace labelled mlgate.dev/ignore=true (no webhook configuration sends its writes
to mlgate, so the violating ones are stored too), then the label is removed and the CLI judges what is stored.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from control_plane import REPO, ControlPlane
from e2e_objects import MLGATE, OUT_OF_WEBHOOK, NamespaceFactory, pytorchjob

pytestmark = pytest.mark.e2e

POLICIES = ["-p", str(REPO / "policies")]


def batch_job(name: str, gpus: int, privileged: bool = False) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "train", "image": "registry.example/train:1.0",
                                 "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
    if privileged:
        container["securityContext"] = {"privileged": True}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}}


def mlgate(cluster: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*MLGATE, *args], capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)})


def verdicts(stdout: str) -> dict[str, tuple[str, list[str]]]:
    """kind/name -> (status, the rules that deny it), from `-o json`."""
    results = json.loads(stdout)["results"]
    return {f"{r['kind']}/{r['name']}": (r["status"], sorted(f"{v['policy']}/{v['rule']}" for v in r["violations"]))
            for r in results}


@pytest.fixture
def stored(cluster: ControlPlane, make_namespace: NamespaceFactory) -> str:
    """A namespace holding two allowed and three violating objects, then opened to mlgate."""
    namespace = make_namespace(OUT_OF_WEBHOOK)
    objects = [batch_job("ok", 1), batch_job("greedy", 12), batch_job("root", 1, privileged=True),
               pytorchjob("ddp-ok", {"nvidia.com/gpu": "2"}), pytorchjob("ddp-greedy", {"nvidia.com/gpu": "16"})]
    cluster.kubectl("create", "-n", namespace, "-f", "-", stdin=objects).check()
    cluster.kubectl("label", "namespace", namespace, "mlgate.dev/ignore-").check()
    return namespace


def test_validate_cluster_denies_the_stored_objects_that_break_the_policies(
        cluster: ControlPlane, stored: str) -> None:
    run = mlgate(cluster, "validate", "--cluster", "-n", stored, "-o", "json", *POLICIES)
    assert run.returncode == 1, run.stderr
    got = verdicts(run.stdout)
    assert got["Job/ok"] == ("allowed", [])
    assert got["Job/greedy"] == ("denied", ["gpu/gpu.max"])
    assert got["Job/root"][0] == "denied" and "pod-security/pod-security.baseline" in got["Job/root"][1], got
    assert got["PyTorchJob/ddp-ok"][0] == "allowed", got
    assert got["PyTorchJob/ddp-greedy"] == ("denied", ["gpu/gpu.max", "gpu/gpu.max"])  # Master and Worker
    assert len(got) == 5, got  # the namespace's other objects (none) and other namespaces are not listed
    source = json.loads(run.stdout)["results"][0]["source"]
    assert source.startswith("/apis/") and f"/namespaces/{stored}/" in source, source


def test_validate_cluster_applies_the_local_exceptions_to_the_stored_objects(
        cluster: ControlPlane, stored: str, tmp_path: Path) -> None:
    exception = {"apiVersion": "mlgate.dev/v1alpha1", "kind": "MLPolicyException",
                 "metadata": {"name": "greedy-benchmark", "namespace": stored},
                 "spec": {"policy": "gpu", "rules": ["gpu.max"], "match": {"names": ["greedy"]},
                          "expiresAt": "2099-01-01T00:00:00Z", "reason": "a one-off 12-GPU benchmark"}}
    path = tmp_path / "exception.json"
    path.write_text(json.dumps(exception))
    run = mlgate(cluster, "validate", "--cluster", "-n", stored, "-o", "json", *POLICIES, "--exceptions", str(path))
    assert run.returncode == 1, run.stderr  # Job/root and PyTorchJob/ddp-greedy still break the policies
    got = verdicts(run.stdout)
    assert got["Job/greedy"] == ("allowed", [])
    assert got["PyTorchJob/ddp-greedy"] == ("denied", ["gpu/gpu.max", "gpu/gpu.max"])  # not matched by name
    (greedy,) = [r for r in json.loads(run.stdout)["results"] if r["name"] == "greedy"]
    assert [(e["namespace"], e["name"], e["rule"], e["expired"]) for e in greedy["excepted"]] == [
        (stored, "greedy-benchmark", "gpu.max", False)], greedy


def test_the_text_report_names_each_stored_object_by_its_api_path(cluster: ControlPlane, stored: str) -> None:
    run = mlgate(cluster, "validate", "--cluster", "-n", stored, "--kinds", "Job.batch", *POLICIES)
    assert run.returncode == 1, run.stderr
    assert f"/apis/batch/v1/namespaces/{stored}/jobs/greedy [doc " in run.stdout, run.stdout
    assert "PyTorchJob" not in run.stdout, run.stdout
    assert "3 document(s): 1 allowed, 2 denied" in run.stdout, run.stdout


def test_a_kind_whose_crd_is_not_installed_is_a_note_not_an_error(cluster: ControlPlane, stored: str) -> None:
    run = mlgate(cluster, "validate", "--cluster", "-n", stored, "--kinds", "SparkApplication,Job.batch", *POLICIES)
    assert run.returncode == 1, run.stderr  # the greedy Job, not the missing CRD
    assert "mlgate: note: not served by the API server, skipped: SparkApplication (sparkoperator.k8s.io)" \
        in run.stderr, run.stderr


def test_an_opted_out_namespace_is_not_judged(cluster: ControlPlane, make_namespace: NamespaceFactory) -> None:
    namespace = make_namespace(OUT_OF_WEBHOOK)
    cluster.kubectl("create", "-n", namespace, "-f", "-", stdin=batch_job("greedy", 12)).check()
    run = mlgate(cluster, "validate", "--cluster", "-n", namespace, *POLICIES)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 document(s)" in run.stdout
    assert "1 object(s) in namespaces labelled mlgate.dev/ignore=true not judged" in run.stderr, run.stderr


def test_facts_dump_replayed_with_validate_facts_gives_the_cluster_verdicts(
        cluster: ControlPlane, stored: str, tmp_path: Path) -> None:
    # a storage fact the policies read: a claim on a single-node provisioner, checkpointed to by 4 pods
    cluster.kubectl("create", "-f", "-", stdin={"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                                                "metadata": {"name": f"ebs-{stored}"},
                                                "provisioner": "ebs.csi.aws.com"}).check()
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": {"name": "ckpt", "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}},
             "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": f"ebs-{stored}",
                      "resources": {"requests": {"storage": "1Gi"}}}}
    cluster.kubectl("create", "-n", stored, "-f", "-", stdin=claim).check()
    job = batch_job("shared-ckpt", 1)
    job["spec"].update(parallelism=4, completions=4)
    job["spec"]["template"]["spec"]["volumes"] = [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt"}}]
    job["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] = [{"name": "ckpt", "mountPath": "/ckpt"}]
    # stored past admission, as the fixture's objects are: once the webhook has the claim it refuses this Job
    cluster.kubectl("label", "namespace", stored, "mlgate.dev/ignore=true").check()
    cluster.kubectl("create", "-n", stored, "-f", "-", stdin=job).check()
    cluster.kubectl("label", "namespace", stored, "mlgate.dev/ignore-").check()

    dump = tmp_path / "facts.yaml"
    dumped = mlgate(cluster, "facts", "dump", "-o", str(dump))
    assert dumped.returncode == 0, dumped.stderr
    text = dump.read_text(encoding="utf-8")
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))  # the header names them
    assert text.startswith("# Cluster facts")
    assert "last-applied-configuration" not in body and "managedFields" not in body
    assert f"name: {stored}" in body and "ebs.csi.aws.com" in body

    live = mlgate(cluster, "validate", "--cluster", "-n", stored, "-o", "json", *POLICIES)
    manifests = tmp_path / "stored.json"
    manifests.write_text(cluster.kubectl("get", "jobs.batch,pytorchjobs", "-n", stored, "-o", "json").check().stdout,
                         encoding="utf-8")
    offline = mlgate(cluster, "validate", "--facts", str(dump), "-o", "json", *POLICIES, str(manifests))
    assert verdicts(offline.stdout) == verdicts(live.stdout), (offline.stderr, live.stderr)
    assert verdicts(live.stdout)["Job/shared-ckpt"][0] == "denied", live.stdout  # the facts mattered
    assert offline.returncode == live.returncode == 1


def test_an_unreachable_cluster_is_one_clear_error(tmp_path: Path) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "gone",
        "clusters": [{"name": "gone", "cluster": {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "u"}}]}), encoding="utf-8")
    run = subprocess.run([*MLGATE, "validate", "--cluster", "--kubeconfig", str(config)], capture_output=True,
                         text=True, timeout=120, check=False)
    assert run.returncode == 2, run.stderr
    assert "https://127.0.0.1:1: reading " in run.stderr and "cannot reach the API server" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr
