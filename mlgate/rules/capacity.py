"""Capacity: jobs that can never run, or will wait, for their namespace's quota or the cluster's nodes.

Fields: every init and regular container's `resources.requests` and `resources.limits` (requests default to
limits, as the API server defaults them), the pod's `priorityClassName`, `activeDeadlineSeconds`,
`nodeSelector` and required node affinity, and the replicas of each template. Cluster facts: the namespace's
ResourceQuotas (`spec.hard`, `spec.scopes`, `spec.scopeSelector`, `status.used`), LimitRanges (`spec.limits[]`
of type Container and Pod: `max`, `min`, `default`, `defaultRequest`, `maxLimitRequestRatio`), Nodes
(`status.allocatable`, labels, `spec.unschedulable`, `NoSchedule`/`NoExecute` `spec.taints` against the pod's
`tolerations`: rules/node_index.py) and PriorityClasses.
Allowed values: what a whole job asks for at once (every template's pods, each holding what `pod_effective` says)
within each quota's `hard` (`pods`/`count/pods`, `requests.*`, `limits.*`, bare `cpu`/`memory` as requests, and
`<class>.deviceclass.resource.k8s.io/devices` for the claims a pod's ResourceClaimTemplates make: rules/claims.py),
counting a pod only against the quotas whose scopes match it (core/v1 ResourceQuotaScope: Terminating,
NotTerminating, BestEffort, NotBestEffort, and PriorityClass through `scopeSelector`; Kubernetes docs "Resource
Quotas"); a pod's GPUs within some node it may run on, and the job's within all of them; a PriorityClass that
exists (`system-cluster-critical` and `system-node-critical` always do); containers and pods within the
LimitRanges the LimitRanger admission plugin enforces when the pods are created (after defaults are filled in).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Any, NamedTuple

from mlgate.model.results import Finding, Skipped, Unchecked
from mlgate.model.workload import PodTemplate, Workload, as_dict, as_list
from mlgate.rules.claims import QUOTA_SUFFIX, driver_gpus, pod_gpus, quota_devices, uncounted_claims
from mlgate.rules.common import container_label, pod_effective, quantity
from mlgate.rules.devices import is_mig
from mlgate.rules.mig import required_terms, selects
from mlgate.rules.node_index import DRA_PREFIX, NodeIndex, node_index, tolerates_node
from mlgate.rules.registry import Context, NoParams, check

BUILT_IN_PRIORITY_CLASSES = frozenset({"system-cluster-critical", "system-node-critical"})
PODS = "pods"


def pod_amounts(template: PodTemplate, section: str) -> Mapping[str, Decimal]:
    """What one pod of `template` holds of each resource in `section` (requests default to limits); worked out
    once per template (until its next write) for the quota, node, queue and limit range rules. Never edit it."""
    return template.derived(_requested if section == "requests" else _limited)


def _requested(template: PodTemplate) -> dict[str, Decimal]:
    return pod_effective((key, c, _container_amounts_in(c, "requests")) for key, _, c in template.regular_containers())


def _limited(template: PodTemplate) -> dict[str, Decimal]:
    return pod_effective((key, c, _container_amounts_in(c, "limits")) for key, _, c in template.regular_containers())


def _container_amounts_in(container: dict[str, Any], section: str) -> dict[str, Decimal]:
    resources = as_dict(container.get("resources"))
    entries = {**as_dict(resources.get("limits")), **as_dict(resources.get("requests"))} \
        if section == "requests" else as_dict(resources.get("limits"))
    return {str(r): a for r, v in entries.items() if (a := quantity(v)) is not None}


def quota_demand(key: str, template: PodTemplate) -> Decimal | None:
    """One pod's charge against quota key `key`, or None for a key this rule does not count."""
    if key in (PODS, "count/pods"):
        return Decimal(1)
    if key.endswith(QUOTA_SUFFIX):  # DRA devices, charged per claim the pod's templates make
        return Decimal(quota_devices(template).get(key.removesuffix(QUOTA_SUFFIX), 0))
    section, _, resource = key.partition(".")
    if section not in ("requests", "limits") or not resource:
        section, resource = "requests", key  # bare cpu/memory are requests (core/v1 ResourceCPU in a quota)
        if key not in ("cpu", "memory", "ephemeral-storage"):
            return None
    return pod_amounts(template, section).get(resource, Decimal(0))


