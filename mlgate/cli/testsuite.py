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

Every PolicyTest document in the YAML/JSON files under the given paths runs, several per file
if need be. A file there that does not parse stops the run with its file and line: skipping it
would let a broken suite pass as green. Resources that name no namespace are judged in
`default`, as `mlgate validate` judges them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mlgate.cli.namespaces import DEFAULT_NAMESPACE, evaluate_in_namespace
from mlgate.cli.outcomes import CaseOutcome
from mlgate.engine.patch import diff
from mlgate.loading.builtin_schemas import shipped
from mlgate.loading.documents import Document, InputError, expand, read_documents
from mlgate.loading.policies import PolicyLoadError, _pointer, describe_validation_error, load_policy_paths
from mlgate.model.facts import NO_FACTS, ClusterFacts, StaticFacts
from mlgate.model.results import Decision, RuleResult, unchecked_text


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
class LoadedSuite:
    path: Path  # relative names in the suite are relative to this file's folder
    label: str  # the file, or file:line when the file holds several suites
    suite: Suite
    document: Document  # for the lines of its expectations


def run_suites(paths: Sequence[str]) -> list[CaseOutcome]:
    suites = [s for path in _expand(paths) for s in _suites_in(path)]
    if not suites:
        raise SuiteError(f"no PolicyTest suites found in {', '.join(paths)}")
    outcomes: list[CaseOutcome] = []
    for suite in suites:
        outcomes.extend(run_suite(suite))
    return outcomes


def _suites_in(path: Path) -> list[LoadedSuite]:
    """Every PolicyTest document in a file under the suite paths.

    A file there that does not read as Kubernetes objects is refused, not passed over: it may
    be a suite with a typo, and skipping it would turn the run green.
    """
    try:
        documents = list(read_documents([str(path)]))
    except InputError as exc:
        raise SuiteError(str(exc)) from exc
    broken = next((d for d in documents if d.error), None)
    if broken is not None:
        raise SuiteError(f"{_error_at(broken)}: {broken.error}")
    tests = [d for d in documents if d.data is not None and d.data.get("kind") == "PolicyTest"]
    return [LoadedSuite(path, d.where if len(tests) > 1 else str(path), _validated(d), d) for d in tests]


def _validated(document: Document) -> Suite:
    try:
        return Suite.model_validate(document.data)
    except ValidationError as exc:
        # each problem at its own field's line (a typo deep in spec.results is not at the document's first line)
        problems = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
        raise SuiteError("\n".join(
            f"{document.source}:{document.line_of(_pointer(e['loc']))}: {line}"
            for e, line in zip(problems, describe_validation_error(exc), strict=True))) from exc


def run_suite(loaded: LoadedSuite) -> list[CaseOutcome]:
    path, suite, base = loaded.path, loaded.suite, loaded.path.parent
    try:
        policies = load_policy_paths([base / p for p in suite.spec.policies])
    except PolicyLoadError as exc:
        raise SuiteError(f"{loaded.label}: policies: {exc}") from exc
    if not policies.policies:  # nothing loaded: every expectation of `skip` would pass
        raise SuiteError(f"{loaded.label}: policies: no MLPolicy or ClusterMLPolicy documents")
    facts = _facts(base, suite.spec.facts, path)
    old = dict(_resources(base, suite.spec.oldResources, path))
    decisions = {
        key: (obj, evaluate_in_namespace(obj, policies, DEFAULT_NAMESPACE, facts=facts, old_obj=old.get(key),
                                         operation="UPDATE" if key in old else "CREATE"))
        for key, obj in _resources(base, suite.spec.resources, path)
    }
    rules = {p.key: {b.rule.id for b in p.bindings} for p in policies.policies}
    outcomes = []
    for index, expectation in enumerate(suite.spec.results):
        line = loaded.document.line_of(f"/spec/results/{index}")
        for name in expectation.resources:
            outcomes.append(_compare(loaded, expectation, name, decisions, rules, line=line))
    return outcomes


