"""Rule parameters: a wrong-typed number or boolean is a load error, never a quietly coerced value."""

from pathlib import Path
from typing import Any, get_args

import pytest

from mlgate.loading.policies import compile_policy, load_policy_paths
from mlgate.rules.registry import catalog

REPO = Path(__file__).resolve().parents[2]


def load_errors(rule: str, params: dict[str, Any]) -> list[str]:
    document = {"apiVersion": "mlgate.dev/v1alpha1", "kind": "ClusterMLPolicy", "metadata": {"name": "p"},
                "spec": {"rules": [{"rule": rule, "params": params}]}}
    policy, errors = compile_policy(document, "<test>")
    assert (policy is None) == bool(errors)
    return [e.detail for e in errors]


@pytest.mark.parametrize(("rule", "params", "field"), [
    ("gpu.max", {"perContainer": True}, "perContainer"),
    ("gpu.max", {"perPod": "2"}, "perPod"),
    ("gpu.max", {"perJob": 4.0}, "perJob"),
    ("gang.inject", {"scheduler": "volcano", "minMember": "2"}, "minMember"),
    ("defaults.run-policy", {"backoffLimit": "3"}, "backoffLimit"),
    ("defaults.security-context", {"runAsNonRoot": "true"}, "runAsNonRoot"),
    ("storage.shared-claim-rwx", {"allowMissingClaims": 1}, "allowMissingClaims"),
])
def test_a_wrong_typed_number_or_boolean_is_a_load_error(rule, params, field):
    (error,) = load_errors(rule, params)
    assert error.startswith(f"spec.rules[0].params.{field}: input should be a valid")


def test_good_params_of_every_kind_still_load():
    assert load_errors("gpu.max", {"perContainer": 8, "perPod": 8, "perJob": 64}) == []
    assert load_errors("defaults.shm", {"sizeLimit": "8Gi", "minGpusPerPod": 2}) == []
    assert load_errors("mig.profile-exists", {"gpuModels": ["a100-40gb"], "strategy": "single"}) == []
    assert load_errors("pod-security.restricted", {"skipChecks": ["hostPorts"], "exceptions": {
        "capabilities": ["IPC_LOCK"], "volumeTypes": ["nfs"], "containers": ["sidecar"]}}) == []


def test_every_int_and_bool_parameter_of_every_rule_refuses_a_string():
    checked = 0
    for rule_id, spec in catalog().items():
        for name, info in spec.params.model_fields.items():
            kinds = set(get_args(info.annotation)) | {info.annotation}
            for kind, wrong in ((int, "1"), (bool, "true")):
                if kind in kinds:
                    alias = info.alias or name
                    errors = load_errors(rule_id, {alias: wrong})
                    assert any(e.startswith(f"spec.rules[0].params.{alias}: ") for e in errors), (rule_id, alias)
                    checked += 1
    assert checked >= 10  # gpu.max, defaults, gang.inject and storage all have some


def test_the_shipped_policies_load():
    assert load_policy_paths([REPO / "policies"]).policies


def test_a_validators_message_keeps_the_case_of_check_ids():
    (error,) = load_errors("pod-security.baseline", {"skipChecks": ["runAsNonRoot"]})
    assert "'runAsNonRoot' is a restricted check" in error
    assert error.split(": ", 1)[1].startswith("value error")
