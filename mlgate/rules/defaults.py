"""Defaults that admission fills in, only where the user left a field unset.

Fields and values written:
- `resources.requests.<gpu>` := `resources.limits.<gpu>` when the request is unset. A request
  that differs is left alone for `gpu.limits` to reject (extended resources cannot be
  overcommitted: https://kubernetes.io/docs/tasks/manage-gpus/scheduling-gpus/).
- `spec.tolerations` += `{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}` on pods
  that ask for GPUs (the taint GPU node pools carry; GKE/AKS/EKS GPU docs).
- `securityContext` hardening from the Pod Security Standards restricted profile
  (https://kubernetes.io/docs/concepts/security/pod-security-standards/), only where it cannot stop a
  working image: container `allowPrivilegeEscalation: false`, pod `seccompProfile.type: RuntimeDefault`,
  and `capabilities.drop: [ALL]` (with `add: [NET_BIND_SERVICE]`) only on a container that provably runs as
  non-root: its effective `runAsUser` (container, else pod) above 0, or `runAsNonRoot: true` (the kubelet
  refuses to start such a container as uid 0). A root process without capabilities cannot do what root
  images do at start: OpenSSH's privilege separation needs SYS_CHROOT, SETUID and SETGID (`chroot("/run/sshd"):
  Operation not permitted`), apt-get's `_apt` sandbox SETUID/SETGID, `apk add` CHOWN, DAC_OVERRIDE and FOWNER,
  writing into a volume of another uid DAC_OVERRIDE. So a container that runs as root, or may, keeps its
  capabilities, and the workload's notes say so ("capabilities kept: ..."); the restricted profile's check
  still warns. NET_BIND_SERVICE stays in `add` (the one capability restricted allows back) because a binary
  with that file capability and the effective bit (mpi-operator's base image: `setcap
  CAP_NET_BIND_SERVICE=+eip /usr/sbin/sshd`, kubeflow/mpi-operator v0.6.0 build/base/Dockerfile) fails to exec
  with EPERM when the bounding set lacks it (capabilities(7), "Safety checking for capability-dumb binaries").
  `allowPrivilegeEscalation: false` (no_new_privs) only stops a process gaining privileges through setuid or
  file-capability binaries: a root process has them already, so it is not gated on the user (a non-root
  image that calls sudo at start does need `allowPrivilegeEscalation: true` written in its manifest).
  `runAsNonRoot: true` only when asked, since it stops images that run as root. Privileged containers and
  Windows pods are left alone.
- Run policy: Kubeflow replica `restartPolicy`, `runPolicy.backoffLimit`,
  `runPolicy.cleanPodPolicy` (training-operator v1 `RunPolicy`); Job `backoffLimit` and pod
  `restartPolicy` (batch/v1 requires Never or OnFailure).
- `/dev/shm` as a memory-backed emptyDir for multi-GPU pods and distributed GPU jobs (NCCL
  uses shared memory; the container runtime's 64 MiB default is too small).
- The checkpoint directory as an env var in the main container.

A field of the wrong type where a default would go (`tolerations: 5`, `securityContext: "x"`), and a container
its name does not single out (no name, or one another container has), are what the API server refuses: they
are never overwritten or guessed at. The rule declines with a `skip` that names the field, and writes nothing.
"""

from __future__ import annotations

import fnmatch
from collections import Counter
from typing import Any, Literal

from pydantic import Field

from mlgate.model import pointer
from mlgate.model.workload import PodTemplate, Unwritable, Workload, as_dict, as_list
from mlgate.rules.common import pod_gpu_count, quantity, regular_gpus
from mlgate.rules.pod_security import Capability
from mlgate.rules.registry import Context, NoParams, Params, mutation

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
SHM_VOLUME = "dshm"
SHM_PATH = "/dev/shm"


@mutation("defaults.gpu-requests", "GPU requests set equal to limits where unset", NoParams, order=10,
          reports_changes=True)
