"""The webhook's side of MLPolicyExceptions, without a cluster: the store fed by watch events (plain dicts), and
admission of MLPolicyException objects and of the jobs they cover."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from builders import change, job, policy_set

from mlgate.model.facts import NO_FACTS
from mlgate_webhook.exception_store import ClusterExceptionSource, ExceptionStore
from mlgate_webhook.review import _request, admit, make_review

RULE = "pod-security.baseline"
NOW = datetime(2030, 1, 1, tzinfo=UTC)
EXCEPTION: dict[str, Any] = {
    "apiVersion": "mlgate.dev/v1alpha1", "kind": "MLPolicyException",
    "metadata": {"name": "net-admin", "namespace": "ml", "generation": 1},
    "spec": {"policy": "test", "rules": [RULE], "match": {"names": ["train"]},
             "expiresAt": "2031-01-01T00:00:00Z", "reason": "RDMA (NET-1234)"},
}
JOB = change(job(), "/spec/template/spec/containers/0/securityContext/capabilities/add", ["NET_ADMIN"])


def store_with(*objects: dict[str, Any]) -> tuple[ClusterExceptionSource, ExceptionStore]:
    source = ClusterExceptionSource()
    source.replace("MLPolicyException", list(objects))
    store = ExceptionStore(source)
    store.refresh()
    return source, store


def test_the_store_loads_what_the_watch_listed():
    _, store = store_with(EXCEPTION)
    assert store.status() == {"inForce": ["ml/net-admin"], "synced": True, "lastError": []}


def test_a_broken_update_is_reported_and_the_last_good_version_stays():
    source, store = store_with(EXCEPTION)
    broken = change(change(EXCEPTION, "/spec/expiresAt", "soon"), "/metadata/generation", 2)
    source.apply("MLPolicyException", "MODIFIED", broken)
    store.refresh()
    assert [e.expires_at.year for e in store.current] == [2031]
    assert store.errors == ["cluster:MLPolicyException/ml/net-admin: spec.expiresAt: must be an RFC 3339 date-time "
                            "such as 2030-01-31T00:00:00Z, not 'soon'"]
    assert source.load_errors[("MLPolicyException", "ml", "net-admin")][0].field == "spec.expiresAt"


def test_a_broken_exception_never_loaded_is_reported_and_holds_back_no_other():
    other = change(change(EXCEPTION, "/metadata/name", "other"), "/spec/reason", "")
    _, store = store_with(EXCEPTION, other)
    assert store.status()["inForce"] == ["ml/net-admin"]
    assert len(store.errors) == 1


def test_a_deleted_exception_leaves_the_set():
    source, store = store_with(EXCEPTION)
    source.apply("MLPolicyException", "DELETED", EXCEPTION)
    assert store.refresh() and store.current == ()


def review_of(obj: dict[str, Any], store: ExceptionStore, allow: Any = True) -> dict[str, Any]:
    request = _request(make_review(obj)["request"])
    policies = policy_set({"rule": RULE}, allowExceptions=allow)
    return admit(request, policies, NO_FACTS, "validate", exceptions=store.at(NOW)).response


def test_a_covered_job_is_admitted_with_a_warning_naming_the_exception():
    response = review_of(JOB, store_with(EXCEPTION)[1])
    assert response["allowed"] is True
    assert response["warnings"] == [f"[test/{RULE}] excepted by ml/net-admin until 2031-01-01T00:00:00Z "
                                    "(MLPolicyException)"]


def test_the_policy_in_force_decides_even_for_an_exception_stored_before_it_was_tightened():
    response = review_of(JOB, store_with(EXCEPTION)[1], allow=False)
    assert response["allowed"] is False


def test_an_exception_object_the_policy_does_not_allow_is_refused():
    response = review_of(EXCEPTION, store_with()[1], allow=False)
    assert response["allowed"] is False
    assert response["status"]["message"] == (
        "cluster:MLPolicyException/ml/net-admin: spec.rules[0]: policy 'test' allows no exceptions "
        f"(allowExceptions: false), so '{RULE}' cannot be excepted")


def test_an_exception_object_the_policy_allows_is_admitted():
    assert review_of(EXCEPTION, store_with()[1])["allowed"] is True
