"""GPUs a pod claims through Dynamic Resource Allocation, so that every GPU rule counts them.

Fields: the pod's `spec.resourceClaims[]` (`name`, and `resourceClaimTemplateName` or `resourceClaimName`) and
each container's `resources.claims[]` (`name`, and `request` to take one request of the claim only). Cluster facts:
the ResourceClaimTemplate (`spec.spec.devices.requests[]`) or ResourceClaim (`spec.devices.requests[]`) named, in
the pod's namespace, and DeviceClasses (`spec.extendedResourceName`, `spec.selectors[].cel.expression`).
Shape: `resource.k8s.io/v1` (kubernetes/api `resource/v1/types.go`): each request sets `exactly`
{deviceClassName, allocationMode `ExactCount` (then `count`, default 1) or `All`} or `firstAvailable[]`, ordered
alternatives of the same fields.
A class is a GPU class (`devices.dra_gpu_class`) by its DeviceClass in the facts, else by the vendors' own class
names. Counting for a maximum (`gpu.max`, the node and launch rules): `ExactCount` is its count; `firstAvailable`
the fewest any alternative asks, since the scheduler may take any; `All` is not counted, since it depends on the
node. Counting for a ResourceQuota (`quota_devices`) follows the API server's quota evaluator
(pkg/quota/v1/evaluator/core/resource_claims.go): `All` as 32 devices, `firstAvailable` as its largest alternative.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from mlgate.model.results import Unchecked
from mlgate.model.workload import PodTemplate, Workload, as_dict, as_list
from mlgate.rules.devices import GpuResources, dra_driver, dra_gpu_class

ALL_DEVICES = 32  # resource/v1 AllocationResultsMaxSize: what the quota evaluator charges for allocationMode All
QUOTA_SUFFIX = ".deviceclass.resource.k8s.io/devices"  # ResourceQuota key per DeviceClass


class Alternative(NamedTuple):
    device_class: str
    devices: int | None  # None: allocationMode All (`count` is a tuple method)


class Request(NamedTuple):
    name: str
    alternatives: tuple[Alternative, ...]  # one for `exactly`, several for `firstAvailable`


class PodClaim(NamedTuple):
    """One entry of the pod's `resourceClaims`: where its devices come from, and what it asks for (None: not in
    the facts, `missing` says why)."""

    source: str  # e.g. ResourceClaimTemplate "four-gpus"
    shared: bool  # a ResourceClaim by name: every pod that names it shares its devices
    requests: tuple[Request, ...] | None
    missing: str = ""


def pod_claims(template: PodTemplate) -> dict[str, PodClaim]:
    """The pod's claims by their pod-level name, looked up once per template (until its next write)."""
    return template.derived(_pod_claims)


def _pod_claims(template: PodTemplate) -> dict[str, PodClaim]:
    claims: dict[str, PodClaim] = {}
    for entry in map(as_dict, as_list(template.spec.get("resourceClaims"))):
        name = str(entry.get("name") or "")
        if entry.get("resourceClaimTemplateName"):
            claims[name] = _look_up(template, "ResourceClaimTemplate", str(entry["resourceClaimTemplateName"]))
        elif entry.get("resourceClaimName"):
            claims[name] = _look_up(template, "ResourceClaim", str(entry["resourceClaimName"]))
    return claims


def _look_up(template: PodTemplate, kind: str, name: str) -> PodClaim:
    source, shared = f'{kind} "{name}"', kind == "ResourceClaim"
    facts = template.facts
    if not facts.known:
        return PodClaim(source, shared, None, "no cluster facts to find it in")
    obj = facts.lookup(kind, template.namespace, name)
    if obj is None:
        where = "is not in the cluster" if facts.serves(kind) else "is not in the facts"
        return PodClaim(source, shared, None, f"{where} (namespace {template.namespace})")
    spec = as_dict(obj.get("spec"))
    devices = as_dict(as_dict(spec.get("spec")).get("devices") if kind == "ResourceClaimTemplate"
                      else spec.get("devices"))
    return PodClaim(source, shared, tuple(_request(as_dict(r)) for r in as_list(devices.get("requests"))))


def _request(request: Mapping[str, Any]) -> Request:
    choices = [as_dict(request.get("exactly"))] if request.get("exactly") is not None else \
        [as_dict(c) for c in as_list(request.get("firstAvailable"))]
    return Request(str(request.get("name") or ""), tuple(_alternative(c) for c in choices))


def _alternative(choice: Mapping[str, Any]) -> Alternative:
    if choice.get("allocationMode") == "All":
        return Alternative(str(choice.get("deviceClassName") or ""), None)
    count = choice.get("count", 1)
    return Alternative(str(choice.get("deviceClassName") or ""),
                       count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 1)


