"""The webhook's parts without a server: review translation, policy store, facts cache, TLS reloader."""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path

import pytest
from builders import change, policy_set, pytorchjob
from webhook_reviews import review

from mlgate.model.facts import NO_FACTS
from mlgate.model.results import Action, Finding, Line, Outcome, RuleResult
from mlgate_certs.bundle import write_atomic
from mlgate_certs.throwaway import throwaway_pki
from mlgate_webhook import review as review_module
from mlgate_webhook.facts_cache import KINDS as FACT_KINDS
from mlgate_webhook.facts_cache import WatchedFacts
from mlgate_webhook.metrics import Metrics
from mlgate_webhook.policy_store import ClusterPolicySource, DirectorySource, PolicyStore
from mlgate_webhook.review import MAX_WARNING_CHARS, ReviewError, admit, parse_review, short_warnings
from mlgate_webhook.tls import CertReloader

GPU_POLICY = {"apiVersion": "mlgate.dev/v1alpha1", "kind": "ClusterMLPolicy", "metadata": {"name": "gpu"},
              "spec": {"rules": [{"rule": "gpu.max", "params": {"perContainer": 8}}]}}


def request_of(body: dict) -> review_module.AdmissionRequest:
    return parse_review(json.dumps(body).encode(), "application/json; charset=utf-8")


# --- review ---------------------------------------------------------------------------------------


def test_allow_a_content_type_with_parameters():
    assert request_of(review(pytorchjob())).uid


def test_deny_a_dry_run_flag_that_is_not_a_boolean():
    body = review(pytorchjob())
    body["request"]["dryRun"] = "yes"
    with pytest.raises(ReviewError, match="dryRun must be a boolean"):
        request_of(body)


def finding_line(path: str, detail: str, fix: str = "", reason: str = "reason") -> Line:
    return Line("p", "r", Finding(path, reason, detail, fix))


LONG_PATH = "/spec/pytorchReplicaSpecs/Worker/template/spec/initContainers/0/resources/limits/nvidia.com~1gpu"


def test_a_long_warning_loses_its_path_first_then_its_detail_or_fix_then_its_tail():
    assert len(finding_line(LONG_PATH, "detail", "fix").render()) > MAX_WARNING_CHARS
    assert short_warnings([finding_line(LONG_PATH, "detail", "fix")]) == ["[p/r] reason: detail; fix"]
    assert short_warnings([finding_line(LONG_PATH, "d" * 120, "fix")]) == ["[p/r] reason: fix"]
    assert short_warnings([finding_line(LONG_PATH, "detail", "f" * 120)]) == ["[p/r] reason: detail"]
    (cut,) = short_warnings([finding_line("/x", "word " * 40)])
    assert len(cut) <= MAX_WARNING_CHARS and cut.endswith("word...")


def test_a_fix_that_contains_a_semicolon_is_kept_whole_or_left_out_whole():
    fix = "use a whole number such as 1; for a fraction of a GPU use a MIG profile"
    short = finding_line(LONG_PATH, "c asks for 0.5", fix, "gpu count not whole")
    assert short_warnings([short]) == ["[p/r] gpu count not whole: c asks for 0.5; " + fix]
    detail = 'init container "fetch-weights" asks for nvidia.com/gpu=0.5'
    long = finding_line(LONG_PATH, detail, fix, "gpu count not whole")
    assert short_warnings([long]) == [f"[p/r] gpu count not whole: {detail}"]


def test_a_detail_with_colons_and_semicolons_is_never_split_on_them():
    line = finding_line(LONG_PATH, "a: b; c: d " * 6, "set x: 1; then y")
    (short,) = short_warnings([line])
    assert short == "[p/r] reason: " + "a: b; c: d " * 6 + "; set x: 1; then y"


