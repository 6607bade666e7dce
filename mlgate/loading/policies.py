"""Policy files to a checked PolicySet, with errors that name file, line and field.

A policy set loads as a whole or not at all: the caller keeps its last good set when
`PolicyLoadError` is raised.
"""

from __future__ import annotations

import difflib
import io
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from mlgate.engine.policyset import Binding, KindRef, Policy, PolicySet
from mlgate.loading.cel_policies import compile_cel, validation_ids
from mlgate.loading.documents import InputError, document_chunks, expand
from mlgate.loading.linemap import compose_with_lines, line_for
from mlgate.loading.vap import CompiledVap, LoadedBinding, compile_vap, pair
from mlgate.model import pointer
from mlgate.model.kinds import WORKLOAD_KIND_KINDS, KindSpec, WorkloadKindDocument
from mlgate.model.policy import API_VERSION, POLICY_KINDS, PolicyDocument
from mlgate.model.results import Action
from mlgate.model.vap import VAP_API_VERSION, VAP_KINDS, BindingDocument, VapDocument
from mlgate.rules.devices import BUILT_IN, GpuResources
from mlgate.rules.registry import catalog
from mlgate.workloads.catalog import SHIPPED, KindCatalog
from mlgate.workloads.renderers import RENDERERS

# a resource name (`[prefix/]name`), or a shell pattern of one: letters, digits, `-_./` and `*?[]`
_RESOURCE_PATTERN = re.compile(r"^[A-Za-z0-9*?\[\]][-A-Za-z0-9_.*?\[\]/]{0,315}$")
Document = Policy | KindSpec | CompiledVap | LoadedBinding  # what one YAML document loads as
CHECKOUT_POLICY_DIR = Path(__file__).resolve().parents[2] / "policies"  # a checkout or an editable install
PACKAGED_POLICY_DIR = Path(__file__).resolve().parents[1] / "shipped_policies"  # an installed wheel's copy


@dataclass(frozen=True)
class LoadError:
    source: str
    line: int | None
    field: str  # dotted path, e.g. spec.rules[0].params.perContainer
    message: str
    pointer: str | None = None  # the same field as a JSON pointer into the document, where there is one

    @property
    def detail(self) -> str:
        """The field and what is wrong with it, without the source (e.g. for the object's own status)."""
        return f"{self.field}: {self.message}" if self.field else self.message

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line else self.source
        return f"{where}: {self.detail}"


class PolicyLoadError(Exception):
    def __init__(self, errors: list[LoadError]):
        self.errors = errors
        super().__init__("\n".join(str(e) for e in errors))


def default_policy_dir() -> Path:
    """The shipped policy set: the copy pyproject.toml puts in the wheel, else `policies/` of the checkout."""
    return PACKAGED_POLICY_DIR if PACKAGED_POLICY_DIR.is_dir() else CHECKOUT_POLICY_DIR


def load_policy_paths(paths: Iterable[str | Path]) -> PolicySet:
    """Every policy and WorkloadKind document in the given files and directories, as one set."""
    return policy_set(load_documents(paths))


def load_documents(paths: Iterable[str | Path]) -> list[Policy | KindSpec]:
    """Every policy and WorkloadKind document in the given files and directories, checked; the
    ValidatingAdmissionPolicies among them paired with their bindings, wherever each was found."""
    policies: list[Policy | KindSpec] = []
    described: list[tuple[str, KindSpec]] = []  # where each WorkloadKind came from
    errors: list[LoadError] = []
    vaps: list[CompiledVap] = []
    vap_bindings: list[LoadedBinding] = []
    for source, text in read_sources(paths, errors):
        loaded, problems = _load_text(text, source, vap=True)
        policies.extend(d for d in loaded if isinstance(d, Policy | KindSpec))
        vaps.extend(d for d in loaded if isinstance(d, CompiledVap))
        vap_bindings.extend(d for d in loaded if isinstance(d, LoadedBinding))
        described.extend((source, k) for k in loaded if isinstance(k, KindSpec))
        errors.extend(problems)
    if (vaps or vap_bindings) and not errors:  # a binding of a policy that did not load would only repeat its error
        policies.extend(pair(vaps, vap_bindings, lambda binding, ptr, message: errors.append(
            LoadError(binding.source, line_for(binding.lines, ptr), _dotted(ptr), message, ptr))))
    errors.extend(duplicate_names(p for p in policies if isinstance(p, Policy)))
    errors.extend(duplicate_kinds(described))
    if errors:
        raise PolicyLoadError(errors)
    return policies


