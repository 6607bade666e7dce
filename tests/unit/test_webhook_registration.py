"""manifests/webhooks.yaml registers exactly the kinds mlgate knows (mlgate/workloads/kinds.yaml), so the two
cannot drift: every version of every shipped kind is validated, the mutable ones are mutated, each rule is in
its kind's scope, every webhook has the safe settings, and only ML kinds fail closed. apps/v1 workloads and
CronJobs reach mlgate only when their pod template asks for a GPU or they opt in; their matchConditions are
evaluated here with cel-python against the GPU resource names mlgate's own rules read.

Each check is a function of the parsed documents that returns what is wrong. The tests run it on the shipped
file (nothing wrong) and on doctored copies (the fault named), so no check passes merely by being unable to fail.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlgate.model import pointer
from mlgate.model.kinds import KindSpec
from mlgate.rules.devices import BUILT_IN
from mlgate.workloads.catalog import SHIPPED
from mlgate.workloads.extract import extract
from mlgate_webhook.review import JUDGED_SUBRESOURCES

ROOT = Path(__file__).resolve().parents[2]
WEBHOOKS = ROOT / "manifests" / "webhooks.yaml"
REAL = ROOT / "tests" / "fixtures" / "real"
MUTATING, VALIDATING = "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"
OPT_IN = "mlgate.dev/ml-workload"
MAX_TIMEOUT = 10

GVR = tuple[str, str, str]  # group, version, resource
# mlgate's policy objects: validated (policies.validate.mlgate.dev) but not workloads, so not in kinds.yaml
POLICY_KINDS: dict[GVR, str] = {("mlgate.dev", "v1alpha1", "mlpolicies"): "Namespaced",
                                ("mlgate.dev", "v1alpha1", "clustermlpolicies"): "Cluster",
                                ("mlgate.dev", "v1alpha1", "clusterworkloadkinds"): "Cluster",
                                ("mlgate.dev", "v1alpha1", "mlpolicyexceptions"): "Namespaced"}
# Pod subresources the webhook judges (review.JUDGED_SUBRESOURCES): `kubectl debug`'s ephemeral containers
SUBRESOURCES: dict[GVR, str] = {("", "v1", f"pods/{s}"): "Namespaced" for s in JUDGED_SUBRESOURCES}
# Mutable kinds the mutating webhook leaves alone: a Pod is built by its operator from a template mlgate has
# already mutated, and mutated alone it would be regrouped as a gang of one.
NOT_MUTATED: set[GVR] = {("", "v1", "pods")}
# Groups whose kinds are mostly not ML: never fail closed on them (an outage must not stop ordinary apps).
GENERAL_GROUPS = {"", "apps", "batch"}
# Kinds that reach mlgate only through a GPU-or-opt-in matchCondition.
CONDITIONAL = {("apps", "deployments"), ("apps", "statefulsets"), ("apps", "daemonsets"), ("apps", "replicasets"),
               ("batch", "cronjobs")}

Documents = list[dict[str, Any]]


# --- reading the manifest ------------------------------------------------------------------------------------------

def load() -> Documents:
    return [d for d in yaml.safe_load_all(WEBHOOKS.read_text(encoding="utf-8")) if d]


def hooks(docs: Documents, kind: str | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    for doc in docs:
        if kind is None or doc["kind"] == kind:
            for hook in doc["webhooks"]:
                yield doc["kind"], hook


def named(hook: dict[str, Any]) -> set[GVR]:
    return {(g, v, r) for rule in hook.get("rules") or [] for g in rule["apiGroups"] for v in rule["apiVersions"]
            for r in rule["resources"]}


def named_by(docs: Documents, kind: str) -> set[GVR]:
    return {gvr for _, hook in hooks(docs, kind) for gvr in named(hook)}


def gvrs(kinds: Iterable[KindSpec]) -> set[GVR]:
    # a kind without versions means every version: a rule would need "*", which nothing here writes
    return {(k.group, v, k.resource) for k in kinds for v in (k.versions or ["*"])}


def scopes(kinds: Iterable[KindSpec]) -> dict[tuple[str, str], str]:
    known = {(k.group, k.resource): k.scope for k in kinds}
    known.update({(g, r): scope for (g, _, r), scope in (POLICY_KINDS | SUBRESOURCES).items()})
    return known


# --- the checks: each returns what is wrong ------------------------------------------------------------------------

def validation_drift(docs: Documents, kinds: Iterable[KindSpec] = SHIPPED.kinds) -> list[str]:
    want, have = gvrs(kinds) | set(POLICY_KINDS) | set(SUBRESOURCES), named_by(docs, VALIDATING)
    return ([f"not validated: {gvr}" for gvr in sorted(want - have)]
            + [f"validated but no shipped kind: {gvr}" for gvr in sorted(have - want)])


def mutation_drift(docs: Documents, kinds: Iterable[KindSpec] = SHIPPED.kinds) -> list[str]:
    kinds = tuple(kinds)
    want = gvrs(k for k in kinds if k.mutable) - NOT_MUTATED
    have = named_by(docs, MUTATING)
    return ([f"not mutated: {gvr}" for gvr in sorted(want - have)]
            + [f"mutated but not a mutable shipped kind: {gvr}" for gvr in sorted(have - want)])


def unsafe_settings(docs: Documents) -> list[str]:
    wrong = []
    for _, hook in hooks(docs):
        name = hook.get("name")
        if hook.get("failurePolicy") not in ("Fail", "Ignore"):
            wrong.append(f"{name}: failurePolicy {hook.get('failurePolicy')!r}")
        timeout = hook.get("timeoutSeconds")
        if not isinstance(timeout, int) or not 1 <= timeout <= MAX_TIMEOUT:
            wrong.append(f"{name}: timeoutSeconds {timeout!r}")
        if hook.get("admissionReviewVersions") != ["v1"]:
            wrong.append(f"{name}: admissionReviewVersions {hook.get('admissionReviewVersions')!r}")
        if hook.get("sideEffects") != "None":
            wrong.append(f"{name}: sideEffects {hook.get('sideEffects')!r}")
        if hook.get("matchConditions"):  # `object` is null on DELETE and CONNECT: the conditions assume it is not
            for rule in hook["rules"]:
                if not set(rule["operations"]) <= {"CREATE", "UPDATE"}:
                    wrong.append(f"{name}: matchConditions with operations {rule['operations']}")
    return wrong


def scope_errors(docs: Documents, kinds: Iterable[KindSpec] = SHIPPED.kinds) -> list[str]:
    known, wrong = scopes(kinds), []
    for _, hook in hooks(docs):
        for rule in hook["rules"]:
            scope = rule.get("scope", "*")
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    want = known.get((group, resource))
                    if want is None:
                        wrong.append(f"{hook['name']}: {group}/{resource} is no kind mlgate knows")
                    elif scope not in (want, "*"):
                        wrong.append(f"{hook['name']}: {group}/{resource} is {want} but its rule says {scope}")
    return wrong


def fail_closed_beyond_ml_kinds(docs: Documents, kinds: Iterable[KindSpec] = SHIPPED.kinds) -> list[str]:
    known, wrong = scopes(kinds), []
    for _, hook in hooks(docs):
        if hook.get("failurePolicy") != "Fail":
            continue
        for group, _, resource in sorted(named(hook)):
            if group in GENERAL_GROUPS and not ml_owned_only(hook):
                wrong.append(f"{hook['name']} fails closed on {group or 'core'}/{resource}")
            if known.get((group, resource)) == "Cluster":  # no namespace can opt out of a cluster-scoped rule
                wrong.append(f"{hook['name']} fails closed on cluster-scoped {group}/{resource}")
    return wrong


def ml_owned_only(hook: dict[str, Any]) -> bool:
    """A webhook on Pod subresources, only for Pods an ML job owns: it may fail closed on a core resource."""
    return named(hook) <= set(SUBRESOURCES) and any(
        c["name"] == "owned-by-an-ml-job" for c in hook.get("matchConditions") or [])


def unconditional_general_kinds(docs: Documents) -> list[str]:
    wrong = []
    for _, hook in hooks(docs):
        matched = {(g, r) for g, _, r in named(hook)}
        if matched & CONDITIONAL:
            names = {c["name"] for c in hook.get("matchConditions") or []}
            if "gpu-or-opted-in" not in names:
                wrong.append(f"{hook['name']} matches {sorted(matched & CONDITIONAL)} without gpu-or-opted-in")
            if matched - CONDITIONAL:
                wrong.append(f"{hook['name']} shares its matchConditions with {sorted(matched - CONDITIONAL)}")
    return wrong


CHECKS: dict[str, Callable[[Documents], list[str]]] = {
    "validation_drift": validation_drift, "mutation_drift": mutation_drift, "unsafe_settings": unsafe_settings,
    "scope_errors": scope_errors, "fail_closed_beyond_ml_kinds": fail_closed_beyond_ml_kinds,
    "unconditional_general_kinds": unconditional_general_kinds,
}


# --- doctoring a copy ----------------------------------------------------------------------------------------------

def hook_named(docs: Documents, name: str) -> dict[str, Any]:
    (hook,) = [h for _, h in hooks(docs) if h["name"] == name]
    return hook


def rule_naming(docs: Documents, kind: str, group: str, resource: str) -> dict[str, Any]:
    return next(rule for _, hook in hooks(docs, kind) for rule in hook["rules"]
                if group in rule["apiGroups"] and resource in rule["resources"])


def drop(docs: Documents, kind: str, group: str, resource: str) -> None:
    for _, hook in hooks(docs, kind):
        for rule in hook["rules"]:
            if group in rule["apiGroups"]:
                rule["resources"] = [r for r in rule["resources"] if r != resource]
        hook["rules"] = [rule for rule in hook["rules"] if rule["resources"]]


def add_rule(docs: Documents, hook: str, group: str, versions: list[str], resource: str, scope: str) -> None:
    hook_named(docs, hook)["rules"].append({"apiGroups": [group], "apiVersions": versions,
                                            "operations": ["CREATE", "UPDATE"], "resources": [resource],
                                            "scope": scope})


def drop_version(docs: Documents, kind: str, group: str, resource: str, version: str) -> None:
    rule = rule_naming(docs, kind, group, resource)
    rule["apiVersions"] = [v for v in rule["apiVersions"] if v != version]


def set_field(hook: str, field: str, value: Any) -> Callable[[Documents], None]:
    def doctor(docs: Documents) -> None:
        if value is None:
            hook_named(docs, hook).pop(field)
        else:
            hook_named(docs, hook)[field] = value
    return doctor


def set_scope(kind: str, group: str, resource: str, scope: str) -> Callable[[Documents], None]:
    def doctor(docs: Documents) -> None:
        rule_naming(docs, kind, group, resource)["scope"] = scope
    return doctor


DOCTORED: list[tuple[str, Callable[[Documents], None], str, str]] = [
    # (what is wrong, the doctoring, the check that must see it, a phrase of its message)
    ("a kind dropped from validation", lambda d: drop(d, VALIDATING, "kubeflow.org", "pytorchjobs"),
     "validation_drift", "not validated: ('kubeflow.org', 'v1', 'pytorchjobs')"),
    ("Pods dropped from validation", lambda d: drop(d, VALIDATING, "", "pods"),
     "validation_drift", "not validated: ('', 'v1', 'pods')"),
    ("a cluster-scoped kind dropped", lambda d: drop(d, VALIDATING, "argoproj.io", "clusterworkflowtemplates"),
     "validation_drift", "not validated: ('argoproj.io', 'v1alpha1', 'clusterworkflowtemplates')"),
    ("one version of a kind dropped", lambda d: drop_version(d, VALIDATING, "kubeflow.org", "mpijobs", "v2beta1"),
     "validation_drift", "not validated: ('kubeflow.org', 'v2beta1', 'mpijobs')"),
    ("a kind nobody ships", lambda d: add_rule(d, "ml-jobs.validate.mlgate.dev", "example.com", ["v1"], "foos",
                                               "Namespaced"),
     "validation_drift", "validated but no shipped kind: ('example.com', 'v1', 'foos')"),
    ("a mutable kind not mutated", lambda d: drop(d, MUTATING, "ray.io", "rayjobs"),
     "mutation_drift", "not mutated: ('ray.io', 'v1', 'rayjobs')"),
    ("an operator-rendered kind mutated", lambda d: add_rule(d, "jobs.mutate.mlgate.dev", "trainer.kubeflow.org",
                                                             ["v1alpha1"], "trainjobs", "Namespaced"),
     "mutation_drift", "mutated but not a mutable shipped kind: ('trainer.kubeflow.org', 'v1alpha1', 'trainjobs')"),
    ("Pods mutated", lambda d: add_rule(d, "jobs.mutate.mlgate.dev", "", ["v1"], "pods", "Namespaced"),
     "mutation_drift", "mutated but not a mutable shipped kind: ('', 'v1', 'pods')"),
    ("a long timeout", set_field("ml-jobs.validate.mlgate.dev", "timeoutSeconds", 30),
     "unsafe_settings", "timeoutSeconds 30"),
    ("no failurePolicy (the API server's default is Fail)", set_field("runtimes.validate.mlgate.dev",
                                                                      "failurePolicy", None),
     "unsafe_settings", "failurePolicy None"),
    ("side effects", set_field("jobs.mutate.mlgate.dev", "sideEffects", "Some"), "unsafe_settings", "sideEffects"),
    ("an old review version", set_field("policies.validate.mlgate.dev", "admissionReviewVersions", ["v1", "v1beta1"]),
     "unsafe_settings", "admissionReviewVersions"),
    ("matchConditions on DELETE", lambda d: rule_naming(d, VALIDATING, "apps", "deployments")["operations"]
     .append("DELETE"), "unsafe_settings", "matchConditions with operations"),
    ("a cluster-scoped kind under Namespaced", set_scope(VALIDATING, "trainer.kubeflow.org", "clustertrainingruntimes",
                                                         "Namespaced"),
     "scope_errors", "clustertrainingruntimes is Cluster but its rule says Namespaced"),
    ("a namespaced kind under Cluster", set_scope(MUTATING, "ray.io", "rayclusters", "Cluster"),
     "scope_errors", "rayclusters is Namespaced but its rule says Cluster"),
    ("Deployments fail closed", set_field("apps-workloads.validate.mlgate.dev", "failurePolicy", "Fail"),
     "fail_closed_beyond_ml_kinds", "fails closed on apps/deployments"),
    ("a cluster-scoped kind fails closed", set_field("runtimes.validate.mlgate.dev", "failurePolicy", "Fail"),
     "fail_closed_beyond_ml_kinds", "fails closed on cluster-scoped trainer.kubeflow.org/clustertrainingruntimes"),
    ("CronJobs without their condition", set_field("cronjobs.validate.mlgate.dev", "matchConditions", None),
     "unconditional_general_kinds", "without gpu-or-opted-in"),
    ("an ML kind behind the GPU condition", lambda d: add_rule(d, "apps-workloads.validate.mlgate.dev", "ray.io",
                                                               ["v1"], "rayjobs", "Namespaced"),
     "unconditional_general_kinds", "shares its matchConditions with [('ray.io', 'rayjobs')]"),
]


# --- registration --------------------------------------------------------------------------------------------------

def test_the_validating_webhooks_name_every_version_of_every_shipped_kind_and_nothing_else():
    assert ("", "v1", "pods") in gvrs(SHIPPED.kinds)  # Pods are held to the same account
    assert all(k.versions for k in SHIPPED.kinds), "a kind with no versions would need an apiVersions '*' rule"
    assert validation_drift(load()) == []


def test_the_mutating_webhooks_name_exactly_the_mutable_kinds_but_pods():
    shipped_pods = {k.resource for k in SHIPPED.kinds if k.group == "" and k.mutable}
    assert shipped_pods == {"pods"}  # the one exception is a deliberate one
    assert mutation_drift(load()) == []
    rendered = gvrs(k for k in SHIPPED.kinds if not k.mutable)
    assert rendered and not rendered & named_by(load(), MUTATING)


def test_a_kind_added_to_the_shipped_table_is_missing_until_it_is_registered():
    extra = KindSpec(group="example.com", versions=["v1", "v2"], kind="Foo", resource="foos",
                     templates=[{"pointer": "/spec/template", "role": "pod"}])
    kinds = (*SHIPPED.kinds, extra)
    assert validation_drift(load(), kinds) == ["not validated: ('example.com', 'v1', 'foos')",
                                               "not validated: ('example.com', 'v2', 'foos')"]
    assert mutation_drift(load(), kinds) == ["not mutated: ('example.com', 'v1', 'foos')",
                                             "not mutated: ('example.com', 'v2', 'foos')"]
    frozen = extra.model_copy(update={"mutable": False})
    assert mutation_drift(load(), (*SHIPPED.kinds, frozen)) == []


def test_every_webhook_has_a_failure_policy_a_short_timeout_v1_reviews_and_no_side_effects():
    assert unsafe_settings(load()) == []


def test_every_rule_is_scoped_as_its_kind_is():
    docs = load()
    assert scope_errors(docs) == []
    cluster = {(k.group, k.resource) for k in SHIPPED.kinds if k.scope == "Cluster"}
    assert cluster == {("trainer.kubeflow.org", "clustertrainingruntimes"),
                       ("serving.kserve.io", "clusterservingruntimes"), ("argoproj.io", "clusterworkflowtemplates")}
    for group, resource in cluster:  # registered, in a rule of their own scope
        rules = [rule for _, hook in hooks(docs, VALIDATING) for rule in hook["rules"]
                 if group in rule["apiGroups"] and resource in rule["resources"]]
        assert rules and all(rule.get("scope", "*") in ("Cluster", "*") for rule in rules)


def test_only_namespaced_ml_kinds_fail_closed():
    docs = load()
    assert fail_closed_beyond_ml_kinds(docs) == []
    failing = {r for _, hook in hooks(docs) if hook["failurePolicy"] == "Fail" for _, _, r in named(hook)}
    assert {"pytorchjobs", "trainjobs", "jobsets", "rayjobs", "inferenceservices"} <= failing


def test_apps_workloads_and_cronjobs_are_matched_only_through_the_gpu_condition():
    docs = load()
    assert unconditional_general_kinds(docs) == []
    for kind in (MUTATING, VALIDATING):
        matched = {(g, r) for _, hook in hooks(docs, kind) if hook.get("matchConditions") and not ml_owned_only(hook)
                   for g, _, r in named(hook)}
        assert matched == CONDITIONAL


def test_every_webhook_says_why_it_has_its_failure_policy():
    text, docs = WEBHOOKS.read_text(encoding="utf-8"), load()
    for _, hook in hooks(docs):
        reason = re.search(rf"- name: {re.escape(hook['name'])}\n\s*# (\w+)", text)
        assert reason and reason.group(1) == hook["failurePolicy"], hook["name"]


@pytest.mark.parametrize(("doctor", "check", "fault"), [pytest.param(*d[1:], id=d[0]) for d in DOCTORED])
def test_a_doctored_manifest_is_caught(doctor: Callable[[Documents], None], check: str, fault: str):
    docs = load()
    doctor(docs)
    found = CHECKS[check](docs)
    assert any(fault in line for line in found), found
    assert CHECKS[check](load()) == []


def test_every_check_is_shown_to_fail_at_least_once():
    assert {d[2] for d in DOCTORED} == set(CHECKS)


# --- the matchConditions, evaluated --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cel() -> Any:
    return pytest.importorskip("celpy", reason="cel-python is needed to evaluate matchConditions")


def sends(cel: Any, hook: dict[str, Any], obj: dict[str, Any]) -> bool:
    """Whether the API server would call `hook` for `obj`: every matchCondition true (an error would raise)."""
    env = cel.Environment()
    for condition in hook.get("matchConditions") or []:
        result = env.program(env.compile(condition["expression"])).evaluate({"object": cel.json_to_cel(obj)})
        assert isinstance(result, cel.celtypes.BoolType), f"{hook['name']}/{condition['name']}: {result!r}"
        if not bool(result):
            return False
    return True


def hooks_for(docs: Documents, kind: str, group: str, resource: str) -> list[dict[str, Any]]:
    return [hook for _, hook in hooks(docs, kind) if any(g == group and r == resource for g, _, r in named(hook))]


def pod_spec_pointer(spec: KindSpec) -> str:
    (template,) = spec.templates
    return template.pointer + ("/spec" if template.shape == "PodTemplateSpec" else "")


def conditional_kinds() -> list[KindSpec]:
    return [k for k in SHIPPED.kinds if (k.group, k.resource) in CONDITIONAL]


def skeleton(spec: KindSpec, containers: list[dict[str, Any]], **pod: Any) -> dict[str, Any]:
    """An object of `spec`'s kind with the pod spec where kinds.yaml says its template lives."""
    obj: dict[str, Any] = {"apiVersion": f"{spec.group}/{spec.versions[0]}", "kind": spec.kind,
                           "metadata": {"name": "x", "namespace": "team"}}
    node = obj
    for token in pointer.split(pod_spec_pointer(spec)):
        node = node.setdefault(token, {})
    node.update(containers=containers, **pod)
    return obj


