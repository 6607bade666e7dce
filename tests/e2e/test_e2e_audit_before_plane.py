"""An audit and a reconciler started before their API server exists, as on a cluster's cold start: each `/readyz`
says which server it cannot reach, and once the control plane is started on the port their kubeconfig names, the
audit leads and writes its PolicyReports, the reconciler makes a TrainingJob's pods, both answer 200, and neither
log holds a traceback.

Their own control plane (the session's is already up): the harness prepares the PKI, the port and the kubeconfig
first (`ControlPlane.prepare`), the processes start, then the plane. Its CRDs are installed while some forty watches
retry against it, so its kubectl waits as long as the demo's does.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from control_plane import ControlPlane, Process, Result, binaries_or_skip, free_port, start_or_fail, wait_for
from e2e_audit import AuditProcess, findings, report
from e2e_objects import in_namespace, trainingjob
from reconciler_steps import names
from test_e2e_cluster_cli import batch_job

pytestmark = pytest.mark.e2e

SETTLE = 150.0  # seconds: the waits have grown towards 30 s (up to 60 with jitter) while the plane started


class PatientPlane(ControlPlane):
    def kubectl(self, *args: str, stdin: str | dict[str, Any] | list[dict[str, Any]] | None = None,
                timeout: float = 120.0) -> Result:
        return super().kubectl(*args, stdin=stdin, timeout=max(timeout, 120.0))


def readyz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


def reconciler(plane: ControlPlane, directory: Path) -> tuple[Process, int]:
    port = free_port()
    process = Process("mlgate operator", [
        sys.executable, "-m", "mlgate_reconciler", "--kubeconfig", str(plane.kubeconfig), "--namespace", "early",
        "--resync", "3600", "--metrics-address", f"127.0.0.1:{port}"], directory / "reconciler.log",
        env={**os.environ, "PYTHONUNBUFFERED": "1"}).start()
    plane.processes.append(process)
    return process, port


def test_an_audit_and_a_reconciler_started_before_the_control_plane_are_unready_naming_it_then_do_their_work(
        tmp_path: Path) -> None:
    plane = PatientPlane(binaries_or_skip(), tmp_path / "control-plane")
    plane.prepare()
    audit = AuditProcess(plane, tmp_path / "audit")
    try:
        audit.start()
        assert audit.process is not None
        operator, operator_port = reconciler(plane, tmp_path)
        for port, process in ((audit.port, audit.process), (operator_port, operator)):
            wait_for(f"/readyz on {port} to say the API server cannot be reached",
                     lambda port=port: "cannot reach" in readyz(port)[1], 30.0, alive=process.check_alive)
            status, body = readyz(port)
            assert status == 503 and body.startswith(f"cannot reach the API server {plane.server}: "), body
            assert "Connection refused" in body and body.count("\n") == 1, body

        start_or_fail(plane)
        plane.kubectl("create", "namespace", "early").check()
        plane.kubectl("create", "-n", "early", "-f", "-", stdin=[batch_job("greedy", 12)]).check()
        plane.kubectl("create", "-f", "-", stdin=in_namespace(trainingjob("warm"), "early")).check()
        wait_for("the audit's report in early to list Job/greedy",
                 lambda: "Job/greedy" in findings(report(plane, "early"), ("fail",)), SETTLE, interval=1.0,
                 alive=audit.process.check_alive)
        assert "gpu/gpu.max fail" in findings(report(plane, "early"), ("fail",))["Job/greedy"]
        wait_for("the reconciler to make TrainingJob warm's pods",
                 lambda: len([p for p in names(plane, "pods", "early") if p.startswith("warm-")]) == 2, SETTLE,
                 interval=1.0, alive=operator.check_alive)
        for port in (audit.port, operator_port):
            wait_for(f"/readyz on {port} to answer 200", lambda port=port: readyz(port) == (200, "ok\n"), SETTLE)
        assert audit.metric("mlgate_audit_leader") == 1
        for log in (audit.log(), operator.log.read_text(encoding="utf-8", errors="replace")):
            assert "Traceback" not in log, log[-3000:]
            assert "cannot reach the API server: NewConnectionError: " in log, log[-3000:]  # one line each time
    finally:
        plane.stop()  # the audit and the reconciler too: they joined the plane's processes
