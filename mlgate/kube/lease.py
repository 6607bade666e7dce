"""Leader election through a `coordination.k8s.io/v1` Lease, as client-go's leaderelection package does it.

`Observation` and `lease_spec` are the algorithm, shared with the reconciler's `leader.py`; `Lease` runs it over
plain resource paths (`rest.Rest`) for the webhook:
- a candidate takes the Lease when it does not exist, has no holder, or its record (holder, renewTime,
  transitions) has not changed for `lease_duration` by the candidate's OWN monotonic clock (clock skew between
  nodes does not matter);
- every write carries the Lease's resourceVersion, so of two racing candidates one gets 409 and stays a follower;
- on shutdown the leader releases the Lease, so a follower takes over without waiting for it to expire.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .reach import describe, unreachable
from .rest import ApiError, Rest

__all__ = ["Lease", "Observation", "lease_spec", "micro_time", "unreachable_note"]

log = logging.getLogger("mlgate.kube.lease")
LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"


def micro_time() -> str:
    """metav1.MicroTime, the Lease's time format."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def unreachable_note(logger: logging.Logger, namespace: str, name: str, exc: Exception) -> bool:
    """Log a failed attempt on the Lease in one line; True when the API server gave no answer (a follower then
    waits longer before its next attempt)."""
    if unreachable(exc):
        logger.warning("lease %s/%s: cannot reach the API server: %s", namespace, name, describe(exc))
        return True
    logger.warning("lease %s/%s: %s: %s", namespace, name, type(exc).__name__, exc)
    return False


@dataclass
class Observation:
    """What a candidate last saw of a Lease's record (holder, renewTime, transitions), and when, by its own clock."""

    clock: Callable[[], float] = time.monotonic
    record: tuple[Any, ...] | None = None
    at: float = 0.0

    def held_by_another(self, spec: Mapping[str, Any], identity: str, default_duration: float) -> bool:
        """True while another holder's record changed within its leaseDurationSeconds, as this candidate saw it."""
        record = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseTransitions"))
        if record != self.record:
            self.record, self.at = record, self.clock()
        holder = spec.get("holderIdentity")
        duration = float(spec.get("leaseDurationSeconds") or default_duration)
        return bool(holder) and holder != identity and self.clock() < self.at + duration


def lease_spec(spec: Mapping[str, Any] | None, identity: str, duration: float) -> dict[str, Any]:
    """The spec `identity` writes to take or renew a Lease whose spec is `spec` (None: it does not exist yet)."""
    now = micro_time()
    mine = spec is not None and spec.get("holderIdentity") == identity
    transitions = int((spec or {}).get("leaseTransitions") or 0)
    return {
        "holderIdentity": identity,
        "leaseDurationSeconds": max(1, round(duration)),
        "acquireTime": (spec or {}).get("acquireTime") if mine else now,
        "renewTime": now,
        "leaseTransitions": transitions if mine or spec is None else transitions + 1,
    }


@dataclass
class Lease:
    rest: Rest
    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0
    clock: Callable[[], float] = time.monotonic
    owner: dict[str, Any] | None = None  # an ownerReference for the Lease it creates
    _seen: Observation = field(init=False)

    def __post_init__(self) -> None:
        self._seen = Observation(self.clock)

    @property
    def path(self) -> str:
        return f"{LEASES.format(namespace=self.namespace)}/{self.name}"

    def try_acquire_or_renew(self) -> bool:
        """One attempt; True when this candidate holds the Lease afterwards."""
        try:
            lease = self.rest("GET", self.path)
            if lease is None:
                self.rest("POST", LEASES.format(namespace=self.namespace), self._lease(None, None))
                return True
            spec = lease.get("spec") or {}
            if self._seen.held_by_another(spec, self.identity, self.lease_duration):
                return False
            body = self._lease(spec, lease["metadata"]["resourceVersion"])
            if lease["metadata"].get("ownerReferences"):  # kept: changing them needs delete permission
                body["metadata"]["ownerReferences"] = lease["metadata"]["ownerReferences"]
            self.rest("PUT", self.path, body)
            return True
        except ApiError as exc:
            if exc.status != 409:
                log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
            return False
        except Exception as exc:  # e.g. urllib3's MaxRetryError: the API server is unreachable this round
            unreachable_note(log, self.namespace, self.name, exc)
            return False

    def _lease(self, spec: dict[str, Any] | None, version: str | None) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if version:
            metadata["resourceVersion"] = version
        elif self.owner is not None:
            metadata["ownerReferences"] = [self.owner]
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata,
                "spec": lease_spec(spec, self.identity, self.lease_duration)}

    def release(self) -> None:
        """Give the Lease up (only if still ours); best effort, the Lease expires on its own."""
        try:
            lease = self.rest("GET", self.path)
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            self.rest("PUT", self.path, {**lease, "spec": {**lease["spec"], "holderIdentity": None,
                                                            "leaseDurationSeconds": 1, "renewTime": micro_time()}})
        except Exception as exc:
            log.warning("releasing lease %s/%s: %s", self.namespace, self.name, exc)
