"""The Pod Security Standards baseline checks, one small pure function each.

Source: kubernetes/kubernetes `staging/src/k8s.io/pod-security-admission/policy/check_*.go` (k8s.io/pod-security-
admission): fields, allowed values and ForbiddenReason strings. A check yields one Finding per offending field;
`reason` is the ForbiddenReason and `detail` follows its wording. Which variant runs at which policy version is
the table in `pod_security_checks.py`.

Fields read: spec.hostNetwork/hostPID/hostIPC, spec.volumes[*].hostPath, spec.securityContext.sysctls, the pod's
and every container's securityContext.{windowsOptions.hostProcess, privileged, capabilities.add, seLinuxOptions,
procMount, seccompProfile, appArmorProfile}, containers' ports[*].hostPort and their probes' and lifecycle hooks'
host, and the annotations `container.apparmor.security.beta.kubernetes.io/*` (all versions) and
`seccomp.security.alpha.kubernetes.io/pod`, `container.seccomp.security.alpha.kubernetes.io/*` (before v1.19).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import lru_cache
from typing import Any

from mlgate.model import pointer
from mlgate.model.results import Finding
from mlgate.model.workload import as_dict, as_list
from mlgate.rules.pod_security_view import Pod, get, is_true, since

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
VALID_PROFILE_TYPES = ("RuntimeDefault", "Localhost")
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
SECCOMP_POD_ANNOTATION = "seccomp.security.alpha.kubernetes.io/pod"  # read by policy versions before v1.19
SECCOMP_CONTAINER_ANNOTATION = "container.seccomp.security.alpha.kubernetes.io/"
SECCOMP_ANNOTATION_VALUES = ("runtime/default", "docker/default")  # and localhost/<profile>
PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
HANDLERS = (*((p,) for p in PROBES), ("lifecycle", "postStart"), ("lifecycle", "preStop"))
HANDLER_FIELDS = (*PROBES, "lifecycle")


@lru_cache(maxsize=64)
def _safe_sysctls(version: int) -> frozenset[str]:
    return since(SAFE_SYSCTLS, version)


@lru_cache(maxsize=64)
def _selinux_types(version: int) -> frozenset[str]:
    return since(SELINUX_TYPES, version)


def windows_host_process(pod: Pod) -> Iterator[Finding]:
    """Pod and containers must not set securityContext.windowsOptions.hostProcess=true."""
    for path, who, _ in pod.setters("windowsOptions", "hostProcess", bad=is_true):
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
    for path, who, _ in pod.setters("privileged", pod_level=False, bad=is_true):
        yield Finding(path, "privileged", f"{who} must not set securityContext.privileged=true",
                      "remove privileged; add only the capabilities the container needs")


def capabilities_baseline(pod: Pod) -> Iterator[Finding]:
    """capabilities.add ⊆ the container runtime's default set (NET_RAW excluded) plus exceptions.capabilities."""
    allowed = BASELINE_CAPABILITIES | pod.allow.capabilities
    for c in pod.containers():
        for i, cap in enumerate(as_list(get(c.sc, "capabilities", "add"))):
            if str(cap) not in allowed:
                yield Finding(c.path("securityContext", "capabilities", "add", i), "non-default capabilities",
                              f'{c.label} must not include "{cap}" in securityContext.capabilities.add',
                              "remove it, or name it in exceptions.capabilities")


def host_path_volumes(pod: Pod) -> Iterator[Finding]:
    """spec.volumes[*].hostPath must be undefined, unless under one of exceptions.hostPathPrefixes."""
    for i, entry in enumerate(as_list(pod.spec.get("volumes"))):
        volume, path = as_dict(entry), get(entry, "hostPath", "path")
        if volume.get("hostPath") is not None and not pod.allow.host_path(path):
            yield Finding(pod.path("volumes", i, "hostPath"), "hostPath volumes",
                          f'volume "{volume.get("name")}" uses hostPath "{path}"',
                          "use a PVC or a CSI volume, or name the path in exceptions.hostPathPrefixes")


def host_ports(pod: Pod) -> Iterator[Finding]:
    """ports[*].hostPort must be undefined or 0, as the API server stores it: with hostNetwork it sets each unset
    hostPort of init and regular containers to the containerPort (SetDefaults_Pod), so that number is judged."""
    host_network = pod.spec.get("hostNetwork") is True
    for c in pod.containers():
        for i, entry in enumerate(as_list(c.spec.get("ports"))):
            port = as_dict(entry)
            host_port, fix = port.get("hostPort"), "remove hostPort; reach the pod through a Service"
            if host_port in (None, 0) and host_network and c.key != "ephemeralContainers":
                host_port, fix = port.get("containerPort"), "with hostNetwork every containerPort is a hostPort"
            if host_port not in (None, 0):
                yield Finding(c.path("ports", i, "hostPort"), "hostPort", f"{c.label} uses hostPort {host_port}", fix)


