"""The Pod Security Standards checks, one small pure function each, as pod-security-admission has them.

Source: kubernetes/kubernetes `staging/src/k8s.io/pod-security-admission/policy/check_*.go` (check IDs,
levels, minimum versions, allowed values, ForbiddenReason strings). Every container check visits
initContainers, containers and ephemeralContainers (`policy/visitor.go`). A check yields one Finding
per offending field; `reason` is PSA's ForbiddenReason and `detail` follows PSA's wording.
`pod_security.py` holds the parameters, the profiles and the registered rules.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

from mlgate.model import pointer
from mlgate.model.results import Finding
from mlgate.model.workload import PodTemplate, as_dict, as_list
from mlgate.rules.common import container_label

LATEST = 37  # the highest MinimumVersion any check registers (sysctls v1.37); `latest` resolves to it
OLDEST = 22  # pod-security-admission shipped in v1.22; older policy versions are not modelled

CheckID = Literal[
    "hostNamespaces", "privileged", "capabilities_baseline", "hostPathVolumes", "hostPorts",
    "hostProbesAndHostLifecycle", "appArmorProfile", "seLinuxOptions", "procMount", "seccompProfile_baseline",
    "sysctls", "windowsHostProcess", "restrictedVolumes", "allowPrivilegeEscalation", "runAsNonRoot",
    "runAsUser", "seccompProfile_restricted", "capabilities_restricted", "procMount_restricted",
]
VolumeType = Literal[  # restricted volume types an exception can name (hostPath has hostPathPrefixes)
    "gcePersistentDisk", "awsElasticBlockStore", "gitRepo", "nfs", "iscsi", "glusterfs", "rbd", "flexVolume",
    "cinder", "cephfs", "flocker", "fc", "azureFile", "vsphereVolume", "quobyte", "azureDisk",
    "photonPersistentDisk", "portworxVolume", "scaleIO", "storageos",
]
POD_ONLY_CHECKS = frozenset({"hostNamespaces", "hostPathVolumes", "sysctls", "restrictedVolumes"})

BASELINE_CAPABILITIES = frozenset({
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
    "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
})
SAFE_SYSCTLS: Mapping[int, frozenset[str]] = {  # policy version → sysctls that became safe then
    0: frozenset({"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies",
                  "net.ipv4.ping_group_range", "net.ipv4.ip_unprivileged_port_start"}),
    27: frozenset({"net.ipv4.ip_local_reserved_ports"}),
    29: frozenset({"net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                   "net.ipv4.tcp_keepalive_probes"}),
    32: frozenset({"net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"}),
    37: frozenset({"net.ipv4.tcp_slow_start_after_idle", "net.ipv4.tcp_notsent_lowat"}),
}
SELINUX_TYPES: Mapping[int, frozenset[str]] = {
    0: frozenset({"", "container_t", "container_init_t", "container_kvm_t"}),
    31: frozenset({"container_engine_t"}),
}
ALLOWED_VOLUMES = ("configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "image", "persistentVolumeClaim",
                   "projected", "secret")
RESTRICTED_VOLUMES = (
    "hostPath", "gcePersistentDisk", "awsElasticBlockStore", "gitRepo", "nfs", "iscsi", "glusterfs", "rbd",
    "flexVolume", "cinder", "cephfs", "flocker", "fc", "azureFile", "vsphereVolume", "quobyte", "azureDisk",
    "photonPersistentDisk", "portworxVolume", "scaleIO", "storageos",
)
VALID_PROFILE_TYPES = ("RuntimeDefault", "Localhost")
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
HANDLERS = (*((p,) for p in PROBES), ("lifecycle", "postStart"), ("lifecycle", "preStop"))
HANDLER_FIELDS = (*PROBES, "lifecycle")


@dataclass(frozen=True)
class Allow:
    """The policy's named exceptions, each read by its own check only."""

    capabilities: frozenset[str] = frozenset()
    host_path_prefixes: tuple[str, ...] = ()
    sysctls: frozenset[str] = frozenset()
    volume_types: frozenset[str] = frozenset()
    containers: Mapping[str, frozenset[str] | None] = field(default_factory=dict)  # None: every container check

    def exempts(self, container: str, check: str) -> bool:
        checks = self.containers.get(container, frozenset())
        return checks is None or check in checks

    def host_path(self, path: Any) -> bool:
        if not isinstance(path, str) or not path.startswith("/"):
            return False
        path = posixpath.normpath(path)
        return any(path == p or path.startswith(p.rstrip("/") + "/") for p in self.host_path_prefixes)


NO_EXCEPTIONS = Allow()


