"""What one webhook process holds: the policy store, cluster facts, TLS, metrics and limits."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from mlgate.kube.reach import Reachability
from mlgate.model.facts import NO_FACTS, ClusterFacts

from .events import DenialEvents
from .exception_store import ExceptionStore
from .metrics import Metrics
from .policy_store import PolicyStore
from .tls import CertReloader

MIB = 1024 * 1024


@dataclass(frozen=True)
class Settings:
    max_body_bytes: int = 8 * MIB  # object and oldObject of up to ~3 MiB each, plus the envelope
    read_timeout: float = 5.0  # the API server gives up after the webhook's timeoutSeconds (5) anyway
    header_timeout: float = 10.0  # a connection must send its request head within this time
    poll_interval: float = 2.0  # how often policy and certificate files are checked for changes
    handshake_timeout: float = 5.0  # TLS handshake, and TLS close, deadline; the API server's calls have 5 s in all
    max_connections: int = 512  # open connections at most (fewer if the fd limit is lower); more are closed at accept
    allow_empty_policies: bool = False  # serve --allow-empty-policies: policy files may hold no policy
    review_deadline: float = 4.5  # judging stops here, just under the webhooks' timeoutSeconds (5)
    loop_stall: float = 10.0  # /healthz on the metrics port fails once the serving loop has not run this long
    large_reviews: int = 1  # large reviews judged at once: one 2.9 MiB review peaks near +135 MiB (limit 256 Mi)


@dataclass
class Service:
    policies: PolicyStore
    metrics: Metrics
    facts: ClusterFacts = field(default_factory=lambda: NO_FACTS)
    tls: CertReloader | None = None
    settings: Settings = field(default_factory=Settings)
    exceptions: ExceptionStore | None = None  # MLPolicyExceptions watched in the cluster
    events: DenialEvents | None = None  # Warning Events on denials no one else reports (in a cluster)
    reach: Reachability | None = None  # whether the API server answers the watches (in a cluster)

    @cached_property
    def large_reviews(self) -> asyncio.Semaphore:
        """How many large reviews are judged at once (made on first use, on the serving loop)."""
        return asyncio.Semaphore(self.settings.large_reviews)

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """Ready means: a policy set is in force, TLS serves a valid certificate, and watched facts are listed.

        While something the watches bring is missing and the API server does not answer, that is named as the reason.
        Once listed, an API server that stops answering is shown (`apiServer`) but does not make the webhook unready:
        the API server is the webhook's only caller, and the cached facts and policies still judge; going unready
        would empty the Service's endpoints just when the API server comes back."""
        policies = self.policies.status()
        tls = self.tls.status() if self.tls else {"ready": False, "lastError": "TLS is not configured"}
        detail: dict[str, Any] = {"policies": policies, "tls": tls}
        if self.exceptions is not None:  # not a readiness condition: until listed, no finding is excepted
            detail["exceptions"] = self.exceptions.status()
        if self.reach is not None:
            detail["apiServer"] = self.reach.status()
        missing = []
        if not policies["loaded"]:
            missing.append("no policy set loaded")
        elif not policies["synced"]:
            missing.append("cluster policies not listed")
        if not tls["ready"]:
            missing.append("TLS not ready")
        status = getattr(self.facts, "status", None)
        if callable(status):  # watched facts: until every kind is listed, rules that need them would skip
            detail["facts"] = status()
            if not self.facts.known:
                missing.append("cluster facts not synced")
        problem = self.reach.problem if self.reach is not None else None
        if problem is not None and {"cluster policies not listed", "cluster facts not synced"} & set(missing):
            missing.append(problem)
        detail["ready"] = not missing
        if missing:
            detail["missing"] = missing
        return not missing, detail
