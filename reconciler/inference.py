"""One level-triggered reconcile of ONE InferenceService: observe, compare with desired.py, fix the difference.

`reconcile_inference_service(client, namespace, name, policies)` runs passes.py's skeleton, as the TrainingJob
pass does, with `InferencePass` (children.py keeps the children):
1. Read it; gone -> nothing to do. Being deleted -> delete the HPA, the Deployments and the Service, then remove
   the finalizer `mlgate.dev/cleanup` last.
2. Add the finalizer before creating anything.
3. Pre-flight (preflight.py) while nothing is materialized yet, or while the service stays refused: a denied
   service gets no children and the status says Failed with the condition Admitted=False/PolicyViolation, or
   Admitted=False/InvalidName for a name its children cannot take (as the TrainingJob pass says).
   A spec the reconciler cannot serve (desired_inference.inference_problem: a runtime the catalog does not
   have, a model URI it cannot fetch, an HPA over a container with no CPU request) is refused the same way,
   with that reason, whenever it is seen: children already made keep serving what they served.
4. Children (desired.desired_inference_children): delete what the spec no longer asks for (the canary once
   canaryTrafficPercent is 0, the HPAs once `scaling` is gone), create what is missing, patch back what drifted
   on the owned fields. A spec change (new image, model, canary percentage) is drift too, so it rolls out through
   the Deployments' own rolling update. With `scaling` set, each Deployment's HorizontalPodAutoscaler owns its
   spec.replicas: the reconciler sets it at creation and never again. Creates go through refusals.py, as the
   TrainingJob's do: a 4xx in REFUSED (a ResourceQuota's 403 included) says Stalled/ChildRefused, a 409 from
   someone else's object Stalled/NameConflict, with a Warning Event, and the pass looks again with a backoff
   (5 s to 5 min) instead of raising or retrying every 30 s.
   With a canary the pass asks discovery whether the API server serves HTTPRoute (a 404 there means the Gateway
   API CRDs are not installed, as a PodGroup's 404 says a gang scheduler's are missing; a read, not a create
   that would fail on every pass): served, the children include the route; not, they are the pod-ratio ones.
   It is asked on every pass with a canary and no route, so installing the CRDs later switches the split.
5. Status (`inference_status`, pure), written by passes.write_status only when it differs (409: the service
   is read again and its children listed again), with an Event for each phase change (the Ready condition's):
   - `readyReplicas` / `canaryReadyReplicas` from the Deployments' status;
   - `url`: `http://<name>.<namespace>.svc.cluster.local` (the Service listens on port 80) once the Service exists;
   - conditions (one per type, lastTransitionTime moves only on a flip): `Admitted`, `PredictorReady`,
     `CanaryReady` (with a canary only: it is removed once the canary is off) and `Ready` (every component meant
     to serve traffic has at least one ready replica). A component the traffic split gives 0 replicas (the
     predictor at canaryTrafficPercent 100) serves nothing, so it is ready as it is (`NoTrafficShare`);
     `Stalled` True while a child could not be created (above), False (`Progressing`) once they all were;
     with a canary `CanarySplitExact`: True/HTTPRoute when the route splits requests (an implementation reports
     it Accepted with ResolvedRefs in its status.parents), False/RouteNotAccepted while none does (the Service's
     endpoints then split by pod ratio), else PodRatio, False when the pod ratio differs from
     canaryTrafficPercent by more than SPLIT_TOLERANCE points;
   - `canary` (with a canary only): `trafficPercent` realized (the route's weight once accepted, else the
     canary's share of the ready pods, of the desired replicas while none is ready), `requestedPercent` and
     `split`;
   - `phase`: Failed (policy violation, or a Deployment reporting ReplicaFailure (e.g. `QuotaExceeded`) or
     ProgressDeadlineExceeded; it clears when the Deployment recovers), Ready, or Pending.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from mlgate.engine import PolicySet
from mlgate.model.facts import ClusterFacts

from .cache import Reader
from .children import (
    ChildKey,
    OwnerKind,
    delete_unwanted,
    owned_children,
    owned_fields,
    repair_drift,
)
from .client import KubeClient
from .desired_inference import (
    COMPONENT_LABEL,
    HTTPROUTE_API,
    ISVC_LABEL,
    canary_split,
    desired_inference_children,
    has_canary,
    inference_problem,
)
from .passes import Context, Converged, Plan, Written, run_pass
from .preflight import invalid_name, namespace_facts, violation
from .reasons import ConditionState, Reason
from .refusals import (
    INVALID_NAME,
    POLICY_VIOLATION,
    Refusals,
    create_children,
    create_stall,
    stall_backoff,
)
from .results import PassResult
from .runtimes import Catalog, active_runtimes
from .status import STALLED, condition, now_rfc3339, set_condition

__all__ = ["INFERENCE", "ISVC_API", "ISVC_KIND", "InferencePass", "inference_status", "reconcile_inference_service"]

ISVC_API, ISVC_KIND = "mlgate.dev/v1alpha1", "InferenceService"
INFERENCE = OwnerKind(ISVC_API, ISVC_KIND, ISVC_LABEL, (  # deleted in this order: the route, then the HPA
    (HTTPROUTE_API, "HTTPRoute"), ("autoscaling/v2", "HorizontalPodAutoscaler"), ("apps/v1", "Deployment"),
    ("v1", "Service")))
ROUTE_SPEC = ("parentRefs", "rules")  # what the reconciler keeps equal on its HTTPRoute
SPLIT_TOLERANCE = 5  # percentage points the pod-ratio split may differ from the asked one before it is said
FAILING_CONDITIONS = {"ReplicaFailure": "True", "Progressing": "False"}  # Deployment condition -> failing status


def reconcile_inference_service(client: KubeClient, namespace: str, name: str, policies: PolicySet, *,
                                facts: ClusterFacts | None = None, now: Callable[[], str] = now_rfc3339,
                                runtimes: Catalog | None = None, reader: Reader | None = None) -> PassResult:
    return run_pass(InferencePass(runtimes or active_runtimes()), client, namespace, name, policies, facts=facts,
                    now=now, reader=reader)


@dataclass(frozen=True)
class InferencePass:
    """The InferenceService as passes.run_pass sees it."""

    catalog: Catalog
    kind: OwnerKind = field(default=INFERENCE)

    def plan(self, ctx: Context, owner: dict[str, Any]) -> Plan:
        owned = owned_children(ctx.reader, owner, INFERENCE)
        refused = _gate(ctx, owner, owned) or inference_problem(owner, self.catalog)
        routed = not refused and _routed(ctx.client, owner, owned)
        desired = [] if refused else desired_inference_children(owner, self.catalog, routed=routed)
        return Plan(owner, refused, desired, owned)

    def replan(self, ctx: Context, fresh: dict[str, Any], plan: Plan) -> Plan:
        """The verdict and the desired children stay this pass's; only what is observed is read again."""
        return Plan(fresh, plan.verdict, plan.desired, owned_children(ctx.reader, fresh, INFERENCE))

    def converge(self, ctx: Context, plan: Plan, result: PassResult) -> Converged:
        if not plan.verdict:
            delete_unwanted(ctx.client, plan.desired, plan.owned, result)
        refusals = create_children(ctx.client, plan.desired, plan.owned, result)
        repair_drift(ctx.client, plan.desired, plan.owned, result, fields=_fields_for(plan.desired))
        return Converged(plan, refusals)

    def status(self, plan: Plan, refusals: Refusals, result: PassResult, stamp: str) -> dict[str, Any]:
        return inference_status(plan.owner.get("status"), plan.owner, plan.owned, plan.verdict, stamp,
                                stall=create_stall(_stalling(refusals), "service"))

    def phase_event(self, status: dict[str, Any]) -> Reason | None:
        ready = condition(status, "Ready") or {}
        return Reason(str(ready.get("reason") or status["phase"]), str(ready.get("message") or status["phase"]))

    def settle(self, ctx: Context, written: Written, result: PassResult) -> None:
        wait = stall_backoff(written.status, ctx.now())
        if wait is not None:  # replaces the conflict's 30 s: the wait grows while the service stays stalled
            result.requeue_after = wait

    def release(self, ctx: Context, owner: dict[str, Any], result: PassResult) -> None:
        return None  # every child is listed, so finalize deleted them all


