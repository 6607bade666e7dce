"""Keep an owner's children equal to its desired ones: shared by the TrainingJob and InferenceService passes.

- A child is the owner's when it carries the owner's name label AND an ownerReference with the owner's uid and
  `controller: true` (an object that only shares the name is never touched).
- Missing children are created. A 409 on create means a same-named object exists: it is read, and when it is
  ours after all (our uid, label gone) it is adopted so the drift repair puts the label back; otherwise it is left
  alone and named in `PassResult.conflicts` with its controller, and the pass asks to look again after
  CONFLICT_RETRY_SECONDS, not at once (the other object will not go away by itself).
- Existing children are compared on the fields the reconciler owns (`owned_fields`) and get one merge patch only
  where those differ, carrying the child's resourceVersion (a 409 means someone wrote first: run again).
  The comparison (`drift`) tolerates what the API server does to a stored object: it adds defaulted fields,
  drops empty values (`omitempty`) and writes quantities in canonical form (1 -> "1", 0.5 -> "500m",
  "1.5Gi" -> "1536Mi"), so values are compared as quantities where the API types them so (QUANTITY_MAPS,
  QUANTITY_FIELDS) and nowhere else (an env value "1.5Gi" stays a string).
- The finalizer `mlgate.dev/cleanup` goes on before anything is created, and comes off only when no child is
  left, so a reconciler that restarts mid-way simply runs the deletion again (deletes are idempotent).
- Children are read through a `Reader` (cache.py): the API client, or the informers' cache in the controller.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mlgate.rules.common import quantity
from mlgate.rules.gang_markers import label_value

from .cache import Reader
from .client import KubeClient
from .results import PassResult, on_conflict, requeue_on_conflict

__all__ = [
    "FINALIZER",
    "ChildKey",
    "OwnerKind",
    "create_missing",
    "delete_unwanted",
    "drift",
    "ensure_finalizer",
    "finalize",
    "owned_children",
    "owned_fields",
    "repair_drift",
]

log = logging.getLogger("mlgate.reconciler")
FINALIZER = "mlgate.dev/cleanup"
ChildKey = tuple[str, str, str]  # (apiVersion, kind, name)
# maps whose every value is a quantity: container resources, PodSpec.overhead, a Volcano PodGroup's minResources
QUANTITY_MAPS = ("limits", "requests", "overhead", "minResources")
QUANTITY_FIELDS = ("sizeLimit", "divisor")  # emptyDir.sizeLimit, resourceFieldRef.divisor
QUANTITY_FIELDS_UNDER = {"target": ("value", "averageValue")}  # an HPA metric's target
CONFLICT_RETRY_SECONDS = 30.0  # a same-named object of someone else's: look again later, not every second


@dataclass(frozen=True)
class OwnerKind:
    """One kind the reconciler owns children for."""

    api_version: str
    kind: str
    label: str  # every child carries this label with the owner's name
    children: tuple[tuple[str, str], ...]  # (apiVersion, kind), in the order they are deleted


def key(obj: dict[str, Any]) -> ChildKey:
    return str(obj.get("apiVersion")), str(obj.get("kind")), str(obj["metadata"]["name"])


def owned_children(reader: Reader, owner: dict[str, Any], kind: OwnerKind,
                   kinds: tuple[tuple[str, str], ...] | None = None) -> dict[ChildKey, dict[str, Any]]:
    """The owner's children of `kinds` (default: every child kind of the owner)."""
    meta = owner["metadata"]
    selector = f"{kind.label}={label_value(str(meta['name']))}"
    uid = meta.get("uid")
    owned: dict[ChildKey, dict[str, Any]] = {}
    for api_version, child_kind in kind.children if kinds is None else kinds:
        for item in reader.list(api_version, child_kind, meta["namespace"], selector):
            refs = (item.get("metadata") or {}).get("ownerReferences") or []
            if any(ref.get("uid") == uid and ref.get("controller") for ref in refs):
                item.setdefault("apiVersion", api_version)
                item.setdefault("kind", child_kind)
                owned[(api_version, child_kind, str(item["metadata"]["name"]))] = item
    return owned


def create_missing(client: KubeClient, desired: list[dict[str, Any]], owned: dict[ChildKey, dict[str, Any]],
                   result: PassResult) -> None:
    for child in desired:
        child_key = key(child)
        if child_key in owned:
            continue
        with on_conflict() as conflict:  # a same-named object exists
            owned[child_key] = client.create(child)
            result.created.append(f"{child_key[1]}/{child_key[2]}")
        if conflict.lost:
            _conflict(client, child, owned, result)