def host_probes_and_host_lifecycle(pod: Pod) -> Iterator[Finding]:
    """Probes' and lifecycle hooks' httpGet.host and tcpSocket.host must be empty (v1.34+)."""
    for c in pod.containers():
        if not any(name in c.spec for name in HANDLER_FIELDS):
            continue  # no probe and no hook: nothing to look into
        for handler in HANDLERS:
            for kind in ("httpGet", "tcpSocket"):
                host = get(c.spec, *handler, kind, "host")
                if host not in (None, ""):
                    yield Finding(c.path(*handler, kind, "host"), "probe or lifecycle host",
                                  f'{c.label} uses probe or lifecycle host "{host}"',
                                  "remove host; probes and hooks must target the pod's own IP")


def app_armor_profile(pod: Pod) -> Iterator[Finding]:
    """appArmorProfile.type ∈ {RuntimeDefault, Localhost}; beta annotations ∈ {"", runtime/default, localhost/*}."""
    yield from profile_types(pod, "appArmorProfile", "forbidden AppArmor profile", "AppArmor profile type")
    for key, value in pod.annotations.items():
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
    """procMount undefined or "Default" (also restricted's procMount_restricted, which never relaxes it)."""
    for path, who, value in pod.setters("procMount", pod_level=False, bad=lambda v: v != "Default"):
        yield Finding(path, "procMount", f'{who} must not set securityContext.procMount to "{value}"',
                      'remove procMount or set it to "Default"')


def seccomp_profile_annotations(pod: Pod) -> Iterator[Finding]:
    """Before v1.19: the seccomp alpha annotations of the pod and of each container, where present, are
    runtime/default, docker/default or localhost/<profile> (an empty value is forbidden too)."""
    annotations = pod.annotations
    keys = [SECCOMP_POD_ANNOTATION, *(SECCOMP_CONTAINER_ANNOTATION + c.name for c in pod.containers())]
    for key in dict.fromkeys(keys):  # two containers of one name share one annotation
        if key not in annotations:
            continue
        text = "" if annotations[key] is None else str(annotations[key])
        if text not in SECCOMP_ANNOTATION_VALUES and not text.startswith("localhost/"):
            yield Finding(pointer.join(pod.template.meta_pointer, "annotations", key), "seccompProfile",
                          f'forbidden annotation {key}="{text}"', 'use "runtime/default" or "localhost/<profile>"')


def seccomp_profile_baseline(pod: Pod) -> Iterator[Finding]:
    """v1.19+: seccompProfile.type, where set, ∈ {RuntimeDefault, Localhost} (Unconfined forbidden)."""
    yield from explicit_seccomp(pod)


def sysctls(pod: Pod) -> Iterator[Finding]:
    """spec.securityContext.sysctls[*].name ∈ the safe set of the policy version, plus exceptions.sysctls."""
    allowed = _safe_sysctls(pod.version) | pod.allow.sysctls
    for i, entry in enumerate(as_list(pod.sc.get("sysctls"))):
        name = as_dict(entry).get("name")
        if str(name) not in allowed:
            yield Finding(pod.path("securityContext", "sysctls", i, "name"), "forbidden sysctls",
                          f'pod must not set sysctl "{name}"', "remove it, or name it in exceptions.sysctls")


def explicit_seccomp(pod: Pod) -> Iterator[Finding]:
    return profile_types(pod, "seccompProfile", "seccompProfile", "securityContext.seccompProfile.type")


def profile_types(pod: Pod, field: str, reason: str, setting: str) -> Iterator[Finding]:
    """Where `securityContext.<field>` is set, its type is RuntimeDefault or Localhost."""
    def bad(profile: Any) -> bool:
        return as_dict(profile).get("type") not in VALID_PROFILE_TYPES

    for path, who, profile in pod.setters(field, bad=bad):
        kind = as_dict(profile).get("type")
        yield Finding(pointer.join(path, "type"), reason, f'{who} must not set {setting} to "{kind or ""}"',
                      'use type "RuntimeDefault" or "Localhost"')
