"""How a predictor pod gets its model, as KServe's storage initializer injector does (pure; no I/O).

kserve/kserve v0.20.0 pkg/webhook/admission/pod/storage_initializer_injector.go, single storage URI:
- `pvc://<claim>/<path>`: the claim is mounted read-only at the runtime's model directory (volume
  `kserve-pvc-source`), subPath `<path>`; no init container.
- any other fetchable URI: an init container `storage-initializer` runs the storage-initializer image with the
  args `[modelUri, <model dir>]` and downloads into an `emptyDir` (volume `kserve-provision-location`), which the
  model server mounts read-only at the same path.
Credentials come from `spec.storage.secretName`: that Secret's keys become the init container's environment
(envFrom), e.g. AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_ENDPOINT_URL for s3://, HF_TOKEN for hf://; they
are never written into the Deployment. Google Cloud Storage reads a key file, not variables, so for gs:// the
Secret is mounted instead, as KServe's credential builder does (pkg/credentials/gcs/gcs_secret.go: volume
`user-gcp-sa` at /var/secrets/, GOOGLE_APPLICATION_CREDENTIALS=/var/secrets/gcloud-application-credentials.json,
the key file name KServe's default GCSCredentialFileName).

Which URIs are accepted is the storage rule's allowlist, imported, not copied (mlgate.rules.storage
DEFAULT_SCHEMES, judged by the same `uri_finding`, so aliases such as gcs:// and Azure https hosts agree with
admission). Of those, what the storage initializer cannot read is refused here (NOT_FETCHED, from kserve/kserve
v0.20.0 python/storage/kserve_storage/kserve_storage.py `Storage.download`): oci:// (KServe serves OCI models
through a modelcar sidecar, which the reconciler does not build), and the gcs://, az://, abfs[s]:// and Azure
dfs spellings the allowlist counts as gs and azure but the initializer does not recognise.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from mlgate.rules.storage import DEFAULT_SCHEMES, uri_finding

from .runtimes import Runtime, StorageInitializer

__all__ = ["GCS_KEY_FILE", "GCS_MOUNT", "GCS_VOLUME", "INIT_CONTAINER", "MODEL_VOLUME", "PVC_VOLUME",
           "mount_model", "uri_problem"]

FETCHED = "s3://, gs://, hf://, pvc:// or Azure https:// storage"  # what NOT_FETCHED leaves of the allowlist
MALFORMED = "uri malformed"  # uri_finding's reason for a known scheme written wrong
INIT_CONTAINER = "storage-initializer"  # KServe constants.StorageInitializerContainerName
MODEL_VOLUME, PVC_VOLUME = "kserve-provision-location", "kserve-pvc-source"  # KServe's volume names
_AZURE_HTTPS = "https://<account>.blob.core.windows.net/<container>/<path> (or file.core.windows.net)"
NOT_FETCHED = {  # written scheme -> why the storage initializer cannot read it, and what to write
    "oci": "oci:// models are served by KServe's modelcar sidecar, which the reconciler does not build",
    "gcs": "the storage initializer reads Google Cloud Storage as gs://; write gs://<bucket>/<path>",
    "az": f"the storage initializer reads Azure storage over https; write {_AZURE_HTTPS}",
    "abfs": f"the storage initializer reads Azure storage over https; write {_AZURE_HTTPS}",
    "abfss": f"the storage initializer reads Azure storage over https; write {_AZURE_HTTPS}",
}
_AZURE_DFS = re.compile(r"^https://[^/]+\.dfs\.core\.windows\.net/", re.IGNORECASE)
# the init container may run under the restricted Pod Security Standard (the pod sets runAsNonRoot and seccomp)
INIT_SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
GCS_VOLUME, GCS_MOUNT = "user-gcp-sa", "/var/secrets/"  # KServe's GCSCredentialVolumeName, ...VolumeMountPath
GCS_KEY_FILE = "gcloud-application-credentials.json"  # KServe's GCSCredentialFileName


def uri_problem(field: str, uri: str) -> str | None:
    """Why the reconciler cannot fetch `uri` (written at `field`), or None."""
    finding = uri_finding(field, uri, list(DEFAULT_SCHEMES))
    if finding is not None and finding.reason != MALFORMED:  # its shape is the storage policy's to judge
        return f"{field}: {finding.reason}: {finding.detail}; use {FETCHED}"
    scheme = uri.partition("://")[0].lower()
    if scheme in NOT_FETCHED:
        return f"{field}: uri not fetched: \"{uri}\": {NOT_FETCHED[scheme]}"
    if _AZURE_DFS.match(uri):
        return f"{field}: uri not fetched: \"{uri}\": the storage initializer reads Azure blob and file storage; " \
               f"write {_AZURE_HTTPS}"
    return None


def mount_model(pod_spec: dict[str, Any], main: dict[str, Any], uri: str, runtime: Runtime, *,
                initializer: StorageInitializer, secret: str | None) -> None:
    """Add the volume, the mount on `main` and (unless pvc://) the init container that fetches `uri`."""
    mount: dict[str, Any] = {"name": MODEL_VOLUME, "mountPath": runtime.model_dir, "readOnly": True}
    if uri.lower().startswith("pvc://"):
        claim, _, path = uri[len("pvc://"):].partition("/")
        volume: dict[str, Any] = {"name": PVC_VOLUME, "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}
        mount["name"] = PVC_VOLUME
        if path.strip("/"):
            mount["subPath"] = path.strip("/")
    else:
        volume = {"name": MODEL_VOLUME, "emptyDir": {}}
        init: dict[str, Any] = {
            "name": INIT_CONTAINER,
            "image": initializer.image,
            "args": [uri, runtime.model_dir],
            "volumeMounts": [{"name": MODEL_VOLUME, "mountPath": runtime.model_dir}],
            "securityContext": copy.deepcopy(INIT_SECURITY),
        }
        if initializer.resources:
            init["resources"] = copy.deepcopy(initializer.resources)
        if secret and uri.lower().startswith("gs://"):
            init["env"] = [{"name": "GOOGLE_APPLICATION_CREDENTIALS", "value": GCS_MOUNT + GCS_KEY_FILE}]
            init["volumeMounts"].append({"name": GCS_VOLUME, "mountPath": GCS_MOUNT, "readOnly": True})
            _replace_volume(pod_spec, {"name": GCS_VOLUME, "secret": {"secretName": secret}})
        elif secret:
            init["envFrom"] = [{"secretRef": {"name": secret}}]
        others = [c for c in pod_spec.get("initContainers") or [] if c.get("name") != INIT_CONTAINER]
        pod_spec["initContainers"] = [init, *others]  # first: the others may read the model too
    _replace_volume(pod_spec, volume)
    main["volumeMounts"] = [*(m for m in main.get("volumeMounts") or [] if m.get("name") != mount["name"]), mount]


def _replace_volume(pod_spec: dict[str, Any], volume: dict[str, Any]) -> None:
    pod_spec["volumes"] = [*(v for v in pod_spec.get("volumes") or [] if v.get("name") != volume["name"]), volume]
