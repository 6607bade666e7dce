"""Storage: claims that many pods write, checkpoint and model URIs, mount paths.

Fields: `volumes[*].persistentVolumeClaim.{claimName,readOnly}` and every container's
`volumeMounts[*].{name,mountPath,readOnly}`; TrainingJob `spec.checkpoint.{claimName,mountPath,uri}`
(the checkpoint claim counts as mounted read-write by every replica); InferenceService `spec.modelUri`.
Cluster facts: the claim's `spec.accessModes` and `spec.storageClassName`, and the class's `provisioner`
(an unset class means the cluster default; `""` means no class, so the provisioner is unknown).
A claim missing from the facts is a finding ("claim not found"): Kubernetes accepts such pods and leaves them
Pending. Where claims are created together with jobs (a watch cache can lag by seconds), bind the rule with
action warn, or set `allowMissingClaims`.

Access modes (core/v1): `ReadWriteOnce` (one node), `ReadOnlyMany`, `ReadWriteMany` (many nodes),
`ReadWriteOncePod` (one pod, never combined with other modes). Only `ReadWriteMany` lets replicas on
different nodes write one claim.
Provisioners (kubernetes-csi/docs `book/src/drivers.md`, "not validated by SIG-Storage"): the drivers in
`RWX_PROVISIONERS` can share a volume read-write across nodes; those in `RWO_PROVISIONERS` cannot, whatever
the claim asks for. Longhorn (share-manager NFS, longhorn#1470) and vSphere (file volumes) share when the
claim asks for ReadWriteMany. Rook prefixes driver names with its namespace (`rook-ceph.cephfs.csi.ceph.com`),
so `<prefix>.<driver>` matches `<driver>`.
URI schemes (KServe storage initializer, `kserve_storage.py`): `s3://<bucket>/<key>`, `gs://<bucket>/<key>`,
`pvc://<claim>/<path>`, `hf://<owner>/<model>[:<revision>]`, `oci://<registry>/<repository>`,
`modelscope://<owner>/<model>`, `hdfs://`, `webhdfs://`, `file://<absolute path>`, and https, of which
`https://<account>.blob|file.core.windows.net/<container>/<path>` is Azure (written `azure` in
`allowedSchemes`). The default allows durable stores every replica can reach: s3, gs, pvc, hf, oci, azure;
`file://` names a node-local path and plain http(s) downloads are mutable and unauthenticated, so they are opt-in.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field, field_validator

from mlgate.model.facts import ClusterFacts
from mlgate.model.results import Finding, Skipped, Unchecked
from mlgate.model.workload import PodTemplate, Workload, as_list
from mlgate.rules.common import container_label
from mlgate.rules.registry import Context, NoParams, Params, check

RWX = "ReadWriteMany"
RWX_PROVISIONERS = (
    "efs.csi.aws.com", "fsx.csi.aws.com", "s3.csi.aws.com", "file.csi.azure.com", "blob.csi.azure.com",
    "filestore.csi.storage.gke.io", "gcsfuse.csi.storage.gke.io", "cephfs.csi.ceph.com", "nfs.csi.k8s.io",
    "smb.csi.k8s.io", "manila.csi.openstack.org", "csi.trident.netapp.io", "pxd.portworx.com",
    "spectrumscale.csi.ibm.com", "csi.weka.io", "driver.longhorn.io", "csi.vsphere.vmware.com",
)
RWO_PROVISIONERS = (
    "ebs.csi.aws.com", "pd.csi.storage.gke.io", "disk.csi.azure.com", "rbd.csi.ceph.com",
    "dobs.csi.digitalocean.com", "csi.hetzner.cloud",
)
DEFAULT_SCHEMES = ("s3", "gs", "pvc", "hf", "oci", "azure")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$")
_SCHEME_NAME = re.compile(r"^[a-z][a-z0-9+.-]*$")
_AZURE_HOST = re.compile(r"^[a-z0-9]{3,24}\.(blob|file)\.core\.windows\.net$")
_S3_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_GS_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_TWO_PARTS = re.compile(r"^[^/:]+/[^/:]+(:[^/]+)?$")


@dataclass
class ClaimUse:
    """How one workload uses one claim: which roles mount it, how, and where."""

    claim: str
    path: str  # where the claim is named: the checkpoint field, else the first read-write volume
    replicas: dict[str, int] = field(default_factory=dict)  # role -> pods
    writable: bool = False
    mounts: dict[str, dict[str, str]] = field(default_factory=dict)  # role -> {mountPath: its pointer}

    @property
    def pods(self) -> int:
        return sum(self.replicas.values())

    def roles(self) -> str:
        return ", ".join(f"{role} ×{count}" for role, count in self.replicas.items())


def claim_uses(workload: Workload) -> dict[str, ClaimUse]:
    """Every claim the workload mounts, the checkpoint claim first."""
    uses: dict[str, ClaimUse] = {}
    checkpoint = workload.checkpoint
    if checkpoint and isinstance(checkpoint.claim_name, str) and checkpoint.claim_name:
        use = uses.setdefault(checkpoint.claim_name, ClaimUse(checkpoint.claim_name, checkpoint.pointer + "/claimName"))
        use.writable = True
        for template in workload.templates:
            use.replicas[template.role] = template.replicas
    for template in workload.templates:
        mounts: dict[str, list[tuple[str, dict[str, Any]]]] | None = None
        for index, volume in enumerate(as_list(template.spec.get("volumes"))):
            source = volume.get("persistentVolumeClaim") if isinstance(volume, dict) else None
            if isinstance(source, dict) and source.get("claimName"):
                mounts = _mounts_by_volume(template) if mounts is None else mounts
                name = volume.get("name")
                _add_volume(uses, template, index, source, mounts.get(name, []) if isinstance(name, str) else [])
    return uses


def _mounts_by_volume(template: PodTemplate) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """Each volume name's mounts with their mountPath pointers: one pass, not one per volume."""
    by_name: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for key, position, container in template.containers():
        for number, mount in enumerate(as_list(container.get("volumeMounts"))):
            name = mount.get("name") if isinstance(mount, dict) else None
            if isinstance(name, str):
                where = template.path(key, position, "volumeMounts", number, "mountPath")
                by_name.setdefault(name, []).append((where, mount))
    return by_name