class Container:
    """One container as the checks see it; built once per pod template and shared by every check."""

    __slots__ = ("index", "key", "name", "sc", "spec", "template")

    def __init__(self, template: PodTemplate, key: str, index: int, spec: dict[str, Any]):
        self.template, self.key, self.index, self.spec = template, key, index, spec
        self.sc: dict[str, Any] = as_dict(spec.get("securityContext"))
        self.name = str(spec.get("name"))

    @property
    def label(self) -> str:
        return container_label(self.key, self.spec)

    def path(self, *tokens: str | int) -> str:
        return self.template.path(self.key, self.index, *tokens)


class Pod:
    """What one check sees: a pod template, the policy version, the exceptions, its own check ID.

    Checks only read, so the spec, the pod's securityContext and the containers are looked up
    once per template (`for_check` shares them, or the caller sets `check` between checks)
    instead of once per check.
    """

    __slots__ = ("_containers", "_sc_fields", "allow", "check", "sc", "spec", "template", "version")

    def __init__(self, template: PodTemplate, version: int, check: str, allow: Allow | None = None):
        self.template, self.version, self.check = template, version, check
        self.allow = allow if allow is not None else NO_EXCEPTIONS
        self.spec: dict[str, Any] = template.spec
        self.sc: dict[str, Any] = as_dict(self.spec.get("securityContext"))
        self._containers = tuple(Container(template, key, index, spec) for key, index, spec in template.containers())
        # securityContext fields the pod or any container sets: most checks look for one that none sets
        self._sc_fields = frozenset(self.sc).union(*(c.sc for c in self._containers))

    def for_check(self, check: str) -> Pod:
        pod = Pod.__new__(Pod)
        pod.template, pod.version, pod.check, pod.allow = self.template, self.version, check, self.allow
        pod.spec, pod.sc, pod._containers, pod._sc_fields = self.spec, self.sc, self._containers, self._sc_fields
        return pod

    @property
    def windows(self) -> bool:
        return as_dict(self.spec.get("os")).get("name") == "windows"

    @property
    def user_namespace(self) -> bool:
        """`hostUsers: false`; PSA relaxes runAsNonRoot, runAsUser and baseline procMount for it from v1.35."""
        return self.version >= 35 and self.spec.get("hostUsers") is False

    def path(self, *tokens: str | int) -> str:
        return self.template.path(*tokens)

    def containers(self) -> Iterable[Container]:
        """Init, regular and ephemeral containers, minus those the exceptions name for this check."""
        if not self.allow.containers:
            return self._containers
        return [c for c in self._containers if not self.allow.exempts(c.name, self.check)]

    def setters(
        self, *tokens: str, pod_level: bool = True, bad: Callable[[Any], bool] | None = None
    ) -> list[tuple[str, str, Any]]:
        """(pointer, who, value) for securityContext.<tokens> wherever the pod or a container sets it;
        with `bad`, only where bad(value) holds (the pointer is then built for offenders only)."""
        if tokens[0] not in self._sc_fields:
            return []
        found = []
        value = _get(self.sc, *tokens)
        if pod_level and value is not None and (bad is None or bad(value)):
            found.append((self.path("securityContext", *tokens), "pod", value))
        for c in self.containers():
            value = _get(c.sc, *tokens)
            if value is not None and (bad is None or bad(value)):
                found.append((c.path("securityContext", *tokens), c.label, value))
        return found


def _is_true(value: Any) -> bool:
    return value is True


def _get(node: Any, *tokens: str) -> Any:
    for token in tokens:
        node = node.get(token) if isinstance(node, dict) else None
    return node


def _since(table: Mapping[int, frozenset[str]], version: int) -> frozenset[str]:
    return frozenset().union(*(names for since, names in table.items() if since <= version))


@lru_cache(maxsize=64)
def _safe_sysctls(version: int) -> frozenset[str]:
    return _since(SAFE_SYSCTLS, version)


@lru_cache(maxsize=64)
def _selinux_types(version: int) -> frozenset[str]:
    return _since(SELINUX_TYPES, version)


# --- baseline ------------------------------------------------------------------------------------------------


def windows_host_process(pod: Pod) -> Iterator[Finding]:
    """Pod and containers must not set securityContext.windowsOptions.hostProcess=true."""
    for path, who, _ in pod.setters("windowsOptions", "hostProcess", bad=_is_true):
        yield Finding(path, "hostProcess", f"{who} must not set securityContext.windowsOptions.hostProcess=true",
                      "remove hostProcess; HostProcess containers have full access to the Windows node")


