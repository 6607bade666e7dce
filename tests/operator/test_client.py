from typing import Any

import pytest

from mlgate_reconciler import client as client_module
from mlgate_reconciler.client import ApiError, KubeClient, rate_limited


def fake_transport(calls: list[str]) -> Any:
    def send(method: str, path: str, query: dict[str, str], body: Any, content_type: str) -> tuple[int, bytes]:
        calls.append(f"{method} {path}")
        return (404, b'{"message": "not found"}') if path.endswith("/gone") else (200, b"{}")

    return send


def test_the_token_bucket_lets_a_burst_through_then_waits_one_refill_per_request(monkeypatch: pytest.MonkeyPatch):
    slept: list[float] = []
    monkeypatch.setattr(client_module.time, "sleep", slept.append)
    calls: list[str] = []
    send = rate_limited(fake_transport(calls), qps=10, burst=2)
    for _ in range(4):
        send("GET", "/api/v1/pods", {}, None, "application/json")
    assert len(calls) == 4
    assert len(slept) == 2 and all(0.05 < s <= 0.1 for s in slept)


def test_every_write_is_counted_and_reported_by_verb_and_kind():
    seen: list[tuple[str, str]] = []
    kube = KubeClient(fake_transport([]), on_write=lambda verb, kind: seen.append((verb, kind)))
    kube.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "namespace": "ns"}})
    assert not kube.delete("v1", "Pod", "ns", "gone")
    assert kube.writes == {"create Pod": 1, "delete Pod": 1}
    assert seen == [("create", "Pod"), ("delete", "Pod")]


def test_a_missing_object_reads_as_none_and_other_errors_raise():
    kube = KubeClient(fake_transport([]))
    assert kube.get("v1", "Pod", "ns", "gone") is None
    with pytest.raises(ApiError):
        KubeClient(lambda *a: (500, b"boom")).get("v1", "Pod", "ns", "x")
