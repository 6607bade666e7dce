"""Storage: claims that many pods write, checkpoint and model URIs, mount paths.

Fields: `volumes[*].persistentVolumeClaim.{claimName,readOnly}` and every container's
`volumeMounts[*].{name,mountPath,readOnly}`; TrainingJob `spec.checkpoint.{claimName,mountPath,uri}`
(the checkpoint claim counts as mounted read-write by every replica); InferenceService `spec.modelUri`; the
fields a kind lists in `storageUris` (kinds.yaml; TrainingJob `spec.modelConfig.{dataPath,outputPath}`), where a
value that is an absolute path names a place in the pod's own volumes and is not a URI to check;
`nodeName` and the `kubernetes.io/hostname` nodeSelector (pods pinned to one node).
Cluster facts: the claim's access modes (`status.accessModes` once bound, else `spec.accessModes`), its
`volumeMode` and its driver, found as `storage_drivers.py` says (annotations, the bound PersistentVolume, the
StorageClass). A claim missing from the facts is a finding ("claim not found"): Kubernetes accepts such pods and
leaves them Pending. Where claims are created together with jobs, set `allowMissingClaims`: the rule then says it
could not check the claim.

Access modes (core/v1, Kubernetes docs "Access Modes"): `ReadWriteOnce` (one node: several pods on that node may
share it), `ReadOnlyMany`, `ReadWriteMany` (many nodes), `ReadWriteOncePod` (one pod, even on one node).
Drivers (storage_drivers.yaml, each row citing its source): what each one shares for Filesystem and for Block
volumes, in-tree names mapped as csi-translation-lib does, and which are object stores that cannot rename
(S3 Mountpoint, gcsfuse, blobfuse: `storage.checkpoint-posix`). A driver the table does not know, or one that
shares only in some setups (Trident NAS, Portworx sharedv4, vSphere file volumes), is a skip that says so.
URI schemes (KServe storage initializer, `kserve_storage.py`), lower case only: RFC 3986 calls schemes
case-insensitive, but the storage initializer matches lower-case prefixes (`_S3_PREFIX = "s3://"`, `startswith`) and
fsspec looks a protocol up as written (`S3` is "Protocol not known"), so `S3://` is never fetched: `s3://<bucket>/<key>`,
`gs://<bucket>/<key>` (`gcs://` too), `pvc://<claim>/<path>`, `hf://<owner>/<model>[:<revision>][/<path>]`,
`oci://<registry>/<repository>`, `modelscope://<owner>/<model>`, `hdfs://`, `webhdfs://`, `file://<absolute path>`,
and https, of which `https://<account>.blob|file|dfs.core.windows.net/<container>/<path>` and KServe's
`https://<account>.z<N>.blob.storage.azure.net/...` are Azure, as are `az://<container>/<path>` and
`abfs[s]://<container>@<account>.dfs.core.windows.net/<path>` (all written `azure` in `allowedSchemes`).
The default allows durable stores every replica can reach: s3, gs, pvc, hf, oci, azure;
`file://` names a node-local path and plain http(s) downloads are mutable and unauthenticated, so they are opt-in.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field, field_validator

from mlgate.model.facts import ClusterFacts
from mlgate.model.results import Finding, Skipped, Unchecked
from mlgate.model.workload import PodTemplate, Workload, as_list
from mlgate.rules.common import container_label
from mlgate.rules.registry import Context, NoParams, Params, check
from mlgate.rules.storage_drivers import DRIVERS, ClaimStorage, claim_storage

RWX, RWOP = "ReadWriteMany", "ReadWriteOncePod"
HOSTNAME_LABEL = "kubernetes.io/hostname"
DEFAULT_SCHEMES = ("s3", "gs", "pvc", "hf", "oci", "azure")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$")
_SCHEME_NAME = re.compile(r"^[a-z][a-z0-9+.-]*$")
# Azure storage over https: an account's blob, file or dfs endpoint, or KServe's `<account>.z<N>.blob.storage.azure.net`
_AZURE_HOST = re.compile(r"^[a-z0-9]{3,24}\.((blob|file|dfs)\.core\.windows\.net|z[0-9]+\.blob\.storage\.azure\.net)$")
# fsspec and Hadoop spellings of the same stores (gcsfs `gcs://`; adlfs `az://`; Hadoop ABFS `abfs[s]://`)
SCHEME_ALIASES = {"gcs": "gs", "az": "azure", "abfs": "azure", "abfss": "azure"}
_S3_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_GS_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_TWO_PARTS = re.compile(r"^[^/:]+/[^/:]+(:[^/]+)?(/.*)?$")  # owner/model[:revision][/subdir]


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
    require_known_provisioner: bool = Field(default=False, description="refuse a driver the table does not know "
                                                                       "(else: a skip naming it)")
    allow_missing_claims: bool = Field(default=False, description="a claim absent from the facts is a skip that "
                                                                  "says so, not a finding")


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
    return [f for use in shared for f in _claim_findings(use, workload, params, context.facts)]


def _claim_findings(
    use: ClaimUse, workload: Workload, params: SharedClaimParams, facts: ClusterFacts,
) -> Iterator[Finding | Unchecked]:
    namespace = workload.namespace or "default"
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
    claim = claim_storage(pvc, facts)
    mounted = next((ptr for paths in use.mounts.values() for ptr in paths.values()), None)
    if claim.volume_mode == "Block" and mounted is not None:
        yield Finding(mounted, "block claim mounted as a directory", f'claim "{use.claim}" is volumeMode Block, a raw '
                      "device that pods attach under volumeDevices, but it is mounted at a mountPath",
                      "use a volumeMode Filesystem claim for files such as checkpoints")
        return
    modes = ", ".join(claim.modes)
    if RWOP in claim.modes:
        yield Finding(use.path, "shared claim is ReadWriteOncePod",
                      f'claim "{use.claim}" is {RWOP}: one pod only, even on one node; {who}',
                      "use a ReadWriteMany claim, or give each replica its own claim")
    elif RWX not in claim.modes:
        if not _on_one_node(workload):  # ReadWriteOnce lets the pods of one node share it
            yield Finding(use.path, "shared claim not ReadWriteMany",
                          f'claim "{use.claim}" has accessModes [{modes}]: ReadWriteOnce lets pods on one node share '
                          f"it, but these pods may run on several nodes; {who}",
                          "use a ReadWriteMany claim on a shared file system (EFS, Filestore, Azure Files, CephFS, "
                          "NFS), give each replica its own claim, or pin every pod to one node")
    else:
        yield from _driver_findings(use, claim, params, who)


def _driver_findings(use: ClaimUse, claim: ClaimStorage, params: SharedClaimParams,
                     who: str) -> Iterator[Finding | Unchecked]:
    driver = DRIVERS.find(claim.driver, params.extra_rwx_provisioners)
    named = f"{claim.driver} ({claim.found_in})" if claim.driver else "no known driver"
    if driver is None:
        if params.require_known_provisioner:
            yield Finding(use.path, "provisioner not known to share", f'claim "{use.claim}" is provisioned by {named}, '
                          f"not known to support {RWX}; {who}",
                          "use a known ReadWriteMany driver or list yours in extraRwxProvisioners")
        else:
            yield Unchecked(f'claim "{use.claim}" is provisioned by {named}, which the driver table does not know, '
                            f"so whether it shares {RWX} is not checked")
        return
    sharing = driver.sharing(claim.volume_mode)
    if sharing in ("rwo", "none"):
        yield Finding(use.path, "provisioner cannot share", f'claim "{use.claim}" asks for {RWX} but {named} attaches '
                      f"{claim.volume_mode} volumes to one node only; {who}",
                      "use a storage class whose driver shares ReadWriteMany file systems")
    elif sharing == "conditional":
        yield Unchecked(f'claim "{use.claim}" on {driver.driver}: {driver.condition}')


def _on_one_node(workload: Workload) -> bool:
    """Every pod pinned to the same node (`nodeName`, or a `kubernetes.io/hostname` nodeSelector)."""
    nodes = set()
    for template in workload.templates:
        selector = template.spec.get("nodeSelector")
        host = selector.get(HOSTNAME_LABEL) if isinstance(selector, dict) else None
        nodes.add(template.spec.get("nodeName") or host)
    return len(nodes) == 1 and None not in nodes


# --- storage.checkpoint-posix -----------------------------------------------------------------


@check("storage.checkpoint-posix", "a claim pods write is on a file system that can rename", NoParams)
def checkpoint_posix(workload: Workload, params: NoParams, context: Context) -> list[Finding] | Skipped:
    written = [u for u in claim_uses(workload).values() if u.writable]
    if not written:
        return Skipped("no claim is mounted read-write")
    if not context.facts.known:
        names = ", ".join(f'"{u.claim}"' for u in written)
        return Skipped(f"no cluster facts to find the driver of claim {names}", looked=False)
    namespace = workload.namespace or "default"
    findings = []
    for use in written:
        pvc = context.facts.pvc(namespace, use.claim)
        claim = claim_storage(pvc, context.facts) if pvc is not None else None
        driver = DRIVERS.find(claim.driver) if claim is not None else None
        if claim is not None and driver is not None and not driver.posix:
            findings.append(Finding(use.path, "claim cannot rename", f'claim "{use.claim}" is an object store mounted '
                                    f"by {driver.driver} ({claim.found_in}), which does not rename files; checkpoint "
                                    "writers write a temporary file and rename it (PyTorch DCP's .metadata)",
                                    "checkpoint to a POSIX file system (EFS, FSx for Lustre, Filestore, CephFS), or "
                                    "write to the object store through its API (s3://, gs://)"))
    return findings


# --- storage.checkpoint-uri -------------------------------------------------------------------


class UriParams(Params):
    allowed_schemes: list[str] = Field(default_factory=lambda: list(DEFAULT_SCHEMES), min_length=1,
                                       description="URI schemes allowed (azure: Azure blob and file hosts)")

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
    for ptr in workload.description.storageUris if workload.description is not None else ():
        value = workload.at(ptr)
        if isinstance(value, str) and value and not value.startswith("/"):
            uris.append((ptr, value))
    if not uris:
        return Skipped("no checkpoint or model URI")
    return [f for ptr, uri in uris if (f := uri_finding(ptr, uri, params.allowed_schemes)) is not None]


def uri_finding(ptr: str, uri: str, allowed: list[str]) -> Finding | None:
    fix = f"use one of: {', '.join(f'{s}://' if s != 'azure' else 'Azure https:// or az://' for s in allowed)}"
    match = _SCHEME.match(uri)
    if not match:
        return Finding(ptr, "uri has no scheme", f'"{uri}" does not start with <scheme>://', fix)
    written, rest = match.group(1), match.group(2)
    scheme = written.lower()
    host = rest.split("/", 1)[0].lower()
    store = "azure" if scheme in ("http", "https") and _AZURE_HOST.match(host) else SCHEME_ALIASES.get(scheme, scheme)
    if store not in allowed and scheme not in allowed:
        shown = f"Azure {written}" if store == "azure" else written
        return Finding(ptr, "uri scheme not allowed", f'"{uri}" uses {shown}', fix)
    if written != scheme:  # the tools that fetch the model match the scheme as written (see the docstring)
        return Finding(ptr, "uri scheme not lower case",
                       f'"{uri}" writes its scheme as {written}, which the storage initializer and fsspec do not '
                       "recognise, so the model is never fetched", f"write {scheme}://")
    problem = _shape_problem(scheme if scheme in ("az", "abfs", "abfss") else store, rest)
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
    if scheme == "az":
        return None if first else "needs a container: az://<container>/<path>"
    if scheme in ("abfs", "abfss"):
        container, at, account = first.partition("@")
        return None if container and at and account else \
            f"needs a container and an account: {scheme}://<container>@<account>.dfs.core.windows.net/<path>"
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
