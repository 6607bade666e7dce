"""The Pod Security Standards checks as pod-security-admission registers them: ID, level, and which variant
runs from which policy version on.

Source: kubernetes/kubernetes `staging/src/k8s.io/pod-security-admission/policy/check_*.go`, each check's
`Versions: []VersionedCheck{{MinimumVersion, CheckPod, OverrideCheckIDs}}`. A policy at version v1.N runs, of
each check, the variant with the highest minimum version ≤ N, and none if every minimum is above N; a restricted
check that runs replaces the baseline checks it overrides. The checks themselves are in
`pod_security_baseline.py` and `pod_security_restricted.py`; this table is the only place versions are decided,
apart from the version tables of allowed values (safe sysctls, SELinux types) beside their checks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Literal, NamedTuple

from mlgate.model.results import Finding
from mlgate.rules import pod_security_baseline as b
from mlgate.rules import pod_security_restricted as r
from mlgate.rules.pod_security_restricted import RESTRICTED_VOLUMES, VolumeType
from mlgate.rules.pod_security_view import Allow, Pod

__all__ = [
    "BASELINE_CHECKS", "CHECKS", "LATEST", "POD_ONLY_CHECKS", "RESTRICTED_VOLUMES", "ActiveCheck", "Allow",
    "CheckDef", "CheckFn", "CheckID", "Pod", "VolumeType", "active_checks",
]

LATEST = 37  # the highest minimum version any check or allowed-value table has (sysctls v1.37): `latest`

CheckID = Literal[
    "hostNamespaces", "privileged", "capabilities_baseline", "hostPathVolumes", "hostPorts",
    "hostProbesAndHostLifecycle", "appArmorProfile", "seLinuxOptions", "procMount", "seccompProfile_baseline",
    "sysctls", "windowsHostProcess", "restrictedVolumes", "allowPrivilegeEscalation", "runAsNonRoot",
    "runAsUser", "seccompProfile_restricted", "capabilities_restricted", "procMount_restricted",
]
POD_ONLY_CHECKS = frozenset({"hostNamespaces", "hostPathVolumes", "sysctls", "restrictedVolumes"})

CheckFn = Callable[[Pod], Iterable[Finding]]


# The variants are partials of module-level functions, not closures: a policy set holds the checks it chose, and
# the CLI pickles the set once for each worker process it spawns (macOS, Windows).
def linux_only(check: CheckFn) -> CheckFn:
    """The v1.25 variants of the Linux-only restricted checks: a pod with spec.os.name windows passes."""
    return partial(_unless_windows, check)


def relaxed_in_user_namespace(check: CheckFn) -> CheckFn:
    """The v1.35 variants for pods in a user namespace (`hostUsers: false`): they pass."""
    return partial(_unless_user_namespace, check)


def _unless_windows(check: CheckFn, pod: Pod) -> Iterable[Finding]:
    return () if pod.windows else check(pod)


def _unless_user_namespace(check: CheckFn, pod: Pod) -> Iterable[Finding]:
    return () if pod.user_namespace else check(pod)


@dataclass(frozen=True)
class CheckDef:
    id: str
    level: Literal["baseline", "restricted"]
    versions: tuple[tuple[int, CheckFn], ...]  # (minimum policy minor version, the variant from then on), ascending
    overrides: tuple[str, ...] = ()  # baseline checks this one replaces in the restricted profile

    @property
    def since(self) -> int:
        return self.versions[0][0]

    def at(self, version: int) -> CheckFn | None:
        """The variant a policy at v1.<version> runs, or None before the check existed."""
        chosen = None
        for minimum, variant in self.versions:
            if minimum <= version:
                chosen = variant
        return chosen


CHECKS: tuple[CheckDef, ...] = (
    CheckDef("hostNamespaces", "baseline", ((0, b.host_namespaces),)),
    CheckDef("privileged", "baseline", ((0, b.privileged),)),
    CheckDef("capabilities_baseline", "baseline", ((0, b.capabilities_baseline),)),
    CheckDef("hostPathVolumes", "baseline", ((0, b.host_path_volumes),)),
    CheckDef("hostPorts", "baseline", ((0, b.host_ports),)),
    CheckDef("hostProbesAndHostLifecycle", "baseline", ((34, b.host_probes_and_host_lifecycle),)),
    CheckDef("appArmorProfile", "baseline", ((0, b.app_armor_profile),)),
    CheckDef("seLinuxOptions", "baseline", ((0, b.se_linux_options),)),  # allowed types: SELINUX_TYPES
    CheckDef("procMount", "baseline", ((0, b.proc_mount), (35, relaxed_in_user_namespace(b.proc_mount)))),
    # before v1.19 seccomp was set by alpha annotations, from v1.19 by the securityContext field
    CheckDef("seccompProfile_baseline", "baseline",
             ((0, b.seccomp_profile_annotations), (19, b.seccomp_profile_baseline))),
    CheckDef("sysctls", "baseline", ((0, b.sysctls),)),  # safe names by version: SAFE_SYSCTLS
    CheckDef("windowsHostProcess", "baseline", ((0, b.windows_host_process),)),
    CheckDef("restrictedVolumes", "restricted", ((0, r.restricted_volumes),), ("hostPathVolumes",)),
    CheckDef("allowPrivilegeEscalation", "restricted",
             ((8, r.allow_privilege_escalation), (25, linux_only(r.allow_privilege_escalation)))),
    CheckDef("runAsNonRoot", "restricted",
             ((0, r.run_as_non_root), (35, relaxed_in_user_namespace(r.run_as_non_root)))),
    CheckDef("runAsUser", "restricted", ((23, r.run_as_user), (35, relaxed_in_user_namespace(r.run_as_user)))),
    CheckDef("seccompProfile_restricted", "restricted",
             ((19, r.seccomp_profile_restricted), (25, linux_only(r.seccomp_profile_restricted))),
             ("seccompProfile_baseline",)),
    CheckDef("capabilities_restricted", "restricted",
             ((22, r.capabilities_restricted), (25, linux_only(r.capabilities_restricted))),
             ("capabilities_baseline",)),
    CheckDef("procMount_restricted", "restricted", ((35, b.proc_mount),), ("procMount",)),
)
BASELINE_CHECKS = frozenset(c.id for c in CHECKS if c.level == "baseline")


class ActiveCheck(NamedTuple):
    id: str
    level: Literal["baseline", "restricted"]
    fn: CheckFn


def active_checks(level: str, version: int, skip: Iterable[str] = ()) -> list[ActiveCheck]:
    """The checks a profile runs at a version: restricted = baseline + restricted, minus what it overrides."""
    skipped = set(skip)
    levels = ("baseline",) if level == "baseline" else ("baseline", "restricted")
    chosen = [c for c in CHECKS if c.level in levels and c.id not in skipped and c.at(version) is not None]
    overridden = {o for c in chosen for o in c.overrides}
    return list(_resolved((c for c in chosen if c.id not in overridden), version))


def _resolved(checks: Iterable[CheckDef], version: int) -> Iterator[ActiveCheck]:
    for c in checks:
        fn = c.at(version)
        if fn is not None:
            yield ActiveCheck(c.id, c.level, fn)