def gpu_requests(workload: Workload, params: NoParams, context: Context) -> bool:
    changed = False
    for template in workload.templates:
        names = _name_counts(template)
        for key, index, container, limits, requests, _ in regular_gpus(template, context.gpus):
            # only a count the API server would accept is copied: a bad limit is gpu.limits' to report
            missing = {k: v for k, v in limits.items() if k not in requests and _whole_count(v)}
            if missing:
                target = _container_target(template, key, index, container, names)
                resources = _field(target, "resources", dict, template.path(key, index, "resources"))
                _field(resources, "requests", dict, template.path(key, index, "resources", "requests")).update(missing)
                changed = True
    return changed


def _whole_count(value: Any) -> bool:
    number = quantity(value) if not isinstance(value, bool) else None
    return number is not None and number >= 0 and number == number.to_integral_value()


class TolerationParams(Params):
    key: str = Field(default="nvidia.com/gpu", description="the taint key GPU nodes carry")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = Field(
        default="NoSchedule", description="the taint's effect the toleration names")


@mutation("defaults.gpu-toleration", "GPU pods tolerate the GPU node taint", TolerationParams, order=20,
          reports_changes=True)
def gpu_toleration(workload: Workload, params: TolerationParams, context: Context) -> bool:
    changed = False
    for template in workload.templates:
        if pod_gpu_count(template, context.gpus) == 0:
            continue
        if any(_tolerates(t, params.key, params.effect) for t in as_list(template.spec.get("tolerations"))):
            continue
        toleration = {"key": params.key, "operator": "Exists", "effect": params.effect}
        _field(template.pod_target(), "tolerations", list, template.path("tolerations")).append(toleration)
        changed = True
    return changed


def _tolerates(toleration: Any, key: str, effect: str) -> bool:
    if not isinstance(toleration, dict):
        return False
    key_ok = toleration.get("key") == key or (not toleration.get("key") and toleration.get("operator") == "Exists")
    return key_ok and toleration.get("effect") in (None, "", effect)


class SecurityParams(Params):
    disallow_privilege_escalation: bool = Field(default=True, description="set allowPrivilegeEscalation: false")
    drop_all_capabilities: bool = Field(default=True, description="set capabilities.drop: [ALL] on containers "
                                        "that provably run as non-root (runAsUser above 0 or runAsNonRoot: "
                                        "true); one that may run as root keeps its capabilities (sshd, apt-get "
                                        "and apk need them)")
    keep_capabilities: list[Capability] = Field(
        default_factory=lambda: ["NET_BIND_SERVICE"],
        description="added back beside drop: [ALL], so binaries carrying these file capabilities still exec "
                    "(the restricted profile allows only NET_BIND_SERVICE)")
    seccomp_runtime_default: bool = Field(default=True, description="set the pod's seccompProfile RuntimeDefault")
    run_as_non_root: bool = Field(default=False, description="set runAsNonRoot: true (breaks images that run as "
                                  "root)")


@mutation("defaults.security-context", "hardened securityContext where unset", SecurityParams, order=30,
          reports_changes=True)
def security_context(workload: Workload, params: SecurityParams, context: Context) -> bool:
    changed = False
    for template in workload.templates:
        if as_dict(template.spec.get("os")).get("name") == "windows":
            continue
        pod_sc = as_dict(template.spec.get("securityContext"))
        wants_seccomp = params.seccomp_runtime_default and not pod_sc.get("seccompProfile")
        wants_non_root = params.run_as_non_root and pod_sc.get("runAsNonRoot") is None
        if wants_seccomp or wants_non_root:
            sc = _field(template.pod_target(), "securityContext", dict, template.path("securityContext"))
            if wants_seccomp:
                _field(sc, "seccompProfile", dict, template.path("securityContext", "seccompProfile"))["type"] = \
                    "RuntimeDefault"
            if wants_non_root:
                sc["runAsNonRoot"] = True
            changed = True
        names = _name_counts(template)
        pod_sc = as_dict(template.spec.get("securityContext"))  # as written above: runAsNonRoot counts
        kept = []
        for key, index, container in template.regular_containers():
            changed |= _harden_container(template, key, index, container, params, names=names, pod_sc=pod_sc)
            if params.drop_all_capabilities and _keeps_capabilities(pod_sc, container):
                kept.append(template.path(key, index))
        note = _kept_note(kept)
        if note and note not in workload.notes:
            workload.notes.append(note)
    return changed