def _compare(
    loaded: LoadedSuite, exp: Expectation, name: str,
    decisions: dict[str, tuple[dict[str, Any], Decision]], rules: dict[str, set[str]], *, line: int,
) -> CaseOutcome:
    def outcome(actual: str, passed: bool, detail: str = "") -> CaseOutcome:
        return CaseOutcome(loaded.label, exp.policy, exp.rule, name, exp.result, actual, passed, detail,
                           str(loaded.path), line)

    matches = [v for k, v in decisions.items() if k == name or k.split("/", 1)[1] == name]
    if len(matches) != 1:
        return outcome("missing", False, f"resource {name!r} matched {len(matches)} resources")
    if exp.policy not in rules:
        return outcome("missing", False, f"no policy named {exp.policy!r} in this suite's policies")
    if exp.rule not in rules[exp.policy]:  # a typo would otherwise pass every `skip` expectation
        return outcome("missing", False, f"policy {exp.policy!r} has no rule {exp.rule!r}")
    _, decision = matches[0]
    results = [r for r in decision.results if r.policy == exp.policy and r.rule == exp.rule]
    if not results:  # no pod template, or the policy does not match this resource
        note = decision.note or f"policy {exp.policy!r} does not apply rule {exp.rule!r} to this resource"
        return outcome("skip", exp.result == "skip", note)
    actual = results[0].outcome.value
    detail = _said(results[0])
    if actual != exp.result:
        return outcome(actual, False, detail)
    if exp.patchedResource:
        expected = _single_object(loaded.path.parent / exp.patchedResource, loaded.path)
        if decision.mutated != expected:
            ops = diff(expected, decision.mutated)
            shown = "; ".join(f"{op['op']} {op['path']}" for op in ops[:5])
            return outcome(actual, False, f"the patched resource differs from {exp.patchedResource}: {shown}")
    return outcome(actual, True, detail)


def _error_at(document: Document) -> str:
    """`file:line` of a document's error: the line the parser stopped at, not where the document starts."""
    return f"{document.source}:{document.error_line or document.line}"


def _said(result: RuleResult) -> str:
    """What the rule said, from its result's fields: its findings (or why it could not evaluate), what it could
    not look at, or why it was skipped."""
    said = [line.render() for line in result.lines()]
    said += [f"[{result.policy}/{result.rule}] {unchecked_text(reason)}" for reason in result.unchecked]
    return "; ".join(said) or result.note


def _objects(base: Path, names: list[str], suite: Path, field: str) -> list[Document]:
    try:
        documents = list(read_documents(str(base / n) for n in names))
    except InputError as exc:
        raise SuiteError(f"{suite}: {field}: {exc}") from exc
    for document in documents:
        if document.data is None:
            raise SuiteError(f"{suite}: {field}: {_error_at(document)}: {document.error}")
    return documents


def _resources(base: Path, names: list[str], suite: Path) -> Iterable[tuple[str, dict[str, Any]]]:
    seen: set[str] = set()
    for document in _objects(base, names, suite, "resources"):
        assert document.data is not None
        key = f"{document.data['kind']}/{(document.data.get('metadata') or {}).get('name')}"
        if key in seen:
            raise SuiteError(f"{document.where}: resource {key} appears twice")
        refused = shipped().check(document.data)
        if refused:  # a case on an object the API server never admits would test nothing
            first = refused[0]
            raise SuiteError(f"{document.source}:{document.line_of(first.path)}: resource {key}: the API server "
                             f"refuses it: {first.reason}: {first.path}: {first.detail}")
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


def render_outcomes(outcomes: Sequence[CaseOutcome], fmt: str) -> str:
    failed = [o for o in outcomes if not o.passed]
    if fmt == "junit":
        from mlgate.cli.ci import junit_outcomes

        return junit_outcomes(outcomes)
    if fmt == "json":
        body = {"results": [o.__dict__ for o in outcomes],
                "summary": {"passed": len(outcomes) - len(failed), "failed": len(failed)}}
        return json.dumps(body, indent=2) + "\n"
    lines = []
    for o in outcomes:
        status = "PASS" if o.passed else "FAIL"
        head = f"{status} {o.suite}: {o.policy}/{o.rule} {o.resource}"
        if not o.passed and o.expected == o.actual:  # the outcome matched; what failed is said on the same line
            lines.append(f"{head}: {o.actual} as expected, but {o.detail}")
        else:
            line = f"{head}: expected {o.expected}, got {o.actual}"
            lines.append(line if o.passed or not o.detail else f"{line}\n     {o.detail}")
    lines.append(f"{len(outcomes) - len(failed)} passed, {len(failed)} failed")
    return "\n".join(lines) + "\n"