def host_namespaces(pod: Pod) -> Iterator[Finding]:
    """spec.hostNetwork, spec.hostPID and spec.hostIPC must be undefined or false."""
    for name in ("hostIPC", "hostNetwork", "hostPID"):
        if pod.spec.get(name) is True:
            yield Finding(pod.path(name), "host namespaces", f"pod must not set {name}=true",
                          f"remove {name}; use the pod network and namespaces")


def privileged(pod: Pod) -> Iterator[Finding]:
    """securityContext.privileged must be undefined or false."""
    for path, who, _ in pod.setters("privileged", pod_level=False, bad=_is_true):
        yield Finding(path, "privileged", f"{who} must not set securityContext.privileged=true",
                      "remove privileged; add only the capabilities the container needs")


def capabilities_baseline(pod: Pod) -> Iterator[Finding]:
    """capabilities.add ⊆ the container runtime's default set (NET_RAW excluded) plus exceptions.capabilities."""
    allowed = BASELINE_CAPABILITIES | pod.allow.capabilities
    for c in pod.containers():
        for i, cap in enumerate(as_list(_get(c.sc, "capabilities", "add"))):
            if str(cap) not in allowed:
                yield Finding(c.path("securityContext", "capabilities", "add", i), "non-default capabilities",
                              f'{c.label} must not include "{cap}" in securityContext.capabilities.add',
                              "remove it, or name it in exceptions.capabilities")


def host_path_volumes(pod: Pod) -> Iterator[Finding]:
    """spec.volumes[*].hostPath must be undefined, unless under one of exceptions.hostPathPrefixes."""
    for i, entry in enumerate(as_list(pod.spec.get("volumes"))):
        volume, path = as_dict(entry), _get(entry, "hostPath", "path")
        if volume.get("hostPath") is not None and not pod.allow.host_path(path):
            yield Finding(pod.path("volumes", i, "hostPath"), "hostPath volumes",
                          f'volume "{volume.get("name")}" uses hostPath "{path}"',
                          "use a PVC or a CSI volume, or name the path in exceptions.hostPathPrefixes")


def host_ports(pod: Pod) -> Iterator[Finding]:
    """ports[*].hostPort must be undefined or 0."""
    for c in pod.containers():
        for i, port in enumerate(as_list(c.spec.get("ports"))):
            host_port = as_dict(port).get("hostPort")
            if host_port not in (None, 0):
                yield Finding(c.path("ports", i, "hostPort"), "hostPort", f"{c.label} uses hostPort {host_port}",
                              "remove hostPort; reach the pod through a Service")


def host_probes_and_host_lifecycle(pod: Pod) -> Iterator[Finding]:
    """Probes' and lifecycle hooks' httpGet.host and tcpSocket.host must be empty (v1.34+)."""
    for c in pod.containers():
        if not any(name in c.spec for name in HANDLER_FIELDS):
            continue  # no probe and no hook: nothing to look into
        for handler in HANDLERS:
            for kind in ("httpGet", "tcpSocket"):
                host = _get(c.spec, *handler, kind, "host")
                if host not in (None, ""):
                    yield Finding(c.path(*handler, kind, "host"), "probe or lifecycle host",
                                  f'{c.label} uses probe or lifecycle host "{host}"',
                                  "remove host; probes and hooks must target the pod's own IP")


def app_armor_profile(pod: Pod) -> Iterator[Finding]:
    """appArmorProfile.type ∈ {RuntimeDefault, Localhost}; beta annotations ∈ {"", runtime/default, localhost/*}."""
    yield from _profile_types(pod, "appArmorProfile", "forbidden AppArmor profile", "AppArmor profile type")
    for key, value in as_dict(pod.template.metadata.get("annotations")).items():
        text = "" if value is None else str(value)
        if not key.startswith(APPARMOR_ANNOTATION) or text in ("", "runtime/default") or text.startswith("localhost/"):
            continue
        if not pod.allow.exempts(key[len(APPARMOR_ANNOTATION):], pod.check):
            yield Finding(pointer.join(pod.template.meta_pointer, "annotations", key), "forbidden AppArmor profile",
                          f'forbidden annotation {key}="{text}"', 'use "runtime/default" or "localhost/<profile>"')


def se_linux_options(pod: Pod) -> Iterator[Finding]:
    """seLinuxOptions.type ∈ the allowed types (container_engine_t from v1.31); .user and .role empty."""
    types = _selinux_types(pod.version)
    for path, who, value in pod.setters("seLinuxOptions"):
        options = as_dict(value)
        if str(options.get("type") or "") not in types:
            yield Finding(pointer.join(path, "type"), "seLinuxOptions",
                          f'{who} set forbidden securityContext.seLinuxOptions: type "{options.get("type")}"',
                          f"use one of: {', '.join(sorted(t for t in types if t))}, or leave type unset")
        for name in ("user", "role"):
            if options.get(name):
                yield Finding(pointer.join(path, name), "seLinuxOptions",
                              f"{who} set forbidden securityContext.seLinuxOptions: {name} may not be set",
                              f"remove seLinuxOptions.{name}")


