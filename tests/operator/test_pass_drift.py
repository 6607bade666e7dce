"""drift() compares Kubernetes quantities by value where the API types them as quantities, and nowhere else."""

from typing import Any

from mlgate_reconciler.children import drift, owned_fields
from mlgate_reconciler.reconcile import stall_backoff


def deployment(volume: dict[str, Any], env_value: str = "x") -> dict[str, Any]:
    container = {"name": "server", "env": [{"name": "CACHE", "value": env_value}]}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "sent-predictor", "labels": {}},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [container], "volumes": [volume]}}}}


def cache(size: str) -> dict[str, Any]:
    return {"name": "cache", "emptyDir": {"sizeLimit": size}}


def test_an_emptydir_size_limit_stored_in_canonical_form_is_no_drift():
    assert not drift(owned_fields(deployment(cache("1.5Gi"))), deployment(cache("1536Mi")))


def test_a_changed_emptydir_size_limit_is_drift():
    assert drift(owned_fields(deployment(cache("1.5Gi"))), deployment(cache("2Gi")))


def test_an_env_value_that_looks_like_a_quantity_is_compared_as_a_string():
    live = deployment(cache("1Gi"), env_value="1536Mi")
    assert drift(owned_fields(deployment(cache("1Gi"), env_value="1.5Gi")), live)


def test_pod_overhead_and_a_podgroups_min_resources_compare_by_value():
    assert not drift({"spec": {"overhead": {"memory": "0.5Gi"}}}, {"spec": {"overhead": {"memory": "512Mi"}}})
    assert not drift({"spec": {"minResources": {"cpu": 0.5}}}, {"spec": {"minResources": {"cpu": "500m"}}})


def test_an_hpa_target_average_value_compares_by_value_but_a_metric_name_does_not():
    wanted = {"target": {"type": "AverageValue", "averageValue": "1.5k"}, "name": "1k"}
    assert not drift(wanted, {"target": {"type": "AverageValue", "averageValue": "1500"}, "name": "1k"})
    assert drift(wanted, {"target": {"type": "AverageValue", "averageValue": "1500"}, "name": "1000"})


def stalled(reason: str, since: str) -> dict[str, Any]:
    return {"conditions": [{"type": "Stalled", "status": "True", "reason": reason, "lastTransitionTime": since}]}


def test_a_refused_create_is_retried_after_as_long_as_it_has_been_stalled_within_5_s_and_5_min():
    assert stall_backoff(stalled("NameConflict", "2026-01-01T00:00:00Z"), "2026-01-01T00:00:01Z") == 5.0
    assert stall_backoff(stalled("NameConflict", "2026-01-01T00:00:00Z"), "2026-01-01T00:00:40Z") == 40.0
    assert stall_backoff(stalled("ChildRefused", "2026-01-01T00:00:00Z"), "2026-01-01T02:00:00Z") == 300.0


def test_other_stalls_keep_their_own_requeue():
    assert stall_backoff(stalled("QuotaExceeded", "2026-01-01T00:00:00Z"), "2026-01-01T00:00:40Z") is None
    assert stall_backoff({}, "2026-01-01T00:00:40Z") is None
