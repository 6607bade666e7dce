"""NVIDIA MIG devices: profiles that exist, and nodes that offer them.

Fields: `resources.limits` / `resources.requests` of init and regular containers, for `nvidia.com/mig-<profile>`
(the k8s-device-plugin "mixed" strategy; `+` written as `.`, e.g. `nvidia.com/mig-1g.10gb.me`,
`nvidia.com/mig-1g.24gb.me.all`, while `-me` stays `nvidia.com/mig-1g.24gb-me`) and, for the "single" strategy,
`nvidia.com/gpu` together with a pod `nodeSelector` or required node affinity (`In`) on `nvidia.com/gpu.product`
whose value ends in `-MIG-<profile>` (e.g. `NVIDIA-A100-SXM4-40GB-MIG-1g.5gb`).
Allowed values: profiles of the GPU models in `mig_tables` (NVIDIA MIG user guide, mig-parted config-default.yaml);
where the pod names its GPU model with a product label that `mig_tables.model_of_product` can place, profiles of
that model only: a single-strategy product (`NVIDIA-A100-SXM4-80GB-MIG-1g.5gb` is refused: 1g.5gb is an A100-40GB
profile), and under the mixed strategy the whole GPU's product in the nodeSelector or in every required node
affinity term (`NVIDIA-H100-80GB-HBM3` with `nvidia.com/mig-1g.5gb` is refused). Resource names must be qualified
names and product values label values (Kubernetes validation: alphanumerics, '-', '_', '.'), so
`nvidia.com/mig-1g.5gb+me` is refused in favour of `nvidia.com/mig-1g.5gb.me`.
Strategies (k8s-device-plugin `internal/lm/mig-strategy.go`, `internal/rm/rm.go`): under "single" every MIG device
is `nvidia.com/gpu` and the profile shows only in the product label; under "mixed" there is one resource per
profile and the product label names the whole GPU.
`mig.node-inventory` reads Node objects from the cluster facts: `status.allocatable` (what the device plugin
advertises) and `metadata.labels` (GPU feature discovery), and matches them against the pod's node selection.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from pydantic import Field

from mlgate.model.results import Finding, Skipped
from mlgate.model.workload import PodTemplate, Workload, as_dict, as_list
from mlgate.rules.common import (
    NAME_PART,
    container_label,
    is_qualified_name,
    pod_effective,
    quantity,
    regular_gpus,
)
from mlgate.rules.devices import FULL_GPU
from mlgate.rules.mig_layout import closest, describe
from mlgate.rules.mig_tables import (
    MIG_RESOURCE_PREFIX,
    MODELS,
    GpuModel,
    ModelKey,
    model_of_product,
    models_with,
    profile_of_label,
    profile_of_resource,
    resource_name,
)
from mlgate.rules.registry import Context, NoParams, Params, check

PRODUCT_LABEL = "nvidia.com/gpu.product"
MIG_MARK = "-MIG-"
SHARED_SUFFIX = "-SHARED"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
ALL_MODELS: list[ModelKey] = list(get_args(ModelKey))
_INT = re.compile(r"[+-]?[0-9]{1,19}")


@dataclass
class Ask:
    """One container's request for one device resource."""

    key: str
    index: int
    container: dict[str, Any]
    resource: str
    section: str
    count: int

    def path(self, template: PodTemplate) -> str:
        return template.path(self.key, self.index, "resources", self.section, self.resource)

    @property
    def label(self) -> str:
        return container_label(self.key, self.container)


class ProfileParams(Params):
    gpu_models: list[ModelKey] = Field(default_factory=lambda: list(ALL_MODELS), min_length=1,
                                       description="the GPU models the cluster has (mig_tables keys)")
    strategy: Literal["mixed", "single", "any"] = Field(default="any", description="the device plugin's MIG "
                                                       "strategy: how pods name MIG devices")


@check("mig.profile-exists", "MIG profiles asked for exist on the GPU models named", ProfileParams)
def profile_exists(workload: Workload, params: ProfileParams, context: Context) -> list[Finding] | Skipped:
    findings: list[Finding] = []
    seen = False
    for template in workload.templates:
        asks, products = asks_of(template, with_full_gpu=False), mig_products(template)
        seen = seen or bool(asks or products)
        selected = selected_models(template)
        findings += [f for a in asks if (f := _resource_finding(template, a, params, selected))]
        findings += [f for path, value in products if (f := _selector_finding(path, value, asks, params))]
    return findings if seen else Skipped("no MIG resources or MIG product selectors")


