"""Pod Security Standards: the baseline and restricted profiles, as pod-security-admission enforces them.

Implements https://kubernetes.io/docs/concepts/security/pod-security-standards/ by following the code of
kubernetes/kubernetes `staging/src/k8s.io/pod-security-admission/policy/check_*.go`: the checks (fields, allowed
values) are in `pod_security_baseline.py` and `pod_security_restricted.py`, one function per PSA check ID, and
which variant runs at which version is the table in `pod_security_checks.py`. Conformance: every fixture
pod-security-admission ships (`test/testdata/{baseline,restricted}/v1.*/{pass,fail}`) is judged as upstream
judges it (`tests/conformance/`).

Rules:
- `pod-security.baseline`: hostNamespaces, privileged, capabilities_baseline, hostPathVolumes, hostPorts,
  hostProbesAndHostLifecycle (v1.34+), appArmorProfile (field and beta annotation), seLinuxOptions,
  procMount, seccompProfile_baseline (alpha annotations before v1.19, the field from v1.19), sysctls,
  windowsHostProcess.
- `pod-security.restricted`: baseline plus restrictedVolumes, allowPrivilegeEscalation (v1.8+), runAsNonRoot,
  runAsUser (v1.23+), seccompProfile_restricted (v1.19+), capabilities_restricted (v1.22+),
  procMount_restricted (v1.35+); as in PSA, a restricted check replaces the baseline check it overrides
  (restrictedVolumes → hostPathVolumes, seccompProfile_restricted → seccompProfile_baseline,
  capabilities_restricted → capabilities_baseline, procMount_restricted → procMount).
Both look at every init, regular and ephemeral container, and at the pod template's annotations.
Windows pods (`spec.os.name: windows`) skip allowPrivilegeEscalation, seccompProfile_restricted and
capabilities_restricted from v1.25; `hostUsers: false` skips runAsNonRoot, runAsUser and baseline
procMount from v1.35 (restricted still requires procMount Default).
Objects are judged as the API server stores them: a volume with no source is an emptyDir, and with
hostNetwork an unset hostPort is the containerPort (SetDefaults_Volume, SetDefaults_Pod), for pod templates
too, since the pods made from them get the same defaults.

Params (both rules, YAML camelCase):
- `version`: "latest" (default) or "v1.N" (any N, v1.0 included), like the
  `pod-security.kubernetes.io/enforce-version` label. It picks what PSA versions: the seccomp annotations
  (before v1.19) or fields, the checks that start later (allowPrivilegeEscalation v1.8, seccompProfile_restricted
  v1.19, capabilities_restricted v1.22, runAsUser v1.23, hostProbesAndHostLifecycle v1.34, procMount_restricted
  v1.35), the safe sysctls (v1.27, v1.29, v1.32, v1.37), SELinux `container_engine_t` (v1.31), the Windows
  exemptions (v1.25) and the hostUsers relaxations (v1.35). Versions above v1.37 behave as "latest".
- `exceptions`: named, narrow exceptions; each one widens exactly one check and nothing else:
    capabilities: [IPC_LOCK, SYS_RESOURCE]   # also allowed in capabilities.add (baseline and restricted);
                                             # drop: ["ALL"] is still required. "ALL" cannot be named.
    hostPathPrefixes: ["/dev/infiniband"]    # hostPath volumes at or under these absolute paths are allowed
                                             # (hostPathVolumes, and hostPath in restrictedVolumes). Not "/".
    sysctls: [kernel.msgmax]                 # also-safe sysctl names (sysctls), matched exactly
    volumeTypes: [nfs]                       # restricted only: volume types restrictedVolumes also allows
                                             # (hostPath is not one: use hostPathPrefixes)
    containers:                              # container-level checks that skip one named container
      - name: nvidia-driver-validation
        checks: [privileged, allowPrivilegeEscalation]
      - cuda-validator                       # a bare name (or {name} without checks) skips EVERY container-
                                             # level check: the widest exception, for trusted system containers
  Container names apply to init, regular and ephemeral containers alike; pod-level checks
  (hostNamespaces, hostPathVolumes, sysctls, restrictedVolumes, and the pod's own securityContext)
  are never skipped by a container exception.
- `skipChecks`: PSA check IDs to leave out, e.g. [hostPorts]. Skipping a restricted check that
  overrides a baseline one brings the baseline one back (skip capabilities_restricted and
  capabilities_baseline still applies). A check outside the rule's profile is a load error.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator
from dataclasses import replace
from functools import cached_property
from typing import Annotated, Any, ClassVar

import orjson
from pydantic import AfterValidator, Field, field_validator, model_validator

from mlgate.model.results import Finding, Skipped
from mlgate.model.workload import PodTemplate, Workload
from mlgate.rules.pod_security_checks import (
    BASELINE_CHECKS,
    LATEST,
    POD_ONLY_CHECKS,
    ActiveCheck,
    Allow,
    CheckID,
    Pod,
    VolumeType,
    active_checks,
)
from mlgate.rules.registry import Context, Params, check

_VERSION = re.compile(r"^v1\.(0|[1-9][0-9]*)$")


def _version(value: str) -> str:
    match = _VERSION.match(value)
    if value != "latest" and not match:
        raise ValueError('must be "latest" or "v1.N", e.g. "v1.31"')
    return value


def _capability(value: str) -> str:
    if value == "ALL":
        raise ValueError('"ALL" is not a narrow exception; name each capability')
    return value


def _host_path(value: str) -> str:
    if value.strip("/") == "":
        raise ValueError('"/" would allow every hostPath; name the directory')
    if not value.startswith("/") or posixpath.normpath(value) != value.rstrip("/") or ".." in value.split("/"):
        raise ValueError("must be an absolute, normalised path such as /dev/infiniband")
    return value.rstrip("/")


Capability = Annotated[str, Field(pattern=r"^[A-Z][A-Z0-9_]*$"), AfterValidator(_capability)]
HostPathPrefix = Annotated[str, AfterValidator(_host_path)]
Sysctl = Annotated[str, Field(pattern=r"^[a-z0-9_][a-z0-9_./-]*$")]
ContainerName = Annotated[str, Field(min_length=1)]


class ContainerException(Params):
    """`{name, checks}`, or a bare name: every container-level check skips that container."""

    name: ContainerName = Field(description="the container's name (init, regular or ephemeral)")
    checks: tuple[CheckID, ...] | None = Field(default=None, strict=False,  # a YAML list
                                               description="container-level check IDs it skips (null: every one)")

    @model_validator(mode="before")
    @classmethod
    def _bare_name(cls, data: Any) -> Any:
        return {"name": data} if isinstance(data, str) else data

    @field_validator("checks")
    @classmethod
    def _container_checks(cls, checks: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if checks is not None and not checks:
            raise ValueError("name at least one check, or give only the name to skip every container check")
        for name in checks or ():
            if name in POD_ONLY_CHECKS:
                raise ValueError(f"{name!r} checks the pod, not containers")
        return checks


class Exceptions(Params):
    # YAML lists (strict=False: see registry.Params); their items stay strict
    capabilities: tuple[Capability, ...] = Field(default=(), strict=False, description="capabilities also "
                                                 "allowed in capabilities.add, e.g. IPC_LOCK (not ALL)")
    host_path_prefixes: tuple[HostPathPrefix, ...] = Field(default=(), strict=False, description="hostPath "
                                                           "volumes allowed at or under these absolute paths (not /)")
    sysctls: tuple[Sysctl, ...] = Field(default=(), strict=False, description="sysctl names also safe, "
                                        "matched exactly")
    volume_types: tuple[VolumeType, ...] = Field(default=(), strict=False, description="volume types "
                                                 "restrictedVolumes also allows (restricted only; not hostPath)")
    containers: tuple[ContainerException, ...] = Field(default=(), strict=False, description="containers that "
                                                       "skip container-level checks: {name, checks} or a bare name")

    def allow(self) -> Allow:
        containers: dict[str, frozenset[str] | None] = {}
        for entry in self.containers:
            if entry.checks is None or (entry.name in containers and containers[entry.name] is None):
                containers[entry.name] = None
            else:
                containers[entry.name] = (containers.get(entry.name) or frozenset()) | frozenset(entry.checks)
        return Allow(
            capabilities=frozenset(self.capabilities),
            host_path_prefixes=tuple(self.host_path_prefixes),
            sysctls=frozenset(self.sysctls),
            volume_types=frozenset(self.volume_types),
            containers=containers,
        )


class BaselineParams(Params):
    LEVEL: ClassVar[str] = "baseline"

    version: Annotated[str, AfterValidator(_version)] = Field(default="latest", description="the Pod Security "
                                                               "Standards version: v1.N or latest, as the "
                                                               "enforce-version label")
    exceptions: Exceptions = Field(default=Exceptions(), description="named exceptions: capabilities, host "
                                   "paths, sysctls, volume types, per container")
    skip_checks: tuple[CheckID, ...] = Field(default=(), strict=False,  # a YAML list
                                             description="check IDs not run at all")

    @field_validator("skip_checks")
    @classmethod
    def _skips_in_profile(cls, checks: tuple[str, ...]) -> tuple[str, ...]:
        for name in checks:
            if cls.LEVEL == "baseline" and name not in BASELINE_CHECKS:
                raise ValueError(f"{name!r} is a restricted check, not part of pod-security.{cls.LEVEL}")
        return checks

    @field_validator("exceptions")
    @classmethod
    def _exceptions_in_profile(cls, exceptions: Exceptions) -> Exceptions:
        if cls.LEVEL != "baseline":
            return exceptions
        if exceptions.volume_types:
            raise ValueError("volumeTypes only affects pod-security.restricted (restrictedVolumes)")
        for entry in exceptions.containers:
            for name in entry.checks or ():
                if name not in BASELINE_CHECKS:
                    raise ValueError(f"containers: {name!r} is not part of pod-security.{cls.LEVEL}")
        return exceptions

    @cached_property
    def compiled(self) -> tuple[Allow, tuple[ActiveCheck, ...]]:
        """The exceptions and the checks this binding runs, worked out once per loaded policy."""
        checks = active_checks(self.LEVEL, self.minor, self.skip_checks)
        if not getattr(self, "include_baseline", True):
            checks = [c for c in checks if c.level == "restricted"]
        return self.exceptions.allow(), tuple(checks)

    @cached_property
    def minor(self) -> int:
        """The policy version as a minor number; "latest" and anything newer than PSA's newest check → LATEST."""
        match = _VERSION.match(self.version)
        return min(int(match.group(1)), LATEST) if match else LATEST


