"""The controller's passes read from its informers' cache (cache.py): once a job is materialized, a pass over it
sends no request at all, and a child deleted by hand is still recreated, within the controller, from the
watch event alone."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from control_plane import ControlPlane, wait_for
from e2e_objects import in_namespace, trainingjob

from mlgate.engine import PolicySet
from mlgate.kube.watch import api_get
from mlgate_reconciler.client import KubeClient, Transport
from mlgate_reconciler.controller import Controller
from mlgate_reconciler.metrics import ReconcilerMetrics

pytestmark = pytest.mark.e2e
WAIT = 30.0
JOB = "llm"


def counted(transport: Transport, seen: Counter[str]) -> Transport:
    def send(method: str, path: str, query: dict[str, str], body: Any, content_type: str) -> tuple[int, bytes]:
        seen[f"{method} {path}"] += 1
        return transport(method, path, query, body, content_type)

    return send


@pytest.fixture
def running(cluster: ControlPlane, namespace: str, transport: Transport,
            policies: PolicySet) -> Iterator[tuple[Controller, Counter[str]]]:
    seen: Counter[str] = Counter()
    controller = Controller(KubeClient(counted(transport, seen)), api_get(str(cluster.kubeconfig), False), policies,
                            ReconcilerMetrics(), namespace=namespace, workers=1, resync=3600)
    stop = threading.Event()
    thread = threading.Thread(target=controller.serve, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_for("the informers", controller.synced, WAIT)
        yield controller, seen
    finally:
        stop.set()
        thread.join(WAIT)


def settled(controller: Controller, seen: Counter[str]) -> bool:
    """Nothing queued and no request sent for half a second."""
    before = sum(seen.values())
    threading.Event().wait(0.5)
    return not len(controller.queue) and sum(seen.values()) == before


def phase(admin: KubeClient, namespace: str) -> str | None:
    job = admin.get("mlgate.dev/v1alpha1", "TrainingJob", namespace, JOB) or {}
    return (job.get("status") or {}).get("phase")


def test_a_pass_over_a_materialized_job_sends_no_request(
        cluster: ControlPlane, namespace: str, transport: Transport,
        running: tuple[Controller, Counter[str]]) -> None:
    controller, seen = running
    admin = KubeClient(transport)
    cluster.kubectl("create", "-f", "-", stdin=in_namespace(trainingjob(JOB), namespace)).check()
    wait_for("the job to be Created", lambda: phase(admin, namespace) == "Created", WAIT)
    wait_for("the controller to settle", lambda: settled(controller, seen), WAIT)
    before = Counter(seen)
    controller.process(("TrainingJob", namespace, JOB))
    sent = Counter(seen)
    sent.subtract(before)
    assert +sent == Counter()
    assert phase(admin, namespace) == "Created"


def test_a_pod_deleted_by_hand_comes_back_from_the_watch_event_alone(
        cluster: ControlPlane, namespace: str, transport: Transport,
        running: tuple[Controller, Counter[str]]) -> None:
    controller, seen = running
    admin = KubeClient(transport)
    cluster.kubectl("create", "-f", "-", stdin=in_namespace(trainingjob(JOB), namespace)).check()
    wait_for("the job to be Created", lambda: phase(admin, namespace) == "Created", WAIT)
    wait_for("the controller to settle", lambda: settled(controller, seen), WAIT)
    pod, creates = "llm-worker-0", f"POST /api/v1/namespaces/{namespace}/pods"
    uid = (admin.get("v1", "Pod", namespace, pod) or {})["metadata"]["uid"]
    before = seen[creates]
    admin.delete("v1", "Pod", namespace, pod)

    def recreated() -> bool:
        again = admin.get("v1", "Pod", namespace, pod)
        return again is not None and again["metadata"]["uid"] != uid

    wait_for(f"{pod} to be recreated", recreated, WAIT)
    assert seen[creates] - before == 1  # the deleted pod only: the others were read from the cache, not created
