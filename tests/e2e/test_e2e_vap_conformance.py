"""mlgate's offline ValidatingAdmissionPolicy verdicts are the real API server's: the oracle for mlgate's CEL.

Every case in tests/e2e/vap_cases/*.yaml is a policy (validations, variables, matchConditions, failurePolicy,
resource rules, selectors) with a binding (validationActions) and the objects to judge. All are applied to the real
kube-apiserver at once, each binding selecting only its own case's objects by label; each object is then sent with
`kubectl create --dry-run=server` and judged offline by `mlgate.engine.evaluate` with the same policies loaded from a
file, and the two must agree: allowed or denied, the denial's message, and the Warn-action warnings. Cases marked
`compare: verdict` (runtime errors, whose text is cel-go's) compare allowed/denied only; `refused: true` cases are
type errors mlgate refuses at load while the API server stores them and denies under failurePolicy Fail; `xfail:`
names a known difference, which must still differ (a fixed one fails the test until the mark is removed).
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml
from control_plane import ControlPlane, wait_for

from mlgate.engine import PolicySet, evaluate
from mlgate.loading.policies import PolicyLoadError, load_policy_paths
from mlgate.model.facts import StaticFacts
from mlgate.model.results import Action, Outcome

pytestmark = pytest.mark.e2e

CASES = Path(__file__).parent / "vap_cases"
LABEL = "mlgate.dev/vap-case"
GROUP = "admissionregistration.k8s.io/v1"
SENTINEL = {"name": "sentinel", "validations": [{"expression": "false", "message": "sentinel"}],
            "objects": [{"apiVersion": "v1", "kind": "ConfigMap"}]}
_DENIED = re.compile(r"ValidatingAdmissionPolicy '([^']+)' with binding '([^']+)' denied request: (.*)$", re.M)
_WARNED = re.compile(r"^Warning: Validation failed for ValidatingAdmissionPolicy '([^']+)' with binding '([^']+)': "
                     r"(.*)$", re.M)


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    message: str | None  # the denial's message; None where only the verdict is compared
    warnings: tuple[str, ...] = ()


def load_cases() -> list[dict[str, Any]]:
    cases = [case for path in sorted(CASES.glob("*.yaml")) for case in yaml.safe_load(path.read_text("utf-8"))]
    names = [c["name"] for c in cases]
    assert len(names) == len(set(names)), "case names repeat"
    return cases


def documents(case: dict[str, Any]) -> list[dict[str, Any]]:
    """The case's policy and binding, the binding narrowed to objects labelled with the case's name."""
    name = f"c-{case['name']}"
    constraints: dict[str, Any] = {"resourceRules": case.get("rules") or [
        {"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"], "resources": ["*"]}]}
    if "exclude" in case:
        constraints["excludeResourceRules"] = case["exclude"]
    if "namespaceSelector" in case:
        constraints["namespaceSelector"] = case["namespaceSelector"]
    spec: dict[str, Any] = {"failurePolicy": case.get("failurePolicy", "Fail"), "matchConstraints": constraints,
                            "validations": case["validations"]}
    for key in ("variables", "matchConditions", "paramKind"):
        if key in case:
            spec[key] = case[key]
    binding = {"policyName": name, "validationActions": case.get("actions", ["Deny"]),
               "matchResources": {"objectSelector": {"matchLabels": {LABEL: case["name"]}}}}
    if "paramRef" in case:
        binding["paramRef"] = case["paramRef"]
    return [
        {"apiVersion": GROUP, "kind": "ValidatingAdmissionPolicy", "metadata": {"name": name}, "spec": spec},
        {"apiVersion": GROUP, "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
         "spec": binding},
    ]


def samples(case: dict[str, Any], namespace: str) -> list[dict[str, Any]]:
    out = []
    for i, obj in enumerate(case["objects"]):
        number = 0 if case.get("update") else i  # an update names the object stored first
        meta = {**obj.get("metadata", {}), "name": f"{case['name']}-{number}", "namespace": namespace,
                "labels": {LABEL: case["name"]}}
        out.append({**obj, "metadata": meta})
    return out


def served_verdict(cluster: ControlPlane, obj: dict[str, Any], *, update: bool = False) -> Verdict:
    done = cluster.kubectl("replace" if update else "create", "--dry-run=server", "-o", "name", "-f", "-", stdin=obj)
    warnings = tuple(sorted(m.group(3).strip() for m in _WARNED.finditer(done.stderr)))
    if done.ok:
        return Verdict(True, None, warnings)
    denied = _DENIED.search(done.stderr)
    assert denied is not None, f"not a policy's denial: {done}"
    return Verdict(False, denied.group(3).strip(), warnings)


def offline_verdict(policies: PolicySet, facts: StaticFacts, obj: dict[str, Any],
                    old: dict[str, Any] | None = None) -> Verdict:
    operation: Literal["CREATE", "UPDATE"] = "CREATE" if old is None else "UPDATE"
    decision = evaluate(obj, policies, facts=facts, mutate=False, operation=operation, old_obj=old)
    denials = [r for r in decision.results if r.outcome is Outcome.FAIL]
    message = denials[0].findings[0].reason if denials and not decision.allowed else None
    warnings = tuple(sorted(f.reason for r in decision.results if r.outcome is Outcome.WARN
                            and r.action is Action.WARN for f in r.findings))  # audit annotations warn nobody
    return Verdict(decision.allowed, message, warnings)


def compared_part(case: dict[str, Any], verdict: Verdict) -> Verdict:
    """What a case compares: a runtime error's message is cel-go's own text, so only the verdict and the number
    of warnings count."""
    if case.get("compare") != "verdict":
        return verdict
    return Verdict(verdict.allowed, None, ("a warning",) * len(verdict.warnings))


def load(tmp_path: Path, name: str, docs: list[dict[str, Any]]) -> PolicySet:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    return load_policy_paths([path])


def test_mlgates_offline_verdicts_on_validating_admission_policies_are_the_api_servers(
        cluster: ControlPlane, make_namespace: Any, tmp_path: Path) -> None:
    cases = load_cases()
    namespace = make_namespace({"vap-tier": "cpu"})
    refused = [c for c in cases if c.get("refused")]
    for case in refused:  # the API server refuses a policy whose expressions do not compile or type-check
        created = cluster.kubectl("create", "-f", "-", stdin=documents(case)[0])
        assert not created.ok and "compilation failed" in created.stderr, created
        with pytest.raises(PolicyLoadError):
            load(tmp_path, case["name"], documents(case))
    cases = [c for c in cases if not c.get("refused")]
    params = [{**p, "metadata": {**p["metadata"], "namespace": namespace}} for c in cases for p in c.get("params", ())]
    cluster.kubectl("create", "-f", "-", stdin=params).check()
    # what updates are judged against, stored before the policies are: it may break them already
    stored = {c["name"]: samples(c, namespace)[0] for c in cases if c.get("update")}
    cluster.kubectl("create", "-f", "-", stdin=list(stored.values())).check()
    cluster.kubectl("apply", "-f", "-", stdin=[doc for case in cases for doc in documents(case)]).check()
    sentinel = samples(SENTINEL, namespace)[0]
    cluster.kubectl("apply", "-f", "-", stdin=documents(SENTINEL)).check()
    wait_for("the case policies in force", lambda: not served_verdict(cluster, sentinel).allowed, 60.0, interval=0.5)
    facts = StaticFacts.from_objects([cluster.get_object("namespace", namespace), *params])  # as --facts gives them

    plain = [c for c in cases if not c.get("xfail")]
    policies = load(tmp_path, "cases", [doc for case in plain for doc in documents(case)])
    jobs = [(case, obj) for case in cases for obj in samples(case, namespace)[1 if case.get("update") else 0:]]
    with ThreadPoolExecutor(4) as pool:
        served = list(pool.map(lambda job: served_verdict(cluster, job[1], update=bool(job[0].get("update"))),
                               jobs))

    differences, known, compared = [], [], 0
    for (case, obj), api in zip(jobs, served, strict=True):
        where = f"{case['name']} {obj['metadata']['name']}"
        if case.get("xfail"):
            try:
                mine: Verdict | None = offline_verdict(load(tmp_path, case["name"], documents(case)), facts, obj)
            except PolicyLoadError:
                mine = None
            assert mine != api, f"{where}: xfail case now agrees with the API server; remove its xfail"
            known.append(f"{where}: {case['xfail']}")
            compared += 1
            continue
        mine = offline_verdict(policies, facts, obj, stored.get(case["name"]))
        theirs, mine = compared_part(case, api), compared_part(case, mine)
        if mine != theirs:
            differences.append(f"{where}:\n    API server: {theirs}\n    mlgate:     {mine}")
        compared += 1
    allowed = sum(v.allowed for v in served)
    print(f"\nVAP conformance: {compared} objects of {len(cases)} policies compared with kube-apiserver "
          f"({allowed} allowed, {len(served) - allowed} denied), and {len(refused)} policies both refuse; "
          f"{len(known)} known differences (xfail):")
    for line in known:
        print(f"  {line}")
    assert len(cases) + len(refused) >= 40
    assert not differences, "mlgate and the API server differ:\n" + "\n".join(differences)