def scopes_match(quota: Mapping[str, Any], template: PodTemplate) -> bool:
    """Whether `quota` charges the pods of `template` (its scopes and scopeSelector)."""
    spec = as_dict(quota.get("spec"))
    if not spec.get("scopes") and not spec.get("scopeSelector"):
        return True  # most quotas: every pod
    requirements = [{"scopeName": s, "operator": "Exists"} for s in as_list(spec.get("scopes"))]
    requirements += [e for e in as_list(as_dict(spec.get("scopeSelector")).get("matchExpressions"))
                     if isinstance(e, dict)]
    return all(_scope_matches(r, template) for r in requirements)


def _scope_matches(requirement: Mapping[str, Any], template: PodTemplate) -> bool:
    scope, operator = requirement.get("scopeName"), requirement.get("operator")
    if scope == "PriorityClass":
        name = template.spec.get("priorityClassName")
        values = [str(v) for v in as_list(requirement.get("values"))]
        return {"In": name in values, "NotIn": name not in values, "Exists": name is not None,
                "DoesNotExist": name is None}.get(str(operator), False)
    terminating = template.spec.get("activeDeadlineSeconds") is not None
    best_effort = not any(pod_amounts(template, s) for s in ("requests", "limits"))
    held = {"Terminating": terminating, "NotTerminating": not terminating, "BestEffort": best_effort,
            "NotBestEffort": not best_effort}.get(str(scope), False)  # other scopes charge no pod here
    return held if operator in ("Exists", "In", None) else not held


Charge = tuple[str, str, Decimal, Decimal, Decimal | None]  # quota name, key, what the job asks, hard, used


def charges(workload: Workload, quotas: Sequence[Mapping[str, Any]]) -> Iterator[Charge]:
    """Each quota key the job is charged against, with what it asks for in all (over the pods the quota's
    scopes charge) beside the quota's hard and used amounts."""
    for quota in quotas:
        name = str(as_dict(quota.get("metadata")).get("name") or "?")
        hard, used = as_dict(as_dict(quota.get("spec")).get("hard")), as_dict(as_dict(quota.get("status")).get("used"))
        charged = [t for t in workload.templates if scopes_match(quota, t)]
        for key, limit in hard.items():
            total = Decimal(0)
            for template in charged:
                per_pod = quota_demand(str(key), template)
                if per_pod is None:
                    break
                total += per_pod * template.replicas
            else:
                bound = quantity(limit)
                if bound is not None and total > 0:
                    yield name, str(key), total, bound, quantity(used.get(key)) if key in used else None


def _who(template: PodTemplate) -> str:
    return "the pod" if template.role == "pod" else f"a {template.role} pod"


def show(amount: Decimal) -> str:
    return str(int(amount)) if amount == amount.to_integral_value() else f"{amount.normalize():f}"


def _job_charges(workload: Workload, context: Context) -> list[Charge] | Skipped:
    """What the job is charged against its namespace's quotas, or why that cannot be worked out."""
    if not workload.pods_counted:
        return Skipped(f"how many {workload.kind} pods run at once is not known")
    if not context.facts.known:
        return Skipped("no cluster facts to find the namespace's ResourceQuotas in", looked=False)
    quotas = context.facts.resource_quotas(workload.namespace or "default")
    key = f"capacity.charges/{id(quotas)}"  # quota and quota-available read the same charges
    if key not in workload.memo:
        workload.memo[key] = (quotas, list(charges(workload, quotas)))  # the list is kept: its id stays its own
    return list(workload.memo[key][1])


@check("capacity.quota", "the whole job fits within its namespace's ResourceQuotas", NoParams)
def quota(workload: Workload, params: NoParams, context: Context) -> list[Finding | Unchecked] | Skipped:
    charged = _job_charges(workload, context)
    if isinstance(charged, Skipped):
        return charged
    return [*_over_quota(workload, charged), *uncounted_claims(workload, context.gpus)]


def _over_quota(workload: Workload, charged: list[Charge]) -> Iterator[Finding]:
    for name, key, asked, hard, _ in charged:
        if asked > hard:
            yield Finding("/spec", "quota exceeded", f"{workload.kind} {workload.name!r} asks for {show(asked)} {key} "
                          f"in all, but ResourceQuota {name!r} in namespace {workload.namespace or 'default'} allows "
                          f"{show(hard)}", "ask for less per pod or fewer replicas, or have the quota raised")


@check("capacity.quota-available", "the whole job fits in what its namespace's quotas have left", NoParams)
def quota_available(workload: Workload, params: NoParams, context: Context) -> list[Finding] | Skipped:
    if context.operation == "UPDATE":
        return Skipped("an update: the job's own pods are counted as used already")
    charged = _job_charges(workload, context)
    if isinstance(charged, Skipped):
        return charged
    return [Finding("/spec", "quota used up", f"{workload.kind} {workload.name!r} asks for {show(asked)} {key}, but "
                    f"ResourceQuota {name!r} has {show(max(hard - used, Decimal(0)))} of {show(hard)} left "
                    f"({show(used)} used): its pods wait until {show(asked - (hard - used))} more are free",
                    "wait, or free what other jobs in the namespace hold")
            for name, key, asked, hard, used in charged if used is not None and hard - used < asked <= hard]