def policy_set(documents: Iterable[Policy | KindSpec], generation: int = 0) -> PolicySet:
    """The set of these policies, judging the shipped kinds plus these WorkloadKinds."""
    documents = list(documents)
    kinds = SHIPPED.with_kinds(d for d in documents if isinstance(d, KindSpec))
    return PolicySet(tuple(d for d in documents if isinstance(d, Policy)), generation, kinds)


def load_policy_text(text: str, source: str) -> tuple[list[Policy | KindSpec], list[LoadError]]:
    """The policies and WorkloadKinds of one file, as the webhook loads them (a ValidatingAdmissionPolicy is the
    API server's to judge there, and not a policy)."""
    loaded, errors = _load_text(text, source, vap=False)
    return [d for d in loaded if isinstance(d, Policy | KindSpec)], errors


def _load_text(text: str, source: str, *, vap: bool) -> tuple[list[Document], list[LoadError]]:
    policies: list[Document] = []
    errors: list[LoadError] = []
    for value, lines in yaml_documents(text, source, errors):
        document: Document | None
        if vap and isinstance(value, dict) and value.get("kind") in VAP_KINDS \
                and value.get("apiVersion") == VAP_API_VERSION:
            document, problems = compile_vap_document(value, source, lines)
        else:
            document, problems = compile_document(value, source, lines)
        errors.extend(problems)
        if document is not None:
            policies.append(document)
    return policies, errors


def read_sources(paths: Iterable[str | Path], errors: list[LoadError]) -> Iterator[tuple[str, str]]:
    """(file, text) of every file in the given files and directories; one that cannot be read is an error."""
    try:
        sources = list(expand(str(p) for p in paths))
    except InputError as exc:
        raise PolicyLoadError([LoadError(exc.path, None, "", exc.problem)]) from exc
    for source in sources:
        try:
            yield source, Path(source).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            errors.append(LoadError(source, None, "", f"cannot read: {exc}"))


def yaml_documents(text: str, source: str, errors: list[LoadError]) -> Iterator[tuple[Any, dict[str, int]]]:
    """Each non-empty YAML document of `text` with its line map; one that does not parse is an error."""
    for line, raw, oversize in document_chunks(io.BytesIO(text.encode("utf-8"))):
        if oversize:
            errors.append(LoadError(source, line, "", "document is larger than 3 MiB"))
            continue
        try:
            value, lines = compose_with_lines(raw.decode("utf-8"), line)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            at = line + mark.line if mark else line
            errors.append(LoadError(source, at, "", f"invalid YAML: {getattr(exc, 'problem', exc)}"))
            continue
        if value is not None:
            yield value, dict(lines)


def compile_document(
    value: Any, source: str, lines: Mapping[str, int] | None = None
) -> tuple[Policy | KindSpec | None, list[LoadError]]:
    """A policy, or a WorkloadKind describing a kind the engine should judge."""
    if isinstance(value, dict) and value.get("kind") in WORKLOAD_KIND_KINDS and value.get("apiVersion") == API_VERSION:
        return compile_kind(value, source, lines)
    return compile_policy(value, source, lines)


def compile_vap_document(
    value: dict[str, Any], source: str, lines: Mapping[str, int] | None = None
) -> tuple[CompiledVap | LoadedBinding | None, list[LoadError]]:
    """A ValidatingAdmissionPolicy with its expressions compiled, or a binding (load_documents pairs them)."""
    lines = dict(lines or {})
    errors: list[LoadError] = []

    def err(ptr: str, message: str) -> None:
        errors.append(LoadError(source, line_for(lines, ptr), _dotted(ptr), message, ptr))

    model = VapDocument if value.get("kind") == VAP_KINDS[0] else BindingDocument
    try:
        document = model.model_validate(value)
    except ValidationError as exc:
        for e in exc.errors():
            err(_pointer(e["loc"]), _pydantic_message(e))
        return None, errors
    if isinstance(document, BindingDocument):
        return LoadedBinding(document, source, lines), []
    compiled = compile_vap(document, source, err)
    return (compiled, []) if compiled is not None and not errors else (None, errors)