def _kept_note(paths: list[str]) -> str | None:
    """One note per pod template, however many containers it has."""
    if not paths:
        return None
    if len(paths) == 1:
        return f"capabilities kept: the container at {paths[0]} may run as root"
    return f"capabilities kept: {len(paths)} containers may run as root, the first at {paths[0]}"


def runs_as_non_root(pod_sc: dict[str, Any], container_sc: dict[str, Any]) -> bool:
    """The container provably runs as a user other than root: its effective runAsUser (the container's, else the
    pod's) is above 0, or, with none, runAsNonRoot is true (the kubelet then refuses uid 0). An image's USER is
    not known at admission."""
    user = container_sc.get("runAsUser")
    user = pod_sc.get("runAsUser") if user is None else user
    if isinstance(user, int) and not isinstance(user, bool):
        return user > 0
    non_root = container_sc.get("runAsNonRoot")
    return (pod_sc.get("runAsNonRoot") if non_root is None else non_root) is True


def _keeps_capabilities(pod_sc: dict[str, Any], container: dict[str, Any]) -> bool:
    """A container the rule left its capabilities because it may run as root (not one that set a drop itself)."""
    sc = as_dict(container.get("securityContext"))
    return not sc.get("privileged") and as_dict(sc.get("capabilities")).get("drop") is None \
        and not runs_as_non_root(pod_sc, sc)


def _harden_container(template: PodTemplate, key: str, index: int, container: dict[str, Any],
                      params: SecurityParams, *, names: Counter[str], pod_sc: dict[str, Any]) -> bool:
    sc = as_dict(container.get("securityContext"))
    if sc.get("privileged"):
        return False  # the API server refuses allowPrivilegeEscalation=false with privileged=true
    wanted: dict[str, Any] = {}
    if params.disallow_privilege_escalation and sc.get("allowPrivilegeEscalation") is None:
        wanted["allowPrivilegeEscalation"] = False
    if params.drop_all_capabilities and as_dict(sc.get("capabilities")).get("drop") is None \
            and runs_as_non_root(pod_sc, sc):
        wanted["drop"] = ["ALL"]
    if not wanted:
        return False
    at = (key, index, "securityContext")
    target = _field(_container_target(template, key, index, container, names), "securityContext", dict,
                    template.path(*at))
    if "drop" in wanted:
        capabilities = _field(target, "capabilities", dict, template.path(*at, "capabilities"))
        capabilities["drop"] = wanted.pop("drop")
        if params.keep_capabilities:
            added = _field(capabilities, "add", list, template.path(*at, "capabilities", "add"))
            added.extend(c for c in params.keep_capabilities if c not in added)
    target.update(wanted)
    return True


class RunPolicyParams(Params):
    restart_policy: Literal["OnFailure", "Never", "ExitCode", "Always"] = Field(
        default="OnFailure", description="each replica's restartPolicy where unset")
    # None by default: training-operator treats an unset backoffLimit as no limit, so a limit of our own would fail a
    # working job that restarts often (preempted spot nodes, a flaky NCCL peer); a platform that wants one sets it
    backoff_limit: int | None = Field(default=None, ge=0, description="retries before the job fails, where unset "
                                      "(none by default: the operators' own default is no limit)")
    clean_pod_policy: Literal["All", "Running", "None"] | None = Field(
        default="Running", description="which pods are deleted when the job ends, where unset")


