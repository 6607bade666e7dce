"""MLPolicyException files and objects to checked `PolicyException`s, with errors that name file, line and field.

Checked twice over: on their own (the schema, rule IDs that exist, a narrowing that can apply to the rules
named), and against the policies in force (the policy exists, binds every rule named, and allows exceptions
for it: `allowExceptions`). The CLI refuses a file that fails either; the webhook refuses such an object at
`kubectl apply`. Files load as a whole or not at all (`PolicyLoadError`), as policy files do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from mlgate.engine.exceptions import NARROWINGS
from mlgate.engine.policyset import Policy
from mlgate.loading.linemap import line_for
from mlgate.loading.policies import (
    LoadError,
    PolicyLoadError,
    _dotted,
    _pointer,
    _pydantic_message,
    cluster_source,
    read_sources,
    yaml_documents,
)
from mlgate.model import pointer
from mlgate.model.exceptions import DEFAULT_NAMESPACE, EXCEPTION_KIND, ExceptionDocument, PolicyException
from mlgate.model.policy import API_VERSION
from mlgate.rules.registry import RULE_ID, catalog

__all__ = ["check_exception_object", "compile_exception", "exceptions_against", "load_exception_paths"]


def load_exception_paths(paths: Iterable[str | Path], policies: Sequence[Policy] | None) -> list[PolicyException]:
    """Every MLPolicyException in the given files and directories, checked against `policies` (None: on their
    own only, as `mlgate exceptions list` without policies lists them)."""
    exceptions: list[PolicyException] = []
    errors: list[LoadError] = []
    for source, text in read_sources(paths, errors):
        for value, lines in yaml_documents(text, source, errors):
            exception, problems = compile_exception(value, source, lines)
            errors.extend(problems)
            if exception is not None:
                errors.extend(exceptions_against(exception, policies, lines) if policies is not None else [])
                exceptions.append(exception)
    errors.extend(_duplicates(exceptions))
    if errors:
        raise PolicyLoadError(errors)
    return exceptions


def compile_exception(
    value: Any, source: str, lines: Mapping[str, int] | None = None
) -> tuple[PolicyException | None, list[LoadError]]:
    """One MLPolicyException document on its own: the schema, its rules, its narrowings."""
    lines = dict(lines or {})

    def err(ptr: str, message: str) -> LoadError:
        return LoadError(source, line_for(lines, ptr), _dotted(ptr), message, ptr)

    if not isinstance(value, dict):
        return None, [err("", f"an exception must be a mapping, not a {type(value).__name__}")]
    if value.get("kind") != EXCEPTION_KIND or value.get("apiVersion") != API_VERSION:
        return None, [err("/kind", f"not an exception: expected apiVersion {API_VERSION} and kind {EXCEPTION_KIND}, "
                                   f"got {value.get('apiVersion')}/{value.get('kind')}")]
    try:
        document = ExceptionDocument.model_validate(value)
    except ValidationError as exc:
        problems = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
        return None, [err(_pointer(e["loc"]), _message(e)) for e in problems]
    spec = document.spec
    known = catalog()  # a name without a dot is a CEL validation's, checked against its policy
    errors = [err(pointer.join("/spec/rules", i), f"unknown rule {rule!r}; `mlgate rules` lists them")
              for i, rule in enumerate(spec.rules) if rule not in known and RULE_ID.match(rule)]
    for narrowing in NARROWINGS:
        outside = [r for r in spec.rules if r not in narrowing.rules]
        if getattr(spec, narrowing.field) and outside:
            errors.append(err(f"/spec/{narrowing.field}", f"narrows only {', '.join(sorted(narrowing.rules))}; "
                              f"no finding of {', '.join(outside)} is about {narrowing.field}"))
    if errors:
        return None, errors
    return PolicyException(
        namespace=document.metadata.namespace or DEFAULT_NAMESPACE, name=document.metadata.name,
        policy=spec.policy, rules=tuple(spec.rules), expires_at=spec.expiresAt, reason=spec.reason,
        names=frozenset(spec.match.names), selector=spec.match.selector, containers=frozenset(spec.containers),
        capabilities=frozenset(spec.capabilities), source=source,
    ), []


def _message(error: Any) -> str:
    """A validator's own words without pydantic's "Value error, " before them."""
    if error["type"] == "value_error" and "error" in error.get("ctx", {}):
        return str(error["ctx"]["error"])
    return _pydantic_message(error)


def exceptions_against(exception: PolicyException, policies: Sequence[Policy],
                       lines: Mapping[str, int] | None = None) -> list[LoadError]:
    """What the policies refuse of the exception: a policy that does not exist, a rule it does not bind, or one
    it allows no exception for."""
    lines = dict(lines or {})

    def err(ptr: str, message: str) -> LoadError:
        return LoadError(exception.source, line_for(lines, ptr), _dotted(ptr), message, ptr)

    policy = next((p for p in policies if exception.names_policy(p.key)), None)
    if policy is None:
        return [err("/spec/policy", f"no policy {exception.policy!r} is in force here (a ClusterMLPolicy, or an "
                                    f"MLPolicy in namespace {exception.namespace!r})")]
    bound = {b.rule.id for b in policy.bindings}
    errors = []
    for index, rule in enumerate(exception.rules):
        ptr = pointer.join("/spec/rules", index)
        if rule not in bound:
            errors.append(err(ptr, f"policy {policy.key!r} has no rule {rule!r}; it has {', '.join(sorted(bound))}"))
        elif not policy.allows_exception(rule):
            allowed = sorted(policy.allowed_exceptions or ())
            why = ("allows no exceptions (allowExceptions: false)" if not allowed
                   else f"allows exceptions only for {', '.join(allowed)}")
            errors.append(err(ptr, f"policy {policy.key!r} {why}, so {rule!r} cannot be excepted"))
    return errors


def check_exception_object(obj: Mapping[str, Any], policies: Sequence[Policy]) -> list[LoadError]:
    """Everything the loader, and the policies in force, would refuse in one MLPolicyException object."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    source = cluster_source(EXCEPTION_KIND, str(meta.get("namespace") or ""), str(meta.get("name") or ""))
    exception, errors = compile_exception(dict(obj), source)
    if exception is None:
        return errors
    return exceptions_against(exception, policies)


def _duplicates(exceptions: Iterable[PolicyException]) -> list[LoadError]:
    seen: dict[tuple[str, str], str] = {}
    errors: list[LoadError] = []
    for exception in exceptions:
        key = (exception.namespace, exception.name)
        if key in seen:
            errors.append(LoadError(exception.source, None, "metadata.name",
                                    f"exception {'/'.join(key)!r} is also defined in {seen[key]}"))
        seen.setdefault(key, exception.source)
    return errors
