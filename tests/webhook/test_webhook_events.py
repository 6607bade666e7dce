"""Warning Events on denials only where nobody else tells the object's owner: a request a controller (a service
account) sent, not a dry run, not mlgate's own reconciler. The Event regards the controlling owner, is sent once
per owner and message in a window, and is paced. The e2e test has the real API server store the Event that the
running webhook records, and `kubectl get events` show it."""

from __future__ import annotations

import copy
import json
import re
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from builders import change, pytorchjob
from webhook_harness import TEST_POLICIES, TLSFiles, client, start_webhook
from webhook_load import wait_until
from webhook_reviews import encode, review

from mlgate_webhook.events import DenialEvents, denial_event, reported_elsewhere
from mlgate_webhook.metrics import Metrics
from mlgate_webhook.review import Admission, parse_review
from mlgate_webhook.server import ServeOptions, Webhook

GPU = "/spec/pytorchReplicaSpecs/Worker/template/spec/containers/0/resources/{}/nvidia.com~1gpu"
CONTROLLER_USER = "system:serviceaccount:ml:argo-workflow"
OWNER = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": "nightly-train", "uid": "u-wf",
         "controller": True}
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def greedy_job(owned: bool = True) -> dict[str, Any]:
    job = change(change(pytorchjob(), GPU.format("limits"), 16), GPU.format("requests"), 16)
    if owned:
        job["metadata"]["ownerReferences"] = [OWNER]
    return job


def request_from(user: str, obj: dict[str, Any] | None = None, *, dry_run: bool = False,
                 namespace: str = "ml") -> dict[str, Any]:
    body = review(obj or greedy_job(), dry_run=dry_run)
    body["request"]["userInfo"]["username"] = user
    body["request"]["namespace"] = namespace
    return body


def denied(user: str = CONTROLLER_USER, **kwargs: Any) -> Admission:
    request = parse_review(encode(request_from(user, **kwargs)), "application/json")
    message = "[gpu/gpu.max] too many gpus per container: container \"pytorch\" asks for 16 GPUs, the limit is 8"
    return Admission(request, {"uid": request.uid, "allowed": False, "status": {"code": 403, "message": message}},
                     "denied")


# --- who needs an Event --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("user", "kwargs", "why"), [
    ("alice@example.com", {}, "the sender reads the denial in the API server's answer"),
    (CONTROLLER_USER, {"dry_run": True}, "a dry run"),
    ("system:serviceaccount:mlgate-system:mlgate-reconciler", {},
     "mlgate's reconciler records its refusals on the owner"),
    (CONTROLLER_USER, {"namespace": ""}, "a cluster-scoped object has no namespace to hold an Event"),
])
def test_no_event_where_someone_already_tells_the_owner(user, kwargs, why):
    assert reported_elsewhere(denied(user, **kwargs).request) == why


def test_a_denial_a_controller_received_needs_an_event():
    assert reported_elsewhere(denied().request) is None
    assert reported_elsewhere(denied("system:kube-controller-manager").request) is None


# --- the Event -----------------------------------------------------------------------------------------------

def test_the_event_regards_the_controlling_owner_and_says_who_was_denied_what():
    event = denial_event(denied(), datetime(2026, 11, 27, 1, 2, 3, 456789, tzinfo=UTC), "mlgate-webhook-7d9f")
    assert event["apiVersion"] == "events.k8s.io/v1" and event["type"] == "Warning"
    assert event["reason"] == "AdmissionDenied" and event["action"] == "Create"
    assert event["regarding"] == {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": "nightly-train",
                                  "namespace": "ml", "uid": "u-wf"}
    assert event["metadata"]["namespace"] == "ml" and event["eventTime"] == "2026-11-27T01:02:03.456789Z"
    assert event["note"].startswith(f"mlgate denied creating PyTorchJob mnist (sent by {CONTROLLER_USER}): "
                                    "[gpu/gpu.max] too many gpus per container")
    assert DNS_SUBDOMAIN.fullmatch(event["metadata"]["name"]) and event["metadata"]["name"].startswith("nightly-train.")


def test_without_an_owner_the_event_regards_the_object_even_a_generated_name():
    job = greedy_job(owned=False)
    job["metadata"] = {"generateName": "mnist-", "namespace": "ml"}
    event = denial_event(denied(obj=job), datetime.now(UTC), "w")
    assert event["regarding"] == {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "mnist-",
                                  "namespace": "ml"}
    assert DNS_SUBDOMAIN.fullmatch(event["metadata"]["name"]) and event["metadata"]["name"].startswith("mnist.")


def test_a_long_message_is_cut_to_what_the_api_server_takes():
    admission = denied()
    admission.response["status"]["message"] = "é" * 2000
    note = denial_event(admission, datetime.now(UTC), "w")["note"]
    assert len(note.encode()) <= 1024 and note.endswith("...")


# --- pacing ----------------------------------------------------------------------------------------------------

