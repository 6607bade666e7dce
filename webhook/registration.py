"""The webhook's own Validating/MutatingWebhookConfigurations, as `mlgate serve --self-managed` writes them.

The content is manifests/webhooks.yaml (shipped in the package as `mlgate.shipped_webhooks`), changed in five
places only: the Service's namespace (or a `url` instead of the Service, for a webhook outside the cluster), the
namespace excluded as mlgate's own, the caBundle, an ownerReference, and the failure policies while no replica
is ready.

Until a replica is ready every webhook is registered with `failurePolicy: Ignore`, and the configuration carries
the annotation `mlgate.dev/enforcing: "false"`; the leader switches to the shipped failure policies (Fail for ML
jobs) once its own replica is ready, and never back: a webhook that stops serving later is the outage
`failurePolicy: Fail` is chosen for. So a Deployment whose pods never start (an image that does not pull) never
locks ML jobs out, and nothing is admitted unchecked once mlgate has served.

Writes happen only when the desired content changes (`mlgate.dev/config-hash`), so the API server does not
reload its webhook clients every poll.
"""

from __future__ import annotations

import copy
import hashlib
import json
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from mlgate.kube.rest import Rest

__all__ = ["CONFIG_PATHS", "desired", "shipped_configurations", "sync"]

CONFIG_PATHS = {
    "MutatingWebhookConfiguration": "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
    "ValidatingWebhookConfiguration": "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
}
ENFORCING = "mlgate.dev/enforcing"
CONFIG_HASH = "mlgate.dev/config-hash"
SHIPPED_NAMESPACE = "mlgate-system"
CHECKOUT_FILE = Path(__file__).resolve().parents[1] / "manifests" / "webhooks.yaml"


def shipped_file() -> Path:
    """The packaged copy of manifests/webhooks.yaml, else the checkout's."""
    try:
        packaged = resources.files("mlgate.shipped_webhooks") / "webhooks.yaml"
        if packaged.is_file():
            return Path(str(packaged))
    except ModuleNotFoundError:
        pass
    return CHECKOUT_FILE


def shipped_configurations(path: Path | None = None) -> list[dict[str, Any]]:
    source = path or shipped_file()
    documents = [d for d in yaml.safe_load_all(source.read_text(encoding="utf-8")) if d]
    kinds = sorted(d.get("kind", "") for d in documents)
    if kinds != sorted(CONFIG_PATHS):
        raise ValueError(f"{source}: want one MutatingWebhookConfiguration and one ValidatingWebhookConfiguration, "
                         f"found {kinds}")
    return documents


def desired(shipped: list[dict[str, Any]], *, namespace: str, ca_bundle: str, enforcing: bool,
            url: str | None = None, owner: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The configurations to store. `ca_bundle` is base64 PEM; `url` replaces the Service (tests, or a webhook
    outside the cluster); `owner` is an ownerReference (the ClusterRole), so deleting the install deletes these."""
    out = []
    for original in shipped:
        config = copy.deepcopy(original)
        for hook in config["webhooks"]:
            client = hook["clientConfig"]
            service = client.pop("service")
            if url is not None:
                client["url"] = url.rstrip("/") + (service.get("path") or "/")
            else:
                client["service"] = {**service, "namespace": namespace}
            client["caBundle"] = ca_bundle
            _exclude_own_namespace(hook, namespace)
            if not enforcing:
                hook["failurePolicy"] = "Ignore"
        metadata = config["metadata"]
        metadata.setdefault("labels", {})["app.kubernetes.io/managed-by"] = "mlgate"
        annotations = metadata.setdefault("annotations", {})
        annotations[ENFORCING] = "true" if enforcing else "false"
        annotations[CONFIG_HASH] = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]
        if owner is not None:  # set when created only (sync): changing it later needs delete permission
            metadata["ownerReferences"] = [owner]
        out.append(config)
    return out


def _exclude_own_namespace(hook: dict[str, Any], namespace: str) -> None:
    """The shipped exclusion of mlgate-system, for the namespace the webhook runs in."""
    for term in (hook.get("namespaceSelector") or {}).get("matchExpressions") or []:
        if term.get("key") == "kubernetes.io/metadata.name" and term.get("operator") == "NotIn":
            term["values"] = [namespace if v == SHIPPED_NAMESPACE else v for v in term.get("values") or []]


def sync(rest: Rest, configs: list[dict[str, Any]]) -> list[str]:
    """Create or update each configuration whose content changed; what was written ("created ...")."""
    written = []
    for config in configs:
        collection = CONFIG_PATHS[config["kind"]]
        name = config["metadata"]["name"]
        stored = rest("GET", f"{collection}/{name}")
        if stored is None:
            rest("POST", collection, config)
            written.append(f"created {config['kind']}/{name}")
            continue
        want = config["metadata"]["annotations"][CONFIG_HASH]
        if ((stored.get("metadata") or {}).get("annotations") or {}).get(CONFIG_HASH) == want:
            continue
        body = copy.deepcopy(config)
        body["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
        body["metadata"].pop("ownerReferences", None)
        if stored["metadata"].get("ownerReferences"):
            body["metadata"]["ownerReferences"] = stored["metadata"]["ownerReferences"]
        rest("PUT", f"{collection}/{name}", body)
        written.append(f"updated {config['kind']}/{name}")
    return written


def stored_enforcing(rest: Rest, configs: list[dict[str, Any]]) -> bool:
    """Whether the stored configurations already enforce (a replica was ready once)."""
    for config in configs:
        stored = rest("GET", f"{CONFIG_PATHS[config['kind']]}/{config['metadata']['name']}")
        if stored is None or ((stored.get("metadata") or {}).get("annotations") or {}).get(ENFORCING) != "true":
            return False
    return True
