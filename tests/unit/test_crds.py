"""The CRDs in manifests/crds (and the stand-ins in tests/e2e_crds): structurally sound, in step
with the engine's own models, accepting what users write (examples/, builders, policies/) and
refusing malformed objects.

OpenAPI parts are checked with `jsonschema`. CEL rules (`x-kubernetes-validations`) are evaluated
with `celpy` (cel-python) where it is installed, after applying the schema's defaults, the order the
API server uses.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

import jsonschema
import pytest
import yaml
from builders import DELETE, change, trainingjob

from mlgate.loading.documents import read_documents
from mlgate.model.kinds import KindSpec, TemplateSource
from mlgate.model.policy import MatchBlock, PolicySpec, Requirement, RuleBinding, UnknownKinds
from mlgate.model.results import Action, FailurePolicy
from mlgate.rules.registry import RULE_ID
from mlgate.workloads import render
from mlgate.workloads.extract import extract

ROOT = Path(__file__).resolve().parents[2]
CRD_DIR = ROOT / "manifests" / "crds"
E2E_CRD_DIR = ROOT / "tests" / "e2e_crds"
EXAMPLES = ROOT / "examples"
POLICIES = ROOT / "policies"
MLGATE_KINDS = {"TrainingJob", "InferenceService", "MLPolicy", "ClusterMLPolicy", "ClusterWorkloadKind",
                "MLPolicyException"}

Obj = dict[str, Any]


def _load(path: Path) -> list[Obj]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def _crd_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("*.yaml") if p.name != "kustomization.yaml")


CRDS: dict[str, Obj] = {_load(p)[0]["spec"]["names"]["kind"]: _load(p)[0] for p in _crd_files(CRD_DIR)}
ALL_CRD_FILES = _crd_files(CRD_DIR) + _crd_files(E2E_CRD_DIR)


def schema_of(kind: str) -> Obj:
    (version,) = CRDS[kind]["spec"]["versions"]
    schema: Obj = version["schema"]["openAPIV3Schema"]
    return schema


def nodes(schema: Obj, path: str = "") -> Iterator[tuple[str, Obj]]:
    """Every structural schema node (not value validations inside anyOf/allOf), with its path."""
    yield path, schema
    for name, child in (schema.get("properties") or {}).items():
        yield from nodes(child, f"{path}/{name}")
    if isinstance(schema.get("items"), dict):
        yield from nodes(schema["items"], f"{path}/*")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from nodes(schema["additionalProperties"], f"{path}/{{}}")


def node_at(schema: Obj, path: str) -> Obj:
    node = schema
    for token in path.strip("/").split("/"):
        node = node["items"] if token == "*" else node["properties"][token]
    return node


def without_descriptions(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: without_descriptions(v) for k, v in schema.items() if k != "description"}
    if isinstance(schema, list):
        return [without_descriptions(v) for v in schema]
    return schema


def schema_errors(obj: Obj) -> list[tuple[str, str]]:
    """(pointer, failing keyword) for every OpenAPI violation of obj against its kind's CRD."""
    validator = jsonschema.Draft7Validator(schema_of(obj["kind"]))
    return sorted(
        ("/" + "/".join(str(p) for p in e.absolute_path), str(e.validator)) for e in validator.iter_errors(obj)
    )


def with_defaults(schema: Obj, value: Any) -> Any:
    """value with the schema's `default`s filled in where a parent exists, as the API server does."""
    if isinstance(value, dict):
        out = {k: v for k, v in value.items()}
        for name, child in (schema.get("properties") or {}).items():
            if name not in out and "default" in child:
                out[name] = copy.deepcopy(child["default"])
            if name in out:
                out[name] = with_defaults(child, out[name])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            out = {k: with_defaults(extra, v) for k, v in out.items()}
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [with_defaults(schema["items"], v) for v in value]
    return value


def cel_violations(obj: Obj, old: Obj | None = None) -> list[str]:
    """Messages of the CEL rules that obj breaks (transition rules only when old is given)."""
    celpy = pytest.importorskip("celpy", reason="cel-python is needed to evaluate CEL rules")
    env = celpy.Environment()
    schema = schema_of(obj["kind"])
    broken: list[str] = []

    def walk(node: Obj, value: Any, previous: Any) -> None:
        for rule in node.get("x-kubernetes-validations") or []:
            if "oldSelf" in rule["rule"] and previous is None:
                continue
            activation = {"self": celpy.json_to_cel(value)}
            if previous is not None:
                activation["oldSelf"] = celpy.json_to_cel(previous)
            if not env.program(env.compile(rule["rule"])).evaluate(activation):
                broken.append(rule["message"])
        for name, child in (node.get("properties") or {}).items():
            if isinstance(value, dict) and name in value:
                walk(child, value[name], previous.get(name) if isinstance(previous, dict) else None)
        if isinstance(node.get("items"), dict) and isinstance(value, list):
            for item in value:
                walk(node["items"], item, None)

    walk(schema, with_defaults(schema, obj), with_defaults(schema, old) if old is not None else None)
    return broken


