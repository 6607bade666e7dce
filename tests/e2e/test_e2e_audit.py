"""The background audit (`python -m mlgate_audit`) against the real API server, with the upstream PolicyReport CRDs
(manifests/reports, installed through tests/e2e_crds).

One audit process for the module, resyncing every RESYNC seconds. Objects are stored in namespaces labelled
mlgate.dev/ignore=true (no webhook configuration sends their writes to mlgate, so violating objects are stored
even when another module registered the webhook), then the label is removed where the test wants them judged.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from control_plane import ControlPlane
from e2e_audit import AuditProcess, findings, report, warning_events
from e2e_objects import OUT_OF_WEBHOOK, NamespaceFactory, pytorchjob
from e2e_webhook import eventually
from test_e2e_cluster_cli import POLICIES, batch_job, mlgate

pytestmark = pytest.mark.e2e

RESYNC = 3.0
SETTLE = 60.0  # seconds an audit result may take to show, on 2 busy cores


@pytest.fixture(scope="module")
def audit(cluster: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuditProcess]:
    process = AuditProcess(cluster, tmp_path_factory.mktemp("audit"), resync=RESYNC)
    process.start()
    yield process
    process.stop()


def store(cluster: ControlPlane, namespace: str, objects: list[dict[str, Any]], *, open_up: bool = True) -> None:
    cluster.kubectl("create", "-n", namespace, "-f", "-", stdin=objects).check()
    if open_up:
        cluster.kubectl("label", "namespace", namespace, "mlgate.dev/ignore-").check()


def until_findings(cluster: ControlPlane, namespace: str, what: str, check: Any,
                   outcomes: tuple[str, ...] = ("fail",)) -> dict[str, list[str]]:
    """Wait until the namespace's report's findings (fail only, unless `outcomes`) satisfy `check`; the findings."""
    def attempt() -> dict[str, list[str]] | None:
        got = findings(report(cluster, namespace), outcomes)
        return got if check(got) else None

    return eventually(f"the audit's report in {namespace} to show {what}", attempt, SETTLE)


def resyncs_pass(audit: AuditProcess, count: int = 2) -> None:
    """Wait for `count` resyncs to judge the stored objects again (the judged counter grows)."""
    start = audit.metric("mlgate_audit_objects_judged_total")
    objects = audit.metric("mlgate_audit_objects")
    eventually(f"{count} resyncs", lambda: True if audit.metric("mlgate_audit_objects_judged_total")
               >= start + count * objects else None, SETTLE)


def test_jobs_stored_in_an_opted_out_namespace_are_reported_once_the_opt_out_is_removed(
        cluster: ControlPlane, audit: AuditProcess, make_namespace: NamespaceFactory) -> None:
    namespace = make_namespace(OUT_OF_WEBHOOK)
    held = audit.metric("mlgate_audit_objects")
    store(cluster, namespace, [batch_job("greedy", 12), batch_job("ok", 1)], open_up=False)
    eventually("the audit to hold the two jobs", lambda: True if audit.metric("mlgate_audit_objects") >= held + 2
               else None, SETTLE)
    resyncs_pass(audit, 1)
    assert report(cluster, namespace) is None  # opted out: judged by nobody, as admission would

    cluster.kubectl("label", "namespace", namespace, "mlgate.dev/ignore-").check()
    got = until_findings(cluster, namespace, "the greedy job failing", lambda f: "Job/greedy" in f)
    assert got == {"Job/greedy": ["gpu/gpu.max fail"]}
    stored = report(cluster, namespace)
    assert stored is not None and stored["summary"]["fail"] == 1 and stored["summary"]["pass"] > 0, stored


def test_a_policy_tightened_with_kubectl_apply_changes_the_report_without_a_restart(
        cluster: ControlPlane, audit: AuditProcess, make_namespace: NamespaceFactory) -> None:
    namespace = make_namespace(OUT_OF_WEBHOOK)
    store(cluster, namespace, [pytorchjob("four", {"nvidia.com/gpu": "4"})])
    eventually("a report with the job passing", lambda: (report(cluster, namespace) or {}).get("summary"), SETTLE)
    assert findings(report(cluster, namespace), ("fail",)) == {}
    pid = audit.pid

    tight = {"apiVersion": "mlgate.dev/v1alpha1", "kind": "MLPolicy", "metadata": {"name": "gpu-tight",
             "namespace": namespace}, "spec": {"rules": [{"rule": "gpu.max", "action": "deny",
                                                         "params": {"perContainer": 2}}]}}
    cluster.kubectl("apply", "-f", "-", stdin=tight).check()
    got = until_findings(cluster, namespace, "the tightened policy failing the job", lambda f: "PyTorchJob/four" in f)
    tightened = f"{namespace}/gpu-tight/gpu.max fail"  # an MLPolicy is named with its namespace
    assert got == {"PyTorchJob/four": [tightened, tightened]}  # Master and Worker
    assert audit.pid == pid and audit.process is not None and audit.process.running()

    # its results turned to fail: one Warning Event, and resyncs that find the same failure send no other
    events = eventually("a Warning Event on the job", lambda: warning_events(cluster, namespace, "four") or None,
                        SETTLE)
    assert events[0]["type"] == "Warning" and events[0]["reason"] == "PolicyViolation", events
    assert events[0]["regarding"]["kind"] == "PyTorchJob" and "gpu.max" in events[0]["note"], events
    resyncs_pass(audit, 2)
    assert len(warning_events(cluster, namespace, "four")) == 1

    cluster.kubectl("delete", "mlpolicy", "gpu-tight", "-n", namespace).check()
    until_findings(cluster, namespace, "the job passing again", lambda f: f == {})


def test_validate_cluster_gives_the_verdicts_of_the_audit_report(
        cluster: ControlPlane, audit: AuditProcess, make_namespace: NamespaceFactory) -> None:
    namespace = make_namespace(OUT_OF_WEBHOOK)
    store(cluster, namespace, [batch_job("ok", 1), batch_job("greedy", 12), batch_job("root", 1, privileged=True),
                               pytorchjob("ddp-ok", {"nvidia.com/gpu": "2"}),
                               pytorchjob("ddp-greedy", {"nvidia.com/gpu": "16"})])
    audited = until_findings(cluster, namespace, "the three violating objects",
                             lambda f: {"Job/greedy", "Job/root", "PyTorchJob/ddp-greedy"} <= set(f),
                             ("fail", "warn"))
    run = mlgate(cluster, "validate", "--cluster", "-n", namespace, "-o", "json", *POLICIES)
    assert run.returncode == 1, run.stderr
    validated: dict[str, list[str]] = {}
    for result in json.loads(run.stdout)["results"]:
        listed = [f"{v['policy']}/{v['rule']} fail" for v in result["violations"]] + \
                 [f"{w['policy']}/{w['rule']} warn" for w in result["warnings"]]
        if listed:
            validated[f"{result['kind']}/{result['name']}"] = sorted(listed)
    assert validated == audited
    fails = {name: [f for f in found if f.endswith(" fail")] for name, found in audited.items()}
    assert fails["PyTorchJob/ddp-greedy"] == ["gpu/gpu.max fail", "gpu/gpu.max fail"]  # Master and Worker
    assert fails["Job/ok"] == fails["PyTorchJob/ddp-ok"] == [], audited  # listed for warnings only


def test_an_unchanged_object_costs_no_report_write_and_a_changed_one_at_most_one(
        cluster: ControlPlane, audit: AuditProcess, make_namespace: NamespaceFactory) -> None:
    namespace = make_namespace(OUT_OF_WEBHOOK)
    store(cluster, namespace, [pytorchjob("ddp", {"nvidia.com/gpu": "12"}), batch_job("ok", 1)])
    # both objects in the report: a report written while only one was judged is written again once both are (in a
    # whole-suite run the audit holds many namespaces, and writes are rate limited), which is a change, not a repeat
    until_findings(cluster, namespace, "both jobs judged, the greedy one failing",
                   lambda f: "PyTorchJob/ddp" in f and "Job/ok" in f, outcomes=("fail", "pass", "warn", "skip"))
    eventually("the audit to settle", lambda: True if audit.metric("mlgate_audit_full_pass_seconds") > 0 else None,
               SETTLE)
    synced = audit.metric("mlgate_audit_last_sync_timestamp_seconds")  # what the MlgateAuditStale alert reads
    resyncs_pass(audit, 1)
    assert audit.metric("mlgate_audit_last_sync_timestamp_seconds") > synced  # every report up to date again
    before, stored = audit.writes_in(namespace), report(cluster, namespace)
    resyncs_pass(audit, 2)
    assert audit.writes_in(namespace) == before  # resyncs judged everything again; nothing changed, nothing written
    # a status change (the operator's, through the status subresource, which no webhook sees or mutates) does not
    # change a verdict: judged again, not written. A label through the main resource would not do: the webhook
    # fills in its defaults on that UPDATE, which changes the spec the verdicts are about
    status = {"status": {"conditions": [{"type": "Created", "status": "True", "reason": "PyTorchJobCreated",
                                         "lastUpdateTime": "2026-01-01T00:00:00Z"}]}}
    cluster.kubectl("patch", "pytorchjob", "ddp", "-n", namespace, "--subresource=status", "--type=merge",
                    "-p", json.dumps(status)).check()
    resyncs_pass(audit, 1)
    assert audit.writes_in(namespace) == before
    assert report(cluster, namespace)["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]  # type: ignore[index]

    # a fix: the report changes, with exactly one write
    patch = {"spec": {"pytorchReplicaSpecs": {role: {"template": {"spec": {"containers": [
        {"name": "pytorch", "image": "registry.example/train:1.0",
         "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}} for role in ("Master", "Worker")}}}
    cluster.kubectl("patch", "pytorchjob", "ddp", "-n", namespace, "--type=merge", "-p", json.dumps(patch)).check()
    until_findings(cluster, namespace, "the fixed job passing", lambda f: f == {})
    time.sleep(RESYNC)
    assert audit.writes_in(namespace) == before + 1


def test_an_exception_makes_the_report_show_skip_with_its_name_until_it_expires_then_fail(
        cluster: ControlPlane, audit: AuditProcess, make_namespace: NamespaceFactory) -> None:
    namespace = make_namespace(OUT_OF_WEBHOOK)
    store(cluster, namespace, [batch_job("greedy", 12)])
    until_findings(cluster, namespace, "the greedy job failing", lambda f: f.get("Job/greedy") == ["gpu/gpu.max fail"])

    expires = int(time.time()) + 25  # whole seconds, as expiresAt; time to see the skip, then the expiry
    exception = {"apiVersion": "mlgate.dev/v1alpha1", "kind": "MLPolicyException",
                 "metadata": {"name": "greedy-benchmark", "namespace": namespace},
                 "spec": {"policy": "gpu", "rules": ["gpu.max"], "match": {"names": ["greedy"]},
                          "expiresAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires)),
                          "reason": "a one-off 12-GPU benchmark"}}
    cluster.kubectl("create", "-f", "-", stdin=exception).check()
    until_findings(cluster, namespace, "the job excepted", lambda f: f.get("Job/greedy") == ["gpu/gpu.max skip"],
                   outcomes=("skip", "fail"))
    (excepted,) = [r for r in report(cluster, namespace)["results"]  # type: ignore[index]
                   if r["rule"] == "gpu.max" and r["result"] == "skip"]
    assert f"{namespace}/greedy-benchmark" in excepted["properties"]["exceptions"], excepted

    # nobody deletes the exception: past expiresAt the audit judges the job again and it fails
    until_findings(cluster, namespace, "the job failing once the exception expired",
                   lambda f: f.get("Job/greedy") == ["gpu/gpu.max fail"])
    assert time.time() >= expires