class Counted(NamedTuple):
    gpus: int  # whole GPUs, or MIG devices where no whole GPU is claimed (as `common._whole_gpus`)
    uncounted: tuple[str, ...]  # what could not be counted, and why
    shared: tuple[tuple[str, int], ...] = ()  # of `gpus`, those of ResourceClaims by name: (source, GPUs)


def container_gpus(template: PodTemplate, container: Mapping[str, Any], gpus: GpuResources) -> Counted:
    """The GPUs a container's `resources.claims` reach."""
    claims = pod_claims(template)
    picked: list[tuple[str, PodClaim, str | None]] = []
    for ref in map(as_dict, as_list(as_dict(container.get("resources")).get("claims"))):
        name = str(ref.get("name") or "")
        if name in claims:
            picked.append((name, claims[name], str(ref["request"]) if ref.get("request") else None))
    return _count(template, picked, gpus)


def pod_gpus(template: PodTemplate, gpus: GpuResources) -> Counted:
    """The GPUs all of the pod's claims hold, each claim once however many containers use it."""
    return _count(template, [(name, claim, None) for name, claim in pod_claims(template).items()], gpus)


def _count(template: PodTemplate, picked: list[tuple[str, PodClaim, str | None]], gpus: GpuResources) -> Counted:
    whole = slices = 0
    uncounted: list[str] = []
    shared: list[tuple[str, int]] = []
    for name, claim, only in picked:
        if claim.requests is None:
            uncounted.append(f'claim "{name}" ({claim.source}) {claim.missing}, so its GPUs were not counted')
            continue
        before = whole + slices
        for request in claim.requests:
            if only is not None and request.name != only:
                continue
            kinds = [(dra_gpu_class(a.device_class, _device_class(template, a.device_class), gpus), a.devices)
                     for a in request.alternatives]
            if not any(kind for kind, _ in kinds):
                continue
            if any(kind and count is None for kind, count in kinds):
                uncounted.append(f'claim "{name}" request "{request.name}" takes all matching devices of a node, '
                                 "so its GPUs were not counted")
                continue
            least = min((count or 0) if kind else 0 for kind, count in kinds)
            if all(kind == "mig" for kind, _ in kinds if kind):
                slices += least
            else:
                whole += least
        if claim.shared and whole + slices > before:
            shared.append((claim.source, whole + slices - before))
    return Counted(whole or slices, tuple(uncounted), tuple(shared))


def driver_gpus(template: PodTemplate, gpus: GpuResources) -> dict[str, int] | None:
    """Per DRA driver, the GPUs all of the pod's claims take from it (as `pod_gpus`), for comparing with what
    each node's ResourceSlices publish; None when a GPU request's driver cannot be told (a class whose selector
    names no single driver, alternatives of several drivers)."""
    taken: dict[str, int] = {}
    for claim in pod_claims(template).values():
        for request in claim.requests or ():
            counted = [(dra_gpu_class(a.device_class, _device_class(template, a.device_class), gpus),
                        dra_driver(a.device_class, _device_class(template, a.device_class)), a.devices)
                       for a in request.alternatives]
            if not any(kind for kind, _, _ in counted):
                continue
            drivers = {driver for kind, driver, _ in counted if kind}
            if None in drivers or len(drivers) != 1 or any(count is None for kind, _, count in counted if kind):
                return None
            driver = str(drivers.pop())
            taken[driver] = taken.get(driver, 0) + min((c or 0) if k else 0 for k, _, c in counted)
    return taken


def _device_class(template: PodTemplate, name: str) -> Mapping[str, Any] | None:
    return template.facts.lookup("DeviceClass", "", name) if template.facts.known else None


def quota_devices(template: PodTemplate) -> dict[str, int]:
    """Per DeviceClass, the devices one pod's own claims (those made from a ResourceClaimTemplate) are charged in
    a ResourceQuota's `<class>.deviceclass.resource.k8s.io/devices`; a ResourceClaim by name was charged when it
    was made."""
    charged: dict[str, int] = {}
    for claim in pod_claims(template).values():
        for request in () if claim.shared else (claim.requests or ()):
            largest: dict[str, int] = {}
            for alternative in request.alternatives:
                count = ALL_DEVICES if alternative.devices is None else alternative.devices
                largest[alternative.device_class] = max(largest.get(alternative.device_class, 0), count)
            for device_class, count in largest.items():
                charged[device_class] = charged.get(device_class, 0) + count
    return charged


def uncounted_claims(workload: Workload, gpus: GpuResources) -> Iterator[Unchecked]:
    """What a GPU rule could not count in the workload's claims, once per reason."""
    seen: set[str] = set()
    for template in workload.templates:
        if not template.spec.get("resourceClaims"):
            continue
        for reason in pod_gpus(template, gpus).uncounted:
            if reason not in seen:
                seen.add(reason)
                yield Unchecked(f"{template.role} pods: {reason}" if template.role != "pod" else reason)