def _add_volume(
    uses: dict[str, ClaimUse], template: PodTemplate, index: int, source: dict[str, Any],
    volume_mounts: list[tuple[str, dict[str, Any]]],
) -> None:
    claim = str(source["claimName"])
    where = template.path("volumes", index, "persistentVolumeClaim", "claimName")
    use = uses.setdefault(claim, ClaimUse(claim, where))
    use.replicas[template.role] = template.replicas
    mounts = use.mounts.setdefault(template.role, {})
    writable = False
    for mount_path, mount in volume_mounts:
        mounts.setdefault(str(mount.get("mountPath")), mount_path)
        writable = writable or not mount.get("readOnly")
    if writable and not source.get("readOnly"):
        if not use.writable:  # name the first read-write volume (a checkpoint claim is writable from the start)
            use.path = where
        use.writable = True


# --- storage.shared-claim-rwx ---------------------------------------------------------------


class SharedClaimParams(Params):
    min_replicas: int = Field(default=2, ge=2, description="pods that must share a claim before it must be RWX")
    extra_rwx_provisioners: list[str] = Field(default_factory=list, description="in-house drivers that share RWX")
    require_known_provisioner: bool = False
    allow_missing_claims: bool = Field(default=False, description="pass claims absent from the facts")


@check("storage.shared-claim-rwx", "a claim that several pods mount read-write is ReadWriteMany", SharedClaimParams)
def shared_claim_rwx(
    workload: Workload, params: SharedClaimParams, context: Context,
) -> list[Finding | Unchecked] | Skipped:
    if not workload.pods_counted:  # workflow steps run one after another; an unknown kind's count is unknown
        return Skipped(f"how many {workload.kind} pods run at once is not known")
    shared = [u for u in claim_uses(workload).values() if u.writable and u.pods >= params.min_replicas]
    if not shared:
        return Skipped(f"no claim is mounted read-write by {params.min_replicas} or more pods")
    if not context.facts.known:
        names = ", ".join(f'"{u.claim}"' for u in shared)
        return Skipped(f"no cluster facts to look up the access mode of claim {names}, which several pods "
                       "mount read-write", looked=False)
    return [f for use in shared for f in _claim_findings(use, workload.namespace or "default", params, context.facts)]