def _conflict(client: KubeClient, child: dict[str, Any], owned: dict[ChildKey, dict[str, Any]],
              result: PassResult) -> None:
    """A create answered 409: adopt the object when its controller is our owner, else name who holds it."""
    api_version, kind, name = key(child)
    meta = child["metadata"]
    existing = client.get(api_version, kind, meta["namespace"], name)
    if existing is None:  # deleted since: create it next pass
        result.requeue = True
        return
    uid = next((ref.get("uid") for ref in meta.get("ownerReferences") or []), None)
    controller = _controller(existing)
    if uid and controller.get("uid") == uid:  # ours without our label (hand-edited): repair_drift restores it
        existing.setdefault("apiVersion", api_version)
        existing.setdefault("kind", kind)
        owned[(api_version, kind, name)] = existing
        return
    holder = f"{controller.get('kind')} {controller.get('name')!r}" if controller else "no controller"
    result.conflicts[f"{kind}/{name}"] = holder
    log.warning("%s/%s/%s exists and belongs to %s, not to its owner; leaving it alone", meta["namespace"], kind,
                name, holder)
    later = result.requeue_after
    result.requeue_after = CONFLICT_RETRY_SECONDS if later is None else min(later, CONFLICT_RETRY_SECONDS)


def _controller(obj: dict[str, Any]) -> dict[str, Any]:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    found: dict[str, Any] = next((ref for ref in refs if ref.get("controller")), {})
    return found


def delete_unwanted(client: KubeClient, desired: list[dict[str, Any]], owned: dict[ChildKey, dict[str, Any]],
                    result: PassResult) -> None:
    """Delete owned children the spec no longer asks for (e.g. the canary once canaryTrafficPercent is 0)."""
    wanted = {key(child) for child in desired}
    for child_key, child in sorted(owned.items()):
        if child_key in wanted or child["metadata"].get("deletionTimestamp"):
            continue
        if client.delete(child_key[0], child_key[1], child["metadata"]["namespace"], child_key[2]):
            result.deleted.append(f"{child_key[1]}/{child_key[2]}")
        owned.pop(child_key)


OWNED_SPEC = {  # kind -> spec keys the reconciler keeps equal to the desired child
    "Service": ("clusterIP", "selector", "ports", "publishNotReadyAddresses", "type"),
    "Deployment": ("selector", "template", "replicas"),
    "HorizontalPodAutoscaler": ("scaleTargetRef", "minReplicas", "maxReplicas", "metrics"),
}


def owned_fields(child: dict[str, Any]) -> dict[str, Any]:
    """The part of a desired child the reconciler keeps equal to the spec (as a merge patch). A pod's spec is
    left out: it is mostly immutable, and a pod that differs is replaced through its owner's restart logic."""
    out: dict[str, Any] = {"metadata": {"labels": dict(child["metadata"].get("labels") or {})}}
    kind = str(child.get("kind"))
    spec = child.get("spec") or {}
    if kind in OWNED_SPEC:
        out["spec"] = {k: spec[k] for k in OWNED_SPEC[kind] if k in spec}
    elif kind == "ConfigMap":
        out["data"] = child.get("data") or {}
    elif kind == "PodGroup":
        out["spec"] = spec
    return out


EXACT_MAPS = {"Service": ("spec", "selector"), "ConfigMap": ("data",)}  # keys not in the spec are removed


def _removals(child: dict[str, Any], live: dict[str, Any], patch: dict[str, Any]) -> bool:
    """Null out, in `patch`, keys of an exactly-owned map that the spec does not have; True when any."""
    path = EXACT_MAPS.get(str(child.get("kind")))
    if path is None:
        return False
    wanted, have = patch, live
    for step in path:
        wanted, have = wanted.get(step) or {}, (have or {}).get(step) or {}
    extra = [k for k in have if k not in wanted]
    for name in extra:
        wanted[name] = None
    return bool(extra)


def drift(wanted: Any, live: Any, quantities: bool = False, parent: str = "") -> bool:
    """True when `live` lacks or differs from something in `wanted`, as stored by the API server.
    `quantities`: the value compared is a quantity (it sits in a QUANTITY_MAPS map or a QUANTITY_FIELDS key);
    `parent`: the key of the map being compared (an HPA's `target`)."""
    if isinstance(wanted, dict):
        if not isinstance(live, dict):
            return True
        return any(drift(v, live[k], _is_quantity(parent, k, v, quantities), k) if k in live
                   else _non_empty(v) for k, v in wanted.items())
    if isinstance(wanted, list):
        return (not isinstance(live, list) or len(live) != len(wanted)
                or any(drift(w, v) for w, v in zip(wanted, live, strict=True)))
    numeric = isinstance(wanted, int | float) and not isinstance(wanted, bool)
    if wanted != live and (quantities or (numeric and isinstance(live, str))):
        parsed = quantity(wanted)
        return parsed is None or parsed != quantity(live)
    return bool(wanted != live)


