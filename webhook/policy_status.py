"""The status of MLPolicy and ClusterMLPolicy objects, as the CRDs describe it.

    status.loadError            why the object could not be loaded, field by field ("" once it loads);
                                shown by `kubectl get mlpolicies` in the Load-Error column
    status.observedGeneration   the metadata.generation that loadError describes

Admission refuses most broken policies (`policies.validate.mlgate.dev`); this covers the ones stored
past it (an opted-out namespace, a webhook outage). Every replica computes the same status from the
same objects and writes only what differs from what it last saw, so two replicas write at most twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from mlgate.loading.policies import LoadError

from .policy_store import ClusterPolicySource

log = logging.getLogger("mlgate.webhook.policies")
ObjectKey = tuple[str, str, str]  # kind, namespace ("" for ClusterMLPolicy), name
Patch = Callable[[str, str, str, dict[str, Any]], None]  # kind, namespace, name, status


class PolicyStatusWriter:
    def __init__(self, source: ClusterPolicySource, patch: Patch):
        self.source = source
        self.patch = patch
        self._written: dict[ObjectKey, tuple[str, dict[str, Any]]] = {}  # resourceVersion seen, status sent

    def sync(self) -> int:
        """Write every status that differs from the object's; the number written. Failures are logged."""
        if not self.source.synced:
            return 0
        written = 0
        for key, obj in self.source.objects():
            errors = self.source.load_errors.get(key)
            if errors is None:
                continue  # not compiled yet: the next policy reload will
            status = desired_status(obj, errors)
            current = obj.get("status") or {}
            version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
            if {k: current.get(k) for k in status} == status or self._written.get(key) == (version, status):
                continue
            try:
                self.patch(*key, status)
            except Exception as exc:  # e.g. deleted meanwhile, or RBAC: the policy set itself is unaffected
                log.warning("could not write the status of %s %s: %s", key[0], "/".join(filter(None, key[1:])), exc)
                continue
            self._written[key] = (version, status)
            written += 1
        return written


def desired_status(obj: Mapping[str, Any], errors: list[LoadError]) -> dict[str, Any]:
    generation = (obj.get("metadata") or {}).get("generation")
    return {"observedGeneration": generation if isinstance(generation, int) else 0,
            "loadError": "; ".join(e.detail for e in errors)}
