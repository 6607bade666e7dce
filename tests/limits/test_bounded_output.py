"""One object cannot make an unbounded message, log line or result: findings past 20 per rule are counted, not
spelled out, in the denial, the warnings and the decision log; a result keeps the first 1,000 and counts the rest."""

from __future__ import annotations

import json

from mlgate.engine import evaluate
from mlgate.model.facts import NO_FACTS
from mlgate.model.results import KEPT_PER_RULE, MESSAGES_PER_RULE
from mlgate_webhook.review import admit, parse_review
from tests.limits.test_linear_evaluation import SHIPPED, trainingjob_overlay
from tests.webhook.webhook_reviews import review


def privileged_overlay(containers: int) -> dict[str, object]:
    job = trainingjob_overlay(containers)
    for container in job["spec"]["template"]["spec"]["containers"]:  # type: ignore[index]
        container["securityContext"] = {"privileged": True}
    return job


def test_a_denial_spells_out_twenty_findings_per_rule_and_counts_the_rest() -> None:
    decision = evaluate(privileged_overlay(8000), SHIPPED, mutate=False)
    (baseline,) = [r for r in decision.results if r.rule == "pod-security.baseline"]
    assert (len(baseline.findings), baseline.dropped, baseline.total) == (KEPT_PER_RULE, 8000 - KEPT_PER_RULE, 8000)
    lines = [line for line in decision.deny_message().splitlines() if "pod-security.baseline" in line]
    assert len(lines) == MESSAGES_PER_RULE + 1
    assert lines[-1] == f"[pod-security/pod-security.baseline] and {8000 - MESSAGES_PER_RULE:,} more findings"
    assert len(decision.deny_message()) < 20_000 and len("\n".join(decision.warnings)) < 20_000


def test_the_webhook_answer_and_its_log_messages_stay_small_for_eight_thousand_findings() -> None:
    body = json.dumps(review(privileged_overlay(8000))).encode()
    admission = admit(parse_review(body, "application/json"), SHIPPED, NO_FACTS, "validate")
    assert admission.verdict == "denied"
    assert len(json.dumps(admission.review())) < 30_000
    assert sum(len(m) for m in admission.messages) < 30_000