# every device and sharing resource name rules/devices.py names, and near misses of them
RESOURCE_NAMES = ["nvidia.com/gpu", "amd.com/gpu", "gpu.intel.com/i915", "gpu.intel.com/xe", "nvidia.com/mig-1g.5gb",
                  "nvidia.com/mig-1g.10gb.me", "nvidia.com/mig-1g.24gb.me.all", "nvidia.com/mig-1g.24gb-me",
                  "nvidia.com/mig-7g.80gb", "amd.com/cpx_nps4", "amd.com/spx_nps1",
                  "nvidia.com/gpu.shared", "nvidia.com/mig-1g.5gb.shared", "nvidia.com/gpumem", "nvidia.com/gpucores",
                  "nvidia.com/gpumem-percentage", "gpu.intel.com/millicores", "gpu.intel.com/memory.max",
                  "gpu.intel.com/tiles", "gpu.intel.com/monitoring", "amd.com/gpumem", "nvidia.com/mig-x",
                  "cpu", "memory", "example.com/fpga", "nvidia.com/vgpu-not-a-gpu-here", "amd.com/xilinx"]


@pytest.mark.parametrize("resource", RESOURCE_NAMES)
def test_the_condition_sees_a_gpu_exactly_where_mlgates_gpu_rules_do(cel: Any, resource: str):
    docs = load()
    for spec in conditional_kinds():
        for kind in (MUTATING, VALIDATING):
            for hook in hooks_for(docs, kind, spec.group, spec.resource):
                main = {"name": "main", "image": "x", "resources": {"limits": {resource: "1"}}}
                plain = {"name": "main", "image": "x"}
                assert sends(cel, hook, skeleton(spec, [main])) is (resource in BUILT_IN), (hook["name"], spec.kind)
                assert sends(cel, hook, skeleton(spec, [plain], initContainers=[main])) is (resource in BUILT_IN)
                assert sends(cel, hook, skeleton(spec, [plain])) is False


