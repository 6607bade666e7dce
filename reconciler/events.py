"""Kubernetes Events for an owner's transitions (best effort: a pass never fails for an event)."""

from __future__ import annotations

import logging
from typing import Any

from .client import ApiError, KubeClient

__all__ = ["EVENT_SOURCE", "record_event"]

log = logging.getLogger("mlgate.reconciler")
EVENT_SOURCE = "mlgate-reconciler"
MAX_EVENT_MESSAGE = 1024  # events are shown on one line


def record_event(client: KubeClient, owner: dict[str, Any], reason: str, message: str, *, warning: bool,
                 stamp: str) -> None:
    meta = owner["metadata"]
    event = {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"],
                           "namespace": meta["namespace"], "uid": meta.get("uid", "")},
        "reason": reason, "message": message[:MAX_EVENT_MESSAGE], "type": "Warning" if warning else "Normal",
        "source": {"component": EVENT_SOURCE}, "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
    }
    try:
        client.create(event)
    except ApiError as exc:
        log.warning("event for %s %s/%s not recorded: %s", owner["kind"], meta["namespace"], meta["name"], exc)