def _resource_finding(template: PodTemplate, ask: Ask, params: ProfileParams,
                      selected: list[tuple[str, GpuModel]] | None) -> Finding | None:
    profile = profile_of_resource(ask.resource) or ""
    if not is_qualified_name(ask.resource):
        return Finding(ask.path(template), "mig resource name invalid",
                       f"{ask.label} asks for {ask.resource}, which is not a valid resource name, so the API server "
                       "refuses the pod (a name part holds only alphanumerics, '-', '_' and '.')",
                       f"ask for {resource_name(profile)}; the device plugin writes the '+' of a profile name "
                       "(`+me`, `+gfx`) as '.'")
    if params.strategy == "single":
        return Finding(ask.path(template), "mig resource under single strategy",
                       f"{ask.label} asks for {ask.resource}; with the single MIG strategy every MIG device "
                       f"is {FULL_GPU}",
                       f"ask for {FULL_GPU} and select the profile with nodeSelector {PRODUCT_LABEL}: "
                       f"<GPU>{MIG_MARK}{profile}")
    if models_with(profile, params.gpu_models):
        return _selection_finding(template, ask, profile, selected)
    return Finding(ask.path(template), "unknown mig profile",
                   f"{ask.label} asks for {ask.resource}, a profile {_scope(params)} offers",
                   f"use one of: {', '.join(resource_name(p) for p in _closest(profile, params))}")


def _selection_finding(template: PodTemplate, ask: Ask, profile: str,
                       selected: list[tuple[str, GpuModel]] | None) -> Finding | None:
    """A mixed-strategy profile that none of the GPU models the pod selects has."""
    if not selected or any(profile in model.profiles for _, model in selected):
        return None
    named = ", ".join(sorted({f"{value} ({model.title})" for value, model in selected}))
    offered = closest(profile, [model for _, model in selected])
    return Finding(ask.path(template), "mig profile not on selected gpu",
                   f"{ask.label} asks for {ask.resource}, but the pod selects {PRODUCT_LABEL}={named}, which has no "
                   f"{profile} profile, so no node it may run on offers it",
                   f"ask for one of: {', '.join(resource_name(p) for p in offered)}, or select a GPU model that "
                   f"has {profile}")


def _selector_finding(path: str, value: str, migs: list[Ask], params: ProfileParams) -> Finding | None:
    profile = product_profile(value) or ""
    if params.strategy == "mixed":
        return Finding(path, "mig strategy mismatch",
                       f"{PRODUCT_LABEL}={value} is a single-strategy MIG product; under the mixed strategy "
                       "the label names the whole GPU",
                       f"ask for {resource_name(profile)} instead of {FULL_GPU} and drop the {MIG_MARK} selector")
    problem = _product_problem(path, value, profile, params)
    if problem is None and params.strategy == "any" and migs:
        return Finding(path, "mig strategies mixed",
                       f"{PRODUCT_LABEL}={value} selects single-strategy nodes, but {migs[0].label} asks for "
                       f"{migs[0].resource}, which only mixed-strategy nodes offer",
                       f"either ask for {FULL_GPU} on {value} nodes, or drop the selector")
    return problem


def _product_problem(path: str, value: str, profile: str, params: ProfileParams) -> Finding | None:
    """A single-strategy product that no node can carry: not a label value, or a profile its GPU model lacks."""
    if not NAME_PART.match(value):
        return Finding(path, "mig product not a label value",
                       f"{PRODUCT_LABEL}={value} is not a valid label value, so no node carries it (at most 63 "
                       "alphanumerics, '-', '_' and '.')",
                       f"select the value nodes carry, or ask for {resource_name(profile)} on mixed-strategy nodes")
    model = model_of_product(value.rsplit(MIG_MARK, 1)[0])
    if model is None:  # a name mlgate cannot place: any model allowed will do
        if models_with(profile, params.gpu_models):
            return None
        return Finding(path, "unknown mig profile",
                       f"{PRODUCT_LABEL}={value} names MIG profile {profile!r}, which {_scope(params)} offers",
                       f"end the value with {MIG_MARK}<profile>, one of: {', '.join(_closest(profile, params))}")
    if model.key not in params.gpu_models:
        return Finding(path, "mig gpu model not allowed",
                       f"{PRODUCT_LABEL}={value} selects {model.title} GPUs, which are not among gpuModels "
                       f"({', '.join(params.gpu_models)})", "select a product of one of those models")
    if profile not in model.profiles:
        return Finding(path, "unknown mig profile",
                       f"{PRODUCT_LABEL}={value} names MIG profile {profile!r}, which {model.title} does not offer",
                       f"end the value with {MIG_MARK}<profile>, one of: {', '.join(_label_profiles(profile, model))}")
    return None


def _label_profiles(profile: str, model: GpuModel) -> list[str]:
    """The profiles of `model` nearest to `profile` that a label value can name ('+' cannot be written)."""
    return [p for p in closest(profile, [model], n=len(model.profiles)) if "+" not in p][:3]