@mutation("defaults.run-policy", "restartPolicy, backoffLimit and cleanPodPolicy", RunPolicyParams, order=40,
          reports_changes=True)
def run_policy(workload: Workload, params: RunPolicyParams, context: Context) -> bool:
    """Only the fields the kind has (its description's `runPolicy`), and a restartPolicy its pods accept."""
    policy = workload.run_policy
    if policy is None:
        return False
    obj = workload.obj
    changed = False
    allowed = policy.restartPolicies
    value = params.restart_policy if params.restart_policy in allowed else (allowed[0] if allowed else None)
    for template in workload.templates:
        if template.restart_policy_pointer is not None and value is not None:
            changed |= _set_default(obj, template.restart_policy_pointer, value)
    if params.backoff_limit is not None and "backoffLimit" in policy.fields:
        changed |= _set_default(obj, policy.pointer + "/backoffLimit", params.backoff_limit)
    if params.clean_pod_policy is not None and "cleanPodPolicy" in policy.fields:
        changed |= _set_default(obj, policy.pointer + "/cleanPodPolicy", params.clean_pod_policy)
    return changed


class ShmParams(Params):
    size_limit: str | None = Field(default="8Gi", description="the /dev/shm emptyDir's sizeLimit (null: none)")
    min_gpus_per_pod: int = Field(default=2, ge=1, description="pods with at least this many GPUs get /dev/shm")


@mutation("defaults.shm", "memory-backed /dev/shm for multi-GPU NCCL jobs", ShmParams, order=50,
          reports_changes=True)
def shared_memory(workload: Workload, params: ShmParams, context: Context) -> bool:
    distributed = workload.total_replicas > 1
    changed = False
    for template in workload.templates:
        gpus = pod_gpu_count(template, context.gpus)
        if gpus == 0 or (gpus < params.min_gpus_per_pod and not distributed):
            continue
        if any(as_dict(m).get("mountPath") == SHM_PATH for _, _, c in template.containers()
               for m in as_list(c.get("volumeMounts"))):
            continue
        if not any(as_dict(v).get("name") == SHM_VOLUME for v in as_list(template.spec.get("volumes"))):
            empty_dir: dict[str, Any] = {"medium": "Memory"}
            if params.size_limit:
                empty_dir["sizeLimit"] = params.size_limit
            _field(template.pod_target(), "volumes", list, template.path("volumes")).append(
                {"name": SHM_VOLUME, "emptyDir": empty_dir})
            changed = True
        names = _name_counts(template)
        for key, index, container, limits, _, _ in regular_gpus(template, context.gpus):
            if key == "containers" and limits:
                target = _container_target(template, key, index, container, names)
                _field(target, "volumeMounts", list, template.path(key, index, "volumeMounts")).append(
                    {"name": SHM_VOLUME, "mountPath": SHM_PATH})
                changed = True
    return changed


class CheckpointEnvParams(Params):
    env_name: str = Field(default="CHECKPOINT_DIR", description="the env var that names the checkpoint directory")
    claim_patterns: list[str] = Field(default_factory=lambda: ["*checkpoint*", "*ckpt*"],
                                      description="shell patterns of claim names that hold checkpoints")


@mutation("defaults.checkpoint-env", "the checkpoint directory as an env var", CheckpointEnvParams, order=60,
          reports_changes=True)
def checkpoint_env(workload: Workload, params: CheckpointEnvParams, context: Context) -> bool:
    changed = False
    for template in workload.templates:
        names = _name_counts(template)
        for key, index, container, directory in _checkpoint_dirs(workload, template, params):
            if any(as_dict(e).get("name") == params.env_name for e in as_list(container.get("env"))):
                continue
            target = _container_target(template, key, index, container, names)
            _field(target, "env", list, template.path(key, index, "env")).append(
                {"name": params.env_name, "value": directory})
            changed = True
    return changed


