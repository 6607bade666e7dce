"""`mlgate test`: versioned policy test suites.

    apiVersion: mlgate.dev/v1alpha1
    kind: PolicyTest
    metadata: {name: gpu}
    spec:
      policies: [../../policies]      # files or directories, relative to this file
      resources: [resources.yaml]
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
from mlgate.loading.documents import InputError, expand, read_documents
from mlgate.loading.policies import PolicyLoadError, load_policy_paths
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
    facts = _facts(base, suite.spec.facts)
    decisions = {key: (obj, evaluate(obj, policies, facts=facts)) for key, obj in _resources(base, suite, path)}
    outcomes = []
    for expectation in suite.spec.results:
        for name in expectation.resources:
            outcomes.append(_compare(path, base, expectation, name, decisions))
    return outcomes


def _compare(
    path: Path, base: Path, exp: Expectation, name: str, decisions: dict[str, tuple[dict[str, Any], Decision]]
) -> CaseOutcome:
    def outcome(actual: str, passed: bool, detail: str = "") -> CaseOutcome:
        return CaseOutcome(str(path), exp.policy, exp.rule, name, exp.result, actual, passed, detail)

    matches = [v for k, v in decisions.items() if k == name or k.split("/", 1)[1] == name]
    if len(matches) != 1:
        return outcome("missing", False, f"resource {name!r} matched {len(matches)} resources")
    _, decision = matches[0]
    results = [r for r in decision.results if r.policy == exp.policy and r.rule == exp.rule]
    if not results:
        note = decision.note or f"policy {exp.policy!r} has no rule {exp.rule!r} for this resource"
        return outcome("skip" if decision.note else "missing", exp.result == "skip" and bool(decision.note), note)
    actual = results[0].outcome.value
    detail = "; ".join(results[0].messages()) or results[0].note
    if actual != exp.result:
        return outcome(actual, False, detail)
    if exp.patchedResource:
        expected = _single_object(base / exp.patchedResource)
        if decision.mutated != expected:
            return outcome(actual, False, f"patched resource differs from {exp.patchedResource}")
    return outcome(actual, True, detail)


def _load_suite(path: Path) -> Suite:
    try:
        return Suite.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
    except (OSError, yaml.YAMLError) as exc:
        raise SuiteError(f"{path}: {exc}") from exc
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(t) for t in first["loc"])
        raise SuiteError(f"{path}: {field}: {first['msg'].lower()}") from exc


def _resources(base: Path, suite: Suite, path: Path) -> Iterable[tuple[str, dict[str, Any]]]:
    seen: set[str] = set()
    try:
        documents = list(read_documents(str(base / r) for r in suite.spec.resources))
    except InputError as exc:
        raise SuiteError(f"{path}: resources: {exc}") from exc
    for document in documents:
        if document.data is None:
            raise SuiteError(f"{document.where}: {document.error}")
        key = f"{document.data['kind']}/{(document.data.get('metadata') or {}).get('name')}"
        if key in seen:
            raise SuiteError(f"{document.where}: resource {key} appears twice")
        seen.add(key)
        yield key, document.data


def _facts(base: Path, facts: str | None) -> ClusterFacts:
    if facts is None:
        return NO_FACTS
    try:
        documents = list(read_documents([str(base / facts)]))
    except InputError as exc:
        raise SuiteError(f"facts: {exc}") from exc
    return StaticFacts.from_objects(d.data for d in documents if d.data is not None)


def _single_object(path: Path) -> dict[str, Any]:
    documents = [d for d in read_documents([str(path)])]
    if len(documents) != 1 or documents[0].data is None:
        raise SuiteError(f"{path}: expected exactly one object")
    return documents[0].data


def _expand(paths: Sequence[str]) -> list[Path]:
    try:
        return [Path(p) for p in expand(paths)]
    except InputError as exc:
        raise SuiteError(str(exc)) from exc


def _is_suite(path: Path) -> bool:
    try:
        head = path.read_text(encoding="utf-8")[:2000]
    except (OSError, UnicodeDecodeError):
        return False
    return "kind: PolicyTest" in head


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