def _routed(client: KubeClient, isvc: dict[str, Any], owned: dict[ChildKey, dict[str, Any]]) -> bool:
    """A canary is split by an HTTPRoute when the API server serves the kind: a route we own says so without
    asking; otherwise discovery is asked (a read, so a pass without the Gateway API writes nothing)."""
    if not has_canary(isvc.get("spec") or {}):
        return False
    return _route(owned) is not None or client.serves(HTTPROUTE_API, "HTTPRoute")


def _stalling(refusals: Refusals) -> Refusals:
    """The refusals that stall a service: a quota's 403 too (status.py says QuotaExceeded for pods only; here a
    Deployment, Service or HPA over an object-count quota is a refused child like any other)."""
    quota = {name: f"403: {message}" for name, message in refusals.quota.items()}
    return Refusals(refused={**refusals.refused, **quota}, conflicts=refusals.conflicts)


def _gate(ctx: Context, isvc: dict[str, Any], owned: dict[ChildKey, dict[str, Any]]) -> Reason | None:
    """The pre-flight verdict while nothing is materialized (or the service stays refused); None otherwise."""
    admitted = condition(isvc.get("status") or {}, "Admitted")
    if owned and (admitted or {}).get("status") != "False":
        return None
    bad_name = invalid_name(isvc)
    if bad_name is not None:  # before the namespace GET: a name never changes, whatever the policies say
        return Reason(INVALID_NAME, bad_name)
    facts = ctx.facts if ctx.facts is not None else namespace_facts(ctx.client, isvc["metadata"]["namespace"])
    found = violation(isvc, ctx.policies, facts)
    return None if found is None else Reason(POLICY_VIOLATION, found)