def test_the_condition_agrees_with_the_engine_on_real_manifests(cel: Any):
    docs, seen = load(), set()
    for path in sorted(REAL.glob("*.yaml")):
        for obj in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            spec = SHIPPED.find(str(obj.get("apiVersion")), str(obj.get("kind"))) if obj else None
            if spec is None or (spec.group, spec.resource) not in CONDITIONAL:
                continue
            workload = extract(obj)
            assert workload is not None
            gpu = any(str(name) in BUILT_IN for t in workload.templates for _, _, c in t.containers()
                      for name in ((c.get("resources") or {}).get("limits") or {}))
            seen.add((spec.kind, gpu))
            for hook in hooks_for(docs, VALIDATING, spec.group, spec.resource):
                assert sends(cel, hook, obj) is gpu, (path.name, hook["name"])
    assert ("Deployment", True) in seen and ("Deployment", False) in seen and ("CronJob", False) in seen


@pytest.mark.parametrize(("labels", "sent"), [({OPT_IN: "true"}, True), ({OPT_IN: "false"}, False),
                                              ({"app": OPT_IN}, False), ({}, False)])
def test_a_workload_without_a_gpu_is_sent_only_when_labelled_as_an_ml_workload(cel: Any, labels: dict, sent: bool):
    docs = load()
    for spec in conditional_kinds():
        obj = skeleton(spec, [{"name": "main", "image": "x", "resources": {"limits": {"cpu": "4"}}}])
        obj["metadata"]["labels"] = labels
        for kind in (MUTATING, VALIDATING):
            (hook,) = hooks_for(docs, kind, spec.group, spec.resource)
            assert sends(cel, hook, obj) is sent, (hook["name"], spec.kind)