def _is_quantity(parent: str, name: str, value: Any, inherited: bool) -> bool:
    """Whether the value under key `name` (in the map under `parent`) is compared as a quantity."""
    if isinstance(value, dict):
        return name in QUANTITY_MAPS
    return inherited or name in QUANTITY_FIELDS or name in QUANTITY_FIELDS_UNDER.get(parent, ())


def _non_empty(value: Any) -> bool:
    """The API server omits empty values (`omitempty`), so an empty wanted value matches a missing one."""
    return value not in (None, "", False, 0, [], {})


def repair_drift(client: KubeClient, desired: list[dict[str, Any]], owned: dict[ChildKey, dict[str, Any]],
                 result: PassResult, fields: Callable[[dict[str, Any]], dict[str, Any]] = owned_fields) -> None:
    for child in desired:
        child_key = key(child)
        live = owned.get(child_key)
        if live is None:
            continue
        wanted = fields(child)
        changed = drift(wanted, live)
        if not (_removals(child, live, wanted) or changed):
            continue
        meta = child["metadata"]
        wanted["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
        with requeue_on_conflict(result, 404):  # 404: deleted meanwhile, created again next pass
            owned[child_key] = client.patch(child_key[0], child_key[1], meta["namespace"], meta["name"], wanted)
            result.repaired.append(f"{child_key[1]}/{child_key[2]}")


# --- finalizer ---------------------------------------------------------------------------------------


def _terminating(child: dict[str, Any]) -> bool:
    """Being deleted, and no DELETE needs repeating. A DELETE of an unscheduled pod is two steps in the API server
    (mark with deletionGracePeriodSeconds 0, then remove); a client that dies between them leaves it marked for
    good unless the DELETE is sent again, which the API server finishes (rest.BeforeDelete)."""
    meta = child["metadata"]
    return bool(meta.get("deletionTimestamp")) and meta.get("deletionGracePeriodSeconds") != 0


def set_finalizers(client: KubeClient, owner: dict[str, Any], finalizers: list[str]) -> dict[str, Any]:
    meta = owner["metadata"]
    patch = {"metadata": {"finalizers": finalizers, "resourceVersion": meta["resourceVersion"]}}
    return client.patch(owner["apiVersion"], owner["kind"], meta["namespace"], meta["name"], patch)


def ensure_finalizer(client: KubeClient, owner: dict[str, Any], result: PassResult) -> dict[str, Any] | None:
    """The owner with the finalizer on; None when it changed under us (a 409: the pass stops, runs again)."""
    finalizers = list(owner["metadata"].get("finalizers") or [])
    if FINALIZER in finalizers:
        return owner
    with requeue_on_conflict(result):
        return set_finalizers(client, owner, [*finalizers, FINALIZER])
    return None


def finalize(client: KubeClient, owner: dict[str, Any], kind: OwnerKind, result: PassResult, *,
             before_release: Callable[[], None] | None = None, reader: Reader | None = None) -> None:
    """Delete the children in `kind.children` order; remove the finalizer only once none is left (asked of the
    API, not of `reader`: a cache would still hold what was just deleted). `before_release` runs after the
    children are gone and before the finalizer comes off (e.g. releasing a checkpoint claim), so a crash in
    between repeats it."""
    meta = owner["metadata"]
    finalizers = list(meta.get("finalizers") or [])
    if FINALIZER not in finalizers:
        return
    owned = owned_children(reader or client, owner, kind)
    for api_version, child_kind in kind.children:
        for child_key, child in owned.items():
            if child_key[:2] != (api_version, child_kind) or _terminating(child):
                continue
            if client.delete(api_version, child_kind, meta["namespace"], child_key[2]):
                result.deleted.append(f"{child_kind}/{child_key[2]}")
    if owned_children(client, owner, kind):  # still terminating: keep the finalizer, look again later
        result.requeue = True
        return
    if before_release is not None:
        before_release()
    with requeue_on_conflict(result, 404):
        set_finalizers(client, owner, [f for f in finalizers if f != FINALIZER])
        result.finalized = True
