"""Malformed shapes the fuzzer found raising outside the rule modules (the extractor, the renderers, the
engine's patch, the webhook's namespacing, gang injection), each as its smallest repro; fixed in ea12f9c.
"""

from __future__ import annotations

import json

import pytest
from builders import change, job, pytorchjob, trainingjob

from mlgate.engine import evaluate
from mlgate.loading.policies import default_policy_dir, load_policy_paths
from mlgate.model.facts import NO_FACTS, StaticFacts
from mlgate.model.results import Outcome
from mlgate_webhook.review import admit, make_review, parse_review

from .shapes import REPO

SHIPPED = load_policy_paths([default_policy_dir()])
TRAINJOB = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "t", "namespace": "ml"},
            "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2, "image": "x"}}}


def rule_errors(obj):
    return [(r.rule, r.note) for r in evaluate(obj, SHIPPED).results if r.outcome is Outcome.ERROR]


@pytest.mark.parametrize(("ptr", "value"), [("/spec/template", "x"), ("/spec/template/spec", "x"),
                                            ("/spec/template/spec/containers", 5)])
def test_a_trainingjob_template_of_the_wrong_type_is_judged_without_raising(ptr, value):
    evaluate(change(trainingjob(), ptr, value), SHIPPED)


def test_trainingjob_resources_that_are_no_mapping_are_judged_without_raising():
    evaluate(change(trainingjob(), "/spec/resources", "x"), SHIPPED)


def test_inference_service_scaling_that_is_no_mapping_is_judged_without_raising():
    evaluate({**change(trainingjob(), "/spec/scaling", "x"), "kind": "InferenceService"}, SHIPPED)


def test_a_trainjob_env_entry_whose_name_is_a_mapping_is_judged_without_raising():
    evaluate(change(TRAINJOB, "/spec/trainer/env", [{"name": {"a": 1}, "value": "v"}]), SHIPPED)


def test_a_trainingjob_overlay_init_container_list_of_the_wrong_type_makes_no_rule_raise():
    assert rule_errors(change(trainingjob(), "/spec/template/spec/initContainers", True)) == []


def test_a_trainingjob_overlay_container_name_that_is_a_mapping_makes_no_rule_raise():
    assert rule_errors(change(trainingjob(), "/spec/template/spec/containers/0/name", {"a": 1})) == []


def test_a_replica_template_that_is_a_list_makes_no_mutation_raise():
    obj = change(pytorchjob(), "/spec/pytorchReplicaSpecs/Worker/template", [{"spec": {}}])
    assert rule_errors(obj) == []


def test_the_webhook_answers_an_object_whose_kind_is_a_mapping():
    body = json.dumps(make_review(change(job(), "/kind", {"x": 1}))).encode()
    assert admit(parse_review(body, "application/json"), SHIPPED, NO_FACTS, "validate").verdict != "error"


def test_a_nan_the_mutations_did_not_touch_is_not_in_the_patch():
    decision = evaluate(change(job(), "/metadata/annotations", {"a": float("nan")}), SHIPPED)
    assert [op for op in decision.patch if op["path"] == "/metadata/annotations/a"] == []


def test_gang_injection_and_run_policy_defaults_agree_on_a_run_policy_that_is_a_string():
    policies = load_policy_paths([default_policy_dir(), REPO / "examples" / "policies" / "gang-volcano.yaml"])
    facts = StaticFacts.from_objects([{"kind": "Namespace", "metadata": {
        "name": "ml", "labels": {"mlgate.dev/scheduler": "volcano"}}}])
    obj = change(pytorchjob(), "/spec/runPolicy", "x")
    first = evaluate(obj, policies, facts=facts)
    again = evaluate(first.mutated, policies, facts=facts)  # type: ignore[arg-type]
    assert again.patch == []


def test_yunikorn_gang_injection_makes_no_rule_raise_on_containers_5():
    policies = load_policy_paths([default_policy_dir(), REPO / "examples" / "policies" / "gang-yunikorn.yaml"])
    facts = StaticFacts.from_objects([{"kind": "Namespace", "metadata": {
        "name": "ml", "labels": {"mlgate.dev/scheduler": "yunikorn"}}}])
    obj = change(pytorchjob(), "/spec/pytorchReplicaSpecs/Worker/template/spec/containers", 5)
    assert [r.note for r in evaluate(obj, policies, facts=facts).results if r.outcome is Outcome.ERROR] == []