def test_what_a_controller_owns_is_validated_but_never_mutated(cel: Any):
    docs = load()
    owner = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d", "uid": "u", "controller": True}
    bystander = dict(owner, controller=False)
    for spec in conditional_kinds():
        gpu = skeleton(spec, [{"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}])
        owned, referenced = copy.deepcopy(gpu), copy.deepcopy(gpu)
        owned["metadata"]["ownerReferences"] = [bystander, owner]
        referenced["metadata"]["ownerReferences"] = [bystander]
        (mutate,) = hooks_for(docs, MUTATING, spec.group, spec.resource)
        (validate,) = hooks_for(docs, VALIDATING, spec.group, spec.resource)
        assert sends(cel, mutate, gpu) and sends(cel, mutate, referenced)
        assert not sends(cel, mutate, owned), spec.kind
        assert sends(cel, validate, owned), spec.kind


def test_kubectl_debug_into_a_pod_an_ml_job_owns_is_judged_and_fails_closed(cel: Any) -> None:
    (hook,) = [h for _, h in hooks(load(), VALIDATING) if named(h) & set(SUBRESOURCES)]
    assert hook["failurePolicy"] == "Fail" and ml_owned_only(hook)
    assert [r["operations"] for r in hook["rules"]] == [["UPDATE"]]
    for labels, owned in (({"training.kubeflow.org/job-name": "mnist"}, True), ({"ray.io/cluster": "rc"}, True),
                          ({"app": "web"}, False), (None, False)):
        pod = {"metadata": {"name": "p", **({"labels": labels} if labels is not None else {})}}
        assert sends(cel, hook, pod) is owned, labels