def _claim_findings(
    use: ClaimUse, namespace: str, params: SharedClaimParams, facts: ClusterFacts,
) -> Iterator[Finding | Unchecked]:
    who = f"{use.pods} pods ({use.roles()}) mount it read-write"
    pvc = facts.pvc(namespace, use.claim)
    if pvc is None:
        if params.allow_missing_claims:
            yield Unchecked(f'claim "{namespace}/{use.claim}" is not in the cluster yet, so its access mode is '
                            f"unknown; {who}")
        else:
            yield Finding(use.path, "claim not found", f'PersistentVolumeClaim "{namespace}/{use.claim}" is not in the '
                          f"cluster; {who}", "create the claim with accessModes [ReadWriteMany] first, or fix its name")
        return
    spec = _dict(pvc.get("spec"))
    modes = [str(m) for m in as_list(spec.get("accessModes"))]
    if RWX not in modes:
        yield Finding(use.path, "shared claim not ReadWriteMany",
                      f'claim "{use.claim}" has accessModes [{", ".join(modes)}] but {who}',
                      "use a ReadWriteMany claim on a shared file system (EFS, Filestore, Azure Files, CephFS, NFS), "
                      "or give each replica its own claim")
        return
    provisioner = _provisioner(spec, facts)
    verdict = classify(provisioner, params.extra_rwx_provisioners)
    if verdict == "rwo":
        yield Finding(use.path, "provisioner cannot share", f'claim "{use.claim}" asks for {RWX} but its class is '
                      f"provisioned by {provisioner}, which only attaches to one node; {who}",
                      "use a storage class whose driver supports ReadWriteMany")
    elif verdict == "unknown" and params.require_known_provisioner:
        yield Finding(use.path, "provisioner not known to share", f'claim "{use.claim}" is provisioned by '
                      f"{provisioner or 'an unknown driver'}, not known to support {RWX}; {who}",
                      "use a known ReadWriteMany driver or list yours in extraRwxProvisioners")


def _provisioner(spec: Mapping[str, Any], facts: ClusterFacts) -> str | None:
    class_name = spec.get("storageClassName")
    if class_name == "":  # explicitly no class: a pre-provisioned volume
        return None
    storage_class = facts.storage_class(str(class_name) if class_name else None)
    value = storage_class.get("provisioner") if storage_class else None
    return str(value) if value else None


def classify(provisioner: str | None, extra: Sequence[str] = ()) -> str:
    """`rwx`, `rwo` or `unknown`; `<prefix>.<driver>` (Rook) matches `<driver>`."""
    if not provisioner:
        return "unknown"

    def matches(drivers: Sequence[str]) -> bool:
        return any(provisioner == d or provisioner.endswith("." + d) for d in drivers)

    if matches(extra):
        return "rwx"
    if matches(RWO_PROVISIONERS):
        return "rwo"
    return "rwx" if matches(RWX_PROVISIONERS) else "unknown"


# --- storage.checkpoint-uri -------------------------------------------------------------------


class UriParams(Params):
    allowed_schemes: list[str] = Field(default_factory=lambda: list(DEFAULT_SCHEMES), min_length=1)

    @field_validator("allowed_schemes")
    @classmethod
    def _lowercase_names(cls, value: list[str]) -> list[str]:
        bad = [s for s in value if not _SCHEME_NAME.match(s)]
        if bad:
            raise ValueError(f"schemes are lowercase names without '://': {', '.join(bad)}")
        return value


@check("storage.checkpoint-uri", "checkpoint and model URIs use an allowed scheme and are well formed", UriParams)
def checkpoint_uri(workload: Workload, params: UriParams, context: Context) -> list[Finding] | Skipped:
    uris: list[tuple[str, str]] = []
    if workload.checkpoint and workload.checkpoint.uri:
        uris.append((workload.checkpoint.pointer + "/uri", str(workload.checkpoint.uri)))
    if workload.model_uri:
        uris.append(workload.model_uri)
    if not uris:
        return Skipped("no checkpoint or model URI")
    return [f for ptr, uri in uris if (f := uri_finding(ptr, uri, params.allowed_schemes)) is not None]


def uri_finding(ptr: str, uri: str, allowed: list[str]) -> Finding | None:
    fix = f"use one of: {', '.join(f'{s}://' if s != 'azure' else 'Azure https://' for s in allowed)}"
    match = _SCHEME.match(uri)
    if not match:
        return Finding(ptr, "uri has no scheme", f'"{uri}" does not start with <scheme>://', fix)
    scheme, rest = match.group(1), match.group(2)
    host = rest.split("/", 1)[0]
    names = {scheme, "azure"} if scheme == "https" and _AZURE_HOST.match(host) else {scheme}
    if not names & set(allowed):
        shown = "Azure https" if "azure" in names else scheme
        return Finding(ptr, "uri scheme not allowed", f'"{uri}" uses {shown}', fix)
    problem = _shape_problem("azure" if "azure" in names else scheme, rest)
    return Finding(ptr, "uri malformed", f'"{uri}" {problem}', "write it as the scheme expects") if problem else None