@check("capacity.nodes", "each pod fits on a node it may run on, and the whole job on all of them", NoParams)
def nodes(workload: Workload, params: NoParams, context: Context) -> list[Finding | Unchecked] | Skipped:
    if not context.facts.known:
        return Skipped("no cluster facts to find nodes in", looked=False)
    slices = context.facts.serves("ResourceSlice")
    index = node_index(context.facts.nodes(), context.facts.objects("ResourceSlice") if slices else ())
    claimed: list[Finding | Unchecked] = []  # what could not be compared, said
    asks = []
    for template in workload.templates:
        wanted = {r: a for r, a in pod_amounts(template, "limits").items()
                  if r in context.gpus and not is_mig(r) and a > 0}
        if template.spec.get("resourceClaims") and pod_gpus(template, context.gpus).gpus:
            wanted |= _dra_asks(template, context, index, slices, claimed)
        if wanted:
            asks.append((template, wanted))
    if not asks:
        return claimed or Skipped("no pod asks for whole GPUs")
    if not index.nodes:
        return Skipped("the cluster facts list no schedulable nodes", looked=False)
    findings: list[Finding | Unchecked] = []
    totals: dict[str, Decimal] = {}
    chosen: set[str] = set()  # the nodes some pod may run on, unless one may run on any (`anywhere`)
    anywhere = False
    for template, wanted in asks:
        selecting = bool(template.spec.get("nodeSelector") or required_terms(template.spec))
        tolerations = template.spec.get("tolerations")
        candidates = [n for n in index.nodes if (not selecting or selects(template.spec, n.labels))
                      and tolerates_node(tolerations, n)] if selecting or index.tainted else index.nodes
        selective = len(candidates) != len(index.nodes) or selecting
        if selective:
            chosen |= {n.name for n in candidates}
        else:
            anywhere = True
        for resource, amount in sorted(wanted.items()):
            largest = max((n.allocatable.get(resource, 0) for n in candidates), default=0) if selective \
                else index.largest.get(resource, 0)
            if amount > largest:
                findings.append(Finding(template.path("containers"), "no node large enough",
                                        f"{_who(template)} asks for {show(amount)} {_named(resource)}, but the largest "
                                        f"node it may run on has {largest} ({len(candidates)} of "
                                        f"{len(index.nodes)} nodes match its node selection"
                                        f"{' and tolerations' if index.tainted else ''})",
                                        "ask for fewer per pod and run more replicas"))
            totals[resource] = totals.get(resource, Decimal(0)) + amount * template.replicas
    if workload.pods_counted and not findings:
        for resource, asked in sorted(totals.items()):
            have = index.total.get(resource, 0) if anywhere else \
                sum(n.allocatable.get(resource, 0) for n in index.nodes if n.name in chosen)
            if asked > have:
                findings.append(Finding("/spec", "cluster too small", f"{workload.kind} {workload.name!r} needs "
                                        f"{show(asked)} {_named(resource)} at once, but the nodes its pods may run "
                                        f"on have {have} in all", "lower the replicas or GPUs per pod"))
    return findings + claimed


def _dra_asks(template: PodTemplate, context: Context, index: NodeIndex, slices: bool,
              unchecked: list[Finding | Unchecked]) -> dict[str, Decimal]:
    """The pod's DRA GPUs per `dra:<driver>`, as the node index counts a node's devices; what cannot be compared
    is added to `unchecked`."""
    who = _who(template)
    if not slices:
        unchecked.append(Unchecked(f"the GPUs {who} claims through DRA are not compared with nodes: the facts hold "
                                   "no ResourceSlices"))
        return {}
    by_driver = driver_gpus(template, context.gpus)
    if by_driver is None:
        unchecked.append(Unchecked(f"the GPUs {who} claims through DRA are not compared with nodes: a claim's "
                                   "DeviceClass names no single driver"))
        return {}
    asks = {}
    for driver, count in by_driver.items():
        if driver in index.dra_unbound:
            unchecked.append(Unchecked(f"the {driver} GPUs {who} claims are not compared with nodes: that driver "
                                       "publishes devices not bound to one node"))
        elif count:
            asks[DRA_PREFIX + driver] = Decimal(count)
    return asks


