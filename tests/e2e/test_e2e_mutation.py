"""Mutation through the real API server: defaults and gang markers are stored, exactly once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from control_plane import ControlPlane, to_json, to_yaml
from e2e_objects import VOLCANO, example, in_namespace, missing_in, offline_mutate, trainingjob
from e2e_webhook import WebhookProcess, eventually

pytestmark = pytest.mark.e2e
GROUP_NAME = "scheduling.k8s.io/group-name"
NamespaceFactory = Callable[..., str]


def volcano_namespace(cluster: ControlPlane, make_namespace: NamespaceFactory, probe: dict[str, Any]) -> str:
    """A namespace the gang-volcano ClusterMLPolicy selects, once the webhook's namespace watch has seen it."""
    namespace = make_namespace(VOLCANO)

    def gang_marked() -> bool | None:
        result = cluster.kubectl("create", "--dry-run=server", "-o", "yaml", "-n", namespace, "-f", "-", stdin=probe)
        return True if result.ok and GROUP_NAME in result.stdout else None

    eventually(f"gang markers in namespace {namespace}", gang_marked, 30)
    return namespace


def apply_and_check_no_drift(cluster: ControlPlane, obj: dict[str, Any], expected: dict[str, Any],
                             tmp_path: Path) -> dict[str, Any]:
    """Apply, compare with `mlgate mutate`, then apply again, diff and relabel: the stored spec never moves.

    A second `kubectl apply` of a CRD object may send a merge patch (lists are replaced whole, and the
    stored lists hold the defaults); the webhook then fills in the same defaults again and nothing changes."""
    kind, name, namespace = obj["kind"], obj["metadata"]["name"], obj["metadata"]["namespace"]
    manifest = tmp_path / f"{name}.json"
    manifest.write_text(to_json(obj), encoding="utf-8")
    cluster.kubectl("apply", "-f", str(manifest)).check()
    live = cluster.get_object(kind, name, namespace)
    assert missing_in(live["spec"], expected["spec"]) == [], to_yaml(live)

    for update in (("apply", "-f", str(manifest)),
                   ("label", kind, name, "-n", namespace, "e2e/touched=yes")):  # an UPDATE by patch
        cluster.kubectl(*update).check()
        after = cluster.get_object(kind, name, namespace)
        assert after["spec"] == live["spec"], f"kubectl {update[0]} moved the spec:\n{to_yaml(after)}"
        assert after["metadata"]["generation"] == live["metadata"]["generation"]
    diff = cluster.kubectl("diff", "-f", str(manifest))
    assert diff.code == 0, diff  # the server-side dry-run of the same apply, mutated again, equals what is stored
    return after


def replace_with_original(cluster: ControlPlane, obj: dict[str, Any], tmp_path: Path) -> None:
    """`kubectl replace` of the manifest as written (a full UPDATE without the defaults, as GitOps tools send)
    stores the same spec: the webhook fills in the same defaults again."""
    kind, name, namespace = obj["kind"], obj["metadata"]["name"], obj["metadata"]["namespace"]
    manifest = tmp_path / f"{name}.json"
    manifest.write_text(to_json(obj), encoding="utf-8")
    cluster.kubectl("create", "-f", str(manifest)).check()
    before = cluster.get_object(kind, name, namespace)
    cluster.kubectl("replace", "-f", str(manifest)).check()
    after = cluster.get_object(kind, name, namespace)
    assert after["spec"] == before["spec"]
    assert after["metadata"]["generation"] == before["metadata"]["generation"]


