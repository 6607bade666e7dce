"""One broken MLPolicy never blocks the others: stored past admission (in an opted-out namespace), it is left out or
keeps its last good version, says why in its status.loadError, /readyz and a metric, and a restarted webhook
becomes ready and enforces every other policy."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from control_plane import ControlPlane
from e2e_objects import pytorchjob
from e2e_webhook import WebhookProcess, eventually, until_verdict
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.e2e
TIMEOUT = 30.0
IGNORE = "mlgate.dev/ignore"
JOB = pytorchjob("four-gpus", {"nvidia.com/gpu": 4})  # under the shipped limit of 8, over a team limit of 2


def mlpolicy(name: str, per_container: Any, namespace: str) -> dict[str, Any]:
    """An MLPolicy limiting the GPUs per container (`per_container` "many" is stored, and does not load)."""
    rule = {"rule": "gpu.max", "action": "deny", "params": {"perContainer": per_container}}
    return {"apiVersion": "mlgate.dev/v1alpha1", "kind": "MLPolicy", "metadata": {"name": name, "namespace": namespace},
            "spec": {"rules": [rule]}}


def rejected(webhook: WebhookProcess, where: str, in_force: str) -> dict[str, Any] | None:
    """/readyz's entry for the object `where`, once it says `in_force`."""
    entry = webhook.readyz()[1].get("policies", {}).get("rejected", {}).get(where)
    return entry if entry is not None and entry["inForce"] == in_force else None


def load_error(cluster: ControlPlane, name: str, namespace: str) -> str | None:
    status = cluster.get_object("mlpolicy", name, namespace).get("status") or {}
    return status.get("loadError") if "loadError" in status else None


def rejected_series(webhook: WebhookProcess) -> list[dict[str, str]]:
    with urllib.request.urlopen(webhook.url + "/metrics", context=webhook.ssl_context(), timeout=5) as response:
        text = response.read().decode()
    return [dict(s.labels) for f in text_string_to_metric_families(text) if f.name == "mlgate_policy_object_rejected"
            for s in f.samples]


def restart(webhook: WebhookProcess, namespace: str) -> None:
    """Stop and start the webhook; `start` waits for /readyz to answer 200."""
    webhook.stop()
    webhook.start()
    webhook.wait_until_called(namespace)


def test_a_broken_mlpolicy_in_an_opted_out_namespace_blocks_neither_the_others_nor_a_restart(
        webhook: WebhookProcess, cluster: ControlPlane, make_namespace: Callable[..., str]) -> None:
    team, opted_out = make_namespace(), make_namespace({IGNORE: "true"})
    cluster.kubectl("apply", "-f", "-", stdin=mlpolicy("team-gpu", 2, team)).check()
    until_verdict(cluster, JOB, team, denied_with=f"[{team}/team-gpu/gpu.max]")
    # stored: MLPolicies in an opted-out namespace are not sent to the webhook that would refuse this one
    cluster.kubectl("apply", "-f", "-", stdin=mlpolicy("typo", "many", opted_out)).check()
    where = f"cluster:MLPolicy/{opted_out}/typo"
    try:
        entry = eventually(f"/readyz to report {where}", lambda: rejected(webhook, where, "none"), TIMEOUT)
        assert entry["errors"] == ["spec.rules[0].params.perContainer: input should be a valid integer"], entry
        written = eventually("its status.loadError", lambda: load_error(cluster, "typo", opted_out), TIMEOUT)
        assert written == entry["errors"][0], written

        restart(webhook, team)  # ready again although the broken object is still stored
        status, ready = webhook.readyz()
        assert status == 200 and ready["policies"]["rejected"][where]["inForce"] == "none", ready
        assert f"{team}/team-gpu" in ready["policies"]["policies"], ready
        denied = cluster.kubectl("apply", "-n", team, "-f", "-", stdin=JOB)
        assert denied.code == 1 and f"[{team}/team-gpu/gpu.max]" in denied.stderr, denied
        assert {"kind": "MLPolicy", "namespace": opted_out, "name": "typo", "in_force": "none"} in (
            rejected_series(webhook))

        # a later good version replaces it
        cluster.kubectl("apply", "-f", "-", stdin=mlpolicy("typo", 1, opted_out)).check()
        eventually("the fixed object to load", lambda: True if f"{opted_out}/typo" in webhook.readyz()[1][
            "policies"]["policies"] else None, TIMEOUT)
        assert where not in webhook.readyz()[1]["policies"]["rejected"]
        assert eventually("its status.loadError to clear", lambda: load_error(cluster, "typo", opted_out) == ""
                          or None, TIMEOUT)
        assert not [s for s in rejected_series(webhook) if s.get("namespace") == opted_out]
    finally:
        cluster.kubectl("delete", "mlpolicy", "typo", "-n", opted_out, "--ignore-not-found").check()


def test_a_broken_new_version_keeps_the_last_good_one_in_force_until_a_restart_leaves_it_out(
        webhook: WebhookProcess, cluster: ControlPlane, namespace: str) -> None:
    cluster.kubectl("apply", "-f", "-", stdin=mlpolicy("team-gpu", 2, namespace)).check()
    denied_by_team = f"[{namespace}/team-gpu/gpu.max]"
    until_verdict(cluster, JOB, namespace, denied_with=denied_by_team)
    where = f"cluster:MLPolicy/{namespace}/team-gpu"
    broken = mlpolicy("team-gpu", "many", namespace)
    cluster.kubectl("label", "namespace", namespace, f"{IGNORE}=true").check()  # opted out for a moment
    try:
        eventually("the API server to store the broken version past the webhook",
                   lambda: cluster.kubectl("apply", "-f", "-", stdin=broken).ok or None, TIMEOUT)
    finally:
        cluster.kubectl("label", "namespace", namespace, f"{IGNORE}-").check()
    eventually(f"/readyz to report {where} with its last good version", lambda: rejected(webhook, where, "lastGood"),
               TIMEOUT)
    assert "the limit is 2" in until_verdict(cluster, JOB, namespace, denied_with=denied_by_team).stderr

    restart(webhook, namespace)  # the last good version lived in the old process: now the object is left out
    assert rejected(webhook, where, "none") is not None, webhook.readyz()
    until_verdict(cluster, JOB, namespace)

    cluster.kubectl("apply", "-f", "-", stdin=mlpolicy("team-gpu", 3, namespace)).check()
    assert "the limit is 3" in until_verdict(cluster, JOB, namespace, denied_with=denied_by_team).stderr
    assert where not in webhook.readyz()[1]["policies"]["rejected"]
