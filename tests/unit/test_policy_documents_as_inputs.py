"""Policy documents among `mlgate validate`'s inputs are held to what the webhook refuses at `kubectl apply`: each
fixture of tests/cli/policy-documents is one change from valid-policy.yaml (or a document of another mlgate kind)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from mlgate.cli.main import cli
from mlgate.cli.review import Record, Settings, review_document
from mlgate.loading.documents import read_documents
from mlgate.loading.exceptions import check_exception_object
from mlgate.loading.policies import check_policy_object, load_policy_paths
from mlgate.model.facts import NO_FACTS

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "cli" / "policy-documents"
SHIPPED = load_policy_paths([ROOT / "policies"])
# fixture -> (pointer, line) of each refusal the loader makes, in order
REFUSED = {
    "unknown-rule.yaml": [("/spec/rules/0/rule", 8)],
    "wrong-parameter.yaml": [("/spec/rules/0/params/perContainer", 11)],
    "unknown-field.yaml": [("/spec/rulez", 7)],  # no rules is allowed: validations or mutations may stand instead
    "exception-rule-not-bound.yaml": [("/spec/rules/0", 9)],
    "workloadkind-unknown-renderer.yaml": [("/spec/render", 10)],
}


def records(path: Path) -> list[Record]:
    settings = Settings(SHIPPED, NO_FACTS)
    return [r for d in read_documents([str(path)]) for r in review_document(d, settings)]


def test_every_fixture_has_a_case() -> None:
    assert sorted(p.name for p in FIXTURES.glob("*.yaml")) == sorted([*REFUSED, "valid-policy.yaml"])


def test_allow_the_valid_policy_as_the_webhook_would() -> None:
    [record] = records(FIXTURES / "valid-policy.yaml")
    assert record.status == "skipped"
    assert record.violations == []


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_deny_a_broken_policy_document_at_its_field_and_line(name: str) -> None:
    [record] = records(FIXTURES / name)
    assert record.status == "denied"
    found = [(i.path, i.line) for i in record.violations if (i.policy, i.rule) == ("mlgate", "load")]
    assert found == REFUSED[name]


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_the_refusals_are_the_webhooks_own(name: str) -> None:
    obj: dict[str, Any] = yaml.safe_load((FIXTURES / name).read_text(encoding="utf-8"))
    webhook = check_exception_object(obj, SHIPPED.policies) if obj["kind"] == "MLPolicyException" \
        else check_policy_object(obj, SHIPPED.policies)
    [record] = records(FIXTURES / name)
    assert [i.detail for i in record.violations if i.policy == "mlgate"] == [e.message for e in webhook]


def test_an_exception_naming_a_policy_not_loaded_is_judged_on_its_own(tmp_path: Path) -> None:
    obj = yaml.safe_load((FIXTURES / "exception-rule-not-bound.yaml").read_text(encoding="utf-8"))
    obj["spec"]["policy"] = "team-policy"  # in force in the cluster, perhaps: not the CLI's to say
    path = tmp_path / "exception.yaml"
    path.write_text(yaml.safe_dump(obj), encoding="utf-8")
    [record] = records(path)
    assert record.violations == []


def test_the_issues_clustermlpolicy_with_an_unknown_rule_exits_1_with_file_line_and_field() -> None:
    result = CliRunner().invoke(cli, ["validate", "-o", "json", str(FIXTURES / "unknown-rule.yaml")])
    assert result.exit_code == 1
    assert '"path":"/spec/rules/0/rule"' in result.output.replace(" ", "")
    assert '"line":8' in result.output.replace(" ", "")
