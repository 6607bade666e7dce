"""Built-in objects against the shipped OpenAPI schemas of the pinned Kubernetes version (the agreement with the
real API server is tests/e2e/test_e2e_builtin_schema.py)."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlgate.cli.review import Settings, review_document
from mlgate.loading.builtin_schemas import DATA, shipped
from mlgate.loading.documents import read_documents
from mlgate.loading.policies import load_policy_paths
from mlgate.model.facts import NO_FACTS

ROOT = Path(__file__).resolve().parents[2]
POD: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app": "x"}},
                       "spec": {"containers": [{"name": "main", "image": "busybox:1.36",
                                                "resources": {"limits": {"cpu": "1", "memory": 1073741824}},
                                                "ports": [{"containerPort": 80}]}]}}


def changed(path: str, value: Any) -> dict[str, Any]:
    """The valid pod with one field set (`...` deletes it)."""
    obj = copy.deepcopy(POD)
    *parents, last = path.strip("/").split("/")
    node: Any = obj
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return obj


def refusals(obj: dict[str, Any]) -> list[tuple[str, str]]:
    found = shipped().check(obj)
    assert found is not None
    return [(v.path, v.reason) for v in found]


def tool() -> Any:
    spec = importlib.util.spec_from_file_location("kube_openapi", ROOT / "tools" / "kube_openapi.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_shipped_schemas_are_those_of_the_pinned_kubernetes_version() -> None:
    data = json.loads(DATA.read_text(encoding="utf-8"))
    assert data["kubernetes"] == (ROOT / "tools" / "control-plane" / "VERSION").read_text(encoding="utf-8").strip()


def test_the_shipped_kinds_are_the_regeneration_tools_list() -> None:
    pytest.importorskip("cryptography", reason="the tool starts a control plane, whose certificates need it")
    kinds = tool().KINDS
    assert sorted(shipped().kinds) == sorted(f"{v}/{k}" for v, names in kinds.items() for k in names)


def test_every_built_in_kind_of_the_kind_table_is_shipped() -> None:
    table = yaml.safe_load((ROOT / "mlgate" / "workloads" / "kinds.yaml").read_text(encoding="utf-8"))
    built_in = [(d["group"], v, d["kind"]) for d in table["kinds"] if d["group"] in ("", "apps", "batch")
                for v in d["versions"]]
    assert len(built_in) >= 7
    for group, version, kind in built_in:
        assert shipped().served(f"{group}/{version}".lstrip("/"), kind), (group, version, kind)


def test_every_reference_in_the_shipped_schemas_resolves() -> None:
    text = DATA.read_text(encoding="utf-8")
    names = set(shipped().schemas)
    refs = {line.split('"$ref": ')[1].strip().strip('",') for line in text.splitlines() if '"$ref": ' in line}
    assert refs and refs <= names


def test_a_valid_pod_is_not_refused() -> None:
    assert refusals(POD) == []


@pytest.mark.parametrize(("path", "value", "expected"), [
    ("/spec/containers", 5, [("/spec/containers", "invalid type")]),
    ("/spec/containers", "x", [("/spec/containers", "invalid type")]),
    ("/spec/containers/0/name", ..., [("/spec/containers/0/name", "required value")]),
    ("/spec/containers/0/name", None, [("/spec/containers/0/name", "required value")]),
    ("/spec/containers/0/name", 7, [("/spec/containers/0/name", "invalid type")]),
    ("/spec/containers/0/imagePullPolicyy", "Always", [("/spec/containers/0/imagePullPolicyy", "unknown field")]),
    ("/spec/containers/0/ports/0/containerPort", "80", [("/spec/containers/0/ports/0/containerPort", "invalid type")]),
    ("/spec/containers/0/ports/0/containerPort", 80.5, [("/spec/containers/0/ports/0/containerPort", "invalid type")]),
    ("/spec/containers/0/resources/limits/cpu", [1], [("/spec/containers/0/resources/limits/cpu", "invalid type")]),
    ("/metadata/labels/app", 5, [("/metadata/labels/app", "invalid type")]),
    ("/metadata/labels", ["a"], [("/metadata/labels", "invalid type")]),
    ("/metadata/nmae", "p", [("/metadata/nmae", "unknown field")]),
    ("/spec/hostNetwork", "yes", [("/spec/hostNetwork", "invalid type")]),
    ("/spec", [], [("/spec", "invalid type")]),
])
def test_deny_a_pod_with_one_malformed_field(path: str, value: Any, expected: list[tuple[str, str]]) -> None:
    assert refusals(changed(path, value)) == expected


@pytest.mark.parametrize(("path", "value"), [
    ("/spec/containers/0/ports/0/containerPort", 80.0),  # kubectl's YAML to JSON writes 80.0 as 80
    ("/spec/containers/0/resources/limits/cpu", 0.5),  # a Quantity is a string or a number
    ("/spec/containers/0/livenessProbe", {"httpGet": {"port": "http"}}),  # IntOrString
    ("/spec/containers/0/livenessProbe", {"httpGet": {"port": 8080}}),
    ("/spec/nodeSelector", None),  # null is the field's zero value
    ("/spec/containers/0/env", [{"name": "D", "value": "2024-01-01"}]),
])
def test_allow_a_pod_with_one_field_the_api_server_decodes(path: str, value: Any) -> None:
    assert refusals(changed(path, value)) == []


def test_a_date_yaml_reads_as_a_date_is_a_string_to_the_api_server() -> None:
    obj = yaml.safe_load("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {since: 2024-01-01}\n")
    assert refusals(obj) == []


def test_a_version_no_longer_served_is_refused_at_api_version() -> None:
    found = shipped().check({"apiVersion": "batch/v1beta1", "kind": "CronJob", "metadata": {"name": "c"}})
    assert found is not None
    assert [(v.path, v.reason, v.fix) for v in found] == [("/apiVersion", "unsupported value",
                                                            "use apiVersion: batch/v1")]


@pytest.mark.parametrize("obj", [
    {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "spec": {"tasks": 5}},
    {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "spec": 5},
    {"apiVersion": "v1", "kind": "Binding"},
])
def test_an_object_of_no_shipped_built_in_kind_is_not_judged(obj: dict[str, Any]) -> None:
    assert shipped().check(obj) is None


def test_a_raw_extension_takes_any_field() -> None:
    obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c"},
           "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}],
                                "config": [{"opaque": {"driver": "gpu.example.com",
                                                       "parameters": {"anything": {"at": ["all"]}}}}]}}}
    assert refusals(obj) == []


def review_text(text: str, tmp_path: Path) -> list[Any]:
    path = tmp_path / "in.yaml"
    path.write_text(text, encoding="utf-8")
    settings = Settings(load_policy_paths([ROOT / "policies"]), NO_FACTS, keep_mutated=True, builtins=shipped())
    return [r for d in read_documents([str(path)]) for r in review_document(d, settings)]


def test_a_refused_object_is_denied_at_its_line_and_not_mutated(tmp_path: Path) -> None:
    text = ("apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  template:\n    spec:\n"
            "      restartPolicy: Never\n      containers:\n      - name: train\n        image: registry.example/t:1\n"
            "        resources: {limits: {nvidia.com/gpu: 1}}\n        imagePullPolicyy: Always\n")
    [record] = review_text(text, tmp_path)
    assert record.status == "denied"
    assert [(i.policy, i.rule, i.reason, i.line) for i in record.violations[:1]] == [
        ("kubernetes", "schema", "unknown field", 12)]
    assert record.patch == []
    assert record.mutated == yaml.safe_load(text)


def test_the_same_object_well_formed_is_mutated(tmp_path: Path) -> None:
    text = ("apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  template:\n    spec:\n"
            "      restartPolicy: Never\n      containers:\n      - name: train\n        image: registry.example/t:1\n"
            "        resources: {limits: {nvidia.com/gpu: 1}}\n")
    [record] = review_text(text, tmp_path)
    assert not [i for i in record.violations if i.policy == "kubernetes"]
    assert record.patch


def test_a_policy_test_resource_the_api_server_refuses_stops_the_suite_at_its_line(tmp_path: Path) -> None:
    from mlgate.cli.testsuite import SuiteError, run_suites

    (tmp_path / "pods.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: 5\n",
                                        encoding="utf-8")
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump({
        "apiVersion": "mlgate.dev/v1alpha1", "kind": "PolicyTest", "metadata": {"name": "s"},
        "spec": {"policies": [str(ROOT / "policies")], "resources": ["pods.yaml"],
                 "results": [{"policy": "gpu", "rule": "gpu.max", "resources": ["p"], "result": "pass"}]}}),
        encoding="utf-8")
    with pytest.raises(SuiteError, match=r"pods\.yaml:5: resource Pod/p: the API server refuses it: invalid type: "
                                         r"/spec/containers"):
        run_suites([str(tmp_path / "suite.yaml")])


def test_the_light_install_refuses_malformed_built_in_objects_without_the_schema_extra(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from mlgate.cli.main import cli

    for module in ("jsonschema", "celpy"):
        monkeypatch.setitem(sys.modules, module, None)  # import fails, find_spec says absent: the light install
    result = CliRunner().invoke(cli, ["validate", "-q", str(ROOT / "tests" / "cli" / "builtins" / "malformed.yaml")])
    assert result.exit_code == 1, result.output
    assert "CRD schemas not checked: they need jsonschema, which comes with mlgate[schema]" in result.output
    assert result.output.count("DENY [kubernetes/schema]") == 13


def test_the_wheel_carries_the_schemas() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    assert DATA.name in config["package-data"]["mlgate.loading"]