def _checkpoint_dirs(
    workload: Workload, template: PodTemplate, params: CheckpointEnvParams
) -> list[tuple[str, int, dict[str, Any], str]]:
    """(list key, index, container, directory) of each container that mounts the checkpoint."""
    checkpoint = workload.checkpoint
    if checkpoint is not None and template.main_container:
        directory = checkpoint.mount_path or checkpoint.uri
        main = next((c for c in template.regular_containers() if c[2].get("name") == template.main_container),
                    None)
        return [(*main, directory)] if main is not None and isinstance(directory, str) and directory else []
    claims: dict[str, Any] = {}
    for volume in as_list(template.spec.get("volumes")):
        name, source = as_dict(volume).get("name"), as_dict(as_dict(volume).get("persistentVolumeClaim"))
        if isinstance(name, str) and source:
            claims[name] = source.get("claimName")
    found = []
    for key, index, container in template.regular_containers():
        for mount in as_list(container.get("volumeMounts")):
            name, path = as_dict(mount).get("name"), as_dict(mount).get("mountPath")
            claim = claims.get(name) if isinstance(name, str) else None
            if isinstance(claim, str) and isinstance(path, str) and path \
                    and any(fnmatch.fnmatchcase(claim, p) for p in params.claim_patterns):
                found.append((key, index, container, path))
                break
    return found


def _name_counts(template: PodTemplate) -> Counter[str]:
    """How many init and regular containers carry each name: once per template, so writing into every
    container stays linear."""
    return Counter(name for _, _, c in template.regular_containers() if isinstance(name := c.get("name"), str))


def _container_target(template: PodTemplate, key: str, index: int, container: dict[str, Any],
                      names: Counter[str]) -> dict[str, Any]:
    """The user's own container to write into, found by its name. A container its name does not single out
    (none, not a string, or shared: the API server refuses each) is not written: the rule declines with why."""
    name = container.get("name")
    where = template.path(key, index)
    if not isinstance(name, str) or not name:
        kind = "init container" if key == "initContainers" else "container"
        raise Unwritable(f"the {kind} at {where} has no name, which the API server requires: not mutated")
    if names[name] > 1:
        raise Unwritable(f'{names[name]} containers are named "{name}" at {template.path()}; the API server '
                         "requires unique names: not mutated")
    return template.container_target(name)


def _field(holder: dict[str, Any], key: str, kind: type, where: str) -> Any:
    """holder[key], created empty (a mapping or a list) where missing or null. A value of another type is the
    user's to fix (the API server refuses it), not the mutation's to overwrite: the rule declines with why."""
    value = holder.get(key)
    if value is None:
        value = holder[key] = kind()
    elif not isinstance(value, kind):
        raise Unwritable(f"{where} is {_json_type(value)}, not {'a mapping' if kind is dict else 'a list'}: "
                         "not mutated")
    return value


def _json_type(value: Any) -> str:
    names = {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "a number",
             float: "a number"}
    return names.get(type(value), type(value).__name__)


def _set_default(obj: dict[str, Any], ptr: str, value: Any) -> bool:
    """Set the field at `ptr` (missing or null parents created) unless present; True if it was set. A parent of
    another type is not overwritten: the rule declines with why."""
    tokens = pointer.split(ptr)
    node: Any = obj
    for depth, token in enumerate(tokens[:-1]):
        if isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]  # list items are walked, never created (a pointer only reaches what exists)
        elif isinstance(node, dict):
            child = node.get(token)
            where = pointer.join("", *tokens[:depth + 1])
            node = child if isinstance(child, list) else _field(node, token, dict, where)
        else:
            raise Unwritable(f"{pointer.join('', *tokens[:depth])} is {_json_type(node)}, not a mapping: not mutated")
    if not isinstance(node, dict):
        raise Unwritable(f"{pointer.join('', *tokens[:-1])} is {_json_type(node)}, not a mapping: not mutated")
    if tokens[-1] in node:
        return False
    node[tokens[-1]] = value
    return True