def test_warnings_that_read_the_same_once_shortened_are_said_once_with_a_count():
    path = "/spec/{}/template/spec/containers/0/x/" + "y" * 40
    lines = [finding_line(path.format(role), "d" * 60, "set x: true") for role in ("Master", "Worker")]
    out = short_warnings([*lines, Line("p", "r", text="other")])
    assert out == ["[p/r] reason: " + "d" * 60 + "; set x: true (2 places)", "[p/r] other"]


def test_at_most_twenty_warnings_and_the_last_says_how_many_more():
    out = short_warnings([Line("p", "r", text=f"w{i}") for i in range(25)])
    assert len(out) == 20
    assert out[-1] == "... and 6 more warnings; see the webhook log"


def test_a_rule_that_could_not_look_says_so_in_a_warning():
    claim = {"name": "ckpt", "persistentVolumeClaim": {"claimName": "checkpoints"}}
    mount = [{"name": "ckpt", "mountPath": "/ckpt"}]
    job = change(change(pytorchjob(workers=4), "/spec/pytorchReplicaSpecs/Worker/template/spec/volumes", [claim]),
                 "/spec/pytorchReplicaSpecs/Worker/template/spec/containers/0/volumeMounts", mount)
    answer = admit(request_of(review(job)), policy_set({"rule": "storage.shared-claim-rwx"}), NO_FACTS, "validate")
    assert answer.response["allowed"] is True
    (warning,) = answer.response["warnings"]
    assert warning.startswith("[test/storage.shared-claim-rwx] could not check: no cluster facts")
    assert len(warning) <= MAX_WARNING_CHARS


def test_a_policy_object_naming_a_kind_no_description_knows_is_stored_with_a_warning():
    obj = {"apiVersion": "mlgate.dev/v1alpha1", "kind": "ClusterMLPolicy", "metadata": {"name": "p"},
           "spec": {"match": {"kinds": ["PytorchJob"]}, "rules": [{"rule": "gpu.limits"}]}}
    answer = admit(request_of(review(obj)), policy_set({"rule": "gpu.limits"}), NO_FACTS, "validate")
    assert answer.response["allowed"] is True
    (warning,) = answer.response["warnings"]
    assert warning.startswith('mlgate: spec.match.kinds[0]: no kind description knows "PytorchJob"')