def _scope(params: ProfileParams) -> str:
    if set(params.gpu_models) == set(ALL_MODELS):
        return "no GPU model mlgate knows"
    return "none of " + ", ".join(MODELS[k].title for k in params.gpu_models)


def _closest(profile: str, params: ProfileParams) -> list[str]:
    return closest(profile, [MODELS[k] for k in params.gpu_models])


@check("mig.node-inventory", "some node offers the MIG devices a pod asks for, in the numbers asked", NoParams)
def node_inventory(workload: Workload, params: NoParams, context: Context) -> list[Finding] | Skipped:
    plans = [(t, products, asks_of(t, with_full_gpu=bool(products)))
             for t in workload.templates for products in [mig_products(t)]]
    if not any(asks for _, _, asks in plans):
        return Skipped("no MIG devices asked for")
    if not context.facts.known:
        return Skipped("no cluster facts to find nodes with these MIG devices in", looked=False)
    nodes = list(context.facts.nodes())
    if not nodes:
        return Skipped("the cluster facts list no nodes to find these MIG devices on", looked=False)
    return [f for t, products, asks in plans if asks for f in _inventory(t, products, asks, nodes)]


def _inventory(
    template: PodTemplate, products: list[tuple[str, str]], asks: list[Ask], nodes: Sequence[Mapping[str, Any]]
) -> Iterator[Finding]:
    candidates = [n for n in nodes if selects(template.spec, _labels(n))]
    if products and not candidates:
        path, value = products[0]
        yield Finding(path, "no node has mig product",
                      f"no node is labelled {PRODUCT_LABEL}={value} and matches the pod's other node selection",
                      "select a product that nodes have, or have the MIG manager apply a layout with it "
                      "(node label nvidia.com/mig.config)")
        return
    scope = "" if len(candidates) == len(nodes) else f" the pod may run on ({len(candidates)} of {len(nodes)})"
    fits = True
    for ask in asks:
        most = max((allocatable(n, ask.resource) for n in candidates), default=0)
        if most == 0:
            offered = sorted({r for n in candidates for r in _allocatable_map(n) if r.startswith(MIG_RESOURCE_PREFIX)})
            instead = f"ask for one of {', '.join(offered)}" if offered else "select nodes that offer MIG devices"
            yield Finding(ask.path(template), "mig devices not offered",
                          f"{ask.label} asks for {ask.resource}, which no node{scope} advertises",
                          f"{instead}, or have the MIG manager apply a layout with this profile "
                          "(node label nvidia.com/mig.config)")
            fits = False
        elif ask.count > most:
            yield Finding(ask.path(template), "more mig devices than any node has",
                          f"{ask.label} asks for {ask.count} {ask.resource}; the most any node{scope} offers is {most}",
                          "ask for fewer and spread the work across more pods")
            fits = False
    need = pod_demand(asks)
    if fits and not any(all(allocatable(n, r) >= c for r, c in need.items()) for n in candidates):
        who = "the pod needs" if template.role == "pod" else f"each {template.role} pod needs"
        yield Finding(template.path("containers"), "no node fits the pod's mig devices",
                      f"{who} {describe(need)} on one node; no node{scope} has them all",
                      "ask for fewer devices per pod, or for profiles that share a node")


def asks_of(template: PodTemplate, with_full_gpu: bool) -> list[Ask]:
    """MIG requests (and `nvidia.com/gpu` too, for single-strategy pods) of init and regular containers."""
    asks: list[Ask] = []
    for key, index, container, limits, requests, _ in regular_gpus(template):  # MIG devices are built-in names
        for resource in sorted(set(limits) | set(requests)):
            if not (resource.startswith(MIG_RESOURCE_PREFIX) or (with_full_gpu and resource == FULL_GPU)):
                continue
            section = "limits" if resource in limits else "requests"
            number = quantity((limits if resource in limits else requests)[resource])
            if number is not None and number > 0 and number == number.to_integral_value():
                asks.append(Ask(key, index, container, resource, section, int(number)))
    return asks


def pod_demand(asks: list[Ask]) -> dict[str, int]:
    """Per resource, what the pod holds at once (`common.pod_effective`: sidecars beside the regular containers,
    other init containers one at a time)."""
    per_container: dict[tuple[str, int], tuple[dict[str, Any], dict[str, int]]] = {}
    for ask in asks:  # in container order
        per_container.setdefault((ask.key, ask.index), (ask.container, {}))[1][ask.resource] = ask.count
    return pod_effective((key, container, amounts) for (key, _), (container, amounts) in per_container.items())


