"""An audit started before its API server exists, as on a cluster's cold start: `/readyz` says which server it
cannot reach, and once the control plane is started on the port its kubeconfig names, the audit leads and writes
its PolicyReports, with no traceback in its log.

Its own control plane (the session's is already up): the harness prepares the PKI, the port and the kubeconfig
first (`ControlPlane.prepare`), the audit starts, then the plane.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import pytest
from control_plane import ControlPlane, binaries_or_skip, start_or_fail, wait_for
from e2e_audit import AuditProcess, findings, report
from test_e2e_cluster_cli import batch_job

pytestmark = pytest.mark.e2e

SETTLE = 150.0  # seconds: the audit's waits have grown towards 30 s (up to 60 with jitter) while the plane started


def readyz(audit: AuditProcess) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{audit.port}/readyz", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_an_audit_started_before_the_control_plane_is_unready_naming_it_then_writes_its_reports(
        tmp_path: Path) -> None:
    plane = ControlPlane(binaries_or_skip(), tmp_path / "control-plane")
    plane.prepare()
    audit = AuditProcess(plane, tmp_path / "audit")
    try:
        audit.start()
        assert audit.process is not None
        alive = audit.process.check_alive
        wait_for("the audit to try the API server", lambda: "cannot reach" in readyz(audit)[1], 30.0, alive=alive)
        status, body = readyz(audit)
        assert status == 503 and body.startswith(f"cannot reach the API server {plane.server}: "), body
        assert "Connection refused" in body and body.count("\n") == 1, body

        start_or_fail(plane)
        plane.kubectl("create", "namespace", "early").check()
        plane.kubectl("create", "-n", "early", "-f", "-", stdin=[batch_job("greedy", 12)]).check()
        wait_for("the audit's report in early to list Job/greedy",
                 lambda: "Job/greedy" in findings(report(plane, "early"), ("fail",)), SETTLE, interval=1.0,
                 alive=alive)
        assert "gpu/gpu.max fail" in findings(report(plane, "early"), ("fail",))["Job/greedy"]
        wait_for("the audit to be ready", lambda: readyz(audit) == (200, "ok\n"), SETTLE)
        assert audit.metric("mlgate_audit_leader") == 1
        log = audit.log()
        assert "Traceback" not in log, log[-3000:]
        assert "cannot reach the API server: NewConnectionError: " in log, log[-3000:]  # one line, no traceback
    finally:
        plane.stop()  # the audit too: it joined the plane's processes
