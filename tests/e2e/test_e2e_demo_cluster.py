"""`make demo-cluster` (tools/demo_cluster.py) as a user runs it: the whole stack starts, the steps print the real
kubectl output, and every process it started is gone when it returns, after `--once` or after Ctrl-C.

The script starts its own control plane (not the session's), and each of its children names the script's temp
dir on its command line: that is how the process table tells them apart from anything else running."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from control_plane import REPO, HarnessError, find_binaries

pytestmark = pytest.mark.e2e
SCRIPT = REPO / "tools" / "demo_cluster.py"
CHILDREN = ("etcd", "kube-apiserver", "mlgate webhook", "mlgate reconciler", "mlgate audit")


@pytest.fixture
def binaries() -> None:
    try:
        find_binaries()
    except HarnessError as exc:
        pytest.skip(str(exc))


def running_with(marker: str) -> dict[int, str]:
    """pid -> command line of every live process whose command line contains `marker`."""
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile
            continue
        if marker in command:
            found[int(entry.name)] = command
    return found


def log_dir(output: str) -> str:
    match = re.search(r"^logs in (\S+)$", output, re.MULTILINE)
    assert match, output
    return match.group(1)


def test_the_demo_shows_a_denial_a_mutation_the_reconcilers_children_and_a_policy_report_then_stops_everything(
        binaries: None) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--once"], capture_output=True, text=True, timeout=600,
                          check=False, cwd=REPO)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "Traceback" not in out + done.stderr

    # the denial, with its rule, field path and fix
    assert ('admission webhook "ml-jobs.validate.mlgate.dev" denied the request: [pod-security/pod-security.baseline] '
            "privileged: /spec/pytorchReplicaSpecs/Worker/template/spec/containers/0/securityContext/privileged: "
            'container "pytorch" must not set securityContext.privileged=true') in out
    # the mutation: what the stored Worker template has beyond the manifest
    assert "pytorchjob.kubeflow.org/mnist-ddp created" in out
    for added in ("+        requests:", "+          nvidia.com/gpu: 1", "+    schedulerName: volcano",
                  "+      scheduling.k8s.io/group-name: mnist-ddp", "+      key: nvidia.com/gpu"):
        assert added in out.splitlines(), (added, out)
    # the reconciler's children, Pending without a kubelet
    for pod in ("ctr-ps-chief-0", "ctr-ps-worker-0", "ctr-ps-worker-1", "ctr-ps-ps-0", "ctr-ps-ps-1"):
        assert re.search(rf"^pod/{pod}\s+0/1\s+Pending\s", out, re.MULTILINE), (pod, out)
    assert re.search(r"^service/ctr-ps\s+ClusterIP\s+None\s", out, re.MULTILINE), out
    # the audit's PolicyReports: one failing result in the namespace that bypassed admission
    assert re.search(r"^legacy\s+mlgate\s+\d+\s+1\s+\d+\s+0\s+\d+\s", out, re.MULTILINE), out
    assert re.search(r"^ml-team\s+mlgate\s+\d+\s+0\s", out, re.MULTILINE), out
    assert ("PyTorchJob/resnet-ddp pod-security/pod-security.baseline: "
            'container "pytorch" must not set securityContext.privileged=true') in out

    started = dict(re.findall(r"^started (.+): pid (\d+),", out, re.MULTILINE))
    stopped = dict(re.findall(r"^stopped (.+) \(pid (\d+)\)$", out, re.MULTILINE))
    assert sorted(started) == sorted(CHILDREN), out
    assert stopped == started, out
    directory = log_dir(out)
    assert running_with(directory) == {}
    assert not Path(directory).exists()  # a clean run leaves no temp dir behind


def test_ctrl_c_while_the_demo_starts_stops_every_process_it_had_started(binaries: None) -> None:
    demo = subprocess.Popen([sys.executable, str(SCRIPT)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=REPO)
    try:
        assert demo.stdout is not None
        directory = log_dir(demo.stdout.readline())
        deadline = time.monotonic() + 120
        while not any("kube-apiserver" in c for c in running_with(directory).values()):
            assert demo.poll() is None and time.monotonic() < deadline, "the API server never started"
            time.sleep(0.1)
        time.sleep(1.0)  # past Popen's return in the script, so the API server is on its list
        demo.send_signal(signal.SIGINT)
        out, err = demo.communicate(timeout=120)
    finally:
        if demo.poll() is None:
            os.kill(demo.pid, signal.SIGKILL)
            demo.wait()
    assert demo.returncode == 0, out + err
    assert "SIGINT received" in out and "stopped kube-apiserver (pid " in out, out + err
    assert "Traceback" not in out + err
    assert running_with(directory) == {}


def test_missing_control_plane_binaries_give_one_line_and_no_traceback(tmp_path: Path) -> None:
    env = {**os.environ, "MLGATE_KUBE_APISERVER": str(tmp_path / "no-kube-apiserver")}
    done = subprocess.run([sys.executable, str(SCRIPT), "--once"], capture_output=True, text=True, timeout=60,
                          check=False, cwd=REPO, env=env)
    assert done.returncode == 2, done
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("demo-cluster: control plane binaries missing: kube-apiserver v"), lines
    assert "make control-plane" in lines[0]