def proc_mount(pod: Pod) -> Iterator[Finding]:
    """procMount undefined or "Default"; baseline allows any value with hostUsers: false from v1.35."""
    if pod.check == "procMount" and pod.user_namespace:
        return
    for path, who, value in pod.setters("procMount", pod_level=False, bad=lambda v: v != "Default"):
        yield Finding(path, "procMount", f'{who} must not set securityContext.procMount to "{value}"',
                      'remove procMount or set it to "Default"')


def seccomp_profile_baseline(pod: Pod) -> Iterator[Finding]:
    """seccompProfile.type, where set, ∈ {RuntimeDefault, Localhost} (Unconfined forbidden)."""
    yield from _explicit_seccomp(pod)


def sysctls(pod: Pod) -> Iterator[Finding]:
    """spec.securityContext.sysctls[*].name ∈ the safe set of the policy version, plus exceptions.sysctls."""
    allowed = _safe_sysctls(pod.version) | pod.allow.sysctls
    for i, entry in enumerate(as_list(pod.sc.get("sysctls"))):
        name = as_dict(entry).get("name")
        if str(name) not in allowed:
            yield Finding(pod.path("securityContext", "sysctls", i, "name"), "forbidden sysctls",
                          f'pod must not set sysctl "{name}"', "remove it, or name it in exceptions.sysctls")


# --- restricted ----------------------------------------------------------------------------------------------


def restricted_volumes(pod: Pod) -> Iterator[Finding]:
    """Only configMap, csi, downwardAPI, emptyDir, ephemeral, image, persistentVolumeClaim, projected, secret."""
    for i, entry in enumerate(as_list(pod.spec.get("volumes"))):
        volume = as_dict(entry)
        if any(volume.get(kind) is not None for kind in ALLOWED_VOLUMES):
            continue
        kind = next((k for k in RESTRICTED_VOLUMES if volume.get(k) is not None), "unknown")
        if kind in pod.allow.volume_types or (kind == "hostPath" and pod.allow.host_path(_get(volume, kind, "path"))):
            continue
        yield Finding(pod.path("volumes", i, *([kind] if kind != "unknown" else [])), "restricted volume types",
                      f'volume "{volume.get("name")}" uses restricted volume type "{kind}"',
                      "use a persistentVolumeClaim, a CSI volume or an emptyDir")


def allow_privilege_escalation(pod: Pod) -> Iterator[Finding]:
    """securityContext.allowPrivilegeEscalation must be explicitly false (Windows pods exempt from v1.25)."""
    if pod.version >= 25 and pod.windows:
        return
    for c in pod.containers():
        if c.sc.get("allowPrivilegeEscalation") is not False:
            yield Finding(c.path("securityContext", "allowPrivilegeEscalation"), "allowPrivilegeEscalation != false",
                          f"{c.label} must set securityContext.allowPrivilegeEscalation=false",
                          "set securityContext.allowPrivilegeEscalation: false")


def run_as_non_root(pod: Pod) -> Iterator[Finding]:
    """runAsNonRoot true on the pod or on every container; false nowhere (skipped for hostUsers: false, v1.35+)."""
    if pod.user_namespace:
        return
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
    """runAsUser must not be 0 at pod or container level (v1.23+; skipped for hostUsers: false, v1.35+)."""
    if pod.user_namespace:
        return
    for path, who, _ in pod.setters("runAsUser", bad=lambda v: v == 0 and not isinstance(v, bool)):
        yield Finding(path, "runAsUser=0", f"{who} must not set runAsUser=0", "use a non-zero UID, e.g. 1000")


def seccomp_profile_restricted(pod: Pod) -> Iterator[Finding]:
    """seccompProfile.type RuntimeDefault or Localhost on the pod or every container (Windows exempt v1.25+)."""
    if pod.version >= 25 and pod.windows:
        return
    explicit = list(_explicit_seccomp(pod))
    yield from explicit
    if explicit or _get(pod.sc, "seccompProfile") is not None:
        return
    for c in pod.containers():
        if c.sc.get("seccompProfile") is None:
            yield Finding(c.path("securityContext", "seccompProfile", "type"), "seccompProfile",
                          f'pod or {c.label} must set securityContext.seccompProfile.type to "RuntimeDefault" '
                          'or "Localhost"', "set spec.securityContext.seccompProfile.type: RuntimeDefault")