def compile_kind(
    value: dict[str, Any], source: str, lines: Mapping[str, int] | None = None
) -> tuple[KindSpec | None, list[LoadError]]:
    lines = dict(lines or {})

    def err(ptr: str, message: str) -> LoadError:
        return LoadError(source, line_for(lines, ptr), _dotted(ptr), message, ptr)

    try:
        document = WorkloadKindDocument.model_validate(value)
    except ValidationError as exc:
        return None, [err(_pointer(e["loc"]), _pydantic_message(e)) for e in exc.errors()]
    spec = document.spec
    if spec.render is not None and spec.render not in RENDERERS:
        return None, [err("/spec/render", f"unknown renderer {spec.render!r}; one of: {', '.join(sorted(RENDERERS))}")]
    return spec, []


def duplicate_kinds(kinds: Iterable[tuple[str, KindSpec]]) -> list[LoadError]:
    """An error for every WorkloadKind (with its source) that describes a group and kind an earlier one does."""
    seen: dict[tuple[str, str], str] = {}
    errors: list[LoadError] = []
    for source, spec in kinds:
        key = (spec.group, spec.kind)
        if key in seen:
            errors.append(LoadError(source, None, "spec.kind",
                                    f"{spec.group or 'core'}/{spec.kind} is also described in {seen[key]}"))
        seen.setdefault(key, source)
    return errors


