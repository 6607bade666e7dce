"""Leader election through a `coordination.k8s.io/v1` Lease, as client-go's leaderelection package does it.

- A candidate reads the Lease every `retry_period`. It takes it when the Lease does not exist, has no holder, or
  its record (holder, renewTime, transitions) has not changed for `lease_duration` as measured by the candidate's
  OWN monotonic clock since it last saw the record change (so clock skew between nodes does not matter).
- Every write carries the Lease's resourceVersion: of two candidates racing for an expired Lease, one gets 409 and
  stays a follower.
- The leader renews every `retry_period`; when no renewal succeeded for `renew_deadline` it has lost the Lease
  and must stop reconciling at once (another replica may already be leader): `hold()` returns False.
- On graceful shutdown the leader releases the Lease (no holder, leaseDurationSeconds 1), so a follower takes
  over without waiting for the lease to expire.
The defaults are client-go's: 15 s lease, 10 s renew deadline, 2 s retry period.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mlgate.kube.lease import Observation, lease_spec, micro_time, unreachable_note  # shared with the webhook
from mlgate.kube.reach import Backoff

from .client import ApiError, KubeClient

__all__ = ["LEASE_API", "LeaderElector"]

log = logging.getLogger("mlgate.reconciler.leader")
LEASE_API, LEASE_KIND = "coordination.k8s.io/v1", "Lease"


@dataclass
class LeaderElector:
    client: KubeClient
    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    clock: Callable[[], float] = time.monotonic
    on_change: Callable[[bool], None] = lambda leading: None
    _seen: Observation = field(init=False)
    _unreachable: bool = field(init=False, default=False)  # the last attempt got no answer from the API server
    _backoff: Backoff = field(init=False)

    def __post_init__(self) -> None:
        self._seen = Observation(self.clock)
        # a follower that cannot reach the API server polls less often, never less than once a lease duration
        self._backoff = Backoff(initial=self.retry_period, cap=self.lease_duration)

    def try_acquire_or_renew(self) -> bool:
        """One attempt; True when this candidate holds the Lease afterwards."""
        self._unreachable = False
        try:
            lease = self.client.get(LEASE_API, LEASE_KIND, self.namespace, self.name)
            if lease is None:
                self.client.create(self._lease(None))
                return True
            spec = lease.get("spec") or {}
            if self._seen.held_by_another(spec, self.identity, self.lease_duration):
                return False
            self.client.patch(LEASE_API, LEASE_KIND, self.namespace, self.name, {
                "metadata": {"resourceVersion": lease["metadata"]["resourceVersion"]},
                "spec": self._lease(spec)["spec"]})
            return True
        except ApiError as exc:
            if exc.status != 409:
                log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
            return False
        except Exception as exc:  # e.g. urllib3's MaxRetryError: the API server is unreachable this round
            self._unreachable = unreachable_note(log, self.namespace, self.name, exc)
            return False

    def _lease(self, spec: dict[str, Any] | None) -> dict[str, Any]:
        return {"apiVersion": LEASE_API, "kind": LEASE_KIND,
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": lease_spec(spec, self.identity, self.lease_duration)}

    def acquire(self, stop: threading.Event) -> bool:
        """Block until this candidate leads (True) or `stop` is set (False)."""
        while not stop.is_set():
            if self.try_acquire_or_renew():
                log.info("%s became leader (lease %s/%s)", self.identity, self.namespace, self.name)
                self.on_change(True)
                self._backoff.reset()
                return True
            if not self._unreachable:
                self._backoff.reset()
            stop.wait(self._backoff.next() if self._unreachable else self.retry_period)
        return False

    def hold(self, stop: threading.Event) -> bool:
        """Renew until `stop` is set (True) or a renewal deadline is missed (False: leadership lost)."""
        last = self.clock()
        while not stop.wait(self.retry_period):
            if self.try_acquire_or_renew():
                last = self.clock()
            elif self.clock() - last >= self.renew_deadline:
                log.error("%s lost the lease %s/%s", self.identity, self.namespace, self.name)
                self.on_change(False)
                return False
        return True

    def release(self) -> None:
        """Give the Lease up (only if still ours), so a follower need not wait for it to expire."""
        try:
            lease = self.client.get(LEASE_API, LEASE_KIND, self.namespace, self.name)
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            self.client.patch(LEASE_API, LEASE_KIND, self.namespace, self.name, {
                "metadata": {"resourceVersion": lease["metadata"]["resourceVersion"]},
                "spec": {"holderIdentity": None, "leaseDurationSeconds": 1, "renewTime": micro_time()}})
            log.info("%s released the lease %s/%s", self.identity, self.namespace, self.name)
        except Exception as exc:  # best effort: the lease expires on its own
            log.warning("releasing lease %s/%s: %s", self.namespace, self.name, exc)
        finally:
            self.on_change(False)
