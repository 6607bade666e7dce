"""`make demo-cluster`: the whole of mlgate on a local control plane, in one terminal.

It starts etcd and kube-apiserver, the webhook, the reconciler and the audit as child processes, with their logs in
one temp dir. The processes come from the e2e harness in tests/e2e, reused as is. Then it applies the examples and
prints what the real kubectl says: a denial, a mutated job, the reconciler's pods and services, and a PolicyReport.
There is no kubelet or scheduler, so pods are stored and stay Pending. Ctrl-C or SIGTERM stops every process it
started, by PID; so does the end of the steps with `--once`.

    python tools/demo_cluster.py [--once]
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import shlex
import shutil
import signal
import sys
import tempfile
import urllib.request
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))  # the harness is a test helper, not an installed package

from control_plane import ControlPlane, HarnessError, Process, Result, find_binaries, free_port, wait_for  # noqa: E402
from e2e_audit import AuditProcess, report  # noqa: E402
from e2e_webhook import WebhookProcess, eventually  # noqa: E402

EXAMPLES = REPO / "examples"
TEAM = "ml-team"  # gang-scheduled by Volcano: the examples' ClusterMLPolicy selects it by label
LEGACY = "legacy"  # opted out of admission at first: what it stores is judged by the audit alone
JOB_LABEL = "mlgate.dev/job-name"  # mlgate_reconciler.desired.JOB_LABEL, on every child
WAIT = 60.0  # seconds for one asynchronous effect to show, on a busy laptop


class DemoPlane(ControlPlane):
    """The harness's control plane, with a kubectl that waits longer: installing the CRDs on a laptop that is busy
    building or testing can take more than the harness's 30 seconds."""

    def kubectl(self, *args: str, stdin: str | dict[str, Any] | list[dict[str, Any]] | None = None,
                timeout: float = 120.0) -> Result:
        return super().kubectl(*args, stdin=stdin, timeout=max(timeout, 120.0))


class Stopped(Exception):
    """SIGINT or SIGTERM arrived: unwind to the cleanup."""


def _stop_signal(signum: int, _frame: FrameType | None) -> NoReturn:
    raise Stopped(signal.Signals(signum).name)


def say(text: str = "") -> None:
    print(text, flush=True)


def heading(text: str) -> None:
    say(f"\n=== {text} ===")


def show(cluster: ControlPlane, *args: str) -> Result:
    """Run kubectl and print it as a terminal would: the command, then its output."""
    say(f"$ {shlex.join(['kubectl', *args])}")
    result = cluster.kubectl(*args)
    say(result.output.rstrip())
    if not result.ok:
        say(f"(exit code {result.code})")
    return result


def started(process: Process | None) -> None:
    if process is not None:
        say(f"started {process.name}: pid {process.pid}, log {process.log}")


# --- the processes ------------------------------------------------------------------------------------------------