def example(name: str) -> Obj:
    (doc,) = _load(EXAMPLES / name)
    return doc


# --- structure -----------------------------------------------------------------------------


@pytest.mark.parametrize("path", ALL_CRD_FILES, ids=lambda p: p.name)
def test_crd_is_apiextensions_v1_named_plural_dot_group(path: Path) -> None:
    (crd,) = _load(path)
    assert (crd["apiVersion"], crd["kind"]) == ("apiextensions.k8s.io/v1", "CustomResourceDefinition")
    assert crd["metadata"]["name"] == f"{crd['spec']['names']['plural']}.{crd['spec']['group']}"


@pytest.mark.parametrize("path", ALL_CRD_FILES, ids=lambda p: p.name)
def test_crd_has_exactly_one_storage_version_and_status_subresources(path: Path) -> None:
    versions = _load(path)[0]["spec"]["versions"]
    assert sum(1 for v in versions if v["storage"]) == 1
    assert all(v["served"] and v["subresources"]["status"] == {} for v in versions)


@pytest.mark.parametrize("path", ALL_CRD_FILES, ids=lambda p: p.name)
def test_every_schema_node_declares_a_type_and_never_mixes_property_styles(path: Path) -> None:
    for version in _load(path)[0]["spec"]["versions"]:
        for where, node in nodes(version["schema"]["openAPIV3Schema"]):
            untyped = node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields")
            assert "type" in node or untyped, f"{where} has no type"
            assert not ("properties" in node and "additionalProperties" in node), where
            if "properties" in node or "additionalProperties" in node:
                assert node["type"] == "object", where


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_list_map_keys_are_required_in_every_item(kind: str) -> None:
    lists = [n for _, n in nodes(schema_of(kind)) if n.get("x-kubernetes-list-type") == "map"]
    assert lists, "every mlgate kind keeps conditions as a map list"
    for node in lists:
        assert set(node["x-kubernetes-list-map-keys"]) <= set(node["items"]["required"])


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_printer_columns_point_at_fields_of_their_type(kind: str) -> None:
    (version,) = CRDS[kind]["spec"]["versions"]
    for column in version["additionalPrinterColumns"]:
        path = column["jsonPath"]
        if path == ".metadata.creationTimestamp":
            assert column["type"] == "date"
            continue
        node = node_at(schema_of(kind), path.replace("[*]", ".*").replace(".", "/"))
        assert node["type"] == column["type"], path


def test_mlgate_crds_are_the_five_kinds_in_one_group_version_and_category() -> None:
    assert set(CRDS) == MLGATE_KINDS
    for crd in CRDS.values():
        assert crd["spec"]["group"] == "mlgate.dev"
        assert [v["name"] for v in crd["spec"]["versions"]] == ["v1alpha1"]
        assert "ml" in crd["spec"]["names"]["categories"]
    cluster_scoped = {"ClusterMLPolicy", "ClusterWorkloadKind"}
    assert {CRDS[k]["spec"]["scope"] for k in cluster_scoped} == {"Cluster"}
    assert {CRDS[k]["spec"]["scope"] for k in MLGATE_KINDS - cluster_scoped} == {"Namespaced"}


def test_short_names_are_unique_across_every_crd_we_install() -> None:
    names = [n for p in ALL_CRD_FILES for n in _load(p)[0]["spec"]["names"].get("shortNames", [])]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("directory", [CRD_DIR, E2E_CRD_DIR], ids=["crds", "e2e_crds"])
def test_kustomization_lists_every_crd_file_once(directory: Path) -> None:
    (kustomization,) = _load(directory / "kustomization.yaml")
    files = [r for r in kustomization["resources"] if not r.startswith("../")]  # another directory's CRDs
    assert sorted(files) == [p.name for p in _crd_files(directory)]


