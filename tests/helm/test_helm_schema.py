"""values.schema.json: helm refuses a wrong value before rendering anything, and its message names the value.
Each case is the default values with one change."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from helm_chart import CHART, Helm

CASES: list[tuple[str, dict[str, Any], str]] = [
    ("replicas as a word", {"webhook": {"replicas": "two"}}, "/webhook/replicas"),
    ("no replica", {"webhook": {"replicas": 0}}, "/webhook/replicas"),
    ("a failurePolicy helm does not know", {"webhook": {"failurePolicy": {"mlJobs": "Retry"}}},
     "/webhook/failurePolicy/mlJobs"),
    ("Deployments failing closed", {"webhook": {"failurePolicy": {"appsWorkloads": "Fail"}}},
     "/webhook/failurePolicy"),
    ("a certificate source that does not exist", {"certs": {"mode": "selfSigned"}}, "/certs/mode"),
    ("a caBundle that is not base64", {"certs": {"caBundle": "-----BEGIN CERTIFICATE-----"}}, "/certs/caBundle"),
    ("an excluded namespace that is no DNS label", {"webhook": {"excludeNamespaces": ["Kube_System"]}},
     "/webhook/excludeNamespaces/0"),
    ("a selector operator Kubernetes does not know",
     {"webhook": {"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "Equals"}]}}},
     "/webhook/namespaceSelector/matchExpressions/0/operator"),
    ("a policy file that is not YAML", {"policies": {"extra": {"site.txt": "x"}}}, "/policies/extra"),
    ("a misspelt top-level key", {"reconcilers": {"enabled": False}}, "reconcilers"),
    ("a quantity that is no quantity", {"reconciler": {"resources": {"limits": {"memory": "lots"}}}},
     "/reconciler/resources/limits/memory"),
    ("a monitoring switch that is no boolean", {"metrics": {"serviceMonitor": {"enabled": "yes"}}},
     "/metrics/serviceMonitor/enabled"),
]


@pytest.mark.parametrize(("change", "where"), [(c[1], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_helm_refuses_a_wrong_value_naming_where_it_is(helm: Helm, change: dict[str, Any], where: str) -> None:
    result = helm.template(values=change)
    assert result.code != 0, result.stdout[:500]
    assert "values don't meet the specifications of the schema" in result.stderr, result.stderr
    assert where in result.stderr, result.stderr
    assert "goroutine" not in result.stderr and "panic" not in result.stderr


def test_helm_says_what_a_wrong_value_should_have_been(helm: Helm) -> None:
    stderr = helm.template(values={"webhook": {"replicas": "two"}}).stderr
    assert "/webhook/replicas" in stderr and "integer" in stderr and "string" in stderr, stderr
    stderr = helm.template(values={"certs": {"mode": "selfSigned"}}).stderr
    assert "secret" in stderr and "certManager" in stderr, stderr


def test_the_default_values_and_every_profile_pass_the_schema(helm: Helm) -> None:
    for values in [None, *sorted((CHART / "ci").glob("*-values.yaml"))]:
        args = ["--values", str(values)] if values else []
        helm.template(*args).check()


def test_the_schema_describes_every_default_value() -> None:
    """Nothing in values.yaml is left to additionalProperties: each key is in the schema."""
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))

    def undescribed(value: Any, node: dict[str, Any], path: str) -> list[str]:
        if "$ref" in node:
            node = schema["definitions"][node["$ref"].rsplit("/", 1)[1]]
        if not isinstance(value, dict) or "properties" not in node:
            return []
        return [p for k, v in value.items() for p in (
            [f"{path}/{k}"] if k not in node["properties"] else undescribed(v, node["properties"][k], f"{path}/{k}"))]

    assert undescribed(values, schema, "") == []
