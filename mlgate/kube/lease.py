"""Leader election through a `coordination.k8s.io/v1` Lease, as client-go's leaderelection package does it.

The same algorithm as the reconciler's `leader.py`, over plain resource paths (`rest.Rest`), for the webhook:
- a candidate takes the Lease when it does not exist, has no holder, or its record (holder, renewTime,
  transitions) has not changed for `lease_duration` by the candidate's OWN monotonic clock (clock skew between
  nodes does not matter);
- every write carries the Lease's resourceVersion, so of two racing candidates one gets 409 and stays a follower;
- on shutdown the leader releases the Lease, so a follower takes over without waiting for it to expire.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .rest import ApiError, Rest

__all__ = ["Lease"]

log = logging.getLogger("mlgate.kube.lease")
LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"


def micro_time() -> str:
    """metav1.MicroTime, the Lease's time format."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Lease:
    rest: Rest
    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0
    clock: Callable[[], float] = time.monotonic
    owner: dict[str, Any] | None = None  # an ownerReference for the Lease it creates
    _observed: tuple[Any, ...] | None = field(default=None, init=False)
    _observed_at: float = field(default=0.0, init=False)

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
            record = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseTransitions"))
            if record != self._observed:
                self._observed, self._observed_at = record, self.clock()
            holder = spec.get("holderIdentity")
            duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
            if holder and holder != self.identity and self.clock() < self._observed_at + duration:
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
            log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
            return False

    def _lease(self, spec: dict[str, Any] | None, version: str | None) -> dict[str, Any]:
        now = micro_time()
        mine = spec is not None and spec.get("holderIdentity") == self.identity
        transitions = int((spec or {}).get("leaseTransitions") or 0)
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if version:
            metadata["resourceVersion"] = version
        elif self.owner is not None:
            metadata["ownerReferences"] = [self.owner]
        return {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata,
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": max(1, round(self.lease_duration)),
                "acquireTime": (spec or {}).get("acquireTime") if mine else now,
                "renewTime": now,
                "leaseTransitions": transitions if mine or spec is None else transitions + 1,
            },
        }

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