def _shape_problem(scheme: str, rest: str) -> str | None:
    first, _, tail = rest.partition("/")
    if scheme in ("s3", "gs"):
        pattern = _S3_BUCKET if scheme == "s3" else _GS_BUCKET
        return None if pattern.match(first) else f"needs a valid bucket name: {scheme}://<bucket>/<key>"
    if scheme == "pvc":
        ok = bool(_DNS_SUBDOMAIN.match(first)) and len(first) <= 253
        return None if ok else "needs a claim name: pvc://<claim>/<path>"
    if scheme in ("hf", "modelscope"):
        return None if _TWO_PARTS.match(rest) else f"needs an owner and a model: {scheme}://<owner>/<model>"
    if scheme == "oci":
        return None if first and tail.strip("/") else "needs a registry and a repository: oci://<registry>/<repo>"
    if scheme == "azure":
        return None if tail.split("/", 1)[0] else "needs a container: https://<account>.blob.core.windows.net/<container>"
    if scheme in ("http", "https"):
        return None if first and tail else f"needs a host and a path: {scheme}://<host>/<path>"
    if scheme == "file":
        return None if rest.startswith("/") and rest.strip("/") else "needs an absolute path: file:///<path>"
    return None if rest.strip("/") else f"has nothing after {scheme}://"


# --- storage.consistent-mounts ----------------------------------------------------------------


@check("storage.consistent-mounts", "every role mounts a shared claim, and the checkpoint, at one path", NoParams)
def consistent_mounts(workload: Workload, params: NoParams, context: Context) -> list[Finding] | Skipped:
    uses = claim_uses(workload)
    shared = [u for u in uses.values() if sum(1 for m in u.mounts.values() if m) > 1]
    checkpoint = workload.checkpoint
    if not shared and not (checkpoint and checkpoint.mount_path and workload.templates):
        return Skipped("no claim is mounted by more than one pod template, and no checkpoint mount")
    findings = [f for use in shared for f in _role_paths(use)]
    if checkpoint and checkpoint.mount_path and workload.templates:
        findings.extend(_checkpoint_conflicts(workload, workload.templates[0]))
    return findings


def _role_paths(use: ClaimUse) -> Iterator[Finding]:
    roles = [(role, paths) for role, paths in use.mounts.items() if paths]
    first_role, first_paths = roles[0]
    for role, paths in roles[1:]:
        if not set(paths) & set(first_paths):
            yield Finding(next(iter(paths.values())), "claim mounted at different paths",
                          f'claim "{use.claim}" is mounted at {_paths(first_paths)} by {first_role} pods '
                          f"and at {_paths(paths)} by {role} pods",
                          f"mount it at {_paths(first_paths)} in every role")


def _checkpoint_conflicts(workload: Workload, template: PodTemplate) -> Iterator[Finding]:
    """A volume for the checkpoint (its claim, or named `checkpoint`) mounted elsewhere, or another
    volume mounted where the checkpoint goes in the main container."""
    checkpoint = workload.checkpoint
    assert checkpoint is not None and checkpoint.mount_path
    wanted = checkpoint.mount_path
    volumes = {str(v.get("name")): v for v in as_list(template.spec.get("volumes")) if isinstance(v, dict)}
    for key, position, container in template.containers():
        for number, mount in enumerate(as_list(container.get("volumeMounts"))):
            if not isinstance(mount, dict):
                continue
            name, at = str(mount.get("name")), mount.get("mountPath")
            claim = _dict(_dict(volumes.get(name)).get("persistentVolumeClaim")).get("claimName")
            for_checkpoint = name == "checkpoint" or (claim is not None and claim == checkpoint.claim_name)
            ptr = template.path(key, position, "volumeMounts", number, "mountPath")
            if for_checkpoint and at != wanted:
                yield Finding(ptr, "checkpoint mounted at different paths",
                              f'volume "{name}" holds the checkpoint but is mounted at "{at}", '
                              f'while spec.checkpoint.mountPath is "{wanted}"',
                              f'mount it at "{wanted}", or drop the volume and let spec.checkpoint mount it')
            elif not for_checkpoint and at == wanted and container.get("name") == template.main_container:
                yield Finding(ptr, "checkpoint mount path taken",
                              f'{container_label(key, container)} mounts volume "{name}" at "{wanted}", '
                              "where spec.checkpoint.mountPath mounts the checkpoint",
                              "mount the other volume elsewhere or change spec.checkpoint.mountPath")


def _paths(paths: Mapping[str, str]) -> str:
    return ", ".join(f'"{p}"' for p in sorted(paths))


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