BUILT_IN = {"v1", "batch/v1", "apps/v1"}
SERVED = {
    (f"{crd['spec']['group']}/{v['name']}", crd["spec"]["names"]["kind"])
    for crd in (_load(p)[0] for p in ALL_CRD_FILES)
    for v in crd["spec"]["versions"]
    if v["served"]
}
STORABLE_DOCS = [(f"examples/{p.name}", d) for p in sorted(EXAMPLES.glob("*.yaml")) for d in _load(p)]
# The real fixtures are judged offline; the ones of kinds the end-to-end tests install are stored there too.
E2E_KINDS = {"Job", "PyTorchJob", "TFJob", "XGBoostJob", "MPIJob", "JobSet", "LeaderWorkerSet", "RayCluster",
             "Workload", "Pod"}
REAL_DOCS = [(p.name, d) for p in sorted((ROOT / "tests" / "fixtures" / "real").glob("*.yaml")) for d in _load(p)]


@pytest.mark.parametrize(("name", "doc"), STORABLE_DOCS, ids=[f"{n}:{d['kind']}" for n, d in STORABLE_DOCS])
def test_a_bare_api_server_with_our_crds_can_store_every_example(name: str, doc: Obj) -> None:
    assert doc["apiVersion"] in BUILT_IN or (doc["apiVersion"], doc["kind"]) in SERVED


@pytest.mark.parametrize(("name", "doc"), REAL_DOCS, ids=[f"{n}:{d['kind']}" for n, d in REAL_DOCS])
def test_a_real_fixture_of_a_kind_the_e2e_tests_use_can_be_stored_there(name: str, doc: Obj) -> None:
    if doc["kind"] in E2E_KINDS:
        assert doc["apiVersion"] in BUILT_IN or (doc["apiVersion"], doc["kind"]) in SERVED


@pytest.mark.parametrize("field", ["/spec/resources", "/spec/template", "/status/conditions"])
def test_training_and_inference_share_field_shapes(field: str) -> None:
    training = without_descriptions(node_at(schema_of("TrainingJob"), field))
    assert training == without_descriptions(node_at(schema_of("InferenceService"), field))


def test_framework_enum_matches_the_renderer() -> None:
    assert set(node_at(schema_of("TrainingJob"), "/spec/framework")["enum"]) == set(render.MAIN_CONTAINER)


def test_policy_crds_share_one_schema() -> None:
    assert schema_of("MLPolicy")["properties"] == schema_of("ClusterMLPolicy")["properties"]


def test_policy_schema_follows_the_policy_model() -> None:
    spec = node_at(schema_of("ClusterMLPolicy"), "/spec")
    assert set(spec["properties"]) == set(PolicySpec.model_fields)
    assert set(spec["properties"]["match"]["properties"]) == set(MatchBlock.model_fields)
    rule = spec["properties"]["rules"]["items"]["properties"]
    assert set(rule) == set(RuleBinding.model_fields)
    assert rule["rule"]["pattern"] == RULE_ID.pattern
    assert rule["action"]["enum"] == [a.value for a in Action]
    assert spec["properties"]["failurePolicy"]["enum"] == [f.value for f in FailurePolicy]
    assert spec["properties"]["unknownKinds"]["enum"] == [u.value for u in UnknownKinds]
    expression = node_at(spec, "/match/namespaceSelector/matchExpressions/*/operator")
    assert expression["enum"] == list(get_args(Requirement.model_fields["operator"].annotation))


# --- objects the schemas accept --------------------------------------------------------------

MLGATE_EXAMPLES = [
    (p.name, d) for p in sorted(EXAMPLES.glob("*.yaml")) for d in _load(p) if d["kind"] in MLGATE_KINDS
]


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_loads_as_a_workload_mlgate_polices(path: Path) -> None:
    docs = list(read_documents([str(path)]))
    assert [d.error for d in docs] == [None]
    assert docs[0].data is not None and extract(docs[0].data) is not None


def test_examples_cover_both_workload_kinds() -> None:
    assert {d["kind"] for _, d in MLGATE_EXAMPLES} >= {"TrainingJob", "InferenceService"}


@pytest.mark.parametrize(("name", "doc"), MLGATE_EXAMPLES, ids=[n for n, _ in MLGATE_EXAMPLES])
def test_example_is_valid(name: str, doc: Obj) -> None:
    assert schema_errors(doc) == []
    assert cel_violations(doc) == []


def test_builders_trainingjob_is_valid() -> None:
    assert schema_errors(trainingjob()) == []
    assert cel_violations(trainingjob()) == []