class RestrictedParams(BaselineParams):
    LEVEL: ClassVar[str] = "restricted"
    # false: only the restricted checks, for policies that bind baseline separately
    # (deny baseline + warn restricted would otherwise report each baseline finding twice)
    include_baseline: bool = Field(default=True, description="run the baseline checks too")


@check("pod-security.baseline", "Pod Security Standards baseline profile, as pod-security-admission", BaselineParams)
def baseline(workload: Workload, params: BaselineParams, context: Context) -> Iterator[Finding] | Skipped:
    return _profile(workload, params, context)


@check("pod-security.restricted", "Pod Security Standards restricted profile, as pod-security-admission",
       RestrictedParams)
def restricted(workload: Workload, params: RestrictedParams, context: Context) -> Iterator[Finding] | Skipped:
    return _profile(workload, params, context)


def _profile(workload: Workload, params: BaselineParams, context: Context) -> Iterator[Finding] | Skipped:
    if not workload.templates:
        return Skipped("no pod templates")
    return _findings(workload, params, context)


def _findings(workload: Workload, params: BaselineParams, context: Context) -> Iterator[Finding]:
    """Yielded, not collected: the engine keeps the first thousand of a rule's findings and counts the rest, so
    an object with a hundred thousand containers never holds all their findings at once."""
    allow, checks = params.compiled
    groups = [(Pod(lead, params.minor, "", allow), lead, twins) for lead, twins in _alike(workload.templates)]
    timed = context.deadline is not None
    for definition in checks:
        if timed:
            context.check_deadline()  # a profile is some twenty checks over every container: stop between them
        for pod, lead, twins in groups:
            pod.check = definition.id  # one view per template for every check: each runs to its end here
            for finding in definition.fn(pod):
                yield finding
                for twin in twins:  # twins rendered from one overlay (a TrainingJob's roles) share their paths
                    if (moved := _moved(finding, lead, twin)) != finding:
                        yield moved