def test_an_engine_crash_denies_under_a_fail_policy_and_allows_with_a_warning_under_ignore(monkeypatch):
    def crash(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(review_module, "evaluate", crash)
    request = request_of(review(pytorchjob()))
    strict = admit(request, policy_set({"rule": "gpu.max"}, failurePolicy="Fail"), NO_FACTS, "validate")
    assert strict.verdict == "error"
    assert strict.response["allowed"] is False
    assert strict.response["status"]["code"] == 500
    assert "RecursionError" in strict.response["status"]["message"]
    lenient = admit(request, policy_set({"rule": "gpu.max"}, failurePolicy="Ignore"), NO_FACTS, "validate")
    assert lenient.response["allowed"] is True
    assert "could not evaluate" in lenient.response["warnings"][0]
    # only policies that match the object decide: a Fail policy for another namespace does not deny
    elsewhere = policy_set({"rule": "gpu.max"}, failurePolicy="Fail", exclude={"namespaces": ["ml"]})
    unmatched = admit(request, elsewhere, NO_FACTS, "validate")
    assert (unmatched.verdict, unmatched.response) == ("skipped", {"uid": request.uid, "allowed": True})


def test_a_namespaced_policy_key_becomes_a_valid_audit_annotation_key(monkeypatch):
    result = RuleResult("team-a/soft", "gpu.max", Action.AUDIT, Outcome.WARN)
    decision = review_module.Decision(allowed=True, results=[result])
    monkeypatch.setattr(type(decision), "audit_annotations", property(lambda self: {"team-a/soft.gpu.max": "x"}))
    answer = review_module._answer(request_of(review(pytorchjob())), decision)
    assert answer.response["auditAnnotations"] == {"team-a_soft.gpu.max": "x"}


QUALIFIED_NAME_PART = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")  # k8s IsQualifiedName


def test_long_audit_annotation_keys_stay_valid_and_distinct():
    policy = "platform-team-gpu-governance-policy-for-all-training-workloads"
    keys = [review_module._annotation_key(f"{policy}.{rule}") for rule in ("gpu.limits", "pod-security.restricted")]
    assert len(set(keys)) == 2
    for key in keys:
        assert len(key) <= 63 and QUALIFIED_NAME_PART.match(key), key
        assert key.startswith("platform-team-gpu-governance")


# --- policy store ---------------------------------------------------------------------------------


def test_a_configmap_mount_is_read_once_through_its_visible_names(tmp_path):
    data = tmp_path / "..2026_01_01_00_00_00.000"
    data.mkdir()
    (data / "gpu.yaml").write_text(json.dumps(GPU_POLICY))
    os.symlink(data.name, tmp_path / "..data")
    os.symlink("..data/gpu.yaml", tmp_path / "gpu.yaml")
    store = PolicyStore([DirectorySource([tmp_path])])
    assert store.refresh() is True
    assert [p.key for p in store.current.policies] == ["gpu"]


def test_cluster_policies_join_the_set_and_a_broken_one_is_left_out_alone(tmp_path):
    (tmp_path / "gpu.yaml").write_text(json.dumps(GPU_POLICY))
    cluster = ClusterPolicySource()
    metrics = Metrics()
    store = PolicyStore([DirectorySource([tmp_path]), cluster], metrics)
    assert store.refresh() is True
    team = {"apiVersion": "mlgate.dev/v1alpha1", "kind": "MLPolicy",
            "metadata": {"name": "soft", "namespace": "team-a", "resourceVersion": "7", "uid": "u"},
            "spec": {"rules": [{"rule": "gpu.max", "action": "warn", "params": {"perContainer": 2}}]}}
    cluster.replace("MLPolicy", [team])
    assert store.refresh() is True
    assert [p.key for p in store.current.policies] == ["gpu", "team-a/soft"]
    cluster.apply("ClusterMLPolicy", "ADDED", change(GPU_POLICY, "/spec/rules/0/rule", "gpu.nope"))
    assert store.refresh() is False  # left out: the set in force is the same, no new generation
    assert store.current.generation == 2
    assert "cluster:ClusterMLPolicy/gpu" in store.errors[0] and "unknown rule" in store.errors[0]
    cluster.apply("ClusterMLPolicy", "MODIFIED", GPU_POLICY)
    assert store.refresh() is False
    assert any("also defined" in e for e in store.errors)  # the same name in a file and in the cluster
    assert [p.key for p in store.current.policies] == ["gpu", "team-a/soft"]
    cluster.apply("ClusterMLPolicy", "DELETED", GPU_POLICY)
    assert store.refresh() is False and store.errors == []
    assert metrics.policy_reload_errors._value.get() == 0  # the set was never rejected
    assert metrics.policy_last_reload_ok._value.get() == 1


def test_an_unchanged_source_is_not_compiled_again(tmp_path):
    (tmp_path / "gpu.yaml").write_text(json.dumps(GPU_POLICY))
    store = PolicyStore([DirectorySource([tmp_path])])
    assert store.refresh() is True
    assert store.refresh() is False
    assert store.current.generation == 1


def test_an_emptied_directory_is_a_set_of_its_own_only_when_allowed_and_generations_keep_counting(tmp_path):
    policy = tmp_path / "gpu.yaml"
    policy.write_text(json.dumps(GPU_POLICY))
    metrics = Metrics()
    store = PolicyStore([DirectorySource([tmp_path], allow_empty=True, settle=0)], metrics)
    assert store.refresh() is True
    policy.unlink()
    assert store.refresh() is False  # a change is loaded once two polls read it alike
    assert store.refresh() is True
    assert (store.current.policies, store.status()["generation"]) == ((), 2)
    policy.write_text(json.dumps(GPU_POLICY))
    store.refresh()
    assert store.refresh() is True
    assert store.status()["generation"] == 3 == metrics.policy_generation._value.get()


# --- facts cache ----------------------------------------------------------------------------------


def node(name: str, gpus: str = "8") -> dict:
    return {"kind": "Node", "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "A100"},
                                         "managedFields": [{"manager": "kubelet"}]},
            "spec": {"taints": []},
            "status": {"allocatable": {"nvidia.com/gpu": gpus}, "capacity": {"nvidia.com/gpu": gpus},
                       "images": [{"names": ["big"], "sizeBytes": 1}], "conditions": []}}


