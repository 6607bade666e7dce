"""`mlgate test`: versioned policy test suites.

    apiVersion: mlgate.dev/v1alpha1
    kind: PolicyTest
    metadata: {name: gpu}
    spec:
      policies: [../../policies]      # files or directories, relative to this file
      resources: [resources.yaml]
      oldResources: [old.yaml]        # optional: same Kind/name are judged as an UPDATE from these
      facts: facts.yaml               # optional cluster facts
      results:
        - policy: gpu                 # the policy's name (namespace/name for an MLPolicy)
          rule: gpu.max
          resources: [Pod/too-many]   # Kind/name, or just name
          result: fail                # pass | fail | warn | error | skip
          patchedResource: fixed.yaml # optional: the whole object after mutation
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mlgate.engine import evaluate
from mlgate.engine.patch import diff
from mlgate.loading.documents import Document, InputError, expand, read_documents
from mlgate.loading.policies import PolicyLoadError, describe_validation_error, load_policy_paths
from mlgate.model.facts import NO_FACTS, ClusterFacts, StaticFacts
from mlgate.model.results import Decision


class SuiteError(Exception):
    pass


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Expectation(_Strict):
    policy: str
    rule: str
    resources: list[str] = Field(min_length=1)
    result: Literal["pass", "fail", "warn", "error", "skip"]
    patchedResource: str | None = None


class SuiteSpec(_Strict):
    policies: list[str] = Field(min_length=1)
    resources: list[str] = Field(min_length=1)
    oldResources: list[str] = Field(default_factory=list)
    facts: str | None = None
    results: list[Expectation] = Field(min_length=1)


class Suite(_Strict):
    apiVersion: Literal["mlgate.dev/v1alpha1"]
    kind: Literal["PolicyTest"]
    metadata: dict[str, Any]
    spec: SuiteSpec


@dataclass(frozen=True)
class CaseOutcome:
    suite: str
    policy: str
    rule: str
    resource: str
    expected: str
    actual: str
    passed: bool
    detail: str = ""


def run_suites(paths: Sequence[str]) -> list[CaseOutcome]:
    files = [p for p in _expand(paths) if _is_suite(p)]
    if not files:
        raise SuiteError(f"no PolicyTest suites found in {', '.join(paths)}")
    outcomes: list[CaseOutcome] = []
    for path in files:
        outcomes.extend(run_suite(path))
    return outcomes


def run_suite(path: Path) -> list[CaseOutcome]:
    suite = _load_suite(path)
    base = path.parent
    try:
        policies = load_policy_paths([base / p for p in suite.spec.policies])
    except PolicyLoadError as exc:
        raise SuiteError(f"{path}: policies: {exc}") from exc
    facts = _facts(base, suite.spec.facts, path)
    old = dict(_resources(base, suite.spec.oldResources, path))
    decisions = {
        key: (obj, evaluate(obj, policies, facts=facts, operation="UPDATE" if key in old else "CREATE",
                            old_obj=old.get(key)))
        for key, obj in _resources(base, suite.spec.resources, path)
    }
    known = {p.key for p in policies.policies}
    outcomes = []
    for expectation in suite.spec.results:
        for name in expectation.resources:
            outcomes.append(_compare(path, base, expectation, name, decisions, known))
    return outcomes


def _compare(  # noqa: PLR0917
    path: Path, base: Path, exp: Expectation, name: str,
    decisions: dict[str, tuple[dict[str, Any], Decision]], known_policies: set[str],
) -> CaseOutcome:
    def outcome(actual: str, passed: bool, detail: str = "") -> CaseOutcome:
        return CaseOutcome(str(path), exp.policy, exp.rule, name, exp.result, actual, passed, detail)

    matches = [v for k, v in decisions.items() if k == name or k.split("/", 1)[1] == name]
    if len(matches) != 1:
        return outcome("missing", False, f"resource {name!r} matched {len(matches)} resources")
    if exp.policy not in known_policies:
        return outcome("missing", False, f"no policy named {exp.policy!r} in this suite's policies")
    _, decision = matches[0]
    results = [r for r in decision.results if r.policy == exp.policy and r.rule == exp.rule]
    if not results:  # not an ML workload, or the policy does not match this resource
        note = decision.note or f"policy {exp.policy!r} does not apply rule {exp.rule!r} to this resource"
        return outcome("skip", exp.result == "skip", note)
    actual = results[0].outcome.value
    detail = "; ".join(results[0].messages()) or results[0].note
    if actual != exp.result:
        return outcome(actual, False, detail)
    if exp.patchedResource:
        expected = _single_object(base / exp.patchedResource, path)
        if decision.mutated != expected:
            ops = diff(expected, decision.mutated)
            shown = "; ".join(f"{op['op']} {op['path']}" for op in ops[:5])
            return outcome(actual, False, f"patched resource differs from {exp.patchedResource}: {shown}")
    return outcome(actual, True, detail)


def _load_suite(path: Path) -> Suite:
    try:
        return Suite.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
    except (OSError, yaml.YAMLError) as exc:
        raise SuiteError(f"{path}: {exc}") from exc
    except ValidationError as exc:
        raise SuiteError("\n".join(f"{path}: {line}" for line in describe_validation_error(exc))) from exc


def _objects(base: Path, names: list[str], suite: Path, field: str) -> list[Document]:
    try:
        documents = list(read_documents(str(base / n) for n in names))
    except InputError as exc:
        raise SuiteError(f"{suite}: {field}: {exc}") from exc
    for document in documents:
        if document.data is None:
            raise SuiteError(f"{suite}: {field}: {document.where}: {document.error}")
    return documents


def _resources(base: Path, names: list[str], suite: Path) -> Iterable[tuple[str, dict[str, Any]]]:
    seen: set[str] = set()
    for document in _objects(base, names, suite, "resources"):
        assert document.data is not None
        key = f"{document.data['kind']}/{(document.data.get('metadata') or {}).get('name')}"
        if key in seen:
            raise SuiteError(f"{document.where}: resource {key} appears twice")
        seen.add(key)
        yield key, document.data


def _facts(base: Path, facts: str | None, suite: Path) -> ClusterFacts:
    if facts is None:
        return NO_FACTS
    documents = _objects(base, [facts], suite, "facts")
    return StaticFacts.from_objects(d.data for d in documents if d.data is not None)


def _single_object(path: Path, suite: Path) -> dict[str, Any]:
    documents = _objects(path.parent, [path.name], suite, "patchedResource")
    if len(documents) != 1 or documents[0].data is None:
        raise SuiteError(f"{suite}: patchedResource: {path}: expected exactly one object, found {len(documents)}")
    return documents[0].data


def _expand(paths: Sequence[str]) -> list[Path]:
    try:
        return [Path(p) for p in expand(paths)]
    except InputError as exc:
        raise SuiteError(str(exc)) from exc


def _is_suite(path: Path) -> bool:
    try:
        documents = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    return len(documents) == 1 and isinstance(documents[0], dict) and documents[0].get("kind") == "PolicyTest"


def render_outcomes(outcomes: Sequence[CaseOutcome], fmt: str) -> str:
    failed = [o for o in outcomes if not o.passed]
    if fmt == "json":
        body = {"results": [o.__dict__ for o in outcomes],
                "summary": {"passed": len(outcomes) - len(failed), "failed": len(failed)}}
        return json.dumps(body, indent=2) + "\n"
    lines = []
    for o in outcomes:
        status = "PASS" if o.passed else "FAIL"
        line = f"{status} {o.suite}: {o.policy}/{o.rule} {o.resource}: expected {o.expected}, got {o.actual}"
        lines.append(line if o.passed else f"{line}\n     {o.detail}")
    lines.append(f"{len(outcomes) - len(failed)} passed, {len(failed)} failed")
    return "\n".join(lines) + "\n"
