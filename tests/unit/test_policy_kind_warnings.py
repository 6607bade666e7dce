"""A kind a policy matches or excludes that no description knows is said at load, with file, line and field."""

from __future__ import annotations

from pathlib import Path

from mlgate.loading.policies import kind_warnings, load_policy_paths, policy_object_warnings
from mlgate.workloads.catalog import SHIPPED

POLICY = """\
apiVersion: mlgate.dev/v1alpha1
kind: ClusterMLPolicy
metadata: {name: gpu}
spec:
  match:
    kinds: [PyTorchJob, {kind}]
  rules:
    - rule: gpu.limits
"""
OWN_KIND = """\
---
apiVersion: mlgate.dev/v1alpha1
kind: WorkloadKind
metadata: {name: trainjobs}
spec:
  group: example.com
  versions: [v1]
  kind: MyTrainer
  resource: mytrainers
  templates: [{pointer: /spec/template, role: worker}]
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_misspelt_kind_is_a_warning_that_names_the_line_field_and_the_kind_meant(tmp_path: Path):
    path = write(tmp_path, POLICY.replace("{kind}", "PytorchJob"))
    (warning,) = kind_warnings(load_policy_paths([path]))
    assert (warning.source, warning.line, warning.field) == (str(path), 6, "spec.match.kinds[1]")
    assert '"PytorchJob"' in warning.message and 'did you mean "PyTorchJob"?' in warning.message


def test_kinds_a_description_knows_and_the_wildcard_draw_no_warning(tmp_path: Path):
    assert kind_warnings(load_policy_paths([write(tmp_path, POLICY.replace("{kind}", "'*'"))])) == []
    own = write(tmp_path, POLICY.replace("{kind}", "MyTrainer") + OWN_KIND)
    assert kind_warnings(load_policy_paths([own])) == []


def test_a_policy_object_gets_the_warning_before_it_is_stored():
    obj = {"apiVersion": "mlgate.dev/v1alpha1", "kind": "ClusterMLPolicy", "metadata": {"name": "p"},
           "spec": {"exclude": {"kinds": ["RayJobs"]}, "rules": [{"rule": "gpu.limits"}]}}
    (warning,) = policy_object_warnings(obj, SHIPPED)
    assert warning.field == "spec.exclude.kinds[0]" and 'did you mean "RayJob"?' in warning.message