def storage_class(name: str, default: bool = False) -> dict:
    annotations = {"storageclass.kubernetes.io/is-default-class": "true"} if default else {}
    return {"kind": "StorageClass", "metadata": {"name": name, "annotations": annotations},
            "provisioner": f"{name}.csi.example"}


def test_facts_are_known_only_once_every_kind_was_listed():
    facts = WatchedFacts()
    for kind in ("Namespace", "PersistentVolumeClaim", "PersistentVolume", "StorageClass", "ResourceQuota",
                 "LimitRange", "PriorityClass", "TrainingRuntime", "ClusterTrainingRuntime", "LocalQueue",
                 "ClusterQueue", "ResourceClaimTemplate", "ResourceClaim", "DeviceClass", "ResourceSlice"):
        facts.replace(kind, [])
        assert facts.known is False
    facts.replace("Node", [node("a")])
    assert facts.known is True


def test_a_kind_the_api_server_does_not_serve_is_told_apart_from_one_with_no_objects():
    facts = WatchedFacts()
    facts.replace("LocalQueue", [])
    assert facts.serves("LocalQueue") is True  # Kueue installed, no queue yet: a queue name is then missing
    facts.unserved("LocalQueue")
    assert facts.serves("LocalQueue") is False  # no Kueue: the rules say they could not look
    facts.replace("LocalQueue", [{"metadata": {"name": "team", "namespace": "ml"}, "spec": {"clusterQueue": "q"}}])
    assert facts.serves("LocalQueue") is True  # installed later: listed again
    assert facts.lookup("LocalQueue", "ml", "team") == {
        "kind": "LocalQueue", "metadata": {"name": "team", "namespace": "ml"}, "spec": {"clusterQueue": "q"}}
    facts.apply("LocalQueue", "DELETED", {"metadata": {"name": "team", "namespace": "ml"}})
    assert facts.lookup("LocalQueue", "ml", "team") is None


def test_a_persistent_volume_is_kept_with_its_driver_and_modes_only():
    facts = WatchedFacts()
    pv = {"metadata": {"name": "s3-pv", "uid": "u", "managedFields": [{}]},
          "spec": {"accessModes": ["ReadWriteMany"], "capacity": {"storage": "1Ti"}, "mountOptions": ["allow-delete"],
                   "csi": {"driver": "s3.csi.aws.com", "volumeHandle": "h", "volumeAttributes": {"bucketName": "b"}}},
          "status": {"phase": "Available"}}
    facts.replace("PersistentVolume", [pv])
    nfs = {"metadata": {"name": "nfs-pv"}, "spec": {"nfs": {"server": "nas", "path": "/x"}}}
    facts.apply("PersistentVolume", "ADDED", nfs)
    assert facts.persistent_volume("s3-pv") == {
        "kind": "PersistentVolume", "metadata": {"name": "s3-pv"},
        "spec": {"accessModes": ["ReadWriteMany"], "csi": {"driver": "s3.csi.aws.com"}}}
    assert facts.persistent_volume("nfs-pv") == {"kind": "PersistentVolume", "metadata": {"name": "nfs-pv"},
                                                 "spec": {"nfs": {}}}
    facts.apply("PersistentVolume", "DELETED", nfs)
    assert facts.persistent_volume("nfs-pv") is None


