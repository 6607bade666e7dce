"""ValidatingAdmissionPolicies read by the CLI: paired with bindings, matched, judged on the object as served.

tests/e2e/test_e2e_vap_conformance.py holds the same judgements to the real API server's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from mlgate.engine import PolicySet, evaluate
from mlgate.loading.policies import PolicyLoadError, load_policy_paths
from mlgate.model.facts import StaticFacts
from mlgate.model.results import Outcome
from mlgate.rules.cel.served import guess_resource, served

PODS = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}


def vap(name: str, validations: list[dict[str, Any]], rules: list[dict[str, Any]] | None = None,
        **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {"matchConstraints": {"resourceRules": rules or [PODS]}, "validations": validations, **spec}}


def binding(policy: str, actions: list[str], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": f"{policy}-binding"},
            "spec": {"policyName": policy, "validationActions": actions, **spec}}


def load(tmp_path: Path, *documents: dict[str, Any]) -> PolicySet:
    path = tmp_path / "vap.yaml"
    path.write_text(yaml.safe_dump_all(documents), encoding="utf-8")
    return load_policy_paths([path])


def load_errors(tmp_path: Path, *documents: dict[str, Any]) -> list[str]:
    with pytest.raises(PolicyLoadError) as caught:
        load(tmp_path, *documents)
    return [str(e) for e in caught.value.errors]


def pod(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"},
            "spec": {"containers": [{"name": "c", "image": "registry.corp/train:1.0"}], **spec}}


def test_a_denying_binding_denies_with_the_validations_message(tmp_path):
    policies = load(tmp_path, vap("no-host-network", [{"expression": "!object.spec.?hostNetwork.orValue(false)",
                                                       "message": "no host network"}]),
                    binding("no-host-network", ["Deny"]))
    decision = evaluate(pod(hostNetwork=True), policies)
    assert not decision.allowed
    assert [(r.policy, r.rule, [f.reason for f in r.findings]) for r in decision.results] == [
        ("no-host-network@no-host-network-binding", "validations[0]", ["no host network"])]
    assert evaluate(pod(), policies).allowed


def test_a_warn_binding_admits_with_a_warning_and_a_message_made_from_the_expression(tmp_path):
    policies = load(tmp_path, vap("p", [{"expression": "object.spec.?hostNetwork.orValue(false) == false"}]),
                    binding("p", ["Warn", "Audit"]))
    decision = evaluate(pod(hostNetwork=True), policies)
    assert decision.allowed
    assert [(r.outcome, r.findings[0].reason) for r in decision.results] == [
        (Outcome.WARN, "failed expression: object.spec.?hostNetwork.orValue(false) == false")]


def test_the_policy_judges_the_object_with_the_api_servers_defaults(tmp_path):
    policies = load(tmp_path, vap("restart", [{"expression": "object.spec.restartPolicy != 'Always'"}]),
                    binding("restart", ["Deny"]))
    assert not evaluate(pod(), policies).allowed
    assert evaluate(pod(restartPolicy="Never"), policies).allowed


def test_a_service_without_pod_templates_is_judged_with_its_default_type(tmp_path):
    services = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"], "resources": ["services"]}
    policies = load(tmp_path, vap("svc", [{"expression": "object.spec.type == 'ClusterIP'"}], [services]),
                    binding("svc", ["Deny"]))
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "ml"},
               "spec": {"ports": [{"port": 80}]}}
    assert evaluate(service, policies).allowed
    node_port = {**service, "spec": {"type": "NodePort", "ports": [{"port": 80}]}}
    assert not evaluate(node_port, policies).allowed
    assert evaluate(pod(), policies).results == []  # a Pod is not a service


def test_resource_rules_match_on_the_operation_and_the_objects_labels(tmp_path):
    update_only = {**PODS, "operations": ["UPDATE"]}
    policies = load(tmp_path, vap("p", [{"expression": "false"}], [update_only]),
                    binding("p", ["Deny"], matchResources={"objectSelector": {"matchLabels": {"judged": "yes"}}}))
    labelled = {**pod(), "metadata": {"name": "p", "namespace": "ml", "labels": {"judged": "yes"}}}
    assert evaluate(labelled, policies).allowed  # a CREATE
    assert not evaluate(labelled, policies, operation="UPDATE", old_obj=pod()).allowed
    assert evaluate(pod(), policies, operation="UPDATE", old_obj=pod()).allowed  # not selected


def test_a_runtime_error_denies_under_fail_and_admits_under_ignore(tmp_path):
    missing = [{"expression": "object.spec.nodeSelector['pool'] == 'gpu'"}]
    failing = load(tmp_path, vap("p", missing), binding("p", ["Deny"]))
    assert [r.outcome for r in evaluate(pod(), failing).results] == [Outcome.ERROR]
    assert not evaluate(pod(), failing).allowed
    ignoring = load(tmp_path, vap("p", missing, failurePolicy="Ignore"), binding("p", ["Deny"]))
    assert evaluate(pod(), ignoring).allowed


def test_a_gpu_count_written_as_an_integer_reaches_the_expression_as_a_string():
    limits = {"nvidia.com/gpu": 8, "cpu": 0.5, "memory": "1Gi"}
    obj = served(pod(containers=[{"name": "c", "image": "x", "resources": {"limits": limits}}]))
    assert obj["spec"]["containers"][0]["resources"] == {
        "limits": {"nvidia.com/gpu": "8", "cpu": "500m", "memory": "1Gi"},
        "requests": {"nvidia.com/gpu": "8", "cpu": "500m", "memory": "1Gi"}}


def test_custom_resources_are_not_given_built_in_defaults():
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "spec": {"x": 1}}
    assert served(job) is job


def test_resources_are_guessed_from_kinds_as_the_rest_mapper_guesses_them():
    assert [guess_resource(k) for k in ("Pod", "Ingress", "NetworkPolicy", "Endpoints", "PyTorchJob")] == [
        "pods", "ingresses", "networkpolicies", "endpoints", "pytorchjobs"]


def test_a_binding_that_names_no_loaded_policy_is_a_load_error(tmp_path):
    assert load_errors(tmp_path, binding("missing", ["Deny"])) == [  # at the line of policyName
        f"{tmp_path / 'vap.yaml'}:6: spec.policyName: no ValidatingAdmissionPolicy 'missing' is loaded; loaded: none"]


def test_mlgates_own_variables_and_the_authorizer_are_refused_at_load(tmp_path):
    errors = load_errors(tmp_path, vap("p", [{"expression": "workload.pods < 4"},
                                             {"expression": "authorizer.group('').resource('pods').check('get')"
                                                            ".allowed()"}]), binding("p", ["Deny"]))
    assert len(errors) == 2, errors
    assert "workload is not a variable of this ValidatingAdmissionPolicy" in errors[0]
    assert "the authorizer is a Kubernetes CEL library mlgate does not support" in errors[1]


def test_a_type_error_is_refused_at_load_with_its_line_and_cel_column(tmp_path):
    errors = load_errors(tmp_path, vap("p", [{"expression": "object.spec.containers.size() == 'one'"}]),
                         binding("p", ["Deny"]))
    assert len(errors) == 1 and "spec.validations[0].expression: CEL 1:" in errors[0], errors
    assert "no matching overload" in errors[0]


PARAMS = {"paramKind": {"apiVersion": "v1", "kind": "ConfigMap"}}
MAX_GPUS = [{"expression": "object.spec.containers.all(c, int(c.resources.?limits[?'nvidia.com/gpu'].orValue('0')) "
                           "<= int(params.data.maxGpus))",
             "messageExpression": "'at most ' + params.data.maxGpus + ' GPUs per container'"}]


def gpu_pod(count: int) -> dict[str, Any]:
    return pod(containers=[{"name": "c", "image": "x:1", "resources": {"limits": {"nvidia.com/gpu": count}}}])


def limits(namespace: str, value: str, name: str = "gpu-limits", **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "data": {"maxGpus": value},
            "metadata": {"name": name, "namespace": namespace, "labels": labels}}


def test_params_come_from_the_cluster_facts_in_the_objects_namespace(tmp_path):
    policies = load(tmp_path, vap("gpus", MAX_GPUS, **PARAMS),
                    binding("gpus", ["Deny"], paramRef={"name": "gpu-limits", "parameterNotFoundAction": "Deny"}))
    facts = StaticFacts.from_objects([limits("ml", "4"), limits("other", "16")])
    denied = evaluate(gpu_pod(8), policies, facts=facts)
    assert [f.reason for r in denied.results for f in r.findings] == ["at most 4 GPUs per container"]
    assert evaluate(gpu_pod(2), policies, facts=facts).allowed


def test_a_selector_judges_with_every_params_object_it_selects(tmp_path):
    policies = load(tmp_path, vap("gpus", MAX_GPUS, **PARAMS),
                    binding("gpus", ["Deny"], paramRef={"selector": {"matchLabels": {"kind": "limits"}},
                                                        "parameterNotFoundAction": "Allow"}))
    facts = StaticFacts.from_objects([limits("ml", "4", "a", kind="limits"), limits("ml", "2", "b", kind="limits")])
    denied = evaluate(gpu_pod(3), policies, facts=facts)
    assert [f.reason for r in denied.results for f in r.findings] == ["at most 2 GPUs per container"]


def test_missing_params_deny_under_fail_allow_when_asked_and_are_unchecked_without_facts(tmp_path):
    def outcome(not_found: str, facts: StaticFacts | None) -> Outcome:
        policies = load(tmp_path, vap("gpus", MAX_GPUS, **PARAMS),
                        binding("gpus", ["Deny"], paramRef={"name": "gpu-limits",
                                                            "parameterNotFoundAction": not_found}))
        kwargs = {} if facts is None else {"facts": facts}
        return evaluate(gpu_pod(8), policies, **kwargs).results[0].outcome

    other_namespace = StaticFacts.from_objects([limits("other", "4")])
    assert outcome("Deny", other_namespace) is Outcome.ERROR
    assert outcome("Allow", other_namespace) is Outcome.SKIP
    assert outcome("Deny", None) is Outcome.SKIP


def test_a_binding_without_the_paramref_its_policy_needs_is_a_load_error(tmp_path):
    errors = load_errors(tmp_path, vap("gpus", MAX_GPUS, **PARAMS), binding("gpus", ["Deny"]))
    text = (tmp_path / "vap.yaml").read_text("utf-8").splitlines()
    spec_line = max(i for i, line in enumerate(text, 1) if line == "spec:")  # the binding's: it has no paramRef
    assert errors == [f"{tmp_path / 'vap.yaml'}:{spec_line}: spec.paramRef: binding 'gpus-binding' needs a paramRef: "
                      "the policy's paramKind is ConfigMap"]


def test_a_field_named_like_a_variable_is_not_taken_for_one(tmp_path):
    policies = load(tmp_path, vap("replicas", [{"expression": "object.spec.template.spec.restartPolicy == 'Always'"}],
                                  [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"],
                                    "resources": ["deployments"]}]), binding("replicas", ["Deny"]))
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "ml"},
                  "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x:1"}]}}}}
    assert evaluate(deployment, policies).allowed


def test_a_namespace_selector_judged_without_facts_says_it_could_not_check(tmp_path):
    policies = load(tmp_path, vap("p", [{"expression": "false"}]),
                    binding("p", ["Deny"], matchResources={"namespaceSelector": {"matchLabels": {"team": "ml"}}}))
    unchecked = evaluate(pod(), policies)
    assert unchecked.allowed
    assert [(r.outcome, r.note) for r in unchecked.results] == [
        (Outcome.SKIP, "the labels of namespace 'ml' are not known (no cluster facts; --facts gives them), so its "
                       "namespaceSelector was not judged")]
    facts = StaticFacts.from_objects([{"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": "ml", "labels": {"team": "ml"}}}])
    assert not evaluate(pod(), policies, facts=facts).allowed


def test_the_shipped_example_denies_eight_gpus_with_the_limit_from_the_facts():
    examples = Path(__file__).resolve().parents[2] / "examples" / "vap"
    policies = load_policy_paths([examples / "gpu-limit.yaml"])
    facts = StaticFacts.from_objects(yaml.safe_load_all((examples / "facts.yaml").read_text("utf-8")))
    obj = yaml.safe_load((examples / "pod-8-gpus.yaml").read_text("utf-8"))
    decision = evaluate(obj, policies, facts=facts)
    assert [f.reason for r in decision.results for f in r.findings] == ["at most 4 GPUs per container"]


def test_an_error_under_a_warning_binding_warns_under_fail_and_is_only_noted_under_ignore(tmp_path):
    missing = [{"expression": "object.spec.nodeSelector['pool'] == 'gpu'"}]
    warned = evaluate(pod(), load(tmp_path, vap("p", missing), binding("p", ["Warn"])))
    assert warned.allowed
    assert [(r.outcome, r.findings[0].reason.split(" resulted in error: ")[0]) for r in warned.results] == [
        (Outcome.WARN, "expression 'object.spec.nodeSelector['pool'] == 'gpu''")]
    ignored = evaluate(pod(), load(tmp_path, vap("p", missing, failurePolicy="Ignore"), binding("p", ["Warn"])))
    assert ignored.allowed and [r.outcome for r in ignored.results] == [Outcome.ERROR]


def test_defaulting_leaves_the_object_as_given_untouched():
    given = pod(containers=[{"name": "c", "image": "x", "ports": [{"containerPort": 80}],
                             "resources": {"limits": {"cpu": 1}}, "livenessProbe": {"tcpSocket": {"port": 80}}}])
    before = yaml.safe_dump(given)
    assert served(given)["spec"]["containers"][0]["ports"] == [{"protocol": "TCP", "containerPort": 80}]
    assert yaml.safe_dump(given) == before


def test_functions_kubernetes_cel_lacks_are_refused_at_load_even_where_cel_cpp_has_them(tmp_path):
    errors = load_errors(tmp_path, vap("p", [{"expression": "object.metadata.name.reverse() != 'x'"},
                                             {"expression": "quantity('1').sign() == 1"}]), binding("p", ["Deny"]))
    assert len(errors) == 2, errors
    assert "reverse: not in Kubernetes' strings library" in errors[0]
    assert "sign: Quantity.sign" in errors[1]
