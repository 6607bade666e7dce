"""AdmissionReview requests as the kube-apiserver sends them, with a fixed uid for golden files."""

from __future__ import annotations

import base64
import json
from typing import Any

from mlgate_webhook.review import make_review

UID = "0f3c1c38-4b4e-4e8a-9d0e-6a2b4c0d7e11"


def review(
    obj: dict[str, Any] | None,
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    dry_run: bool = False,
    uid: str = UID,
    sub_resource: str = "",
) -> dict[str, Any]:
    return make_review(obj, operation, old=old, dry_run=dry_run, uid=uid, sub_resource=sub_resource)


def encode(value: Any) -> bytes:
    return (json.dumps(value, indent=2) + "\n").encode()


def decoded_patch(response: dict[str, Any]) -> list[dict[str, Any]] | None:
    patch = response.get("patch")
    return json.loads(base64.b64decode(patch)) if patch else None