POLICY_DOCS = [d for p in sorted(POLICIES.glob("*.yaml")) for d in _load(p) if d["kind"] in MLGATE_KINDS]
MINIMAL_POLICY: Obj = {
    "apiVersion": "mlgate.dev/v1alpha1",
    "kind": "MLPolicy",
    "metadata": {"name": "team-gpus", "namespace": "ml"},
    "spec": {
        "match": {"kinds": ["TrainingJob"], "objectSelector": {"matchExpressions": [
            {"key": "team", "operator": "In", "values": ["nlp"]}]}},
        "rules": [{"rule": "gpu.max", "action": "warn", "params": {"perContainer": 4}}],
    },
}


@pytest.mark.parametrize("doc", [MINIMAL_POLICY, *POLICY_DOCS], ids=lambda d: d["metadata"]["name"])
def test_policy_document_is_valid(doc: Obj) -> None:
    assert schema_errors(doc) == []
    assert cel_violations(doc) == []


# --- objects the schemas refuse: one change from a valid object each ------------------------

TJ = trainingjob()
ISVC = example("inferenceservice.yaml")

SCHEMA_REJECTS = [
    ("framework-caffe", TJ, "/spec/framework", "caffe", ("/spec/framework", "enum")),
    ("zero-replicas", TJ, "/spec/replicas", 0, ("/spec/replicas", "minimum")),
    ("replicas-as-text", TJ, "/spec/replicas", "2", ("/spec/replicas", "type")),
    ("negative-gpus", TJ, "/spec/resources/gpu", -1, ("/spec/resources/gpu", "minimum")),
    ("mig-without-memory", TJ, "/spec/resources/mig", "3g", ("/spec/resources/mig", "pattern")),
    ("mig-with-5-slices", TJ, "/spec/resources/mig", "5g.40gb", ("/spec/resources/mig", "pattern")),
    ("negative-cpu", TJ, "/spec/resources/cpu", "-1", ("/spec/resources/cpu", "pattern")),
    ("memory-as-list", TJ, "/spec/resources/memory", ["16Gi"], ("/spec/resources/memory", "anyOf")),
    ("no-image", TJ, "/spec/image", DELETE, ("/spec", "required")),
    ("numeric-hyperparameter", TJ, "/spec/hyperparameters", {"LR": 0.1}, ("/spec/hyperparameters/LR", "type")),
    ("relative-mount-path", TJ, "/spec/checkpoint", {"claimName": "c", "mountPath": "ckpt"},
     ("/spec/checkpoint/mountPath", "pattern")),
    ("uri-without-scheme", TJ, "/spec/checkpoint", {"uri": "bucket/ckpt"}, ("/spec/checkpoint/uri", "pattern")),
    ("unknown-scheduler", TJ, "/spec/scheduling/scheduler", "slurm", ("/spec/scheduling/scheduler", "enum")),
    ("zero-min-member", TJ, "/spec/scheduling/minMember", 0, ("/spec/scheduling/minMember", "minimum")),
    ("clean-pod-policy-sometimes", TJ, "/spec/runPolicy/cleanPodPolicy", "Sometimes",
     ("/spec/runPolicy/cleanPodPolicy", "enum")),
    ("negative-parameter-servers", TJ, "/spec/tensorflow/parameterServers", -1,
     ("/spec/tensorflow/parameterServers", "minimum")),
    ("phase-done", TJ, "/status/phase", "Done", ("/status/phase", "enum")),
    ("isvc-runtime-not-a-name", ISVC, "/spec/runtime", "Triton Server", ("/spec/runtime", "pattern")),
    ("isvc-no-model", ISVC, "/spec/modelUri", DELETE, ("/spec", "required")),
    ("isvc-canary-101", ISVC, "/spec/canaryTrafficPercent", 101, ("/spec/canaryTrafficPercent", "maximum")),
    ("isvc-target-0", ISVC, "/spec/scaling/targetUtilization", 0, ("/spec/scaling/targetUtilization", "minimum")),
    ("policy-action-block", MINIMAL_POLICY, "/spec/rules/0/action", "block", ("/spec/rules/0/action", "enum")),
    ("policy-rule-id-caps", MINIMAL_POLICY, "/spec/rules/0/rule", "GPU_MAX", ("/spec/rules/0/rule", "pattern")),
    ("policy-failure-maybe", MINIMAL_POLICY, "/spec/failurePolicy", "Maybe", ("/spec/failurePolicy", "enum")),
]


