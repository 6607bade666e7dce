"""The Pod Security Standards restricted checks (on top of baseline), one small pure function each.

Source: kubernetes/kubernetes `staging/src/k8s.io/pod-security-admission/policy/check_*.go` (k8s.io/pod-security-
admission); which variant runs at which policy version is the table in `pod_security_checks.py`.

Fields read: spec.volumes[*] (the volume source), spec.os.name, spec.hostUsers (through the table), and the pod's
and every container's securityContext.{allowPrivilegeEscalation, runAsNonRoot, runAsUser, seccompProfile,
capabilities}. Allowed values are in each check's docstring.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

from mlgate.model.results import Finding
from mlgate.model.workload import as_dict, as_list
from mlgate.rules.pod_security_baseline import explicit_seccomp
from mlgate.rules.pod_security_view import Pod, get

VolumeType = Literal[  # restricted volume types an exception can name (hostPath has hostPathPrefixes)
    "gcePersistentDisk", "awsElasticBlockStore", "gitRepo", "nfs", "iscsi", "glusterfs", "rbd", "flexVolume",
    "cinder", "cephfs", "flocker", "fc", "azureFile", "vsphereVolume", "quobyte", "azureDisk",
    "photonPersistentDisk", "portworxVolume", "scaleIO", "storageos",
]
ALLOWED_VOLUMES = ("configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "image", "persistentVolumeClaim",
                   "projected", "secret")
RESTRICTED_VOLUMES = (
    "hostPath", "gcePersistentDisk", "awsElasticBlockStore", "gitRepo", "nfs", "iscsi", "glusterfs", "rbd",
    "flexVolume", "cinder", "cephfs", "flocker", "fc", "azureFile", "vsphereVolume", "quobyte", "azureDisk",
    "photonPersistentDisk", "portworxVolume", "scaleIO", "storageos",
)


def restricted_volumes(pod: Pod) -> Iterator[Finding]:
    """Only configMap, csi, downwardAPI, emptyDir, ephemeral, image, persistentVolumeClaim, projected, secret.

    A volume that names no source at all (`- name: scratch`) is an emptyDir: the API server stores it so
    (SetDefaults_Volume). A source this table does not know is still refused, as "unknown"."""
    for i, entry in enumerate(as_list(pod.spec.get("volumes"))):
        volume = as_dict(entry)
        if any(volume.get(kind) is not None for kind in ALLOWED_VOLUMES):
            continue
        if isinstance(entry, dict) and all(value is None for key, value in volume.items() if key != "name"):
            continue  # no source: defaulted to emptyDir (a volume that is no mapping at all stays refused)
        kind = next((k for k in RESTRICTED_VOLUMES if volume.get(k) is not None), "unknown")
        if kind in pod.allow.volume_types or (kind == "hostPath" and pod.allow.host_path(get(volume, kind, "path"))):
            continue
        yield Finding(pod.path("volumes", i, *([kind] if kind != "unknown" else [])), "restricted volume types",
                      f'volume "{volume.get("name")}" uses restricted volume type "{kind}"',
                      "use a persistentVolumeClaim, a CSI volume or an emptyDir")


def allow_privilege_escalation(pod: Pod) -> Iterator[Finding]:
    """securityContext.allowPrivilegeEscalation must be explicitly false."""
    for c in pod.containers():
        if c.sc.get("allowPrivilegeEscalation") is not False:
            yield Finding(c.path("securityContext", "allowPrivilegeEscalation"), "allowPrivilegeEscalation != false",
                          f"{c.label} must set securityContext.allowPrivilegeEscalation=false",
                          "set securityContext.allowPrivilegeEscalation: false")


def run_as_non_root(pod: Pod) -> Iterator[Finding]:
    """runAsNonRoot true on the pod or on every container (a container may leave it unset if the pod says true);
    false nowhere. A non-zero runAsUser does not stand in for it."""
    explicit = [(p, who) for p, who, _ in pod.setters("runAsNonRoot", bad=lambda v: v is not True)]
    for path, who in explicit:
        yield Finding(path, "runAsNonRoot != true", f"{who} must not set securityContext.runAsNonRoot=false",
                      "set runAsNonRoot: true and run the image as a non-zero UID")
    if explicit or pod.sc.get("runAsNonRoot") is True:
        return
    for c in pod.containers():
        if c.sc.get("runAsNonRoot") is None:
            yield Finding(c.path("securityContext", "runAsNonRoot"), "runAsNonRoot != true",
                          f"pod or {c.label} must set securityContext.runAsNonRoot=true",
                          "set spec.securityContext.runAsNonRoot: true, or set it on this container")


def run_as_user(pod: Pod) -> Iterator[Finding]:
    """runAsUser must not be 0 at pod or container level."""
    for path, who, _ in pod.setters("runAsUser", bad=lambda v: v == 0 and not isinstance(v, bool)):
        yield Finding(path, "runAsUser=0", f"{who} must not set runAsUser=0", "use a non-zero UID, e.g. 1000")


def seccomp_profile_restricted(pod: Pod) -> Iterator[Finding]:
    """seccompProfile.type RuntimeDefault or Localhost on the pod or every container; a pod-level Unconfined is
    refused even where a container sets its own profile."""
    explicit = list(explicit_seccomp(pod))
    yield from explicit
    if explicit or get(pod.sc, "seccompProfile") is not None:
        return
    for c in pod.containers():
        if c.sc.get("seccompProfile") is None:
            yield Finding(c.path("securityContext", "seccompProfile", "type"), "seccompProfile",
                          f'pod or {c.label} must set securityContext.seccompProfile.type to "RuntimeDefault" '
                          'or "Localhost"', "set spec.securityContext.seccompProfile.type: RuntimeDefault")


def capabilities_restricted(pod: Pod) -> Iterator[Finding]:
    """capabilities.drop includes "ALL" (exactly: "all" is not it); add only NET_BIND_SERVICE plus
    exceptions.capabilities."""
    allowed = {"NET_BIND_SERVICE"} | pod.allow.capabilities
    for c in pod.containers():
        if "ALL" not in as_list(get(c.sc, "capabilities", "drop")):
            yield Finding(c.path("securityContext", "capabilities", "drop"), "unrestricted capabilities",
                          f'{c.label} must set securityContext.capabilities.drop=["ALL"]',
                          'set securityContext.capabilities.drop: ["ALL"]')
        for i, cap in enumerate(as_list(get(c.sc, "capabilities", "add"))):
            if str(cap) not in allowed:
                yield Finding(c.path("securityContext", "capabilities", "add", i), "unrestricted capabilities",
                              f'{c.label} must not include "{cap}" in securityContext.capabilities.add',
                              "add only NET_BIND_SERVICE, or name the capability in exceptions.capabilities")