def start_everything(cluster: ControlPlane, directory: Path) -> None:
    heading("Starting the control plane, the webhook, the reconciler and the audit")
    cluster.start()
    for process in cluster.processes:
        started(process)
    cluster.kubectl("create", "namespace", TEAM).check()
    cluster.kubectl("label", "namespace", TEAM, "mlgate.dev/scheduler=volcano").check()
    cluster.kubectl("apply", "-f", str(EXAMPLES / "policies" / "gang-volcano.yaml")).check()

    webhook = WebhookProcess(cluster, directory / "webhook")
    webhook.start()
    started(webhook.process)
    webhook.register(TEAM)  # the shipped webhook configurations, with a url to this process
    eventually(f"the gang-volcano ClusterMLPolicy to apply in {TEAM}", lambda: _gang_marked(cluster), WAIT)

    port = free_port()
    reconciler = Process("mlgate reconciler", [
        sys.executable, "-m", "mlgate_reconciler", "--kubeconfig", str(cluster.kubeconfig), "--resync", "300",
        "--metrics-address", f"127.0.0.1:{port}", "--identity", "demo"], directory / "reconciler.log",
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    cluster.processes.append(reconciler)  # recorded before it starts: the cleanup stops whatever is listed
    reconciler.start()
    started(reconciler)
    wait_for("the reconciler's /readyz", lambda: _http_ok(f"http://127.0.0.1:{port}/readyz"), WAIT,
             alive=reconciler.check_alive)

    audit = AuditProcess(cluster, directory / "audit", resync=5.0)
    audit.start()
    started(audit.process)


def _gang_marked(cluster: ControlPlane) -> bool | None:
    probe = cluster.kubectl("create", "--dry-run=server", "-n", TEAM, "-o", "json", "-f",
                            str(EXAMPLES / "pytorchjob-needs-defaults.yaml"))
    return True if probe.ok and '"schedulerName": "volcano"' in probe.stdout else None


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            return int(response.status) == 200
    except OSError:
        return False


def stop_everything(cluster: ControlPlane) -> None:
    """Each process by its own PID, the last started first (the API server outlives its clients)."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)  # a second Ctrl-C must not cut the cleanup short
    if cluster.processes:
        heading("Stopping what was started")
    for process in reversed(cluster.processes):
        pid = process.pid
        if pid is None:
            continue
        process.stop()
        say(f"stopped {process.name} (pid {pid})")


# --- the steps ----------------------------------------------------------------------------------------------------

def denial(cluster: ControlPlane) -> None:
    heading("1. A denial: a PyTorchJob with a privileged worker is refused at kubectl apply")
    show(cluster, "apply", "-n", TEAM, "-f", "examples/pytorchjob-privileged.yaml")
    show(cluster, "get", "pytorchjob", "-n", TEAM)


def mutation(cluster: ControlPlane) -> None:
    heading("2. A mutated job: mlgate fills in what the manifest left out")
    show(cluster, "apply", "-n", TEAM, "-f", "examples/pytorchjob-needs-defaults.yaml")
    stored = cluster.get_object("pytorchjob", "mnist-ddp", TEAM)
    written = yaml.safe_load((EXAMPLES / "pytorchjob-needs-defaults.yaml").read_text(encoding="utf-8"))
    say("What mlgate added to the Worker template: the manifest (-) against "
        f"`kubectl get pytorchjob mnist-ddp -n {TEAM} -o yaml` (+):")
    worker = ("spec", "pytorchReplicaSpecs", "Worker")
    before, after = _dig(written, worker), _dig(stored, worker)
    for line in difflib.unified_diff(_lines(before), _lines(after), "manifest", "stored", n=1, lineterm=""):
        say(line)
    say(f"and to the job: spec.runPolicy = {json.dumps(stored['spec'].get('runPolicy'))}")


def _dig(obj: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        obj = obj[key]
    return obj


def _lines(value: Any) -> list[str]:
    return yaml.safe_dump(value, sort_keys=True).splitlines()


def children(cluster: ControlPlane) -> None:
    heading("3. The reconciler's children: a TrainingJob becomes pods and services")
    show(cluster, "apply", "-n", TEAM, "-f", "examples/trainingjob-tensorflow-ps.yaml")
    selector = f"{JOB_LABEL}=ctr-ps"

    def ready() -> bool:
        names = cluster.kubectl("get", "pods,svc", "-n", TEAM, "-l", selector, "-o", "name").stdout.split()
        return sum(n.startswith("pod/") for n in names) >= 5 and any(n.startswith("service/") for n in names)

    wait_for("the reconciler's pods and services of ctr-ps (1 chief, 2 workers, 2 parameter servers)", ready, WAIT)
    show(cluster, "get", "pods,svc", "-n", TEAM, "-l", selector)
    say("(no kubelet or scheduler runs here: the pods are stored and stay Pending)")
    show(cluster, "get", "trainingjob", "ctr-ps", "-n", TEAM)


def policy_report(cluster: ControlPlane) -> None:
    heading("4. A PolicyReport: the audit judges what is already stored")
    say(f"The privileged job is stored in namespace {LEGACY} while it opts out of admission, then the opt-out goes:")
    show(cluster, "create", "namespace", LEGACY)
    show(cluster, "label", "namespace", LEGACY, "mlgate.dev/ignore=true")
    show(cluster, "apply", "-n", LEGACY, "-f", "examples/pytorchjob-privileged.yaml")
    show(cluster, "label", "namespace", LEGACY, "mlgate.dev/ignore-")

    def written() -> bool | None:
        legacy, team = report(cluster, LEGACY), report(cluster, TEAM)
        return True if legacy and legacy.get("summary", {}).get("fail") and team else None

    eventually("the audit's PolicyReports", written, WAIT)
    show(cluster, "get", "policyreports", "-A")
    show(cluster, "get", "polr", "mlgate", "-n", LEGACY, "-o",
         'jsonpath={range .results[?(@.result=="fail")]}{.resources[0].kind}/{.resources[0].name} '
         '{.policy}/{.rule}: {.message}{"\\n"}{end}')


# --- main ---------------------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--once", action="store_true", help="run the steps, print, then stop everything")
    args = parser.parse_args(argv)
    try:
        binaries = find_binaries()
    except HarnessError as exc:
        print(f"demo-cluster: {exc}", file=sys.stderr)
        return 2
    directory = Path(tempfile.mkdtemp(prefix="mlgate-demo-"))
    say(f"logs in {directory}")
    cluster = DemoPlane(binaries, directory / "control-plane")
    code = 0
    try:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, _stop_signal)
        os.chdir(REPO)  # the commands shown name examples/ relative to the repository
        start_everything(cluster, directory)
        for step in (denial, mutation, children, policy_report):
            step(cluster)
        if not args.once:
            heading("Running")
            say(f"export KUBECONFIG={cluster.kubeconfig}   # then kubectl as you like; Ctrl-C stops everything")
            while True:
                signal.pause()
    except Stopped as stop:
        say(f"\n{stop.args[0]} received")
    except (HarnessError, AssertionError, OSError) as exc:
        print(f"demo-cluster: {exc}\n{cluster.tails(20)}", file=sys.stderr)
        code = 1
    finally:
        stop_everything(cluster)
    if code == 0:
        shutil.rmtree(directory, ignore_errors=True)
    else:
        print(f"demo-cluster: logs kept in {directory}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