class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def recorder(post=None, **kwargs) -> tuple[DenialEvents, list[dict[str, Any]], Clock, Metrics]:
    sent: list[dict[str, Any]] = []
    clock, metrics = Clock(), Metrics()
    events = DenialEvents(post or (lambda namespace, event: sent.append(event)), metrics, "w", clock=clock, **kwargs)
    return events, sent, clock, metrics


def test_a_controller_retrying_a_refused_create_gets_one_event_per_window():
    events, sent, clock, metrics = recorder(window=600)
    assert [events.denied(denied()) for _ in range(5)] == [True, False, False, False, False]
    clock.now += 601
    assert events.denied(denied())
    events.send_pending()
    assert len(sent) == 2
    assert metrics.denial_events.labels("recorded")._value.get() == 2
    assert metrics.denial_events.labels("skipped")._value.get() == 4


def test_events_are_paced_by_a_token_bucket():
    events, _, clock, _ = recorder(rate=1.0, burst=3)
    owners = [dict(OWNER, name=f"wf-{i}") for i in range(5)]
    jobs = [greedy_job() for _ in owners]
    for job, owner in zip(jobs, owners, strict=True):
        job["metadata"]["ownerReferences"] = [owner]
    assert [events.denied(denied(obj=j)) for j in jobs] == [True, True, True, False, False]
    clock.now += 1.0
    assert events.denied(denied(obj=jobs[4]))


def test_a_refused_event_is_counted_and_never_retried():
    def refuse(namespace: str, event: dict[str, Any]) -> None:
        raise RuntimeError("403 Forbidden: events.events.k8s.io is forbidden")

    events, _, _, metrics = recorder(post=refuse)
    assert events.denied(denied())
    events.send_pending()
    events.send_pending()
    assert metrics.denial_events.labels("error")._value.get() == 1 and not events.pending


# --- through the running webhook -----------------------------------------------------------------------------

def test_the_running_webhook_records_an_event_for_a_controller_and_none_for_a_person(tls_files: TLSFiles):
    webhook = start_webhook(tls_files, [TEST_POLICIES])
    sent: list[dict[str, Any]] = []
    webhook.service.events = DenialEvents(lambda namespace, event: sent.append(event), webhook.metrics, "w")
    webhook.service.events.start()
    try:
        with client(webhook, tls_files) as http:
            for user in ("alice@example.com", CONTROLLER_USER):
                answer = http.post("/validate", content=encode(request_from(user)),
                                   headers={"content-type": "application/json"}).json()["response"]
                assert answer["allowed"] is False
        wait_until(lambda: len(sent) == 1, what="the controller's Event")
        assert sent[0]["regarding"]["name"] == "nightly-train" and CONTROLLER_USER in sent[0]["note"]
    finally:
        webhook.service.events.stop()
        webhook.stop()


# --- against the real API server -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def api_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))
    from control_plane import started_plane

    plane = started_plane(tmp_path_factory.mktemp("events-control-plane"))
    yield plane
    plane.stop()


@pytest.mark.e2e
def test_the_api_server_stores_the_event_the_webhook_records_and_kubectl_shows_it(api_server, tls_files, tmp_path):
    api_server.kubectl("create", "namespace", "ml").check()
    options = ServeOptions(port=0, cert_file=tls_files.cert, key_file=tls_files.key,
                           policy_paths=(str(TEST_POLICIES),), kubeconfig=str(api_server.kubeconfig),
                           state_dir=tmp_path)
    webhook = Webhook(options)
    webhook.start()
    try:
        with client(webhook, tls_files) as http:
            wait_until(lambda: http.get("/readyz").status_code == 200, what="the webhook ready", seconds=30)
            person, dry_run = request_from("alice@example.com"), request_from(CONTROLLER_USER, dry_run=True)
            for body in (person, dry_run, request_from(CONTROLLER_USER), request_from(CONTROLLER_USER)):
                answer = http.post("/validate", content=encode(copy.deepcopy(body)),
                                   headers={"content-type": "application/json"}).json()["response"]
                assert answer["allowed"] is False

        def listed() -> list[dict[str, Any]]:
            result = api_server.kubectl("get", "events.events.k8s.io", "-n", "ml", "-o", "json").check()
            return json.loads(result.stdout)["items"]

        wait_until(lambda: listed() != [], what="the Event stored", seconds=15)
        (event,) = listed()
        assert event["type"] == "Warning" and event["reason"] == "AdmissionDenied"
        assert event["regarding"]["kind"] == "Workflow" and event["regarding"]["name"] == "nightly-train"
        assert event["reportingController"] == "mlgate.dev/webhook"
        assert webhook.metrics.denial_events.labels("recorded")._value.get() == 1
        shown = api_server.kubectl("get", "events", "-n", "ml", "--field-selector", "type=Warning").check().stdout
        assert "AdmissionDenied" in shown and "workflow/nightly-train" in shown.lower()
    finally:
        webhook.stop()
