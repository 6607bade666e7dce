"""The MLPolicyExceptions in force, reloaded as the watch reports changes.

Each exception object is compiled on its own: a broken one (stored past the validating webhook, during
an outage or from an opted-out namespace) is reported (log, /readyz, its status.loadError, the metric)
and the last version of it that loaded stays in force, as the last good policy set does; the others are
unaffected, so one team's typo never holds back another team's exception or the policy set.

Whether the policy in force still allows an exception is not decided here: the engine asks the policy
at every evaluation (mlgate/engine/exceptions.py), so a policy tightened to `allowExceptions: false`
takes effect at once, without touching the exceptions stored.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Hashable
from datetime import datetime
from typing import Any

from mlgate.loading.exceptions import compile_exception
from mlgate.loading.policies import LoadError, cluster_source
from mlgate.model.exceptions import EXCEPTION_KIND, Exceptions, PolicyException

from .metrics import Metrics
from .policy_store import ClusterPolicySource

log = logging.getLogger("mlgate.webhook.exceptions")
ObjectKey = tuple[str, str, str]


class ClusterExceptionSource(ClusterPolicySource):
    """MLPolicyException objects, kept from watch events (plain dicts), as ClusterPolicySource keeps policies."""

    name = "exceptions"

    @property
    def synced(self) -> bool:
        return EXCEPTION_KIND in self._listed


class ExceptionStore:
    def __init__(self, source: ClusterExceptionSource, metrics: Metrics | None = None):
        self.source = source
        self.metrics = metrics
        self.current: tuple[PolicyException, ...] = ()
        self.errors: list[str] = []
        self._good: dict[ObjectKey, PolicyException] = {}  # the last version of each object that loaded
        self._version: Hashable = None
        self._lock = threading.Lock()

    def at(self, now: datetime) -> Exceptions:
        """The exceptions in force, judged at `now` (the caller's clock: the engine reads none)."""
        return Exceptions(self.current, now=now)

    def refresh(self) -> bool:
        """Recompile if an object changed; True when the exceptions in force changed."""
        with self._lock:
            version = self.source.version()
            if version == self._version:
                return False
            self._version = version
            good: dict[ObjectKey, PolicyException] = {}
            errors: list[str] = []
            by_object: dict[ObjectKey, list[LoadError]] = {}
            for key, obj in self.source.objects():
                exception, problems = compile_exception({**obj, "kind": key[0]}, cluster_source(*key))
                by_object[key] = problems
                if exception is not None:
                    good[key] = exception
                    continue
                errors.extend(str(p) for p in problems)
                if key in self._good:  # broken now: its last good version stays
                    good[key] = self._good[key]
            self.source.load_errors = by_object
            changed = tuple(good.values()) != self.current
            self._good, self.current, self.errors = good, tuple(good.values()), errors
        if errors:
            log.error("%d MLPolicyException(s) could not be loaded; their last good versions stay in force",
                      len(errors), extra={"fields": {"errors": errors}})
            if self.metrics:
                self.metrics.policy_reload_errors.inc()
        if changed:
            log.info("%d MLPolicyException(s) in force", len(self.current),
                     extra={"fields": {"exceptions": [f"{e.namespace}/{e.name}" for e in self.current]}})
        return changed

    def status(self) -> dict[str, Any]:
        return {"inForce": [f"{e.namespace}/{e.name}" for e in self.current], "synced": self.source.synced,
                "lastError": list(self.errors)}
