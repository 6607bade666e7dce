"""An object placed in the namespace it is created in, when its manifest names none.

kubectl creates such an object in its context's namespace, and the API server leaves
metadata.namespace out of many CREATE objects it sends to admission (the request carries it).
Namespace-matched policies need it either way: the webhook fills in the request's namespace,
the CLI the one `-n` names.
"""

from __future__ import annotations

from typing import Any

# The cluster-scoped kinds found in manifests; everything else (ML jobs, custom resources) is namespaced.
CLUSTER_SCOPED_KINDS = frozenset({
    "APIService", "CertificateSigningRequest", "ClusterIssuer", "ClusterMLPolicy", "ClusterRole",
    "ClusterRoleBinding", "CSIDriver", "CSINode", "CustomResourceDefinition", "IngressClass",
    "MutatingWebhookConfiguration", "Namespace", "Node", "PersistentVolume", "PriorityClass",
    "RuntimeClass", "StorageClass", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
    "ValidatingWebhookConfiguration", "VolumeAttachment",
})


def in_namespace(obj: dict[str, Any], namespace: str, cluster_scoped: frozenset[str] = frozenset()) -> dict[str, Any]:
    """`obj` with metadata.namespace set when it is namespaced and names none; otherwise `obj` itself.
    `cluster_scoped` adds the kinds a policy set describes as cluster-scoped (a ClusterTrainingRuntime)."""
    meta = obj.get("metadata")
    kind = obj.get("kind")
    scoped = isinstance(kind, str) and (kind in CLUSTER_SCOPED_KINDS or kind in cluster_scoped)
    if not namespace or scoped or not isinstance(meta, dict) or meta.get("namespace"):
        return obj
    return {**obj, "metadata": {**meta, "namespace": namespace}}