@pytest.mark.parametrize(
    ("case", "base", "ptr", "value", "expected"), SCHEMA_REJECTS, ids=[c[0] for c in SCHEMA_REJECTS]
)
def test_schema_rejects(case: str, base: Obj, ptr: str, value: Any, expected: tuple[str, str]) -> None:
    assert schema_errors(base) == []
    assert schema_errors(change(base, ptr, value)) == [expected]


CEL_REJECTS = [
    ("gpu-and-mig", TJ, "/spec/resources/mig", "1g.10gb", "set at most one of resources.gpu and resources.mig"),
    ("checkpoint-claim-and-uri", TJ, "/spec/checkpoint", {"claimName": "c", "mountPath": "/c", "uri": "s3://b/c"},
     "checkpoint needs claimName and mountPath, or uri, and not both"),
    ("checkpoint-claim-without-mount", TJ, "/spec/checkpoint", {"claimName": "c"},
     "checkpoint needs claimName and mountPath, or uri, and not both"),
    ("min-member-without-gang", TJ, "/spec/scheduling", {"minMember": 2},
     "scheduling.minMember needs scheduling.gang true"),
    ("tensorflow-settings-on-pytorch", TJ, "/spec/tensorflow", {"parameterServers": 1},
     "spec.tensorflow is used only by framework tensorflow"),
    ("isvc-min-over-max", ISVC, "/spec/scaling/minReplicas", 5,
     "scaling.minReplicas must not exceed scaling.maxReplicas"),
    ("isvc-canary-traffic-without-canary", ISVC, "/spec/canary", DELETE,
     "canaryTrafficPercent above 0 needs spec.canary"),
    ("isvc-empty-canary", ISVC, "/spec/canary", {}, "canary needs modelUri or image"),
    ("isvc-torchserve-onnx", ISVC, "/spec/runtime", "torchserve", "runtime torchserve serves only framework pytorch"),
    ("isvc-tf-serving-onnx", ISVC, "/spec/runtime", "tensorflow-serving",
     "runtime tensorflow-serving serves only framework tensorflow"),
    ("policy-in-without-values", MINIMAL_POLICY, "/spec/match/objectSelector/matchExpressions/0/values", DELETE,
     "In and NotIn need values; Exists and DoesNotExist take none"),
    ("policy-no-rules", MINIMAL_POLICY, "/spec/rules", [], "a policy needs rules, validations or mutations"),
]


@pytest.mark.parametrize(("case", "base", "ptr", "value", "message"), CEL_REJECTS, ids=[c[0] for c in CEL_REJECTS])
def test_cel_rejects_what_openapi_alone_accepts(case: str, base: Obj, ptr: str, value: Any, message: str) -> None:
    obj = change(base, ptr, value)
    assert schema_errors(obj) == []
    assert cel_violations(base) == []
    assert cel_violations(obj) == [message]


def test_cel_accepts_the_alternatives_each_rule_allows() -> None:
    mig = change(TJ, "/spec/resources", {"mig": "1g.10gb+me", "cpu": 2})
    claim = change(TJ, "/spec/checkpoint", {"claimName": "ckpt", "mountPath": "/ckpt"})
    gang = change(TJ, "/spec/scheduling", {"gang": True, "minMember": 2, "scheduler": "kueue"})
    tf = change(change(TJ, "/spec/framework", "tensorflow"), "/spec/tensorflow", {"parameterServers": 2})
    for obj in (mig, claim, gang, tf):
        assert schema_errors(obj) == []
        assert cel_violations(obj) == []


def test_framework_cannot_change_after_creation() -> None:
    assert cel_violations(change(TJ, "/spec/framework", "mpi"), old=TJ) == ["framework is immutable"]
    assert cel_violations(change(TJ, "/spec/replicas", 4), old=TJ) == []


def test_defaults_fill_framework_replicas_and_checkpoint_retention() -> None:
    obj = change(change(TJ, "/spec/framework", DELETE), "/spec/replicas", DELETE)
    spec = with_defaults(schema_of("TrainingJob"), change(obj, "/spec/checkpoint", {"uri": "s3://b/k"}))["spec"]
    assert (spec["framework"], spec["replicas"], spec["checkpoint"]["retain"]) == ("pytorch", 1, True)


def test_workload_kind_schema_follows_the_kind_model() -> None:
    spec = node_at(schema_of("ClusterWorkloadKind"), "/spec")
    assert set(spec["properties"]) == set(KindSpec.model_fields)
    assert set(spec["properties"]["templates"]["items"]["properties"]) == set(TemplateSource.model_fields)
    assert set(spec["required"]) == {name for name, f in KindSpec.model_fields.items() if f.is_required()}