def test_quota_events_replace_a_namespaces_quotas_one_by_one():
    facts = WatchedFacts()
    quota = {"metadata": {"name": "gpus", "namespace": "ml"}, "spec": {"hard": {"requests.nvidia.com/gpu": "8"}}}
    facts.replace("ResourceQuota", [quota])
    held = facts.resource_quotas("ml")  # a reader's list is never changed under it
    facts.apply("ResourceQuota", "MODIFIED", {**quota, "status": {"used": {"requests.nvidia.com/gpu": "6"}}})
    assert [q["status"]["used"] for q in facts.resource_quotas("ml")] == [{"requests.nvidia.com/gpu": "6"}]
    assert "status" not in held[0]
    facts.apply("ResourceQuota", "DELETED", quota)
    assert facts.resource_quotas("ml") == []


def test_watch_events_add_change_and_remove_facts():
    facts = WatchedFacts()
    facts.replace("Namespace", [{"metadata": {"name": "ml", "labels": {"team": "a"}}}])
    facts.apply("Namespace", "MODIFIED", {"metadata": {"name": "ml", "labels": {"team": "b"}}})
    facts.apply("Namespace", "ADDED", {"metadata": {"name": "other"}})
    facts.apply("Namespace", "DELETED", {"metadata": {"name": "other"}})
    facts.apply("Namespace", "BOOKMARK", {"metadata": {"resourceVersion": "9"}})
    assert facts.namespace_labels("ml") == {"team": "b"}
    assert facts.namespace_labels("other") is None
    facts.replace("PersistentVolumeClaim", [])
    facts.apply("PersistentVolumeClaim", "ADDED", {"metadata": {"name": "data", "namespace": "ml"},
                                                   "spec": {"accessModes": ["ReadWriteMany"]}})
    assert facts.pvc("ml", "data")["spec"] == {"accessModes": ["ReadWriteMany"]}
    facts.replace("StorageClass", [storage_class("fast"), storage_class("std", default=True)])
    assert facts.storage_class(None)["provisioner"] == "std.csi.example"
    facts.apply("StorageClass", "DELETED", storage_class("std", default=True))
    assert facts.storage_class(None) is None


def test_nodes_are_trimmed_and_readers_keep_a_stable_list():
    facts = WatchedFacts()
    facts.replace("Node", [node("a"), node("b")])
    before = facts.nodes()
    facts.apply("Node", "MODIFIED", node("a", gpus="4"))
    facts.apply("Node", "DELETED", node("b"))
    assert [n["metadata"]["name"] for n in before] == ["a", "b"]  # a reader's list never changes under it
    (a,) = facts.nodes()
    assert a["status"] == {"allocatable": {"nvidia.com/gpu": "4"}, "capacity": {"nvidia.com/gpu": "4"}}
    assert "managedFields" not in a["metadata"]


def test_a_reflector_lists_then_applies_watch_events_and_lists_again_after_410():
    from mlgate.kube.watch import Reflector

    calls: list[str] = []
    stop = threading.Event()
    events = [{"type": "ADDED", "object": {"metadata": {"name": "new", "resourceVersion": "11"}}},
              {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "old"}}]

    class Response:
        status = 200

        def __init__(self, lines: list[dict] | None = None, data: dict | None = None):
            self.lines, self.data = lines or [], json.dumps(data or {}).encode()

        def stream(self, amt=None, decode_content=True):
            text = "".join(json.dumps(line) + "\n" for line in self.lines).encode()
            yield from (text[i:i + 7] for i in range(0, len(text), 7))  # lines split across chunks

        def release_conn(self):
            calls.append("released")

    def get(path, query, timeout):
        assert path == "/api/v1/namespaces"
        if query.get("watch"):
            calls.append(f"watch@{query['resourceVersion']}")
            return Response(events)
        calls.append("list")
        if calls.count("list") == 2:
            stop.set()
        return Response(data={"metadata": {"resourceVersion": "10"}, "items": [{"metadata": {"name": "ml"}}]})

    facts = WatchedFacts()
    reflector = Reflector("Namespace", "/api/v1/namespaces", get, facts.replace, facts.apply, stop)
    reflector.start().join(timeout=10)
    assert calls == ["list", "watch@10", "released", "list"]
    assert facts.namespace_labels("ml") == {}
    assert facts.namespace_labels("new") is None  # the second LIST replaced what the watch had added