_CANONICAL = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS


def _alike(templates: list[PodTemplate]) -> list[tuple[PodTemplate, list[PodTemplate]]]:
    """Templates grouped by identical pod spec and metadata (a Kubeflow Master and its Workers
    usually are): each group is checked once and its findings are repeated at the twins' paths. Grouped by a
    canonical serialisation, so hundreds of distinct templates cost one pass, not one comparison per pair."""
    if len(templates) == 1:  # nothing to compare: no serialisation on the common path
        return [(templates[0], [])]
    groups: dict[bytes | int, tuple[PodTemplate, list[PodTemplate]]] = {}
    for template in templates:
        try:
            key: bytes | int = orjson.dumps((template.spec, template.metadata), option=_CANONICAL)
        except TypeError:  # nested past orjson's limit, or a value JSON cannot hold: a group of its own
            key = id(template)
        if key in groups:
            groups[key][1].append(template)
        else:
            groups[key] = (template, [])
    return list(groups.values())


def _moved(finding: Finding, lead: PodTemplate, twin: PodTemplate) -> Finding:
    for old, new in ((lead.path(), twin.path()), (lead.meta_pointer, twin.meta_pointer)):
        if finding.path == old or finding.path.startswith(old + "/"):
            return replace(finding, path=new + finding.path[len(old):])
    return finding
