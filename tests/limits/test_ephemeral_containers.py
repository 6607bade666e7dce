"""pods/ephemeralcontainers: the Pod is judged as an UPDATE, so the debug container it gains can deny, what the Pod
already had only warns, and /mutate leaves a running Pod alone."""

from __future__ import annotations

import json
from typing import Any

from mlgate.model.facts import NO_FACTS
from mlgate_webhook.review import admit, parse_review
from tests.builders import change, pod
from tests.limits.test_linear_evaluation import SHIPPED
from tests.webhook.webhook_reviews import review

DEBUG = {"name": "debugger", "image": "busybox:1.36", "securityContext": {"privileged": True}}


def debugged(before: dict[str, Any], container: dict[str, Any]) -> dict[str, Any]:
    return change(before, "/spec/ephemeralContainers", [container])


def answer(after: dict[str, Any], before: dict[str, Any], endpoint: str = "validate") -> dict[str, Any]:
    body = json.dumps(review(after, "UPDATE", old=before, sub_resource="ephemeralcontainers")).encode()
    return admit(parse_review(body, "application/json"), SHIPPED, NO_FACTS, endpoint).response  # type: ignore[arg-type]


def test_a_privileged_debug_container_is_denied_at_its_own_field() -> None:
    response = answer(debugged(pod(), DEBUG), pod())
    assert response["allowed"] is False
    assert "/spec/ephemeralContainers/0/securityContext/privileged" in response["status"]["message"]


def test_a_plain_debug_container_is_allowed() -> None:
    plain = {"name": "debugger", "image": "busybox:1.36"}
    assert answer(debugged(pod(), plain), pod())["allowed"] is True


def test_what_the_pod_already_had_only_warns() -> None:
    old = change(pod(), "/spec/hostNetwork", True)
    response = answer(debugged(old, {"name": "debugger", "image": "busybox:1.36"}), old)
    assert response["allowed"] is True and any("host namespaces" in w for w in response["warnings"])


def test_the_mutating_endpoint_leaves_a_running_pod_alone() -> None:
    assert answer(debugged(pod(), DEBUG), pod(), "mutate") == {"uid": answer(pod(), pod(), "mutate")["uid"],
                                                                "allowed": True}