def compile_policy(
    value: Any, source: str, lines: Mapping[str, int] | None = None
) -> tuple[Policy | None, list[LoadError]]:
    lines = dict(lines or {})

    def err(ptr: str, message: str) -> LoadError:
        return LoadError(source, line_for(lines, ptr), _dotted(ptr), message, ptr)

    if not isinstance(value, dict):
        return None, [err("", f"a policy must be a mapping, not a {type(value).__name__}")]
    if value.get("kind") not in POLICY_KINDS or value.get("apiVersion") != API_VERSION:
        expected = " or ".join((*POLICY_KINDS, *WORKLOAD_KIND_KINDS))
        return None, [err("/kind", f"not a policy: expected apiVersion {API_VERSION} and kind {expected}, "
                                   f"got {value.get('apiVersion')}/{value.get('kind')}")]
    try:
        document = PolicyDocument.model_validate(value)
    except ValidationError as exc:
        return None, [err(_pointer(e["loc"]), _pydantic_message(e)) for e in exc.errors()]
    rules = catalog()
    bindings: list[Binding] = []
    errors: list[LoadError] = []
    for index, binding in enumerate(document.spec.rules):
        base = pointer.join("/spec/rules", index)
        spec = rules.get(binding.rule)
        if spec is None:
            close = difflib.get_close_matches(binding.rule, list(rules), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else "; `mlgate rules` lists them"
            errors.append(err(base + "/rule", f"unknown rule {binding.rule!r}{hint}"))
            continue
        if spec.is_mutation and "action" in binding.model_fields_set and not (
                source.startswith(CLUSTER_PREFIX) and binding.action is Action.DENY):
            # a mutation never denies or warns: an action here would promise what it cannot do. A stored object's
            # `action: deny` is what the CRD defaulted before it stopped doing so; refusing it would keep every such
            # policy out of force, and refuse each update of it, after an upgrade: it is left unread instead
            errors.append(err(base + "/action", f"{binding.rule} is a mutation, which takes no action "
                                                "(deny, warn and audit are for checks); remove it"))
            continue
        try:
            params = spec.params.model_validate(binding.params)
        except ValidationError as exc:
            errors.extend(
                err(base + "/params" + _pointer(e["loc"]), _pydantic_message(e)) for e in exc.errors()
            )
            continue
        bindings.append(Binding(spec, params, binding.action))
    bindings += compile_cel(document.spec, lambda ptr, message: errors.append(err(ptr, message)))
    errors += [err(f"/spec/gpuResources/{i}", f"{r!r} is not a resource name or a shell pattern of one "
                   "(e.g. example.com/npu, example.com/npu-*)")
               for i, r in enumerate(document.spec.gpuResources) if not _RESOURCE_PATTERN.match(r)]
    allowed = document.spec.allowExceptions
    bound = {b.rule for b in document.spec.rules} | set(validation_ids(document.spec))
    if isinstance(allowed, list):
        errors += [err(f"/spec/allowExceptions/{i}", f"{r!r} is not a rule of this policy; one of: "
                       f"{', '.join(sorted(bound))}") for i, r in enumerate(allowed) if r not in bound]
    if errors:
        return None, errors
    meta = document.metadata
    namespace = (meta.namespace or "default") if document.kind == "MLPolicy" else None
    refs = tuple(KindRef(kind, _dotted(ptr), line_for(lines, ptr))
                 for section in ("match", "exclude") if (block := getattr(document.spec, section)) is not None
                 for i, kind in enumerate(block.kinds) for ptr in [f"/spec/{section}/kinds/{i}"])
    policy = Policy(
        name=meta.name,
        bindings=tuple(bindings),
        match=document.spec.match,
        exclude=document.spec.exclude,
        failure_policy=document.spec.failurePolicy,
        namespace=namespace,
        source=source,
        unknown_kinds=document.spec.unknownKinds,
        gpus=GpuResources(tuple(document.spec.gpuResources)) if document.spec.gpuResources else BUILT_IN,
        kind_refs=refs,
        allowed_exceptions=frozenset(allowed) if isinstance(allowed, list) else None if allowed else frozenset(),
    )
    return policy, []


def kind_warnings(policies: PolicySet) -> list[LoadError]:
    """A warning for every kind a policy matches or excludes that no description in the set knows: a typo
    (`PytorchJob`) would otherwise match nothing, and nothing would say so."""
    known = {spec.kind for spec in policies.kinds.kinds}
    warnings = []
    for policy in policies.policies:
        for ref in policy.kind_refs:
            if ref.kind != "*" and ref.kind not in known:
                close = difflib.get_close_matches(ref.kind, known, n=1, cutoff=0.75)
                hint = f'did you mean "{close[0]}"?' if close else "a WorkloadKind can describe it"
                warnings.append(LoadError(policy.source, ref.line, ref.field,
                                          f'no kind description knows "{ref.kind}", so only pod specs found by search '
                                          f"in objects of that kind would match; {hint}"))
    return warnings


CLUSTER_PREFIX = "cluster:"


def cluster_source(kind: str, namespace: str, name: str) -> str:
    """How a policy stored in the cluster is named in errors: `cluster:MLPolicy/team-a/gpu-limits`."""
    return f"{CLUSTER_PREFIX}{kind}/{namespace + '/' if namespace else ''}{name}"


def check_policy_object(obj: Mapping[str, Any], in_force: Iterable[Policy] = ()) -> list[LoadError]:
    """Everything the loader would reject in one MLPolicy, ClusterMLPolicy or ClusterWorkloadKind object,
    before it is stored.

    The same checks as a policy file (schema, rule names, each rule's parameters), plus a name
    already taken by a policy in force from another source: either would keep the object out of
    the webhook's next policy set.
    """
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    source = cluster_source(str(obj.get("kind") or ""), str(meta.get("namespace") or ""), str(meta.get("name") or ""))
    policy, errors = compile_document(dict(obj), source)
    if not isinstance(policy, Policy):
        return errors
    return duplicate_names([*(p for p in in_force if p.source != source), policy])  # its own old version aside


def policy_object_warnings(obj: Mapping[str, Any], kinds: KindCatalog) -> list[LoadError]:
    """What a policy object would be warned of once in force (`kind_warnings`), with the kinds of the set in
    force; nothing for an object the loader refuses (its errors say more)."""
    policy, _ = compile_document(dict(obj), "")
    return kind_warnings(PolicySet((policy,), kinds=kinds)) if isinstance(policy, Policy) else []


def duplicate_names(policies: Iterable[Policy]) -> list[LoadError]:
    """An error for every policy whose name an earlier one in `policies` already has."""
    seen: dict[str, str] = {}
    errors: list[LoadError] = []
    for policy in policies:
        if policy.key in seen:
            errors.append(LoadError(policy.source, None, "metadata.name",
                                    f"policy {policy.key!r} is also defined in {seen[policy.key]}"))
        seen.setdefault(policy.key, policy.source)
    return errors


def describe_validation_error(exc: ValidationError) -> list[str]:
    """`field.path: message` for every problem, unknown fields first (they explain the rest)."""
    errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
    return [f"{_dotted(_pointer(e['loc']))}: {_pydantic_message(e)}" for e in errors]


def _pointer(loc: tuple[Any, ...]) -> str:
    return pointer.join("", *[t for t in loc if not (isinstance(t, str) and t.startswith("function-"))])


def _dotted(ptr: str) -> str:
    out = ""
    for token in pointer.split(ptr):
        out += f"[{token}]" if token.isdigit() else (f".{token}" if out else token)
    return out


def _pydantic_message(error: Any) -> str:
    if error["type"] == "extra_forbidden":
        return "unknown field"
    if error["type"] == "missing":
        return "required field is missing"
    text = str(error["msg"])  # pydantic's sentence, or a validator's own words with check IDs in camelCase
    return text[:1].lower() + text[1:]
