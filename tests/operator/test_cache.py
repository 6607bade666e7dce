"""The informers' cache the passes read from (cache.py): filled by LIST and watch events, written through by the
client, never older than what it holds. The API stand-in answers one function's reads, nothing else."""

from __future__ import annotations

from typing import Any

import pytest

from mlgate_reconciler.cache import Cache, shrink
from mlgate_reconciler.client import ApiError, KubeClient
from mlgate_reconciler.results import PassResult, requeue_on_conflict

PODS = ("v1", "Pod", "mlgate.dev/job-name")
JOBS = ("mlgate.dev/v1alpha1", "TrainingJob", "")


class Api:
    """Counts the reads that reach it; answers with nothing."""

    def __init__(self) -> None:
        self.reads: list[str] = []

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads.append(f"GET {kind}/{name}")
        return None

    def list(self, api_version: str, kind: str, namespace: str, selector: str = "") -> list[dict[str, Any]]:
        self.reads.append(f"LIST {kind}")
        return []


def pod(name: str, version: str, job: str = "llm", **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "team", "resourceVersion": version,
                         "labels": {"mlgate.dev/job-name": job}, **meta},
            "spec": {"nodeName": "node-1", "containers": [{"name": "main", "image": "trainer:1"}]},
            "status": {"phase": "Running"}}


def cache_of(api: Api) -> Cache:
    return Cache(api)  # type: ignore[arg-type]  # the stand-in has the reads Cache makes of its client


def test_a_listed_collection_answers_without_asking_the_api() -> None:
    api = Api()
    cache = cache_of(api)
    cache.replace(PODS, [pod("llm-worker-0", "5"), pod("other-worker-0", "6", job="other")])
    listed = cache.list("v1", "Pod", "team", "mlgate.dev/job-name=llm")
    assert ([p["metadata"]["name"] for p in listed], api.reads) == (["llm-worker-0"], [])


def test_a_collection_not_listed_yet_is_read_from_the_api() -> None:
    api = Api()
    cache = cache_of(api)
    assert cache.list("v1", "Pod", "team", "mlgate.dev/job-name=llm") == []
    assert cache.get("v1", "Secret", "team", "llm-ssh") is None
    assert api.reads == ["LIST Pod", "GET Secret/llm-ssh"]


def test_a_watch_event_older_than_the_object_held_changes_nothing() -> None:
    cache = cache_of(Api())
    cache.replace(PODS, [])
    cache.written(pod("llm-worker-0", "12"))  # our own create's answer
    cache.event(PODS, "MODIFIED", {**pod("llm-worker-0", "11"), "status": {"phase": "Pending"}})
    held, = cache.list("v1", "Pod", "team", "mlgate.dev/job-name=llm")
    assert (held["metadata"]["resourceVersion"], held["status"]["phase"]) == ("12", "Running")


def test_a_deleted_object_does_not_come_back_with_a_late_event() -> None:
    cache = cache_of(Api())
    cache.replace(PODS, [pod("llm-worker-0", "5")])
    cache.event(PODS, "DELETED", pod("llm-worker-0", "9"))
    cache.event(PODS, "MODIFIED", pod("llm-worker-0", "7"))
    assert cache.list("v1", "Pod", "team", "mlgate.dev/job-name=llm") == []


def test_a_delete_the_client_sent_marks_the_object_as_being_deleted_until_the_watch_says_more() -> None:
    cache = cache_of(Api())
    cache.replace(PODS, [pod("llm-worker-0", "5")])
    cache.deleted("v1", "Pod", "team", "llm-worker-0")
    held, = cache.list("v1", "Pod", "team", "mlgate.dev/job-name=llm")
    assert held["metadata"].get("deletionTimestamp")
    cache.event(PODS, "DELETED", pod("llm-worker-0", "6"))
    assert cache.list("v1", "Pod", "team", "mlgate.dev/job-name=llm") == []


def test_a_write_through_reaches_only_the_collections_that_watch_the_object() -> None:
    cache = cache_of(Api())
    cache.replace(PODS, [])
    cache.replace(JOBS, [])
    cache.written({**pod("stray", "3"), "metadata": {"name": "stray", "namespace": "team", "resourceVersion": "3"}})
    job = {"apiVersion": "mlgate.dev/v1alpha1", "kind": "TrainingJob",
           "metadata": {"name": "llm", "namespace": "team", "resourceVersion": "4"}, "status": {"phase": "Created"}}
    cache.written(job)
    assert cache.list("v1", "Pod", "team", "mlgate.dev/job-name=llm") == []  # unlabelled: not one of ours
    assert (cache.get("mlgate.dev/v1alpha1", "TrainingJob", "team", "llm") or {}).get("status") == {"phase": "Created"}


def test_what_a_reader_changes_in_its_copy_never_reaches_the_cache() -> None:
    cache = cache_of(Api())
    cache.replace(JOBS, [{"metadata": {"name": "llm", "namespace": "team", "resourceVersion": "4"},
                          "status": {"phase": "Created"}}])
    copy = cache.get("mlgate.dev/v1alpha1", "TrainingJob", "team", "llm") or {}
    copy["status"]["phase"] = "Failed"
    assert (cache.get("mlgate.dev/v1alpha1", "TrainingJob", "team", "llm") or {})["status"]["phase"] == "Created"


def test_a_cached_pod_keeps_no_managed_fields_and_only_the_spec_field_a_pass_reads() -> None:
    shrunk = shrink({**pod("llm-worker-0", "5"), "metadata": {"name": "llm-worker-0", "managedFields": [{}]}})
    assert (shrunk["metadata"], shrunk["spec"], shrunk["status"]) == (
        {"name": "llm-worker-0"}, {"nodeName": "node-1"}, {"phase": "Running"})


def test_the_client_hands_every_write_answer_and_every_delete_to_its_observer() -> None:
    answers = {"POST": b'{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "resourceVersion": "8"}}',
               "DELETE": b"{}"}
    client = KubeClient(lambda method, path, query, body, content_type: (200, answers[method]))
    seen: list[Any] = []

    class Observer:
        def written(self, obj: dict[str, Any]) -> None:
            seen.append(obj["metadata"]["resourceVersion"])

        def deleted(self, api_version: str, kind: str, namespace: str, name: str) -> None:
            seen.append(f"deleted {kind}/{name}")

    client.observer = Observer()
    client.create(pod("p", ""))
    client.delete("v1", "Pod", "team", "p")
    assert seen == ["8", "deleted Pod/p"]


def test_requeue_on_conflict_ends_the_block_on_a_409_and_asks_for_another_pass() -> None:
    result = PassResult()
    with requeue_on_conflict(result) as conflict:
        raise ApiError(409, "the object has been modified")
    assert (conflict.lost, result.requeue) == (True, True)


def test_requeue_on_conflict_lets_any_other_error_through() -> None:
    result = PassResult()
    with pytest.raises(ApiError), requeue_on_conflict(result, 404):
        raise ApiError(500, "etcdserver: request timed out")
    assert not result.requeue
