"""`mlgate validate` refuses what the API server refuses for a CRD's kind: its openAPIV3Schema (unknown fields,
nulls, defaults, types, bounds) and its CEL rules, each at its field path and line. Fixtures are one minimal
valid object with one change each; tests/e2e/test_e2e_crd_schema.py holds the same verdicts against a real
API server."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
from builders import DELETE, change, trainingjob
from click.testing import CliRunner

from mlgate.cli.main import cli
from mlgate.loading import schemas
from mlgate.loading.schemas import CEL_BLOCKED, SchemaCatalog, default_crd_dir
from mlgate.loading.violations import Violation

ROOT = Path(__file__).resolve().parents[2]
E2E_CRDS = ROOT / "tests" / "e2e_crds"
TJ = trainingjob()
ISSUE = """\
apiVersion: mlgate.dev/v1alpha1
kind: TrainingJob
metadata:
  name: bad
  namespace: ml
spec:
  framework: mxnet
  replicas: 0
  resources:
    gpu: 1
    mig: 1g.10gb
"""


@pytest.fixture(scope="module")
def catalog() -> SchemaCatalog:
    return SchemaCatalog.from_paths([default_crd_dir()])


def refusals(catalog: SchemaCatalog, obj: dict[str, Any]) -> list[tuple[str, str, str]]:
    verdict = catalog.check(obj)
    assert verdict is not None
    return sorted((v.check, v.path, v.reason) for v in verdict.violations)


def crd(schema: dict[str, Any], *, status: bool = False) -> dict[str, Any]:
    """A CRD of kind Thing (example.com/v1) around one openAPIV3Schema."""
    version = {"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}
    if status:
        version["subresources"] = {"status": {}}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "things.example.com"},
            "spec": {"group": "example.com", "names": {"kind": "Thing", "plural": "things"}, "scope": "Namespaced",
                     "versions": [version]}}


def thing(spec: Any) -> dict[str, Any]:
    return {"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "t"}, "spec": spec}


def spec_schema(spec: dict[str, Any]) -> SchemaCatalog:
    return SchemaCatalog([crd({"type": "object", "properties": {"spec": spec}})])


# --- the minimal valid object -----------------------------------------------------------------------------


def test_the_minimal_trainingjob_passes_with_nothing_left_unchecked(catalog: SchemaCatalog) -> None:
    assert catalog.check(TJ) == schemas.Verdict("trainingjobs.mlgate.dev")


def test_a_kind_no_crd_describes_gets_no_verdict(catalog: SchemaCatalog) -> None:
    assert catalog.check({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}) is None


def test_the_object_checked_is_not_changed(catalog: SchemaCatalog) -> None:
    obj = change(change(TJ, "/spec/replicas", None), "/spec/typo", 1)
    before = json.dumps(obj, sort_keys=True)
    catalog.check(obj)
    assert json.dumps(obj, sort_keys=True) == before


# --- one change each: what the API server refuses --------------------------------------------------------

REFUSED = [
    ("framework-mxnet", "/spec/framework", "mxnet", [("schema", "/spec/framework", "unsupported value")]),
    ("zero-replicas", "/spec/replicas", 0, [("schema", "/spec/replicas", "invalid value")]),
    ("replicas-as-text", "/spec/replicas", "2", [("schema", "/spec/replicas", "invalid type")]),
    ("replicas-2.5", "/spec/replicas", 2.5, [("schema", "/spec/replicas", "invalid type")]),
    ("no-image", "/spec/image", DELETE, [("schema", "/spec/image", "required value")]),
    ("null-image", "/spec/image", None, [("schema", "/spec/image", "required value")]),
    ("image-too-long", "/spec/image", "x" * 1025, [("schema", "/spec/image", "too long")]),
    ("empty-image", "/spec/image", "", [("schema", "/spec/image", "invalid value")]),
    ("129-hyperparameters", "/spec/hyperparameters", {f"K{i}": "v" for i in range(129)},
     [("schema", "/spec/hyperparameters", "too many")]),
    ("cpu-as-list", "/spec/resources/cpu", ["4"], [("schema", "/spec/resources/cpu", "invalid type")]),
    ("negative-cpu", "/spec/resources/cpu", "-1", [("schema", "/spec/resources/cpu", "invalid value")]),
    ("arg-as-number", "/spec/args", [1], [("schema", "/spec/args/0", "invalid type")]),
    ("unknown-field", "/spec/replica", 3, [("schema", "/spec/replica", "unknown field")]),
    ("unknown-metadata-field", "/metadata/label", {"a": "b"}, [("schema", "/metadata/label", "unknown field")]),
    ("unknown-status-field", "/status/done", True, [("schema", "/status/done", "unknown field")]),
    ("other-version", "/apiVersion", "mlgate.dev/v1", [("schema", "/apiVersion", "unsupported value")]),
    ("gpu-and-mig", "/spec/resources/mig", "1g.10gb", [("cel", "/spec/resources", "invalid value")]),
    ("tensorflow-on-pytorch", "/spec/tensorflow", {"parameterServers": 1}, [("cel", "/spec/tensorflow", "forbidden")]),
    ("min-member-without-gang", "/spec/scheduling", {"minMember": 2},
     [("cel", "/spec/scheduling/minMember", "invalid value")]),
]


@pytest.mark.parametrize(("case", "ptr", "value", "expected"), REFUSED, ids=[c[0] for c in REFUSED])
def test_deny_what_the_api_server_refuses(catalog: SchemaCatalog, case: str, ptr: str, value: Any,
                                          expected: list[tuple[str, str, str]]) -> None:
    assert refusals(catalog, change(TJ, ptr, value)) == expected


ACCEPTED = [
    ("null-replicas-takes-the-default", "/spec/replicas", None),
    ("replicas-2.0-is-an-integer", "/spec/replicas", 2.0),
    ("cpu-as-a-number", "/spec/resources/cpu", 4),
    ("anything-in-the-pod-template", "/spec/template/spec/hostAliases", [{"ip": "10.0.0.1"}]),
    ("status-values-a-create-cannot-set", "/status/phase", "Done"),
    ("duplicate-conditions-in-status", "/status/conditions", [{"type": "A", "status": "True"}] * 2),
    ("mig-alone", "/spec/resources", {"mig": "1g.10gb+me"}),
]


@pytest.mark.parametrize(("case", "ptr", "value"), ACCEPTED, ids=[c[0] for c in ACCEPTED])
def test_allow_what_the_api_server_accepts(catalog: SchemaCatalog, case: str, ptr: str, value: Any) -> None:
    assert refusals(catalog, change(TJ, ptr, value)) == []


def test_defaults_are_filled_in_before_the_cel_rules_run(catalog: SchemaCatalog) -> None:
    # framework defaults to pytorch, so tensorflow settings are refused even where framework is not written
    obj = change(change(TJ, "/spec/framework", DELETE), "/spec/tensorflow", {"parameterServers": 1})
    assert refusals(catalog, obj) == [("cel", "/spec/tensorflow", "forbidden")]


def test_type_errors_leave_the_cel_rules_unchecked_as_the_api_server_does(catalog: SchemaCatalog) -> None:
    obj = change(change(TJ, "/spec/replicas", "2"), "/spec/resources/mig", "1g.10gb")
    verdict = catalog.check(obj)
    assert verdict is not None
    assert [(v.path, v.reason) for v in verdict.violations] == [("/spec/replicas", "invalid type")]
    assert verdict.unchecked == [("cel", CEL_BLOCKED)]


def test_a_bound_error_does_not_stop_the_cel_rules(catalog: SchemaCatalog) -> None:
    obj = change(change(TJ, "/spec/replicas", 0), "/spec/resources/mig", "1g.10gb")
    assert refusals(catalog, obj) == [("cel", "/spec/resources", "invalid value"),
                                      ("schema", "/spec/replicas", "invalid value")]


def test_transition_rules_do_not_run_on_create(catalog: SchemaCatalog) -> None:
    assert catalog.check(change(TJ, "/spec/framework", "mpi")) == schemas.Verdict("trainingjobs.mlgate.dev")


def test_refusals_say_what_the_api_server_says(catalog: SchemaCatalog) -> None:
    verdict = catalog.check(change(change(TJ, "/spec/framework", "mxnet"), "/spec/replicas", 0))
    assert verdict is not None
    assert verdict.violations == [
        Violation("schema", "/spec/framework", "unsupported value",
                  '"mxnet": supported values: "pytorch", "tensorflow", "xgboost", "mpi", "jax"'),
        Violation("schema", "/spec/replicas", "invalid value", "0: should be greater than or equal to 1"),
    ]


def test_cel_outcomes_are_reused_across_jobs_that_differ_only_where_no_rule_looks() -> None:
    catalog = SchemaCatalog.from_paths([default_crd_dir()])
    for index in range(20):
        uri = change(change(TJ, "/spec/checkpoint", {"uri": f"s3://ckpt/{index}"}), "/spec/image", f"i:{index}")
        assert refusals(catalog, uri) == []
    both = change(TJ, "/spec/checkpoint", {"uri": "s3://ckpt/x", "claimName": "c", "mountPath": "/c"})
    assert refusals(catalog, both) == [("cel", "/spec/checkpoint", "invalid value")]
    assert len(catalog._cel.outcomes) == 11  # the spec's 8 rules, resources, and the checkpoint block twice


# --- the OpenAPI extensions and CEL features, on a CRD of their own -------------------------------------


def test_nullable_keeps_a_null_and_accepts_it() -> None:
    catalog = spec_schema({"type": "object", "properties": {"a": {"type": "string", "nullable": True}}})
    assert refusals(catalog, thing({"a": None})) == []
    assert refusals(catalog, thing({"a": 1})) == [("schema", "/spec/a", "invalid type")]


def test_an_object_without_properties_keeps_no_fields_unless_it_preserves_them() -> None:
    closed = spec_schema({"type": "object"})
    assert refusals(closed, thing({"a": 1})) == [("schema", "/spec/a", "unknown field")]
    kept = spec_schema({"type": "object", "x-kubernetes-preserve-unknown-fields": True})
    assert refusals(kept, thing({"a": {"b": 1}})) == []


def test_an_embedded_resource_has_its_apiversion_kind_and_metadata() -> None:
    catalog = spec_schema({"type": "object", "x-kubernetes-embedded-resource": True,
                           "properties": {"data": {"type": "string"}}})
    assert refusals(catalog, thing({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                                    "data": "x"})) == []
    assert refusals(catalog, thing({"metadata": {"nmae": "c"}})) == [("schema", "/spec/metadata/nmae",
                                                                      "unknown field")]


@pytest.mark.parametrize(("list_type", "items", "value", "at"), [
    ("set", {"type": "string"}, ["a", "b", "a"], "/spec/l/2"),
    ("map", {"type": "object", "properties": {"name": {"type": "string"}}}, [{"name": "a"}, {"name": "a"}],
     "/spec/l/1"),
])
def test_deny_a_duplicate_in_a_set_or_map_list(list_type: str, items: dict[str, Any], value: list[Any],
                                               at: str) -> None:
    node = {"type": "array", "items": items, "x-kubernetes-list-type": list_type,
            "x-kubernetes-list-map-keys": ["name"]}
    catalog = spec_schema({"type": "object", "properties": {"l": node}})
    assert refusals(catalog, thing({"l": value})) == [("schema", at, "duplicate value")]


def rule_catalog(**rule: Any) -> SchemaCatalog:
    return spec_schema({"type": "object", "x-kubernetes-validations": [rule],
                        "properties": {"a": {"type": "string"}, "labels": {"type": "object",
                                                                          "additionalProperties": {"type": "string"}}}})


def test_a_rule_without_a_message_says_which_rule_failed() -> None:
    verdict = rule_catalog(rule="self.a == 'x'").check(thing({"a": "y"}))
    assert verdict is not None
    assert verdict.violations == [Violation("cel", "/spec", "invalid value", "failed rule: self.a == 'x'")]


def test_a_message_expression_is_the_message() -> None:
    verdict = rule_catalog(rule="self.a == 'x'", message="m", messageExpression="'a is ' + self.a").check(
        thing({"a": "y"}))
    assert verdict is not None
    assert [v.detail for v in verdict.violations] == ["a is y"]


def test_a_field_path_with_brackets_points_at_the_field() -> None:
    catalog = rule_catalog(rule="!has(self.labels) || !('app.kubernetes.io/name' in self.labels)",
                           fieldPath=".labels['app.kubernetes.io/name']", reason="FieldValueForbidden")
    assert refusals(catalog, thing({"labels": {"app.kubernetes.io/name": "x"}})) == [
        ("cel", "/spec/labels/app.kubernetes.io~1name", "forbidden")]


def test_a_rule_reading_a_missing_field_is_refused_as_the_api_server_refuses_it() -> None:
    verdict = rule_catalog(rule="self.a == 'x'").check(thing({}))
    assert verdict is not None
    assert [v.detail for v in verdict.violations] == ["no such member in mapping: 'a' evaluating rule: self.a == 'x'"]


def test_a_rule_cel_python_cannot_run_is_unchecked_never_passed_or_refused() -> None:
    verdict = rule_catalog(rule="self.a.matches('x') && isURL(self.a)").check(thing({"a": "x"}))
    assert verdict is not None
    assert verdict.violations == []
    assert verdict.unchecked == [("cel", "/spec: the rule `self.a.matches('x') && isURL(self.a)` needs the CEL "
                                         "function isURL(), which cel-python does not have")]


def test_the_kubernetes_string_functions_it_knows_run() -> None:
    catalog = rule_catalog(rule="self.a.lowerAscii() == 'abc'")
    assert refusals(catalog, thing({"a": "ABC"})) == []
    assert refusals(catalog, thing({"a": "ABD"})) == [("cel", "/spec", "invalid value")]


def test_upstream_jobset_cel_rules_refuse_startup_order_with_depends_on() -> None:
    catalog = SchemaCatalog.from_paths([E2E_CRDS / "jobset.x-k8s.io_jobsets.yaml"])
    jobs = [{"name": n, "template": {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}}
            for n in ("a", "b")]
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "j"},
              "spec": {"replicatedJobs": jobs}}
    assert refusals(catalog, jobset) == []
    ordered = change(change(jobset, "/spec/startupPolicy", {"startupPolicyOrder": "InOrder"}),
                     "/spec/replicatedJobs/1/dependsOn", [{"name": "a", "status": "Ready"}])
    assert refusals(catalog, ordered) == [("cel", "/spec", "invalid value")]


# --- the command line -------------------------------------------------------------------------------------


def test_validate_denies_the_trainingjob_the_api_server_refuses_at_each_field_and_line(tmp_path: Path) -> None:
    manifest = tmp_path / "bad.yaml"
    manifest.write_text(ISSUE)
    result = CliRunner().invoke(cli, ["validate", "-o", "json", str(manifest)])
    assert result.exit_code == 1, result.output
    (record,) = json.loads(result.stdout)["results"]
    found = [(v["rule"], v["path"], v["reason"], v["line"]) for v in record["violations"] if v["policy"] == "crd"]
    assert found == [("schema", "/spec/framework", "unsupported value", 7),
                     ("schema", "/spec/image", "required value", 6),
                     ("schema", "/spec/replicas", "invalid value", 8)]
    assert [u["rule"] for u in record["unchecked"] if u["policy"] == "crd"] == ["cel"]


def test_validate_reads_the_crds_given_with_crds(tmp_path: Path) -> None:
    (tmp_path / "crd.yaml").write_text(json.dumps(crd({"type": "object", "properties": {"spec": {
        "type": "object", "properties": {"size": {"type": "integer", "minimum": 1}}}}})))
    manifest = tmp_path / "thing.yaml"
    manifest.write_text(json.dumps(thing({"size": 0})))
    assert CliRunner().invoke(cli, ["validate", str(manifest)]).exit_code == 0
    result = CliRunner().invoke(cli, ["validate", "--crds", str(tmp_path / "crd.yaml"), str(manifest)])
    assert result.exit_code == 1
    assert "DENY [crd/schema] invalid value\n       0: should be greater than or equal to 1\n" in result.stdout


def test_crds_that_hold_no_crd_are_an_error(tmp_path: Path) -> None:
    (tmp_path / "not-a-crd.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n")
    result = CliRunner().invoke(cli, ["validate", "--crds", str(tmp_path / "not-a-crd.yaml"), str(tmp_path)])
    assert result.exit_code == 2
    assert "no CustomResourceDefinition with a schema" in result.stderr


def test_without_the_schema_extra_validate_says_so_once_and_goes_on(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schemas, "MODULES", ("jsonschema", "no_such_module_for_mlgate"))
    manifest = tmp_path / "bad.yaml"
    manifest.write_text(ISSUE + "---\n" + ISSUE)
    result = CliRunner().invoke(cli, ["validate", str(manifest)])
    assert result.exit_code == 0, result.output
    assert result.stderr.count("CRD schemas not checked: they need no_such_module_for_mlgate, which comes with "
                               "mlgate[schema]") == 1
    asked = CliRunner().invoke(cli, ["validate", "--crds", str(E2E_CRDS), str(manifest)])
    assert asked.exit_code == 2
    assert "pip install 'mlgate[schema]'" in asked.stderr


def test_the_schema_extra_names_the_modules_the_check_imports() -> None:
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    assert sorted(d.split(">")[0] for d in extras[schemas.EXTRA]) == ["cel-python", "jsonschema"]
    (own,) = [d for d in extras["dev"] if d.startswith("mlgate[")]
    assert schemas.EXTRA in own.removeprefix("mlgate[").removesuffix("]").split(",")


def test_the_webhook_and_the_reconciler_never_import_the_schema_check() -> None:
    for path in [*(ROOT / "webhook").rglob("*.py"), *(ROOT / "operator").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom | ast.Import):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                assert not any(n.startswith(("mlgate.loading.schemas", "mlgate.loading.cel_rules")) for n in names)


def test_a_crd_file_that_does_not_parse_is_an_error_at_its_line(tmp_path):
    from mlgate.loading.schemas import SchemaCatalog, SchemaLoadError

    broken = tmp_path / "crds.yaml"
    broken.write_text("apiVersion: apiextensions.k8s.io/v1\nspec: [unclosed\n", encoding="utf-8")
    with pytest.raises(SchemaLoadError, match=r"crds\.yaml:3: invalid YAML: did not find expected"):
        SchemaCatalog.from_paths([broken])