def test_a_reflector_backs_off_when_the_resource_is_not_served(caplog):
    from mlgate.kube.watch import ApiError, Reflector

    stop = threading.Event()

    def get(path, query, timeout):
        stop.set()
        raise ApiError(404, "not found")

    replaced: list[tuple[str, list]] = []
    reflector = Reflector("MLPolicy", "/apis/mlgate.dev/v1alpha1/mlpolicies", get,
                          lambda kind, items: replaced.append((kind, list(items))), lambda *a: None, stop)
    reflector.start().join(timeout=10)
    assert "is the CRD installed?" in caplog.text
    assert reflector.synced.is_set() and replaced == [("MLPolicy", [])]  # readiness never waits on a missing CRD


# --- TLS reloader ---------------------------------------------------------------------------------


def test_a_mismatched_pair_keeps_the_old_certificate_and_a_good_one_replaces_it(tmp_path: Path):
    pki = throwaway_pki(tmp_path)
    metrics = Metrics()
    reloader = CertReloader(pki.server_cert, pki.server_key, metrics)
    first = reloader.listener
    assert reloader.check() is False  # nothing changed
    other = throwaway_pki(tmp_path / "other")
    write_atomic(pki.server_key, other.server.key_pem(), private=True)
    assert reloader.check() is False
    assert "key" in reloader.last_error.lower() or "mismatch" in reloader.last_error.lower()
    assert reloader._current is first
    assert metrics.cert_reload_errors._value.get() == 1
    write_atomic(pki.server_cert, other.server.cert_pem())
    assert reloader.check() is True
    assert reloader._current is not first and reloader.last_error == ""
    assert metrics.cert_expiry._value.get() == other.server.not_after.replace(microsecond=0).timestamp()


def test_a_webhook_with_watched_facts_is_ready_only_once_they_are_listed():
    from mlgate_webhook.service import Service

    facts = WatchedFacts()
    store = PolicyStore([])
    store.refresh()
    service = Service(store, Metrics(), facts)
    ready, detail = service.readiness()
    assert not ready
    assert "cluster facts not synced" in detail["missing"]
    for kind in FACT_KINDS:
        facts.replace(kind, [])
    ready, detail = service.readiness()
    assert detail["missing"] == ["TLS not ready"]  # no TLS in this unit test; facts are no longer missing


def test_mutate_runs_only_the_mutations_of_the_set_in_force():
    from mlgate_webhook.review import mutations_only

    full = policy_set({"rule": "gpu.max"}, {"rule": "defaults.shm"})
    view = mutations_only(full)
    assert [b.rule.id for p in view.policies for b in p.bindings] == ["defaults.shm"]
    assert mutations_only(full) is view  # computed once per set
    assert mutations_only(policy_set({"rule": "gpu.max"})).policies == ()


def test_a_review_is_built_even_for_an_object_whose_metadata_is_not_a_mapping():
    broken = {"apiVersion": "mlgate.dev/v1alpha1", "kind": "MLPolicy", "metadata": "team-gpu", "spec": None}
    request = review_module.make_review(broken, namespace="ml", uid="u-1")["request"]
    assert (request["name"], request["namespace"], request["kind"]["group"]) == ("", "ml", "mlgate.dev")