def capabilities_restricted(pod: Pod) -> Iterator[Finding]:
    """capabilities.drop includes ALL; add only NET_BIND_SERVICE plus exceptions.capabilities (Windows exempt)."""
    if pod.version >= 25 and pod.windows:
        return
    allowed = {"NET_BIND_SERVICE"} | pod.allow.capabilities
    for c in pod.containers():
        if "ALL" not in as_list(_get(c.sc, "capabilities", "drop")):
            yield Finding(c.path("securityContext", "capabilities", "drop"), "unrestricted capabilities",
                          f'{c.label} must set securityContext.capabilities.drop=["ALL"]',
                          'set securityContext.capabilities.drop: ["ALL"]')
        for i, cap in enumerate(as_list(_get(c.sc, "capabilities", "add"))):
            if str(cap) not in allowed:
                yield Finding(c.path("securityContext", "capabilities", "add", i), "unrestricted capabilities",
                              f'{c.label} must not include "{cap}" in securityContext.capabilities.add',
                              "add only NET_BIND_SERVICE, or name the capability in exceptions.capabilities")


def _explicit_seccomp(pod: Pod) -> Iterator[Finding]:
    return _profile_types(pod, "seccompProfile", "seccompProfile", "securityContext.seccompProfile.type")


def _profile_types(pod: Pod, field: str, reason: str, setting: str) -> Iterator[Finding]:
    """Where `securityContext.<field>` is set, its type is RuntimeDefault or Localhost."""
    for path, who, profile in pod.setters(field, bad=lambda p: as_dict(p).get("type") not in VALID_PROFILE_TYPES):
        kind = as_dict(profile).get("type")
        yield Finding(pointer.join(path, "type"), reason, f'{who} must not set {setting} to "{kind or ""}"',
                          'use type "RuntimeDefault" or "Localhost"')


# --- the registry of checks ----------------------------------------------------------------------------------

CheckFn = Callable[[Pod], Iterable[Finding]]


@dataclass(frozen=True)
class CheckDef:
    id: str
    level: Literal["baseline", "restricted"]
    since: int  # the lowest policy minor version with this check
    fn: CheckFn
    overrides: tuple[str, ...] = ()  # baseline checks this one replaces in the restricted profile


CHECKS: tuple[CheckDef, ...] = (
    CheckDef("hostNamespaces", "baseline", 0, host_namespaces),
    CheckDef("privileged", "baseline", 0, privileged),
    CheckDef("capabilities_baseline", "baseline", 0, capabilities_baseline),
    CheckDef("hostPathVolumes", "baseline", 0, host_path_volumes),
    CheckDef("hostPorts", "baseline", 0, host_ports),
    CheckDef("hostProbesAndHostLifecycle", "baseline", 34, host_probes_and_host_lifecycle),
    CheckDef("appArmorProfile", "baseline", 0, app_armor_profile),
    CheckDef("seLinuxOptions", "baseline", 0, se_linux_options),
    CheckDef("procMount", "baseline", 0, proc_mount),
    CheckDef("seccompProfile_baseline", "baseline", 19, seccomp_profile_baseline),
    CheckDef("sysctls", "baseline", 0, sysctls),
    CheckDef("windowsHostProcess", "baseline", 0, windows_host_process),
    CheckDef("restrictedVolumes", "restricted", 0, restricted_volumes, ("hostPathVolumes",)),
    CheckDef("allowPrivilegeEscalation", "restricted", 8, allow_privilege_escalation),
    CheckDef("runAsNonRoot", "restricted", 0, run_as_non_root),
    CheckDef("runAsUser", "restricted", 23, run_as_user),
    CheckDef("seccompProfile_restricted", "restricted", 19, seccomp_profile_restricted, ("seccompProfile_baseline",)),
    CheckDef("capabilities_restricted", "restricted", 22, capabilities_restricted, ("capabilities_baseline",)),
    CheckDef("procMount_restricted", "restricted", 35, proc_mount, ("procMount",)),
)
BASELINE_CHECKS = frozenset(c.id for c in CHECKS if c.level == "baseline")


def active_checks(level: str, version: int, skip: Iterable[str] = ()) -> list[CheckDef]:
    """The checks a profile runs at a version: restricted = baseline + restricted, minus what it overrides."""
    skipped = set(skip)
    levels = ("baseline",) if level == "baseline" else ("baseline", "restricted")
    chosen = [c for c in CHECKS if c.level in levels and version >= c.since and c.id not in skipped]
    overridden = {o for c in chosen for o in c.overrides}
    return [c for c in chosen if c.id not in overridden]
