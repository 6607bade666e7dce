"""Never stall: a review is judged within a deadline just under the webhooks' timeoutSeconds, and past it the work
is abandoned (not finished in the background) and the policies' failure mode answers; large reviews are judged
one at a time, off the event loop, so probes and small reviews keep their latency."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from typing import Any

import pytest
from webhook_harness import FAST, TLSFiles, client, start_webhook
from webhook_reviews import review

from mlgate.engine import DeadlineExceeded, evaluate
from mlgate.loading.policies import default_policy_dir, load_policy_paths
from mlgate.model.facts import NO_FACTS
from mlgate_webhook.review import admit, parse_review
from tests.limits.test_linear_evaluation import trainingjob_overlay

SHIPPED = load_policy_paths([default_policy_dir()])


def privileged(containers: int) -> dict[str, Any]:
    job = trainingjob_overlay(containers)
    job["spec"]["template"]["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    return job


def test_the_engine_stops_at_the_first_rule_past_its_deadline() -> None:
    job = privileged(40_000)  # about 3 s to judge whole
    start = time.process_time()
    with pytest.raises(DeadlineExceeded):
        evaluate(job, SHIPPED, deadline=time.monotonic() + 0.2)
    assert time.process_time() - start < 1.5  # abandoned at a rule boundary, not finished


def test_past_its_deadline_a_review_is_answered_by_the_policies_failure_mode() -> None:
    body = json.dumps(review(privileged(10))).encode()
    admission = admit(parse_review(body, "application/json"), SHIPPED, NO_FACTS, "validate", time.monotonic() - 1)
    assert admission.verdict == "error" and admission.response["allowed"] is False  # the shipped policies Fail
    assert admission.response["status"]["message"] == ("mlgate could not judge this object in time; "
                                                       "the work was abandoned")


@pytest.fixture
def deadline_webhook(tls_files: TLSFiles) -> Any:
    server = start_webhook(tls_files, [default_policy_dir()], replace(FAST, review_deadline=1.0))
    yield server
    server.stop()


def test_a_huge_review_is_abandoned_at_its_deadline_while_health_probes_keep_answering(
        deadline_webhook: Any, tls_files: TLSFiles) -> None:
    body = json.dumps(review(privileged(150_000))).encode()  # 2.9 MiB; about 10 s to judge whole
    answer: dict[str, Any] = {}

    def send() -> None:
        with client(deadline_webhook, tls_files) as http:
            started = time.monotonic()
            response = http.post("/validate", content=body, headers={"Content-Type": "application/json"},
                                 timeout=30)
            answer.update(seconds=time.monotonic() - started, body=response.json())

    sender = threading.Thread(target=send)
    sender.start()
    probes: list[float] = []
    with client(deadline_webhook, tls_files) as http:
        while sender.is_alive() and len(probes) < 200:
            started = time.monotonic()
            assert http.get("/healthz").status_code == 200
            probes.append(time.monotonic() - started)
            time.sleep(0.05)
    sender.join(timeout=30)
    assert answer["body"]["response"]["allowed"] is False
    assert "could not judge this object in time" in answer["body"]["response"]["status"]["message"]
    assert answer["seconds"] < 5, answer["seconds"]  # 1 s deadline, plus reading and parsing 2.9 MiB
    assert probes and max(probes) < 1.0, max(probes)


def test_large_reviews_wait_their_turn_and_one_that_waits_past_its_deadline_is_refused(
        deadline_webhook: Any, tls_files: TLSFiles) -> None:
    body = json.dumps(review(privileged(150_000))).encode()
    statuses: list[int] = []

    def send() -> None:
        with client(deadline_webhook, tls_files) as http:
            statuses.append(http.post("/validate", content=body, headers={"Content-Type": "application/json"},
                                      timeout=30).status_code)

    senders = [threading.Thread(target=send) for _ in range(3)]
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join(timeout=60)
    assert sorted(statuses)[0] == 200 and 429 in statuses  # one judged (and abandoned), the others refused


def test_small_reviews_are_not_held_behind_a_large_one(deadline_webhook: Any, tls_files: TLSFiles) -> None:
    big = json.dumps(review(privileged(150_000))).encode()
    small = json.dumps(review(privileged(1))).encode()
    def send_big() -> None:
        with client(deadline_webhook, tls_files) as http:
            http.post("/validate", content=big, headers={"Content-Type": "application/json"}, timeout=30)

    sender = threading.Thread(target=send_big)
    sender.start()
    time.sleep(0.3)
    with client(deadline_webhook, tls_files) as http:
        started = time.monotonic()
        response = http.post("/validate", content=small, headers={"Content-Type": "application/json"})
        assert response.json()["response"]["allowed"] is False and time.monotonic() - started < 1.0
    sender.join(timeout=30)

