"""Any object to the engine's view of it: pod templates with their field paths, and job context.

A known kind is read through its description (`kinds.yaml`, or a `WorkloadKind` of the policy set): template
pointers with `*` wildcards, roles, replica counts, run policy and gang facts. Kinds whose pods are not a plain
template go through a renderer (`renderers/`). An object of a kind no description knows is searched for pod
specs (`search.py`), and each one found is judged as one pod. `extract` returns None only for an object that
holds no pod spec at all.
"""

from __future__ import annotations

from functools import cache, lru_cache, partial
from typing import Any

from mlgate.model import pointer
from mlgate.model.facts import NO_FACTS, ClusterFacts
from mlgate.model.kinds import Count, KindSpec, TemplateSource
from mlgate.model.workload import PodTemplate, Workload, as_dict, as_list
from mlgate.workloads.catalog import SHIPPED, KindCatalog
from mlgate.workloads.renderers import RENDERERS
from mlgate.workloads.search import unknown_kind_templates
from mlgate.workloads.templates import raw_template, whole

MAX_EMBEDDING = 4  # an Experiment's trial may be any kind, but not one nested without end


def extract(
    obj: dict[str, Any], old_obj: dict[str, Any] | None = None, *,
    kinds: KindCatalog = SHIPPED, facts: ClusterFacts = NO_FACTS,
) -> Workload | None:
    api_version, kind = str(obj.get("apiVersion") or ""), str(obj.get("kind") or "")
    meta = as_dict(obj.get("metadata"))
    name, namespace = meta.get("name") or meta.get("generateName") or "", meta.get("namespace") or ""
    workload = Workload(obj=obj, api_version=api_version, kind=kind, name=str(name), namespace=str(namespace),
                        old_obj=old_obj, description=kinds.find(api_version, kind))
    if old_obj is not None:
        workload.old_workload = cache(partial(extract, old_obj, kinds=kinds, facts=facts))
    if workload.description is None:
        workload.templates, workload.pods_counted = unknown_kind_templates(obj), False
        if not workload.templates:
            return None
        workload.notes.append(f"{api_version or '?'}/{kind or '?'}: unknown kind; each pod spec judged as one pod, "
                              "pod counts unchecked; describe it with a WorkloadKind")
    else:
        describe(workload, workload.description, obj, "", kinds=kinds, facts=facts, depth=0)
        # one of a set of separate objects (a Pod) that a controller made: its owner, judged whole, has the
        # job-wide counts (a worker's torchrun --nnodes=2 is right in a one-pod object)
        if workload.gang.groupSpansObjects and _controlled(meta):
            workload.pods_counted = False
    for template in workload.templates:  # a pod's DRA claims are found in its namespace (rules/claims.py)
        template.namespace, template.facts = workload.namespace or "default", facts
    return workload


def _controlled(meta: dict[str, Any]) -> bool:
    return any(isinstance(r, dict) and r.get("controller") is True for r in as_list(meta.get("ownerReferences")))


def describe(workload: Workload, spec: KindSpec, root: dict[str, Any], base: str, *, kinds: KindCatalog,
             facts: ClusterFacts, depth: int) -> None:
    """Add what `spec` says about `root` (found at pointer `base` of the workload's object) to the workload."""
    for source in spec.templates:
        for match in matches(root, source.pointer):
            workload.templates.append(_template(root, base, source, match))
    if spec.render is not None:
        RENDERERS[spec.render](workload, root, base, spec.renderAt, facts)
    if spec.runPolicy is not None and workload.run_policy is None:
        workload.run_policy = spec.runPolicy if not base else \
            spec.runPolicy.model_copy(update={"pointer": base + spec.runPolicy.pointer})
    if spec.gang.pointer is not None and workload.gang_pointer is None:
        workload.gang_pointer = base + spec.gang.pointer
    for embedded in spec.embedded:
        for at, value, *_ in matches(root, embedded):
            nested = kinds.find(str(value.get("apiVersion") or ""), str(value.get("kind") or "")) \
                if isinstance(value, dict) else None
            if nested is None or depth >= MAX_EMBEDDING:
                workload.templates += unknown_kind_templates(value, base + at) if isinstance(value, dict) else []
                continue
            describe(workload, nested.model_copy(update={"runPolicy": None, "gang": spec.gang}), value, base + at,
                     kinds=kinds, facts=facts, depth=depth + 1)


# (the value's pointer, the value, the pointer of the item the last `*` matched (else the root's: counts and
# roles are read there), that item, its map key or list index)
Match = tuple[str, Any, str, Any, str | None]


def matches(root: Any, pattern: str) -> list[Match]:
    """Every value `pattern` (a pointer whose `*` is any list item or map value) reaches in `root`.
    Run for every template of every object: plain tuples and string joins, no per-step objects."""
    found: list[Match] = [("", root, "", root, None)]
    for token, suffix in _steps(pattern):
        step: list[Match] = []
        if token == "*":
            for at, node, _, _, _ in found:
                items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
                for key, value in items:
                    item_at = f"{at}/{pointer.escape(key)}"
                    step.append((item_at, value, item_at, value, str(key)))
        else:
            for at, node, anchor_at, anchor, key in found:
                if isinstance(node, dict):
                    value = node.get(token)
                elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                    value = node[int(token)]
                else:
                    continue
                if value is not None:
                    step.append((at + suffix, value, anchor_at, anchor, key))
        if not step:
            return step
        found = step
    return found


@lru_cache(maxsize=1024)
def _steps(pattern: str) -> tuple[tuple[str, str], ...]:
    """Each token of a pattern with its escaped `/token` suffix: worked out once per pattern."""
    return tuple((token, "/" + pointer.escape(token)) for token in pointer.split(pattern))


def count(rule: Count, anchor: Any) -> int:
    """What a `Count` says for one matched item."""
    if rule.value is not None:
        result = rule.value
    elif rule.at is not None:
        result = whole(resolve(anchor, rule.at), rule.default)
    elif rule.ifSet is not None:
        chosen = rule.then if resolve(anchor, rule.ifSet) is not None else rule.otherwise
        result = count(chosen, anchor) if chosen is not None else 0
    elif rule.product is not None:
        result = 1
        for part in rule.product:
            result *= count(part, anchor)
    else:
        parts = [count(part, anchor) for part in (rule.min or rule.max or [])]
        result = min(parts) if rule.min is not None else max(parts)
    return max(result + rule.offset, 0)


def resolve(anchor: Any, relative: str) -> Any:
    if "/" not in relative and isinstance(anchor, dict):  # most fields read are one level below the item
        return anchor.get(relative)
    return pointer.resolve(anchor, "/" + relative)


def _template(root: dict[str, Any], base: str, source: TemplateSource, match: Match) -> PodTemplate:
    at, value, anchor_at, anchor, key = match
    suspended = source.suspended is not None and resolve(anchor, source.suspended) is True
    replicas = 0 if suspended else count(source.replicas, anchor)
    template = raw_template(root, base, at, _role(source.role, anchor, key), replicas,
                            bare=source.shape == "PodSpec", found=value)
    if source.restartPolicy is not None:
        template.restart_policy_pointer = base + anchor_at + "/" + source.restartPolicy
    return template


def _role(role: str, anchor: Any, key: str | None) -> str:
    if not (role.startswith("{") and role.endswith("}")):
        return role
    field = role[1:-1]
    if field == "key":
        return key or ""
    value = resolve(anchor, field) if isinstance(anchor, dict) else None
    return str(value) if isinstance(value, str | int) and not isinstance(value, bool) else (key or field)