def _fields_for(desired: list[dict[str, Any]]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """owned_fields, plus an HTTPRoute's parents and rules, minus a Deployment's replicas when an HPA scales it."""
    scaled = {c["spec"]["scaleTargetRef"]["name"] for c in desired if c["kind"] == "HorizontalPodAutoscaler"}

    def fields(child: dict[str, Any]) -> dict[str, Any]:
        out = owned_fields(child)
        if child["kind"] == "HTTPRoute":  # the weights are the point of it
            out["spec"] = {k: child["spec"][k] for k in ROUTE_SPEC}
        if child["kind"] == "Deployment" and child["metadata"]["name"] in scaled:
            out["spec"].pop("replicas", None)
        return out

    return fields


# --- status ------------------------------------------------------------------------------------------


def inference_status(old: dict[str, Any] | None, isvc: dict[str, Any], owned: dict[ChildKey, dict[str, Any]],
                     refused: Reason | None, now: str, *, stall: Reason | None = None) -> dict[str, Any]:
    """The new `.status` (pure): equal to `old` when nothing observed changed, so nothing is written. `refused`:
    the pre-flight's (reason, message); `stall`: refusals.create_stall's, when a child could not be created."""
    status = copy.deepcopy(old or {})
    meta = isvc["metadata"]
    deployments = {str((c["metadata"].get("labels") or {}).get(COMPONENT_LABEL)): c
                   for k, c in owned.items() if k[1] == "Deployment"}
    spec = isvc.get("spec") or {}
    canary = has_canary(spec)
    conditions = [c for c in status.get("conditions") or []
                  if canary or c.get("type") not in ("CanaryReady", "CanarySplitExact")]
    if refused:
        conditions = set_condition(conditions, "Admitted", "False", *refused, now=now)
        conditions = set_condition(conditions, "Ready", "False", *refused, now=now)
        phase = "Failed"
    else:
        conditions = set_condition(conditions, "Admitted", "True", "PolicyAllowed",
                                   "the policies admit the service", now=now)
        components = [("PredictorReady", "predictor"), *([("CanaryReady", "canary")] if canary else [])]
        wanted = dict(zip(("predictor", "canary"), canary_split(spec), strict=True))
        verdicts = [_component(deployments.get(component), component, wanted) for _, component in components]
        for (kind, _), (value, reason, message) in zip(components, verdicts, strict=True):
            conditions = set_condition(conditions, kind, value, reason, message, now=now)
        failing = next((v for v in verdicts
                        if v.status == "False" and v.reason not in ("NotCreated", "NoReadyReplicas")), None)
        not_ready = next((v for v in verdicts if v.status != "True"), None)
        ready = (not_ready._replace(status="False") if not_ready
                 else ConditionState("True", "ComponentsReady", "every component is ready"))
        conditions = set_condition(conditions, "Ready", *ready, now=now)
        phase = "Failed" if failing else "Ready" if not_ready is None else "Pending"
        status["readyReplicas"] = _ready(deployments.get("predictor"))
        if canary:
            status["canaryReadyReplicas"] = _ready(deployments.get("canary"))
            split = _canary_split(spec, deployments, _route(owned))
            status["canary"] = split.canary
            conditions = set_condition(conditions, "CanarySplitExact", *split.exact, now=now)
        else:
            status.pop("canaryReadyReplicas", None)
            status.pop("canary", None)
        if any(k[1] == "Service" for k in owned):
            status["url"] = f"http://{meta['name']}.{meta['namespace']}.svc.cluster.local"
    if stall is not None:
        conditions = set_condition(conditions, STALLED, "True", *stall, now=now)
    elif (condition({"conditions": conditions}, STALLED) or {}).get("status") == "True":
        conditions = set_condition(conditions, STALLED, "False", "Progressing", "nothing holds the service up",
                                   now=now)
    status.update({"conditions": conditions, "phase": phase})
    if meta.get("generation") is not None:
        status["observedGeneration"] = meta["generation"]
    return status


def _component(deployment: dict[str, Any] | None, component: str, wanted: dict[str, int]) -> ConditionState:
    """The readiness of one Deployment; `wanted`: replicas per component (the split)."""
    if wanted[component] == 0 and any(wanted.values()):  # the others take all traffic: nothing to wait for
        return ConditionState("True", "NoTrafficShare", f"the traffic split gives the {component} 0 replicas "
                                                        "(canaryTrafficPercent); the other component serves all "
                                                        "traffic")
    if deployment is None:
        return ConditionState("False", "NotCreated", f"the {component} Deployment does not exist yet")
    for found in (deployment.get("status") or {}).get("conditions") or []:
        if FAILING_CONDITIONS.get(str(found.get("type"))) == found.get("status"):
            message = str(found.get("message") or found.get("reason") or "")
            reason = "QuotaExceeded" if "exceeded quota" in message else str(found.get("reason") or "Failing")
            return ConditionState("False", reason, f"{deployment['metadata']['name']}: {message}")
    ready = _ready(deployment)
    if ready < 1:
        return ConditionState("False", "NoReadyReplicas", f"the {component} Deployment has no ready replica yet")
    return ConditionState("True", "ReplicasReady", f"{ready} {component} replica(s) ready")


def _route(owned: dict[ChildKey, dict[str, Any]]) -> dict[str, Any] | None:
    return next((c for k, c in owned.items() if k[:2] == (HTTPROUTE_API, "HTTPRoute")), None)


class Split(NamedTuple):
    canary: dict[str, Any]  # status.canary
    exact: ConditionState  # the CanarySplitExact condition


def _canary_split(spec: dict[str, Any], deployments: dict[str, dict[str, Any]],
                  route: dict[str, Any] | None) -> Split:
    asked = int(spec["canaryTrafficPercent"])
    unaccepted = None if route is None else _route_unaccepted(route)
    if route is not None and unaccepted is None:
        name = route["metadata"]["name"]
        return Split({"trafficPercent": asked, "requestedPercent": asked, "split": "HTTPRoute"},
                     ConditionState("True", "HTTPRoute", f"HTTPRoute {name!r} sends {asked}% of requests to the "
                                                         f"canary (backend weights {100 - asked}/{asked})"))
    ready = {c: _ready(deployments.get(c)) for c in ("predictor", "canary")}
    pods = ready if sum(ready.values()) else dict(zip(("predictor", "canary"), canary_split(spec), strict=True))
    total = sum(pods.values())
    realized = (100 * pods["canary"] + total // 2) // total if total else 0
    counted = "ready pods" if sum(ready.values()) else "desired replicas"
    share = (f"the pod ratio sends {realized}% of connections to the canary ({pods['canary']} of {total} "
             f"{counted}); {asked}% was asked")
    if unaccepted is not None:  # the Service's own endpoints carry the traffic until something applies the route
        exact = ConditionState("False", "RouteNotAccepted", f"{unaccepted}; until one does, {share}")
    elif abs(realized - asked) > SPLIT_TOLERANCE:
        exact = ConditionState("False", "PodRatio", f"{share}: install the Gateway API CRDs (HTTPRoute) for an "
                                                    "exact split, or raise scaling.minReplicas")
    else:
        exact = ConditionState("True", "PodRatio", share)
    return Split({"trafficPercent": realized, "requestedPercent": asked, "split": "PodRatio"}, exact)


def _route_unaccepted(route: dict[str, Any]) -> str | None:
    """Why the route's weights may not be in force, or None: an implementation applies them once it reports the
    route Accepted and its backends resolved (ResolvedRefs) for our parent, for the route's current generation
    (kubernetes-sigs/gateway-api v1.6.1 apis/v1/shared_types.go RouteParentStatus, RouteConditionAccepted,
    RouteConditionResolvedRefs). An API server that serves HTTPRoute without a mesh or Gateway writes no status,
    and the Service's endpoints then split by pod ratio."""
    name = route["metadata"]["name"]
    parents = {(str(p.get("kind") or "Gateway"), str(p.get("name"))) for p in route["spec"].get("parentRefs") or []}
    generation = (route.get("metadata") or {}).get("generation")
    for entry in (route.get("status") or {}).get("parents") or []:
        ref = entry.get("parentRef") or {}
        if (str(ref.get("kind") or "Gateway"), str(ref.get("name"))) not in parents:
            continue
        found = {c.get("type"): c for c in entry.get("conditions") or []}
        if all((found.get(t) or {}).get("status") == "True" and _current(found[t], generation)
               for t in ("Accepted", "ResolvedRefs")):
            return None
    return (f"HTTPRoute {name!r} is not reported Accepted with ResolvedRefs for generation {generation} by any "
            "Gateway API implementation (status.parents)")


def _current(found: dict[str, Any], generation: Any) -> bool:
    observed = found.get("observedGeneration")
    return not isinstance(observed, int) or not isinstance(generation, int) or observed >= generation


def _ready(deployment: dict[str, Any] | None) -> int:
    return int(((deployment or {}).get("status") or {}).get("readyReplicas") or 0)