def mig_products(template: PodTemplate) -> list[tuple[str, str]]:
    """(path, value) of every single-strategy MIG product the pod's node selection requires."""
    found: list[tuple[str, str]] = []
    selector = template.spec.get("nodeSelector")
    if isinstance(selector, dict) and MIG_MARK in str(selector.get(PRODUCT_LABEL, "")):
        found.append((template.path("nodeSelector", PRODUCT_LABEL), str(selector[PRODUCT_LABEL])))
    for t, term in enumerate(required_terms(template.spec)):
        for e, expr in enumerate(as_list(term.get("matchExpressions"))):
            if isinstance(expr, dict) and expr.get("key") == PRODUCT_LABEL and expr.get("operator") == "In":
                for v, value in enumerate(as_list(expr.get("values"))):
                    if MIG_MARK in str(value):
                        found.append((template.path("affinity", "nodeAffinity", REQUIRED, "nodeSelectorTerms", t,
                                                    "matchExpressions", e, "values", v), str(value)))
    return found


def product_profile(value: str) -> str | None:
    """`NVIDIA-A100-SXM4-40GB-MIG-1g.5gb` -> `1g.5gb`; the `-SHARED` suffix and a sanitized `+` are undone."""
    if MIG_MARK not in value:
        return None
    return profile_of_label(value.rsplit(MIG_MARK, 1)[1].removesuffix(SHARED_SUFFIX))


def selected_models(template: PodTemplate) -> list[tuple[str, GpuModel]] | None:
    """(product, model) of each whole-GPU product the pod's node selection allows, or None where it allows any
    model: no product in the nodeSelector nor in every required term, a single-strategy product (judged on its
    own), or a product `model_of_product` cannot place."""
    selector = as_dict(template.spec.get("nodeSelector"))
    if PRODUCT_LABEL in selector:
        products = [str(selector[PRODUCT_LABEL])]
    else:
        terms = [_term_products(t) for t in required_terms(template.spec)]
        if not terms or not all(terms):
            return None
        products = [p for term in terms for p in term]
    models = [(p, model_of_product(p)) for p in products]
    if any(MIG_MARK in p or m is None for p, m in models):
        return None
    return [(p, m) for p, m in models if m is not None]


def _term_products(term: Mapping[str, Any]) -> list[str]:
    """The products one required node-affinity term allows (`In` on the product label), none if it does not say."""
    return [str(v) for e in as_list(term.get("matchExpressions"))
            if isinstance(e, dict) and e.get("key") == PRODUCT_LABEL and e.get("operator") == "In"
            for v in as_list(e.get("values"))]


def required_terms(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    required = as_dict(as_dict(as_dict(spec.get("affinity")).get("nodeAffinity")).get(REQUIRED))
    return [t for t in as_list(required.get("nodeSelectorTerms")) if isinstance(t, dict)]


def selects(spec: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether a node with `labels` satisfies the pod's nodeSelector and required node affinity."""
    selector = as_dict(spec.get("nodeSelector"))
    if any(labels.get(str(k)) != str(v) for k, v in selector.items()):
        return False
    terms = required_terms(spec)
    return not terms or any(_term_matches(t, labels) for t in terms)


def _term_matches(term: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    expressions = [e for e in as_list(term.get("matchExpressions")) if isinstance(e, dict)]
    if not expressions:
        return bool(term.get("matchFields"))  # an empty term matches no node; fields are not checked here
    return all(_expression_matches(e, labels) for e in expressions)


def _expression_matches(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, operator = str(expr.get("key", "")), expr.get("operator")
    values = [str(v) for v in as_list(expr.get("values"))]
    if operator == "In":
        return labels.get(key) in values
    if operator == "NotIn":
        return labels.get(key) not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    if operator in ("Gt", "Lt"):
        label = _int64(labels.get(key))
        bound = _int64(values[0]) if len(values) == 1 else None
        if label is None or bound is None:
            return False
        return label > bound if operator == "Gt" else label < bound
    return True  # an operator mlgate does not know never rules a node out


def allocatable(node: Mapping[str, Any], resource: str) -> int:
    number = quantity(_allocatable_map(node).get(resource, 0))
    return int(number) if number is not None and number > 0 else 0


def _allocatable_map(node: Mapping[str, Any]) -> Mapping[str, Any]:
    return as_dict(as_dict(node.get("status")).get("allocatable"))


def _labels(node: Mapping[str, Any]) -> Mapping[str, str]:
    return {str(k): str(v) for k, v in as_dict(as_dict(node.get("metadata")).get("labels")).items()}


def _int64(value: str | None) -> int | None:
    """`value` as the scheduler reads a Gt/Lt operand (Go's strconv.ParseInt(value, 10, 64)); None where that
    fails, so no node matches. str.isdigit would let "²" and 5,000-digit strings reach int()."""
    if value is None or not _INT.fullmatch(value):
        return None
    number = int(value)
    return number if -(2**63) <= number < 2**63 else None