def _named(resource: str) -> str:
    return f"devices of DRA driver {resource.removeprefix(DRA_PREFIX)}" if resource.startswith(DRA_PREFIX) \
        else resource


@check("capacity.limit-range", "containers and pods within the namespace's LimitRanges", NoParams)
def limit_range(workload: Workload, params: NoParams, context: Context) -> list[Finding] | Skipped:
    if not context.facts.known:
        return Skipped("no cluster facts to find the namespace's LimitRanges in", looked=False)
    ranges = context.facts.limit_ranges(workload.namespace or "default")
    items = [_Range(str(as_dict(r.get("metadata")).get("name") or "?"), item.get("type"),
                    *(_amounts(item.get(k)) for k in _RANGE_KEYS))
             for r in ranges for item in map(as_dict, as_list(as_dict(r.get("spec")).get("limits")))]
    if not items:
        return Skipped("no LimitRange in the namespace")
    findings: list[Finding] = []
    for template in workload.templates:
        for item in items:
            if item.type == "Container":
                for key, index, container in template.regular_containers():
                    findings += _range_findings(template.path(key, index, "resources"), _container_amounts(
                        container, item), item, f"{container_label(key, container)}")
            elif item.type == "Pod":
                amounts = {s: pod_amounts(template, s) for s in ("requests", "limits")}
                findings += _range_findings(template.path("containers"), amounts, item, _who(template))
    return findings


_RANGE_KEYS = ("max", "min", "maxLimitRequestRatio", "default", "defaultRequest")


class _Range(NamedTuple):
    """One `spec.limits` item of a LimitRange, its amounts parsed once per evaluation."""

    name: str  # the LimitRange's
    type: Any
    max: dict[str, Decimal]
    min: dict[str, Decimal]
    ratio: dict[str, Decimal]
    default: dict[str, Decimal]
    default_request: dict[str, Decimal]


def _container_amounts(container: dict[str, Any], item: _Range) -> dict[str, dict[str, Decimal]]:
    """A container's requests and limits as the LimitRanger admission plugin leaves them: unset limits take the
    range's `default`, unset requests its `defaultRequest`, else the limit."""
    resources = as_dict(container.get("resources"))
    limits = {**item.default, **_amounts(resources.get("limits"))}
    requests = {**limits, **item.default_request, **_amounts(resources.get("requests"))}
    return {"requests": requests, "limits": limits}


def _amounts(entries: Any) -> dict[str, Decimal]:
    return {str(r): a for r, v in as_dict(entries).items() if (a := quantity(v)) is not None}


def _range_findings(ptr: str, amounts: Mapping[str, Mapping[str, Decimal]], item: _Range, who: str,
                    ) -> Iterator[Finding]:
    fix = "keep within the namespace's LimitRange, or have it changed"
    name = item.name
    for resource, bound in item.max.items():
        if (value := amounts["limits"].get(resource)) is not None and value > bound:
            yield Finding(ptr, "above limit range", f"{who} has a {resource} limit of {show(value)}, above the "
                          f"{show(bound)} LimitRange {name!r} allows: the API server refuses its pods", fix)
    for resource, bound in item.min.items():
        if (value := amounts["requests"].get(resource)) is not None and value < bound:
            yield Finding(ptr, "below limit range", f"{who} requests {show(value)} {resource}, below the "
                          f"{show(bound)} LimitRange {name!r} requires: the API server refuses its pods", fix)
    for resource, ratio in item.ratio.items():
        limit, request = amounts["limits"].get(resource), amounts["requests"].get(resource)
        if limit is not None and request and limit / request > ratio:
            yield Finding(ptr, "limit to request ratio too high", f"{who} limits {resource} to "
                          f"{show(limit / request)} times its request; LimitRange {name!r} allows {show(ratio)}",
                          fix)


@check("capacity.priority-class", "every priorityClassName names a PriorityClass that exists", NoParams)
def priority_class(workload: Workload, params: NoParams, context: Context) -> list[Finding] | Skipped:
    named = [(t, str(t.spec["priorityClassName"])) for t in workload.templates if t.spec.get("priorityClassName")]
    if not named:
        return Skipped("no priorityClassName")
    if not context.facts.known:
        return Skipped("no cluster facts to find PriorityClasses in", looked=False)
    return [Finding(t.path("priorityClassName"), "priority class not found",
                    f'PriorityClass "{name}" does not exist, so the API server refuses the {t.role} pods',
                    "use a PriorityClass that exists (kubectl get priorityclasses), or create it first")
            for t, name in named
            if name not in BUILT_IN_PRIORITY_CLASSES and context.facts.priority_class(name) is None]
