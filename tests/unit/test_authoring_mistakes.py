"""Authoring mistakes are caught, not silent (issue 27, part 6): a namespaceSelector judged without facts, a
kind no description knows in CI, an action on a mutation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from mlgate.engine import evaluate
from mlgate.loading.policies import load_policy_text
from mlgate.model.facts import StaticFacts
from mlgate.model.results import Outcome
from tests.builders import policy_set, pytorchjob

ROOT = Path(__file__).resolve().parents[2]


def test_a_namespace_selector_judged_without_facts_says_it_could_not_check():
    policies = policy_set({"rule": "gpu.max", "params": {"perJob": 1}},
                          match={"namespaceSelector": {"matchLabels": {"tier": "dev"}}})
    (result,) = evaluate(pytorchjob(workers=3), policies).results
    assert result.outcome is Outcome.SKIP
    assert result.unchecked == ("the labels of namespace 'ml' are not known (no cluster facts; --facts gives them), "
                                "so spec.match.namespaceSelector was not judged",)


def test_with_facts_a_namespace_selector_is_judged():
    policies = policy_set({"rule": "gpu.max", "params": {"perJob": 1}},
                          match={"namespaceSelector": {"matchLabels": {"tier": "dev"}}})
    dev = StaticFacts.from_objects([{"apiVersion": "v1", "kind": "Namespace",
                                     "metadata": {"name": "ml", "labels": {"tier": "dev"}}}])
    prod = StaticFacts.from_objects([{"apiVersion": "v1", "kind": "Namespace",
                                      "metadata": {"name": "ml", "labels": {"tier": "prod"}}}])
    assert [r.outcome for r in evaluate(pytorchjob(workers=3), policies, facts=dev).results] == [Outcome.FAIL]
    assert evaluate(pytorchjob(workers=3), policies, facts=prod).results == []


def test_a_policy_whose_other_match_fields_miss_says_nothing_without_facts():
    policies = policy_set({"rule": "gpu.max", "params": {"perJob": 1}},
                          match={"kinds": ["TFJob"], "namespaceSelector": {"matchLabels": {"tier": "dev"}}})
    assert evaluate(pytorchjob(workers=3), policies).results == []


def test_an_action_on_a_mutation_is_refused_at_its_line():
    text = ("apiVersion: mlgate.dev/v1alpha1\nkind: ClusterMLPolicy\nmetadata:\n  name: p\nspec:\n  rules:\n"
            "    - rule: defaults.gpu-toleration\n      action: deny\n")
    policies, problems = load_policy_text(text, "p.yaml")
    assert policies == []
    assert [str(p) for p in problems] == [
        "p.yaml:8: spec.rules[0].action: defaults.gpu-toleration is a mutation, which takes no action (deny, warn "
        "and audit are for checks); remove it"]


def test_a_stored_policy_keeps_loading_with_the_action_deny_an_earlier_crd_defaulted_on_its_mutations():
    from mlgate.loading.policies import check_policy_object

    stored = {"apiVersion": "mlgate.dev/v1alpha1", "kind": "ClusterMLPolicy", "metadata": {"name": "p"},
              "spec": {"rules": [{"rule": "defaults.gpu-toleration", "action": "deny"}]}}
    assert check_policy_object(stored) == []
    warned = {**stored, "spec": {"rules": [{"rule": "defaults.gpu-toleration", "action": "warn"}]}}
    assert [p.field for p in check_policy_object(warned)] == ["spec.rules[0].action"]


def test_warn_exit_code_fails_ci_on_a_kind_no_description_knows(tmp_path: Path):
    policy = tmp_path / "typo.yaml"
    policy.write_text("apiVersion: mlgate.dev/v1alpha1\nkind: ClusterMLPolicy\nmetadata: {name: typo}\nspec:\n"
                      "  match: {kinds: [PytorchJob]}\n  rules:\n    - rule: gpu.max\n      params: {perJob: 2}\n",
                      encoding="utf-8")

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "mlgate", "validate", "-p", str(policy),
                               "examples/trainingjob-ok.yaml", *extra], cwd=ROOT, capture_output=True, text=True,
                              check=False)

    plain, strict = run(), run("--warn-exit-code", "3")
    assert (plain.returncode, strict.returncode) == (0, 3)
    assert 'no kind description knows "PytorchJob"' in strict.stderr