def test_trainingjob_is_stored_with_defaults_and_volcano_gang_settings_once(
        webhook: WebhookProcess, cluster: ControlPlane, make_namespace: NamespaceFactory, tmp_path: Path) -> None:
    namespace = volcano_namespace(cluster, make_namespace, trainingjob("probe"))
    obj = in_namespace(trainingjob("bert-base"), namespace)
    stored = apply_and_check_no_drift(cluster, obj, offline_mutate(obj, tmp_path / "offline", VOLCANO), tmp_path)

    spec = stored["spec"]
    assert spec["scheduling"] == {"gang": True, "scheduler": "volcano", "minMember": 2, "queue": "default"}
    template = spec["template"]
    assert template["metadata"]["annotations"][GROUP_NAME] == "bert-base"
    assert template["spec"]["schedulerName"] == "volcano"
    assert template["spec"]["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert template["spec"]["containers"][0]["env"] == [{"name": "CHECKPOINT_DIR", "value": "s3://ml-checkpoints/bert-base"}]
    assert "backoffLimit" not in spec.get("runPolicy", {})  # the shipped defaults leave the operator's no-limit


def test_pytorchjob_is_stored_with_defaults_and_volcano_gang_settings_once(
        webhook: WebhookProcess, cluster: ControlPlane, make_namespace: NamespaceFactory, tmp_path: Path) -> None:
    original = example("pytorchjob-needs-defaults.yaml")
    namespace = volcano_namespace(cluster, make_namespace, {**original, "metadata": {"name": "probe"}})
    obj = in_namespace(original, namespace)
    stored = apply_and_check_no_drift(cluster, obj, offline_mutate(obj, tmp_path / "offline", VOLCANO), tmp_path)

    spec = stored["spec"]
    assert spec["runPolicy"]["schedulingPolicy"] == {"minAvailable": 3, "queue": "default"}
    for role in ("Master", "Worker"):
        template = spec["pytorchReplicaSpecs"][role]["template"]
        assert template["metadata"]["annotations"][GROUP_NAME] == "mnist-ddp"
        assert template["metadata"]["annotations"]["scheduling.volcano.sh/queue-name"] == "default"
        assert template["spec"]["schedulerName"] == "volcano"
        container = template["spec"]["containers"][0]
        assert container["resources"]["requests"] == {"nvidia.com/gpu": 1}
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert [t["key"] for t in template["spec"]["tolerations"]] == ["nvidia.com/gpu"]
        assert [v["name"] for v in template["spec"]["volumes"]] == ["dshm"]


def test_jobs_outside_a_gang_namespace_get_defaults_but_no_gang_markers(
        webhook: WebhookProcess, cluster: ControlPlane, namespace: str) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=trainingjob("plain")).check()
    spec = cluster.get_object("trainingjob", "plain", namespace)["spec"]
    assert "scheduling" not in spec
    assert "schedulerName" not in spec["template"]["spec"]
    assert spec["template"]["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"


def test_replacing_a_job_with_its_manifest_as_written_keeps_the_defaults(
        webhook: WebhookProcess, cluster: ControlPlane, namespace: str, tmp_path: Path) -> None:
    replace_with_original(cluster, in_namespace(trainingjob("bert-base"), namespace), tmp_path)
    replace_with_original(cluster, in_namespace(example("pytorchjob-needs-defaults.yaml"), namespace), tmp_path)


def test_replacing_a_gang_job_with_its_manifest_as_written_keeps_the_gang_settings(
        webhook: WebhookProcess, cluster: ControlPlane, make_namespace: NamespaceFactory, tmp_path: Path) -> None:
    namespace = volcano_namespace(cluster, make_namespace, trainingjob("probe"))
    replace_with_original(cluster, in_namespace(trainingjob("bert-base"), namespace), tmp_path)


def test_a_batch_job_is_grouped_by_volcano_through_its_owner_and_carries_no_group_name(
        webhook: WebhookProcess, cluster: ControlPlane, make_namespace: NamespaceFactory) -> None:
    namespace = volcano_namespace(cluster, make_namespace, trainingjob("probe"))
    container = {"name": "train", "image": "registry.example/train:1.0", "resources": {"limits": {"nvidia.com/gpu": 1}}}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "shards", "namespace": namespace},
           "spec": {"parallelism": 3, "completions": 3,
                    "template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}}
    cluster.kubectl("apply", "-f", "-", stdin=job).check()
    live = cluster.get_object("job", "shards", namespace)
    # Volcano's podgroup controller reads the minimum off the pods' owner; a group-name annotation would need a
    # PodGroup of that name, which nothing creates for a Job, and leave the pods Pending
    assert live["metadata"]["annotations"]["scheduling.volcano.sh/group-min-member"] == "3", to_yaml(live)
    template = live["spec"]["template"]
    assert template["spec"]["schedulerName"] == "volcano"
    assert GROUP_NAME not in (template["metadata"].get("annotations") or {}), to_yaml(live)
    assert template["metadata"]["annotations"]["scheduling.volcano.sh/queue-name"] == "default"
