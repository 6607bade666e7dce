"""Reading a cluster, one function at a time, with a stand-in `get` that answers as the API server does."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from mlgate.kube.facts import read_facts, trim
from mlgate.kube.listing import Wanted, list_items, served
from mlgate.kube.stored import KindFilterError, controlled_by_judged, opted_out, wanted_kinds
from mlgate.kube.watch import ApiError
from mlgate.workloads.catalog import SHIPPED


@dataclass
class Answer:
    status: int
    data: bytes

    def stream(self, amt=None, decode_content=True):
        yield self.data

    def release_conn(self):
        pass


class Server:
    """Paths to JSON bodies; a LIST is cut into pages of `limit` with continue tokens."""

    def __init__(self, bodies):
        self.bodies, self.calls = bodies, []

    def __call__(self, path, query, timeout):
        self.calls.append((path, dict(query)))
        if path not in self.bodies:
            raise ApiError(404, "the server could not find the requested resource")
        body = self.bodies[path]
        if "items" in body and "limit" in query:
            start, limit = int(query.get("continue") or 0), int(query["limit"])
            page = body["items"][start:start + limit]
            more = start + limit < len(body["items"])
            body = {"items": page, "metadata": {"continue": str(start + limit) if more else ""}}
        return Answer(200, json.dumps(body).encode())


def job(name, namespace="team-a"):
    return {"metadata": {"name": name, "namespace": namespace}}


def test_a_list_of_five_items_in_pages_of_two_takes_three_requests():
    server = Server({"/apis/batch/v1/jobs": {"items": [job(f"j{i}") for i in range(5)]}})
    names = [i["metadata"]["name"] for i in list_items(server, "/apis/batch/v1/jobs", page=2)]
    assert names == ["j0", "j1", "j2", "j3", "j4"]
    assert [q.get("continue") for _, q in server.calls] == [None, "2", "4"]


DISCOVERY = {
    "/api": {"versions": ["v1"]},
    "/apis": {"groups": [{"name": "batch", "versions": [{"version": "v1"}], "preferredVersion": {"version": "v1"}},
                         {"name": "kubeflow.org", "versions": [{"version": "v1"}]}]},
    "/api/v1": {"resources": [{"name": "pods", "kind": "Pod", "namespaced": True, "verbs": ["list", "get"]}]},
    "/apis/batch/v1": {"resources": [{"name": "jobs", "kind": "Job", "namespaced": True, "verbs": ["list"]}]},
    "/apis/kubeflow.org/v1": {"resources": [{"name": "tfjobs", "kind": "TFJob", "namespaced": True,
                                             "verbs": ["list"]}]},
}


def test_discovery_serves_the_kinds_the_api_server_lists_and_names_the_others():
    wanted = [Wanted("batch", "Job", "jobs", ("v1",)), Wanted("kubeflow.org", "PyTorchJob", "pytorchjobs", ("v1",)),
              Wanted("ray.io", "RayCluster", "rayclusters", ("v1",)), Wanted("", "Pod", "pods", ("v1",))]
    found, missing = served(Server(DISCOVERY), wanted)
    assert [(s.kind, s.path("ns")) for s in found] == [("Job", "/apis/batch/v1/namespaces/ns/jobs"),
                                                       ("Pod", "/api/v1/namespaces/ns/pods")]
    assert [m.kind for m in missing] == ["PyTorchJob", "RayCluster"]


def test_kinds_named_without_a_group_mean_every_kind_of_that_name():
    both = wanted_kinds(SHIPPED, ["job"])
    assert sorted(w.group for w in both) == ["batch", "batch.volcano.sh"]
    assert [w.group for w in wanted_kinds(SHIPPED, ["Job.batch"])] == ["batch"]


def test_a_kind_no_description_knows_is_refused_with_the_known_ones():
    with pytest.raises(KindFilterError, match=r"no kind 'Jobb' is known; one of: .*PyTorchJob"):
        wanted_kinds(SHIPPED, ["Jobb"])


def test_a_job_s_pod_is_judged_through_its_job_but_a_pod_of_an_unknown_owner_on_its_own():
    by_job = {"metadata": {"ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "controller": True}]}}
    by_other = {"metadata": {"ownerReferences": [{"apiVersion": "example.com/v1", "kind": "Thing",
                                                  "controller": True}]}}
    assert controlled_by_judged(by_job, SHIPPED) is True
    assert controlled_by_judged(by_other, SHIPPED) is False


def test_only_the_ignore_label_set_to_true_opts_a_namespace_out():
    assert opted_out({"mlgate.dev/ignore": "true"}) is True
    assert opted_out({"mlgate.dev/ignore": "false"}) is False
    assert opted_out(None) is False


def test_a_fact_keeps_the_annotations_rules_read_and_drops_the_others():
    claim = {"metadata": {"name": "c", "namespace": "a", "managedFields": [{}], "annotations": {
        "volume.kubernetes.io/storage-provisioner": "ebs.csi.aws.com",
        "kubectl.kubernetes.io/last-applied-configuration": '{"secret": "x"}'}}, "spec": {}}
    assert trim("PersistentVolumeClaim", claim)["metadata"] == {
        "name": "c", "namespace": "a", "annotations": {"volume.kubernetes.io/storage-provisioner": "ebs.csi.aws.com"}}


def test_facts_of_a_kind_not_served_are_none_and_said_so():
    notes: list[str] = []
    server = Server({"/api/v1/namespaces": {"items": [{"metadata": {"name": "a", "labels": {"t": "1"}}}]},
                     **{p: {"items": []} for p in ("/api/v1/persistentvolumeclaims", "/api/v1/persistentvolumes",
                                                  "/apis/storage.k8s.io/v1/storageclasses", "/api/v1/nodes",
                                                  "/api/v1/resourcequotas", "/api/v1/limitranges",
                                                  "/apis/scheduling.k8s.io/v1/priorityclasses")}})
    unserved: set[str] = set()
    objects = list(read_facts(server, notes, unserved))
    assert objects == [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a", "labels": {"t": "1"}}}]
    assert notes[:3] == ["TrainingRuntime (trainer.kubeflow.org/v1alpha1) is not served: none in the facts",
                         "ClusterTrainingRuntime (trainer.kubeflow.org/v1alpha1) is not served: none in the facts",
                         "LocalQueue (kueue.x-k8s.io/v1beta2) is not served: none in the facts"]
    assert unserved == {"TrainingRuntime", "ClusterTrainingRuntime", "LocalQueue", "ClusterQueue",
                        "ResourceClaimTemplate", "ResourceClaim", "DeviceClass", "ResourceSlice"}


def test_a_resource_slice_keeps_where_its_devices_are_and_their_names_only():
    published = {"metadata": {"name": "n1-gpu", "managedFields": [{}]},
                 "spec": {"driver": "gpu.nvidia.com", "nodeName": "n1", "pool": {"name": "n1", "generation": 3},
                          "devices": [{"name": "gpu-0", "attributes": {"uuid": {"string": "GPU-1"}},
                                       "capacity": {"memory": {"value": "80Gi"}}}]}}
    assert trim("ResourceSlice", published) == {
        "kind": "ResourceSlice", "metadata": {"name": "n1-gpu"},
        "spec": {"driver": "gpu.nvidia.com", "nodeName": "n1", "pool": {"name": "n1", "generation": 3},
                 "devices": [{"name": "gpu-0"}]}}


def test_a_forbidden_fact_kind_is_an_error_not_an_empty_list():
    def forbidden(path, query, timeout):
        raise ApiError(403, "nodes is forbidden")

    with pytest.raises(ApiError, match="403"):
        list(read_facts(forbidden, []))
