"""What `mlgate validate -o policyreport` prints, the real API server takes, with the upstream report CRDs
(manifests/reports, installed through tests/e2e_crds) in force: kubectl's strict field validation refuses unknown
fields, and the schemas refuse values outside their enums. Stored and read back, a report is unchanged in
everything the audit compares."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from control_plane import REPO, ControlPlane, to_json
from e2e_objects import EXAMPLES, MLGATE

from mlgate.reports import OPENREPORTS, WGPOLICY, unchanged

pytestmark = pytest.mark.e2e

INPUTS = [str(EXAMPLES / "pytorchjob-privileged.yaml"), str(EXAMPLES / "trainingjob-too-many-gpus.yaml"),
          str(REPO / "tests" / "cli" / "policyreport" / "cluster-serving-runtime.yaml")]
# read back at the version written: the wgpolicyk8s.io CRD stores (and prefers) v1beta1
NAMESPACED = {WGPOLICY: "policyreports.v1alpha2.wgpolicyk8s.io", OPENREPORTS: "reports.v1alpha1.openreports.io"}


def printed(api: str, namespace: str) -> tuple[str, list[dict[str, Any]]]:
    done = subprocess.run([*MLGATE, "validate", "-o", "policyreport", "--report-api", api, "-n", namespace, *INPUTS],
                          cwd=REPO, capture_output=True, text=True, check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done  # 1: the privileged job is denied
    return done.stdout, [d for d in yaml.safe_load_all(done.stdout) if d is not None]


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "reports.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("api", [WGPOLICY, OPENREPORTS])
def test_the_printed_reports_pass_a_server_side_dry_run(cluster: ControlPlane, namespace: str, tmp_path: Path,
                                                        api: str) -> None:
    text, reports = printed(api, namespace)
    assert [r["kind"] for r in reports] == (["ClusterPolicyReport", "PolicyReport"] if api == WGPOLICY
                                            else ["ClusterReport", "Report"])
    dry = cluster.kubectl("apply", "--dry-run=server", "--validate=strict", "-f", write(tmp_path, text)).check()
    assert "(server dry run)" in dry.stdout, dry


@pytest.mark.parametrize("api", [WGPOLICY, OPENREPORTS])
def test_a_stored_report_reads_back_unchanged(cluster: ControlPlane, namespace: str, tmp_path: Path,
                                             api: str) -> None:
    _, reports = printed(api, namespace)
    local = next(r for r in reports if r["metadata"].get("namespace") == namespace)
    cluster.kubectl("apply", "--validate=strict", "-f", write(tmp_path, to_json(local))).check()
    resource = NAMESPACED[api]
    stored = cluster.get_object(resource, "mlgate", namespace)
    assert stored["metadata"]["resourceVersion"]  # really stored
    assert stored["results"] == local["results"]
    assert unchanged(stored, local)
    columns = cluster.kubectl("get", resource, "mlgate", "-n", namespace).check().stdout.split()
    assert columns[:6] == ["NAME", "PASS", "FAIL", "WARN", "ERROR", "SKIP"], columns
    assert columns[7] == "mlgate" and columns[9:11] == ["2", "3"], columns  # the summary: 2 fail, 3 warn


def test_a_result_outside_the_crd_enum_is_refused(cluster: ControlPlane, namespace: str, tmp_path: Path) -> None:
    _, reports = printed(WGPOLICY, namespace)
    report = next(r for r in reports if r["kind"] == "PolicyReport")
    report["results"][0]["result"] = "denied"
    refused = cluster.kubectl("apply", "--dry-run=server", "-f", write(tmp_path, to_json(report)))
    assert refused.code != 0 and 'Unsupported value: "denied"' in refused.stderr, refused


def test_a_field_the_crd_does_not_know_is_refused(cluster: ControlPlane, namespace: str, tmp_path: Path) -> None:
    _, reports = printed(WGPOLICY, namespace)
    report = next(r for r in reports if r["kind"] == "PolicyReport")
    report["source"] = "mlgate"  # openreports has a report-level source; v1alpha2 does not
    refused = cluster.kubectl("apply", "--dry-run=server", "--validate=strict", "-f",
                              write(tmp_path, to_json(report)))
    assert refused.code != 0 and 'unknown field "source"' in refused.stderr, refused
